"""How long does `iotrace report` take on a big trace? Budget: 10 M events <= 10 s.

Builds a synthetic trace of N events (default 10 M) shaped like a training
job: 8 loader processes x 2 threads reading 20,000 files (4 KiB-1 MiB reads,
sequential and random), opens/stats/closes per file, futex waits, periodic
checkpoint writes with fsync. It is written with the recorder's own schemas
(the Parquet is what a recording gives), then the report is built once per
repetition and each rule is timed.

    .venv/bin/python bench/report_speed.py [--events 10000000] [--reps 3] [--keep DIR]
    .venv/bin/python bench/report_speed.py --events 100000000 --reps 1 --no-per-rule

The peak resident memory of the process (VmHWM) is printed with the times:
a trace too large to cache in memory is read from its Parquet files, and
DuckDB spills what does not fit under its memory limit (analyzers/views.py).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import iotrace
from iotrace.analyzers.base import Context, Targets
from iotrace.analyzers.registry import all_rules
from iotrace.analyzers.report import VERDICT, build_report
from iotrace.analyzers.verdict import make_verdict
from iotrace.analyzers.waits import analyse
from iotrace.analyzers.thresholds import load_thresholds
from iotrace.analyzers.views import create_views
from iotrace.convert import EVENTS_SCHEMA
from iotrace.schema import (EVENT_WRITE_OPTS, FILES_SCHEMA, PROCESSES_SCHEMA, SCHEMA_VERSION,
                            THREADS_SCHEMA)

NFILES = 20_000
PIDS = np.arange(1000, 1008, dtype=np.int32)
OPS = ["pread64", "read", "openat", "newfstatat", "close", "futex", "write", "fsync", "lseek"]
OP_P = [0.55, 0.2, 0.04, 0.04, 0.04, 0.08, 0.04, 0.001, 0.009]


def make_part(rng, n, t0):
    op_idx = rng.choice(len(OPS), size=n, p=np.array(OP_P) / sum(OP_P)).astype(np.int8)
    ts = t0 + np.cumsum(rng.integers(200, 2000, size=n))
    pid = rng.choice(PIDS, size=n)
    tid = pid * 10 + rng.integers(0, 2, size=n).astype(np.int32)
    is_io = np.isin(op_idx, [0, 1, 6])
    req = np.where(is_io, 2 ** rng.integers(12, 21, size=n), 0).astype(np.int64)
    file_id = np.where(np.isin(op_idx, [5]), -1, rng.integers(0, NFILES, size=n)).astype(np.int64)
    off = np.where(is_io, rng.integers(0, 256, size=n) * 4096, -1).astype(np.int64)
    cols = {
        "ts_ns": ts.astype(np.int64), "dur_ns": rng.integers(500, 50_000, size=n),
        "pid": pid, "tid": tid,
        "op": pa.DictionaryArray.from_arrays(pa.array(op_idx), pa.array(OPS)),
        "fd": np.full(n, 5, np.int32), "offset": off, "req_bytes": req,
        "ret": np.where(is_io, req, 0), "file_id": file_id,
        "fd_kind": pa.DictionaryArray.from_arrays(
            pa.array(np.where(file_id >= 0, 0, 1).astype(np.int8)), pa.array(["file", "none"])),
        "flags": np.zeros(n, np.int64), "mode": np.zeros(n, np.int32),
        "arg": np.where(op_idx == 5, 0x7F0000001000 + (pid.astype(np.int64) % 4) * 64, 0),
        "path": pa.nulls(n, pa.dictionary(pa.int32(), pa.string())),
        "path2": pa.nulls(n, pa.dictionary(pa.int32(), pa.string())),
        "eflags": np.zeros(n, np.int16),
        "chan_ino": pa.nulls(n, pa.int64()),
        "http": pa.nulls(n, pa.dictionary(pa.int32(), pa.string())),
    }
    return pa.table(cols, schema=EVENTS_SCHEMA), int(ts[-1])


def make_trace(root: Path, events: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    (root / "events").mkdir(parents=True)
    t, part, left = 10**9, 0, events
    while left:
        n = min(left, 1_000_000)
        table, t = make_part(rng, n, t)
        pq.write_table(table, root / "events" / f"part-{part:06d}.parquet", **EVENT_WRITE_OPTS)
        part, left = part + 1, left - n
    pq.write_table(pa.table({
        "file_id": np.arange(NFILES), "path": [f"/data/shard_{i // 1000}/s_{i}.npz"
                                               for i in range(NFILES)],
        "fs_type": ["ext4"] * NFILES, "mount_point": ["/"] * NFILES,
        "dev_major": [8] * NFILES, "dev_minor": [1] * NFILES, "ino": np.arange(NFILES) + 100,
        "mount_options": ["rw"] * NFILES,
    }, schema=FILES_SCHEMA), root / "files.parquet")
    pq.write_table(pa.table({
        "pid": PIDS, "ppid": [1] + [int(PIDS[0])] * (len(PIDS) - 1),
        "cmdline": ["python train.py"] * len(PIDS), "comm": ["python"] * len(PIDS),
        "start_ns": [0] * len(PIDS), "exit_ns": [t] * len(PIDS), "exit_code": [0] * len(PIDS),
        "exit_signal": [None] * len(PIDS), "execs": [1] * len(PIDS),
        "threads": [2] * len(PIDS), "before_trace": [False] * len(PIDS),
        "rank": [None] * len(PIDS), "local_rank": [None] * len(PIDS),
    }, schema=PROCESSES_SCHEMA), root / "processes.parquet")
    tids = [(int(p) * 10 + k, int(p)) for p in PIDS for k in range(2)]
    pq.write_table(pa.table({
        "tid": [x[0] for x in tids], "pid": [x[1] for x in tids],
        "name": ["loader"] * len(tids), "start_ns": [0] * len(tids),
        "exit_ns": [t] * len(tids)}, schema=THREADS_SCHEMA), root / "threads.parquet")
    (root / "meta.json").write_text(json.dumps({
        "schema_version": SCHEMA_VERSION, "state": "complete", "mode": "run",
        "events": events, "drops": 0, "counters": {}}))


def time_rules(root: Path, targets: Targets) -> dict[str, float]:
    """Seconds per rule, run one by one (the same work build_report does)."""
    trace = iotrace.open_trace(root)
    rules = all_rules()
    out = {}
    s = time.perf_counter()
    create_views(trace.con)         # the events cache and the shared tables (io...)
    out["(views)"] = time.perf_counter() - s
    t0, t1 = trace.con.execute("select min(ts_ns), max(ts_ns + dur_ns) from events").fetchone()
    ctx = Context(con=trace.con, meta=trace.meta, targets=targets,
                  thresholds=load_thresholds(rules + [VERDICT], None), t0_ns=t0, t1_ns=t1)
    s = time.perf_counter()
    waits = analyse(trace.con, ctx.thresholds["verdict"], t0, t1)
    out["(waits)"] = time.perf_counter() - s
    for rule in rules:
        s = time.perf_counter()
        rule.run(ctx)
        out[rule.id] = time.perf_counter() - s
    s = time.perf_counter()
    make_verdict(ctx, waits)
    out["(verdict)"] = time.perf_counter() - s
    return out


def peak_rss() -> int:
    """Bytes: the process's peak resident set (VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def mem_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--keep", help="build the trace here and keep it")
    ap.add_argument("--trace", help="time this trace (made by --keep) instead of building one")
    ap.add_argument("--no-per-rule", dest="per_rule", action="store_false",
                    help="skip the per-rule timings (a second pass over the trace)")
    args = ap.parse_args()
    if args.trace:
        root = Path(args.trace)
        args.events = json.loads((root / "meta.json").read_text())["events"]
        build_s = 0.0
    else:
        root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="iotrace-rbench-"))
        if args.keep and root.exists():
            shutil.rmtree(root)
        s = time.perf_counter()
        make_trace(root, args.events)
        build_s = time.perf_counter() - s
    size = sum(p.stat().st_size for p in (root / "events").glob("*.parquet"))
    targets = Targets(read_bps=8 * (1 << 30))
    times = []
    for _ in range(args.reps):
        s = time.perf_counter()
        report = build_report(iotrace.open_trace(root), targets)
        times.append(time.perf_counter() - s)
    report_rss = peak_rss()
    per_rule = time_rules(root, targets) if args.per_rule else {}
    med = statistics.median(times)
    print(f"report speed  {time.strftime('%Y-%m-%d %H:%M %z')}, kernel {platform.release()}, "
          f"{os.cpu_count()} CPUs ({cpu_model()}), {mem_gib():.0f} GiB memory")
    print(f"report speed: {args.events:,} synthetic events ({size / args.events:.2f} B/event, "
          f"built in {build_s:.1f} s), target 8 GiB/s")
    print(f"  report (all rules + verdict), median of {args.reps}: {med:6.2f} s "
          f"(runs: {', '.join(f'{t:.2f}' for t in times)})   budget <= 10 s for 10 M events   "
          f"{'ok' if med * 10_000_000 / args.events <= 10 else 'OVER BUDGET'}")
    print(f"  peak memory (VmHWM) after the report runs: {report_rss / (1 << 30):.2f} GiB")
    print(f"  findings: {', '.join(f.id + ':' + f.severity for f in report.findings) or 'none'}")
    if per_rule:
        print("  per rule (one run):")
        for rid, sec in sorted(per_rule.items(), key=lambda x: -x[1]):
            print(f"    {rid:<18} {sec:6.2f} s")
    if not args.keep and not args.trace:
        shutil.rmtree(root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
