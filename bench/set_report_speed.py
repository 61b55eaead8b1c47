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
command, as a user's command does: from raw events each node a Spark task,
DuckDB on the executor; for sets of up to --spark-sql-max-nodes also every
rule's SQL on Spark, --spark-sql), N runs each; with --spark-cluster, also
on a standalone Spark cluster started on this machine (a master and two
workers of a core each, tests/spark_cluster.py) for the sets of up to
--cluster-max-nodes nodes. Each DuckDB command's peak resident memory is that of
its largest process (the report, or one of its node workers: wait4's
maxrss), the most of its runs (Spark's JVM is not waited for: not given). Needs root (the recording).

    sudo .venv/bin/python bench/set_report_speed.py [--nodes 1,8,16,64] [--reps 3]
                                                    [--spark-reps 1] [--spark-cluster]
"""
from __future__ import annotations

import argparse
import contextlib
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


PEAK: dict[str, int] = {}      # command label -> peak RSS in KiB, the most of its runs


def timed(cmd: list[str], label: str = "") -> float:
    """The command's wall time; its largest process's peak RSS into PEAK[label]."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        raise subprocess.CalledProcessError(p.returncode, cmd)
    if label:
        PEAK[label] = max(PEAK.get(label, 0), ru.ru_maxrss)
    return dt


def run(times: dict, what: str, n: int, cmd: list[str]) -> None:
    times.setdefault((what, n), []).append(timed(cmd, f"{what}/{n}"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="1,8,16,64")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--spark-reps", type=int, default=0,
                    help="runs of each report on Spark (local[*]); 0: none")
    ap.add_argument("--spark-cluster", action="store_true",
                    help="also on a standalone cluster on this machine (--spark-reps runs)")
    ap.add_argument("--cluster-max-nodes", type=int, default=8)
    ap.add_argument("--spark-sql-max-nodes", type=int, default=1,
                    help="sets of up to this many nodes also with --spark-sql (every rule's "
                         "SQL on Spark, about 16 s a node in local mode)")
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
            run(times, "report one trace", 1, [*IOTRACE, "report", str(one), "--format", "json"])
            for n in sizes:
                run(times, "report SET (summaries)", n,
                    [*IOTRACE, "report", str(sets[n]), "--format", "json"])
                # a target makes every node's report read its raw events
                run(times, "report SET (raw events)", n,
                    [*IOTRACE, "report", str(sets[n]), "--format", "json", "--target-read",
                     "1GB/s"])
                if n <= 8:
                    run(times, "export --perfetto SET", n,
                        [*IOTRACE, "export", "--perfetto", str(sets[n]), "-o",
                         str(work / f"s{n}.pftrace")])
        masters = [("spark", "local[*]")] if a.spark_reps else []
        cluster = contextlib.ExitStack()
        if a.spark_cluster and a.spark_reps:
            sys.path.insert(0, str(ROOT / "tests"))
            from spark_cluster import standalone_cluster
            masters.append(("spark cluster", cluster.enter_context(
                standalone_cluster(work / "spark-cluster"))))
        with cluster:
            for _ in range(a.spark_reps):
                for label, master in masters:
                    for n in sizes:
                        if label == "spark cluster" and n > a.cluster_max_nodes:
                            continue
                        spark = ["--engine", "spark", "--spark-master", master]
                        run(times, f"{label}: SET (summaries)", n,
                            [*IOTRACE, "report", str(sets[n]), "--format", "json", *spark])
                        # the nodes as tasks: DuckDB on the executors
                        run(times, f"{label}: SET (raw events)", n,
                            [*IOTRACE, "report", str(sets[n]), "--format", "json",
                             "--target-read", "1GB/s", *spark])
                        if n <= a.spark_sql_max_nodes:
                            run(times, f"{label}: SET (raw, --spark-sql)", n,
                                [*IOTRACE, "report", str(sets[n]), "--format", "json",
                                 "--target-read", "1GB/s", "--spark-sql", *spark])
        print(f"one node's trace: {meta['events']:,} events, "
              f"{meta['events_parquet_bytes'] / 1e6:.1f} MB of Parquet; "
              f"medians of {a.reps} interleaved runs (DuckDB) and {a.spark_reps} (Spark, "
              f"local[*]), {os.cpu_count()} CPUs")
        print(f"{'command':34} {'nodes':>5} {'events':>12} {'median s':>9} {'s per node':>10} "
              f"{'peak RSS':>9}")
        for (what, n), xs in times.items():
            med = statistics.median(xs)
            # Spark's JVM is not a process the report waits for: no peak
            peak = ("-" if what.startswith("spark")
                    else f"{PEAK.get(f'{what}/{n}', 0) / 1024:.0f} MiB")
            print(f"{what:34} {n:>5} {n * meta['events']:>12,} {med:>9.2f} {med / n:>10.2f} "
                  f"{peak:>9}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
