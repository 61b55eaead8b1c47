"""Writing the trace directory (docs/trace-format.md is the contract).

TRACE/
  meta.json          schema version, host, kernel, command, start, options,
                     probes, counts, drops, exit status
  events/part-NNNNNN.parquet
  files.parquet      file_id -> path, fs_type, mount point, dev, ino
  processes.parquet  one row per process
  threads.parquet    one row per thread
Tables and meta.json are rewritten atomically (tmp + rename) while tracing,
so a trace cut short by kill -9 is still readable.
"""
from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any, Optional

import pyarrow as pa
import duckdb
import pyarrow.parquet as pq

from .model import Model, kernel_dev_to_major_minor
from .schema import (EVENT_WRITE_OPTS, FILES_SCHEMA, PROCESSES_SCHEMA, SCHEMA_VERSION,
                     THREADS_SCHEMA, atomic_write_json, atomic_write_table)
from .trace import create_views
from . import requests

def mount_table() -> dict[tuple[int, int], tuple[str, str, str]]:
    """(major, minor) -> (mount point, fs type, super options) from
    /proc/self/mountinfo (NFS's rsize/wsize are among the super options)."""
    out: dict[tuple[int, int], tuple[str, str, str]] = {}
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        parts = left.split()
        if len(parts) < 5 or not right:
            continue
        major, minor = (int(x) for x in parts[2].split(":"))
        mnt = parts[4].replace("\\040", " ")
        fields = right.split()
        out.setdefault((major, minor), (mnt, fields[0], fields[2] if len(fields) > 2 else ""))
    return out


def files_table(model: Model, mounts: dict) -> pa.Table:
    rows = sorted(model.files.values(), key=lambda f: f.file_id)
    cols: dict[str, list] = {name: [] for name in FILES_SCHEMA.names}
    for f in rows:
        major, minor = kernel_dev_to_major_minor(f.dev)
        mnt, mtype, mopts = mounts.get((major, minor), (None, None, None))
        cols["file_id"].append(f.file_id)
        cols["path"].append(f.path)
        cols["fs_type"].append(mtype or model.fs_type(f.fs_magic))
        cols["mount_point"].append(mnt)
        cols["dev_major"].append(major)
        cols["dev_minor"].append(minor)
        cols["ino"].append(f.ino)
        cols["mount_options"].append(mopts)
    return pa.table(cols, schema=FILES_SCHEMA)


def processes_table(model: Model) -> pa.Table:
    starts: dict[int, list[int]] = {}     # pid -> its threads' start times
    for t in model.all_threads():
        starts.setdefault(t.pid, []).append(t.start_ns)

    def nthreads(p) -> int:
        # a reused pid: only the threads of this lifetime
        end = p.exit_ns if p.exit_ns is not None else 1 << 62
        return sum(1 for s in starts.get(p.pid, ()) if p.start_ns <= s <= end) or 1

    cols: dict[str, list] = {name: [] for name in PROCESSES_SCHEMA.names}
    for p in sorted(model.all_procs(), key=lambda p: p.start_ns):
        st = p.exit_status
        cols["pid"].append(p.pid)
        cols["ppid"].append(p.ppid)
        cols["cmdline"].append(p.cmdline)
        cols["comm"].append(p.comm)
        cols["start_ns"].append(p.start_ns)
        cols["exit_ns"].append(p.exit_ns)
        cols["exit_code"].append(None if st is None or st & 0x7F else (st >> 8) & 0xFF)
        cols["exit_signal"].append(None if st is None or not st & 0x7F else st & 0x7F)
        cols["execs"].append(p.execs)
        cols["threads"].append(nthreads(p))
        cols["before_trace"].append(p.seen_before_trace)
        cols["rank"].append(p.rank)
        cols["local_rank"].append(p.local_rank)
    return pa.table(cols, schema=PROCESSES_SCHEMA)


def threads_table(model: Model) -> pa.Table:
    cols: dict[str, list] = {name: [] for name in THREADS_SCHEMA.names}
    for t in sorted(model.all_threads(), key=lambda t: (t.pid, t.start_ns, t.tid)):
        cols["tid"].append(t.tid)
        cols["pid"].append(t.pid)
        cols["name"].append(t.name)
        cols["start_ns"].append(t.start_ns)
        cols["exit_ns"].append(t.exit_ns)
    return pa.table(cols, schema=THREADS_SCHEMA)


def _cgroup_cpu_limit() -> Optional[float]:
    """CPUs this process's cgroup may use (cgroup v2 cpu.max, v1 CFS quota),
    or None without a limit."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            hid, ctrl, path = line.split(":", 2)
            if hid == "0":
                f = Path("/sys/fs/cgroup") / path.lstrip("/") / "cpu.max"
                q, per = f.read_text().split()[:2]
                return None if q == "max" else int(q) / int(per)
            if "cpu" in ctrl.split(","):
                d = Path("/sys/fs/cgroup") / ctrl / path.lstrip("/")
                q = int((d / "cpu.cfs_quota_us").read_text())
                return None if q < 0 else q / int((d / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None


def machine_info() -> dict:
    """The CPUs and memory the job could use, for the what-if model: CPUs
    online, those this process (and a job it starts) may run on, its
    cgroup's CPU limit, and the memory (MemTotal, MemAvailable) at start."""
    mem = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            k, v = line.split(":", 1)
            if k in ("MemTotal", "MemAvailable"):
                mem[k] = int(v.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return {"cpus_online": os.cpu_count(), "cpus_allowed": len(os.sched_getaffinity(0)),
            "cgroup_cpu_limit": _cgroup_cpu_limit(), "mem_total_bytes": mem.get("MemTotal"),
            "mem_available_bytes": mem.get("MemAvailable")}


def base_meta(command: Optional[list[str]], mode: str, options: dict) -> dict:
    uname = platform.uname()
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "iotrace",
        "iotrace_pid": os.getpid(),   # who writes it while `recording`
        "state": "recording",
        "mode": mode,
        "host": uname.node,
        "kernel": uname.release,
        "arch": uname.machine,
        "command": command,
        "options": options,
        "machine": machine_info(),
        "events": 0,
        "drops": 0,
    }


class TraceWriter:
    """Owns a trace directory while it is being recorded."""

    def __init__(self, root: Path, meta: dict, owner: Optional[tuple[int, int]] = None) -> None:
        self.root = root
        self.owner = owner   # (uid, gid) that files are handed to as written (sudo)
        self.events_dir = root / "events"
        self.events_dir.mkdir(parents=True, exist_ok=True)
        self._own(self.events_dir)
        self.meta = meta
        self.mounts = mount_table()
        self.events = 0
        self.parts = 0
        self.bytes = 0

    def write_events(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        path = self.events_dir / f"part-{self.parts:06d}.parquet"
        tmp = path.with_name(path.name + ".tmp")
        pq.write_table(table, tmp, **EVENT_WRITE_OPTS)
        os.replace(tmp, path)
        self._own(path)
        self.parts += 1
        self.events += table.num_rows
        self.bytes += path.stat().st_size

    def _own(self, path: Path) -> None:
        if self.owner:
            os.chown(path, *self.owner)

    def write_tables(self, model: Model) -> None:
        for name, table in (("files", files_table(model, self.mounts)),
                            ("processes", processes_table(model)),
                            ("threads", threads_table(model))):
            atomic_write_table(table, self.root / f"{name}.parquet")
            self._own(self.root / f"{name}.parquet")

    def write_requests(self) -> dict:
        """requests.parquet and connections.parquet from the events written
        (requests.py); their row counts for meta.json."""
        con = duckdb.connect()
        try:
            create_views(con, self.root, derived=False)
            counts = requests.build(con, self.root)
        finally:
            con.close()
        for name in counts:
            self._own(self.root / f"{name}.parquet")
        return counts

    def write_meta(self, **updates: Any) -> None:
        self.meta.update(updates)
        self.meta["events"] = self.events
        self.meta["event_parts"] = self.parts
        self.meta["events_parquet_bytes"] = self.bytes
        atomic_write_json(self.meta, self.root / "meta.json")
        self._own(self.root / "meta.json")
