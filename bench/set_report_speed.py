"""How long does `iotrace report SET` take as the job grows to 64 nodes?

Records one real trace (a torch DataLoader training loop, tests/workloads/
train_loader.py, 2 worker processes, over 256 sample files), then builds
trace sets of 1, 8, 16 and 64 nodes from it: each node a copy with its own
host name and its monotonic clock shifted (as after a different boot), so
the set's clock alignment is exercised. Times the set's report (JSON) from
the nodes' summaries (the default) and from their raw events (what a target
or thresholds ask for: nodes analysed in parallel, one process per CPU), and,
for up to 8 nodes, the set's Perfetto export; medians of --reps runs each,
interleaved. With --spark-reps N (and the spark extra installed), the same
reports on Apache Spark in local mode (`--engine spark`, a JVM started per
command, as a user's command does), N runs each. Needs root (the recording).

    sudo .venv/bin/python bench/set_report_speed.py [--nodes 1,8,16,64] [--reps 3]
                                                    [--spark-reps 1]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
IOTRACE = [sys.executable, "-m", "iotrace"]


def record(work: Path) -> Path:
    data = work / "data"
    data.mkdir()
    for i in range(256):
        (data / f"sample_{i:04d}.bin").write_bytes(os.urandom(64 << 10))
    out = work / "one"
    subprocess.run([*IOTRACE, "run", "-q", "-o", str(out), "--", sys.executable,
                    str(ROOT / "tests/workloads/train_loader.py"), str(data),
                    str(work / "gt.json"), "--loader", "torch", "--workers", "2",
                    "--compute", "0.01", "--epochs", "2", "--batch", "4"], check=True)
    return out


def replicate(src: Path, dst: Path, n: int) -> None:
    """n copies of src as host=node000.., node k's clock shifted by k x 1000.5 s."""
    for k in range(n):
        d = dst / f"host=node{k:03d}"
        shutil.copytree(src, d)
        shift = k * 1_000_500_000_000
        for part in (d / "events").glob("*.parquet"):
            t = pq.read_table(part)
            i = t.schema.get_field_index("ts_ns")
            pq.write_table(t.set_column(i, "ts_ns", pc.add(t["ts_ns"], shift)), part)
        meta = json.loads((d / "meta.json").read_text())
        meta["host"] = f"node{k:03d}"
        for key in ("start_monotonic_ns", "end_monotonic_ns"):
            meta[key] += shift
        for s in meta["clock"]["samples"]:
            s["monotonic_ns"] += shift
        (d / "meta.json").write_text(json.dumps(meta))


def timed(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="1,8,16,64")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--spark-reps", type=int, default=0,
                    help="runs of each report on Spark (local[*]); 0: none")
    a = ap.parse_args()
    sizes = [int(x) for x in a.nodes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="iotrace-setbench-"))
    try:
        one = record(work)
        meta = json.loads((one / "meta.json").read_text())
        sets = {}
        for n in sizes:
            sets[n] = work / f"set{n}"
            replicate(one, sets[n], n)
        times: dict[tuple[str, int], list[float]] = {}
        for _ in range(a.reps):                     # interleaved: noise hits all sizes alike
            times.setdefault(("report one trace", 1), []).append(
                timed([*IOTRACE, "report", str(one), "--format", "json"]))
            for n in sizes:
                times.setdefault(("report SET (summaries)", n), []).append(
                    timed([*IOTRACE, "report", str(sets[n]), "--format", "json"]))
                # a target makes every node's report read its raw events
                times.setdefault(("report SET (raw events)", n), []).append(
                    timed([*IOTRACE, "report", str(sets[n]), "--format", "json",
                           "--target-read", "1GB/s"]))
                if n <= 8:
                    times.setdefault(("export --perfetto SET", n), []).append(
                        timed([*IOTRACE, "export", "--perfetto", str(sets[n]), "-o",
                               str(work / f"s{n}.pftrace")]))
        for _ in range(a.spark_reps):
            for n in sizes:
                spark = ["--engine", "spark"]
                times.setdefault(("spark: SET (summaries)", n), []).append(
                    timed([*IOTRACE, "report", str(sets[n]), "--format", "json", *spark]))
                times.setdefault(("spark: SET (raw events)", n), []).append(
                    timed([*IOTRACE, "report", str(sets[n]), "--format", "json",
                           "--target-read", "1GB/s", *spark]))
        print(f"one node's trace: {meta['events']:,} events, "
              f"{meta['events_parquet_bytes'] / 1e6:.1f} MB of Parquet; "
              f"medians of {a.reps} interleaved runs (DuckDB) and {a.spark_reps} (Spark, "
              f"local[*]), {os.cpu_count()} CPUs")
        print(f"{'command':26} {'nodes':>5} {'events':>12} {'median s':>9} {'s per node':>10}")
        for (what, n), xs in times.items():
            med = statistics.median(xs)
            print(f"{what:26} {n:>5} {n * meta['events']:>12,} {med:>9.2f} {med / n:>10.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
