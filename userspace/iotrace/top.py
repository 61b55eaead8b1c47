"""`iotrace top`: the exporter's numbers (exporter.Sums) in a terminal,
refreshed every second: per job its training loop's data-wait share, its
read and write rates, IOPS, what the page cache had to read from storage,
its threads' time in reads and writes; per job and mount its reads and
writes of files; the files read and written most; per job and object-storage endpoint its requests,
throttled answers and retries a second; per block device its rates and
latency. Keys: s sorts,
q quits.

Rates are the counters' growth over the last WINDOW_S seconds, as
Prometheus's rate() would give them (the kernel's per-second sums arrive
1-2 s after their second); the data-wait share over WAIT_WINDOW_S (a wait
is counted when it ends: a shorter window swings with the steps).
"""
from __future__ import annotations

import os
import select
import sys
import termios
import threading
import time
import tty
from collections import deque
from typing import Optional

from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .abi import OP_NAMES
from .exporter import LATENCY_BUCKETS, READ_CODES, WRITE_CODES, Sums
from .live_files import WINDOW_S as FILES_WINDOW_S

WINDOW_S = 5.0
WAIT_WINDOW_S = 10.0
MOUNT_ROWS = 8            # the busiest (job, mount) pairs shown
SORTS = ("wait", "read", "write", "read_iops", "storage")
# the exporter's read and write calls, as the op names its sums are keyed by
READ_NAMES = {OP_NAMES[c] for c in READ_CODES}
WRITE_NAMES = {OP_NAMES[c] for c in WRITE_CODES}
MIB = 1 << 20


def snapshot(s: Sums) -> dict:
    """Totals now: per job and per device."""
    jobs: dict[str, dict[str, float]] = {}
    with s.lock:
        for job, io in s.io.items():
            jobs.setdefault(job, {}).update(io)
        for (job, op), (n, t) in s.calls.items():
            j = jobs.setdefault(job, {})
            if op in READ_NAMES:
                j["read_calls"] = j.get("read_calls", 0) + n
                j["io_s"] = j.get("io_s", 0) + t
            elif op in WRITE_NAMES:
                j["write_calls"] = j.get("write_calls", 0) + n
                j["io_s"] = j.get("io_s", 0) + t
        devs: dict[str, dict[str, float]] = {}
        for (_, dev, kind), v in s.device.items():
            d = devs.setdefault(dev, {})
            d[kind] = d.get(kind, 0) + v
        for (dev, _), h in s.latency.items():
            d = devs.setdefault(dev, {})
            d["requests"] = d.get("requests", 0) + sum(h[:len(LATENCY_BUCKETS) + 1])
            d["latency_s"] = d.get("latency_s", 0) + h[-1]
        for (job, _), v in s.data_wait.items():
            j = jobs.setdefault(job, {})
            j["data_wait_s"] = j.get("data_wait_s", 0) + v
        for job, n in s.loops_now.items():
            jobs.setdefault(job, {})["loops"] = n
        mounts = {k: dict(v) for k, v in s.mounts.items()}
        files = s.files.top(s.top_files) if s.files is not None else {}
        endpoints: dict[tuple[str, str], list] = {}
        for (job, endpoint, _, _), (n, thr, rty) in s.requests.items():
            e = endpoints.setdefault((job, endpoint), [0, 0, 0])
            e[0] += n
            e[1] += thr
            e[2] += rty
        live = set(s.jobs.live)
        dropped = float(s.recorder.get("drops", 0))
    return {"t": time.monotonic(), "jobs": jobs, "devs": devs, "mounts": mounts,
            "endpoints": endpoints, "files": files, "live": live, "dropped": dropped}


def rates(old: dict, new: dict) -> tuple[dict, dict]:
    """Per job and per device: the counters' growth a second between two snapshots."""
    dt = max(new["t"] - old["t"], 1e-3)

    def per(a: dict, b: dict, key: str) -> float:
        return max(b.get(key, 0) - a.get(key, 0), 0) / dt

    jobs = {}
    for job in set(new["jobs"]) | new["live"]:
        a, b = old["jobs"].get(job, {}), new["jobs"].get(job, {})
        r = {k: per(a, b, k) for k in ("read_bytes", "write_bytes", "storage_read_bytes",
                                        "read_calls", "write_calls", "io_s")}
        jobs[job] = r
    devs = {}
    for dev in new["devs"]:
        a, b = old["devs"].get(dev, {}), new["devs"].get(dev, {})
        n = max(b.get("requests", 0) - a.get("requests", 0), 0)
        devs[dev] = {"read": per(a, b, "read"), "write": per(a, b, "write"),
                     "iops": n / dt,
                     "latency": (b.get("latency_s", 0) - a.get("latency_s", 0)) / n if n else None}
    return jobs, devs


def mount_rates(old: dict, new: dict) -> dict:
    """Per (job, mount): reads, reads from storage and writes of regular
    files (bytes a second), and the threads' time in writes and syncs."""
    dt = max(new["t"] - old["t"], 1e-3)
    out = {}
    for key, b in new["mounts"].items():
        a = old["mounts"].get(key, {})
        r = {k: max(b.get(k, 0) - a.get(k, 0), 0) / dt
             for k in ("read_bytes", "storage_read_bytes", "write_bytes", "write_s", "sync_s")}
        if any(r.values()):
            out[key] = r
    return out


def endpoint_rates(old: dict, new: dict) -> dict:
    """Per (job, endpoint): requests, throttled answers and retries a second."""
    dt = max(new["t"] - old["t"], 1e-3)
    out = {}
    for key, b in new["endpoints"].items():
        a = old["endpoints"].get(key, [0, 0, 0])
        r = [max(x - y, 0) / dt for x, y in zip(b, a)]
        if r[0]:
            out[key] = r
    return out


def endpoint_table_view(endpoints: dict) -> Table:
    e = Table(expand=False, header_style="bold")
    for name in ("JOB", "ENDPOINT", "REQUESTS/s", "THROTTLED/s", "RETRIES/s"):
        e.add_column(name, justify="left" if name in ("JOB", "ENDPOINT") else "right")
    top = sorted(endpoints.items(), key=lambda kv: -kv[1][0])
    for (job, endpoint), (n, thr, rty) in top[:MOUNT_ROWS]:
        e.add_row(job, endpoint, f"{n:.1f}", f"{thr:.1f}", f"{rty:.1f}")
    if len(top) > MOUNT_ROWS:
        e.add_row(f"({len(top) - MOUNT_ROWS} more)", "", "", "", "")
    return e


def files_table_view(files: dict) -> Table:
    """The files read and written most in the last 10 s, over all jobs."""
    f = Table(expand=False, header_style="bold")
    for name in ("JOB", "FILE (last 10 s)", "READ MiB/s", "WRITE MiB/s"):
        f.add_column(name, justify="right" if "MiB" in name else "left", overflow="fold")
    rows = sorted(((rd + wr, job, name, rd, wr) for job, fs in files.items()
                   for name, rd, wr in fs), reverse=True)
    for _, job, name, rd, wr in rows[:MOUNT_ROWS]:
        f.add_row(job, name, f"{rd / FILES_WINDOW_S / MIB:.2f}", f"{wr / FILES_WINDOW_S / MIB:.2f}")
    return f


def mount_table_view(mounts: dict) -> Table:
    m = Table(expand=False, header_style="bold")
    for name in ("JOB", "MOUNT", "READ MiB/s", "FROM STORAGE MiB/s", "WRITE MiB/s",
                 "THREADS IN WRITE+SYNC"):
        m.add_column(name, justify="left" if name in ("JOB", "MOUNT") else "right")
    top = sorted(mounts.items(), key=lambda kv: -(kv[1]["read_bytes"] + kv[1]["write_bytes"]))
    for (job, mount), r in top[:MOUNT_ROWS]:
        m.add_row(job, mount, f"{r['read_bytes'] / MIB:.2f}",
                  f"{r['storage_read_bytes'] / MIB:.2f}", f"{r['write_bytes'] / MIB:.2f}",
                  f"{r['write_s'] + r['sync_s']:.2f}")
    if len(top) > MOUNT_ROWS:
        m.add_row(f"({len(top) - MOUNT_ROWS} more)", "", "", "", "", "")
    return m


def wait_shares(old: dict, new: dict) -> dict:
    """Per job: the share of the time between two snapshots its loops waited
    for data (summed over its loops: 2 ranks waiting all the time are 200%),
    None where no loop fed by worker processes is found."""
    dt = max(new["t"] - old["t"], 1e-3)
    out = {}
    for job, b in new["jobs"].items():
        if not b.get("loops"):
            out[job] = None
            continue
        a = old["jobs"].get(job, {})
        out[job] = max(b.get("data_wait_s", 0) - a.get("data_wait_s", 0), 0) / dt
    return out


def render(title: str, jobs: dict, devs: dict, sort: str, dropped: float, window: float,
           waits: Optional[dict] = None, wait_window: float = 0.0,
           mounts: Optional[dict] = None, endpoints: Optional[dict] = None,
           files: Optional[dict] = None):
    waits = waits or {}
    for job, r in jobs.items():
        r["wait"] = waits.get(job)
    if sort == "wait":
        order = sorted(jobs.items(), key=lambda kv: -(kv[1]["wait"] if kv[1]["wait"]
                                                       is not None else -1))
    else:
        key = {"read": "read_bytes", "write": "write_bytes", "read_iops": "read_calls",
               "storage": "storage_read_bytes"}[sort]
        order = sorted(jobs.items(), key=lambda kv: -kv[1][key])
    t = Table(title=title, title_justify="left", expand=False, header_style="bold")
    for name, width in (("JOB", 28), ("DATA WAIT", 11), ("READ MiB/s", 10), ("WRITE MiB/s", 11),
                        ("READ IOPS", 9), ("WRITE IOPS", 10), ("FROM STORAGE MiB/s", 18),
                        ("PAGE-CACHE HITS", 15), ("THREADS IN I/O", 14)):
        mark = " v" if (name == "DATA WAIT" and sort == "wait") or \
            (name.startswith("READ MiB") and sort == "read") or \
            (name.startswith("WRITE MiB") and sort == "write") or \
            (name.startswith("READ IOPS") and sort == "read_iops") or \
            (name.startswith("FROM STORAGE") and sort == "storage") else ""
        t.add_column(name + mark, justify="left" if name == "JOB" else "right",
                     min_width=width)
    for job, r in order:
        hits = (f"{1 - r['storage_read_bytes'] / r['read_bytes']:.0%}"
                if r["read_bytes"] > 0 else "-")
        wait = f"{r['wait']:.0%}" if r["wait"] is not None else "-"
        t.add_row(job, wait, f"{r['read_bytes'] / MIB:.2f}", f"{r['write_bytes'] / MIB:.2f}",
                  f"{r['read_calls']:.0f}", f"{r['write_calls']:.0f}",
                  f"{r['storage_read_bytes'] / MIB:.2f}", hits, f"{r['io_s']:.2f}")
    if not jobs:
        t.add_row("(no job yet)", "", "", "", "", "", "", "", "")
    d = Table(expand=False, header_style="bold")
    for name in ("DEVICE", "READ MiB/s", "WRITE MiB/s", "REQUESTS/s", "MEAN LATENCY"):
        d.add_column(name, justify="left" if name == "DEVICE" else "right")
    for dev, r in sorted(devs.items(), key=lambda kv: -(kv[1]["read"] + kv[1]["write"])):
        lat = f"{r['latency'] * 1e3:.2f} ms" if r["latency"] is not None else "-"
        d.add_row(dev, f"{r['read'] / MIB:.2f}", f"{r['write'] / MIB:.2f}",
                  f"{r['iops']:.0f}", lat)
    foot = Text(f"rates over the last {window:.0f} s, data wait over {wait_window:.0f} s (the "
                f"kernel's sums arrive 1-2 s late); records dropped: {dropped:.0f}; keys: s sort "
                f"({sort}), q quit. DATA WAIT: the share of the time the training loop waited "
                "for its loader's worker processes; - where the job has no such loop (a loop "
                "that loads its own data: iotrace attach --pid PID --duration 30, then "
                "iotrace report).", style="dim")
    parts = [t, mount_table_view(mounts) if mounts else
             Text("no reads or writes of files yet", style="dim")]
    if files:
        parts.append(files_table_view(files))
    if endpoints:
        parts.append(endpoint_table_view(endpoints))
    return Group(*parts,
                 d if devs else Text("no block-device requests yet", style="dim"), foot)


class Keys:
    """Single keys from a terminal (cbreak mode), restored on exit."""

    def __init__(self):
        self.fd = sys.stdin.fileno() if sys.stdin.isatty() else None
        self.old = None

    def __enter__(self):
        if self.fd is not None:
            self.old = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
        return self

    def read(self) -> Optional[str]:
        if self.fd is None or not select.select([self.fd], [], [], 0)[0]:
            return None
        return os.read(self.fd, 1).decode(errors="replace")

    def __exit__(self, *exc):
        if self.old is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.old)


def run(rec, sums: Sums, title: str, stop: threading.Event, refresh_s: float = 1.0) -> str:
    """The view until q, Ctrl-C (stop set) or the traced processes' end;
    returns why it ended."""
    history: deque = deque()
    sort = 0
    why = "quit"
    with Keys() as keys, Live(auto_refresh=False, screen=True, transient=False) as live:
        next_draw = 0.0
        while not stop.is_set():
            rec.read_status(0.2)
            sums.add_joined(rec.take_joined())
            sums.add_records(*rec.take_records())
            sums.add_wakes(rec.take_wakes())
            sums.add_files(rec.take_files())
            sums.add_rates(rec.take_rates())
            sums.recorder = dict(rec.stats)
            k = keys.read()
            if k in ("q", "Q"):
                break
            if k in ("s", "S"):
                sort = (sort + 1) % len(SORTS)
                next_draw = 0.0
            if not rec.alive():
                why = "the traced processes exited" if (rec.end or {}).get("reason") == \
                    "exited" else f"the recorder stopped: {(rec.end or {}).get('reason')}"
                break
            now = time.monotonic()
            if now < next_draw:
                continue
            sums.jobs.scan()
            snap = snapshot(sums)
            history.append(snap)
            while len(history) > 1 and snap["t"] - history[0]["t"] > WAIT_WINDOW_S:
                history.popleft()
            base = next(h for h in history if snap["t"] - h["t"] <= WINDOW_S)
            if base is snap:
                base = history[0]
            jobs, devs = rates(base, snap) if len(history) > 1 else ({}, {})
            mounts = mount_rates(base, snap) if len(history) > 1 else {}
            endpoints = endpoint_rates(base, snap) if len(history) > 1 else {}
            waits = wait_shares(history[0], snap) if len(history) > 1 else {}
            live.update(render(title, jobs, devs, SORTS[sort], snap["dropped"],
                               snap["t"] - base["t"], waits, snap["t"] - history[0]["t"],
                               mounts, endpoints, snap["files"]),
                        refresh=True)
            next_draw = now + refresh_s
    return why
