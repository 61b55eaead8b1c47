"""The hooks' cost measured with the bare recorder and a C pread loop, for a
machine that has neither the iotrace package nor fio (a lent machine with an
accelerator, another kernel): Python's standard library only.

    sudo python3 bench/hooks_raw.py RECORDER SYSCALL_LOOP [--reps 5] [--calls 2000000]

RECORDER is an iotrace-recorder (build it static to carry it: see
bench/README.md), SYSCALL_LOOP bench/syscall_loop.c built. Interleaved
repetitions (the order rotates) of one thread pread-ing 4 KiB of a page-cached
file in a loop:

  untraced                      the loop alone
  full, fentry / tracepoint     recorder -- loop        (IOTRACE_HOOKS=...)
  profile, fentry / tracepoint  recorder --profile -- loop
  bystander, fentry / tracepoint  the loop untraced while the recorder traces
                                a sleeping process

then the capture rate: THREADS threads of 1-byte preads, full trace, events
per second of the loop's run and the drops the recorder counted. Rows for
fentry say "skipped" where the kernel refuses fentry programs. Medians of
(variant / untraced of the same repetition), min-max beside.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FILE_BYTES = 1 << 20


def loop(prog: str, data: Path, threads: int, calls: int, nbytes: int) -> float:
    """Runs the loop untraced; seconds it took."""
    out = subprocess.run([prog, str(data), str(threads), str(calls), str(nbytes)],
                         capture_output=True, text=True, check=True).stdout
    return float(out.split()[1])


def statuses(path: Path) -> dict:
    lines = {}
    for line in path.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        lines[rec.get("type")] = rec
    return lines


def traced(recorder: str, prog: str, data: Path, threads: int, calls: int, nbytes: int,
           hooks: str, profile: bool, work: Path) -> tuple[float, dict]:
    spool = work / "spool"
    shutil.rmtree(spool, ignore_errors=True)
    spool.mkdir()
    st = work / "status"
    with open(st, "w") as f:
        out = subprocess.run([recorder, "--spool", str(spool), "--status-fd", str(f.fileno()),
                              *(["--profile"] if profile else []), "--",
                              prog, str(data), str(threads), str(calls), str(nbytes)],
                             capture_output=True, text=True, pass_fds=(f.fileno(),),
                             env={**os.environ, "IOTRACE_HOOKS": hooks}, timeout=300)
    end = statuses(st).get("end", {})
    if out.returncode != 0 or not end:
        raise RuntimeError(f"traced run failed ({hooks}): {out.stderr.strip()[-400:]}")
    shutil.rmtree(spool, ignore_errors=True)
    return float(out.stdout.split()[1]), end


def bystander(recorder: str, prog: str, data: Path, calls: int, hooks: str,
              work: Path) -> float:
    """The loop untraced while the recorder traces a sleeping process."""
    spool = work / "spool"
    shutil.rmtree(spool, ignore_errors=True)
    spool.mkdir()
    st = work / "status"
    sleeper = subprocess.Popen(["sleep", "600"])
    with open(st, "w") as f:
        rec = subprocess.Popen([recorder, "--spool", str(spool), "--status-fd",
                                str(f.fileno()), "--pid", str(sleeper.pid)],
                               stderr=subprocess.PIPE, pass_fds=(f.fileno(),),
                               env={**os.environ, "IOTRACE_HOOKS": hooks})
    try:
        deadline = time.monotonic() + 120
        while "ready" not in statuses(st):
            if rec.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"recorder did not start ({hooks}): "
                                   f"{rec.stderr.read().decode(errors='replace')[-400:]}")
            time.sleep(0.05)
        return loop(prog, data, 1, calls, 4096)
    finally:
        rec.send_signal(signal.SIGINT)
        rec.wait()
        sleeper.kill()
        sleeper.wait()
        shutil.rmtree(spool, ignore_errors=True)


def check_hooks(recorder: str) -> tuple[str, str]:
    out = subprocess.run([recorder, "--check"], capture_output=True, text=True)
    for line in out.stdout.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        return rec.get("syscall_hooks", "?"), rec.get("syscall_hooks_why", "")
    raise RuntimeError(f"recorder --check failed: {out.stderr.strip()[-400:]}")


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f}x ({min(xs):.3f}-{max(xs):.3f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recorder")
    ap.add_argument("syscall_loop")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--calls", type=int, default=2_000_000)
    ap.add_argument("--rate-calls", type=int, default=1_000_000,
                    help="calls per thread in the capture-rate runs")
    ap.add_argument("--threads", type=int, default=0,
                    help="capture-rate threads (default: half the CPUs, at most 8)")
    ap.add_argument("--json", help="write the numbers here too")
    a = ap.parse_args()
    threads = a.threads or max(1, min(8, (os.cpu_count() or 2) // 2))

    used, why = check_hooks(a.recorder)
    hooks = ["fentry", "tracepoint"] if used == "fentry" else ["tracepoint"]
    print(f"kernel {platform.release()}, {os.cpu_count()} CPUs; default hooks: {used}"
          + (f" ({why})" if why else ""), flush=True)

    work = Path(tempfile.mkdtemp(prefix="iotrace-hooks-raw."))
    data = work / "data"
    data.write_bytes(os.urandom(FILE_BYTES))
    loop(a.syscall_loop, data, 1, 100_000, 4096)           # warm the page cache
    variants = ["untraced"] + [f"{m}-{h}" for h in hooks for m in ("full", "profile", "bystander")]
    ratios: dict[str, list[float]] = {v: [] for v in variants[1:]}
    ns: dict[str, list[float]] = {v: [] for v in variants}
    complete: dict[str, list[float]] = {}
    try:
        for rep in range(a.reps):
            order = variants[rep % len(variants):] + variants[:rep % len(variants)]
            secs = {}
            for v in order:
                if v == "untraced":
                    secs[v] = loop(a.syscall_loop, data, 1, a.calls, 4096)
                    continue
                mode, h = v.split("-")
                if mode == "bystander":
                    secs[v] = bystander(a.recorder, a.syscall_loop, data, a.calls, h, work)
                    continue
                secs[v], end = traced(a.recorder, a.syscall_loop, data, 1, a.calls, 4096,
                                      h, mode == "profile", work)
                got = end["profile_calls"] if mode == "profile" else end["bytes_read"] / 4096
                complete.setdefault(v, []).append(got / a.calls)
            for v in variants:
                ns[v].append(secs[v] * 1e9 / a.calls)
                if v != "untraced":
                    ratios[v].append(secs[v] / secs["untraced"])
            print(f"rep {rep + 1}/{a.reps}: " + ", ".join(
                f"{v} {secs[v] * 1e9 / a.calls:.0f} ns" for v in variants), flush=True)

        rate = {}
        for h in hooks:
            for _ in range(3):
                s, end = traced(a.recorder, a.syscall_loop, data, threads, a.rate_calls, 1,
                                h, False, work)
                rate.setdefault(h, []).append((end["events"] / s, end["drops"],
                                               threads * a.rate_calls / s,
                                               end.get("own_lock_waits", 0)))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"\n4 KiB page-cache preads, 1 thread, {a.calls:,} calls, {a.reps} interleaved reps")
    print(f"{'variant':24} {'ns/call':>9}  {'vs untraced (min-max)':28} calls recorded")
    print(f"{'untraced':24} {statistics.median(ns['untraced']):9.0f}")
    for v in variants[1:]:
        c = complete.get(v)
        print(f"{v:24} {statistics.median(ns[v]):9.0f}  {med(ratios[v]):28} "
              + (f"{min(c):.4f}-{max(c):.4f}" if c else "-"))
    print(f"\ncapture rate, {threads} threads of 1-byte preads, full trace (3 runs)")
    for h, rows in rate.items():
        for ev, drops, offered, waits in rows:
            print(f"  {h:11} {ev / 1e6:6.2f} M events/s recorded, {drops} drops, "
                  f"{waits:,} waits for the ring's lock "
                  f"(loop's own rate {offered / 1e6:.2f} M calls/s)")
    if a.json:
        Path(a.json).write_text(json.dumps({
            "kernel": platform.release(), "cpus": os.cpu_count(), "hooks_default": used,
            "hooks_why": why, "ns": ns, "ratios": ratios, "complete": complete,
            "rate": rate}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
