"""How long does `iotrace report SET` take as the job grows to 256 nodes,
and does it name the slow node?

Records two real traces of a torch DataLoader training loop (tests/workloads/
train_loader.py, 2 worker processes, over 256 sample files, as rank 0): a
normal node, and a slowed one whose loader's workers take --slow-prep
seconds more a sample (its loop waits for them). Then builds trace sets of
1, 8, 16 and 64 nodes (--nodes): node k a copy of the normal trace as rank
k, with its own host name and its monotonic clock shifted by k x 1001 s
(events, processes, threads, Python samples, the node summary's rates and
report: as after a different boot), so the set's clock alignment is
exercised; node n/2 a copy of the slowed trace, the straggler every report
of a set must name (node and rank; the run fails if one does not).

Times the set's report (JSON) from the nodes' summaries (the default) and
from their raw events (what a target or thresholds ask for: nodes analysed
in parallel, one process per CPU), and, for up to 8 nodes, the set's
Perfetto export; medians of --reps runs each, interleaved. With
--spark-reps N (and the spark extra installed), the same reports on Apache
Spark in local mode (`--engine spark`, a JVM started per command, as a
user's command does: from raw events each node a Spark task, DuckDB on the
executor; for sets of up to --spark-sql-max-nodes also every rule's SQL on
Spark, --spark-sql), N runs each; with --spark-cluster, also on a
standalone Spark cluster started on this machine (a master and two workers
of a core each, tests/spark_cluster.py) for the sets of up to
--cluster-max-nodes nodes. With --memory-limit SIZE, the largest set's raw
report once more inside a memory cgroup (v1) of that size: a set whose
events take more memory than the report may have. Each DuckDB command's
peak resident memory is that of its largest process (the report, or one of
its node workers: wait4's maxrss), the most of its runs (Spark's JVM is not
waited for: not given). Needs root (the recording, the cgroup).

    sudo .venv/bin/python bench/set_report_speed.py [--nodes 1,8,16,64] [--reps 3]
                                                    [--spark-reps 1] [--spark-cluster]
                                                    [--memory-limit 400M]
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
from typing import Optional

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
IOTRACE = [sys.executable, "-m", "iotrace"]


def record(work: Path, name: str = "one", prep: float = 0.0) -> Path:
    """A traced run of the loader as rank 0 of a job (RANK in its
    environment, as torchrun sets it); prep: seconds of work a sample in the
    loader's workers (a slowed node: its loop waits for them)."""
    data = work / "data"
    if not data.exists():
        data.mkdir()
        for i in range(256):
            (data / f"sample_{i:04d}.bin").write_bytes(os.urandom(64 << 10))
    out = work / name
    subprocess.run([*IOTRACE, "run", "-q", "-o", str(out), "--", sys.executable,
                    str(ROOT / "tests/workloads/train_loader.py"), str(data),
                    str(work / f"gt-{name}.json"), "--loader", "torch", "--workers", "2",
                    "--compute", "0.01", "--epochs", "2", "--batch", "4", "--prep", str(prep)],
                   check=True, env=dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1"))
    return out


SHIFT_S = 1001          # node k's monotonic clock: k x this many seconds later (another boot)


def replicate(src: Path, dst: Path, n: int, slow: Optional[Path] = None) -> Optional[int]:
    """n copies of src as host=node000.., node k as rank k, its clock
    shifted by k x SHIFT_S s (tests/synthetic_set.py). With slow: node n // 2
    is a copy of it (the straggler); returns that node's index."""
    sys.path.insert(0, str(ROOT / "tests"))
    from synthetic_set import copy_node
    slow_at = n // 2 if slow is not None and n > 1 else None
    for k in range(n):
        copy_node(slow if k == slow_at else src, dst / f"host=node{k:03d}", f"node{k:03d}", k,
                  k * SHIFT_S)
    return slow_at


PEAK: dict[str, int] = {}      # command label -> peak RSS in KiB, the most of its runs


def timed(cmd: list[str], label: str = "", out: Optional[Path] = None) -> float:
    """The command's wall time (its stdout into out); its largest process's
    peak RSS into PEAK[label]."""
    t = time.perf_counter()
    with open(out or os.devnull, "wb") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        raise subprocess.CalledProcessError(p.returncode, cmd)
    if label:
        PEAK[label] = max(PEAK.get(label, 0), ru.ru_maxrss)
    return dt


NAMED: dict[str, str] = {}      # command label -> the straggler its report named
WRONG: list[str] = []           # reports that did not name the slowed node and rank


def named(report: Path, expect: Optional[tuple[str, int]]) -> str:
    """Who the report (JSON) names as the straggler: "nodeNNN/rank K", and
    whether it is the node slowed (expect)."""
    strag = json.loads(report.read_text()).get("stragglers") or []
    got = ", ".join(f"{s['host']}/rank {s['rank']}" for s in strag) or "none"
    if expect is None:
        return got
    want = f"{expect[0]}/rank {expect[1]}"
    return got if got == want else f"WRONG: {got} (not {want})"


def run(times: dict, what: str, n: int, cmd: list[str], work: Path,
        expect: Optional[tuple[str, int]] = None) -> None:
    label = f"{what}/{n}"
    out = work / "last-report.json"
    times.setdefault((what, n), []).append(timed(cmd, label, out))
    if "report" in cmd and n > 1:
        NAMED[label] = named(out, expect)
        if NAMED[label].startswith("WRONG"):
            WRONG.append(f"{label}: {NAMED[label]}")


def parquet_bytes(root: Path) -> tuple[int, int]:
    """The set's events: bytes of Parquet on disk, and uncompressed (what
    they take in memory as columns)."""
    disk = mem = 0
    for p in root.glob("host=*/events/*.parquet"):
        disk += p.stat().st_size
        md = pq.ParquetFile(p).metadata
        mem += sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups))
    return disk, mem


def parse_size(text: str) -> int:
    """512M, 1G, 1.5G -> bytes (powers of 1024)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    return int(float(t[:-1]) * units[t[-1]]) if t[-1:] in units else int(t)


@contextlib.contextmanager
def memory_cgroup(limit: int):
    """A cgroup (v1 memory controller) that holds its processes to limit
    bytes of memory, swap included; yields (prefix to run a command in it,
    its directory)."""
    cg = Path("/sys/fs/cgroup/memory") / f"iotrace-setbench-{os.getpid()}"
    cg.mkdir()
    try:
        (cg / "memory.limit_in_bytes").write_text(str(limit))
        with contextlib.suppress(OSError):      # no swap accounting: memory alone
            (cg / "memory.memsw.limit_in_bytes").write_text(str(limit))
        yield ["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh"], cg
    finally:
        for _ in range(50):         # its last processes leave it a moment after they exit
            try:
                cg.rmdir()
                break
            except OSError:
                time.sleep(0.1)


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
    ap.add_argument("--slow-prep", type=float, default=0.01,
                    help="seconds of loader work a sample on the slowed node (its loop "
                         "waits for its workers); 0: no slowed node")
    ap.add_argument("--memory-limit", default="",
                    help="also the largest set's raw report in a memory cgroup of this size "
                         "(e.g. 1G): a set larger than memory")
    a = ap.parse_args()
    sizes = [int(x) for x in a.nodes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="iotrace-setbench-"))
    try:
        one = record(work)
        slow = record(work, "slow", a.slow_prep) if a.slow_prep > 0 else None
        meta = json.loads((one / "meta.json").read_text())
        sets, expect = {}, {}
        for n in sizes:
            sets[n] = work / f"set{n}"
            k = replicate(one, sets[n], n, slow)
            expect[n] = (f"node{k:03d}", k) if k is not None else None
        times: dict[tuple[str, int], list[float]] = {}
        for _ in range(a.reps):                     # interleaved: noise hits all sizes alike
            run(times, "report one trace", 1, [*IOTRACE, "report", str(one), "--format", "json"],
                work)
            for n in sizes:
                run(times, "report SET (summaries)", n,
                    [*IOTRACE, "report", str(sets[n]), "--format", "json"], work, expect[n])
                # a target makes every node's report read its raw events
                run(times, "report SET (raw events)", n,
                    [*IOTRACE, "report", str(sets[n]), "--format", "json", "--target-read",
                     "1GB/s"], work, expect[n])
                if n <= 8:
                    run(times, "export --perfetto SET", n,
                        [*IOTRACE, "export", "--perfetto", str(sets[n]), "-o",
                         str(work / f"s{n}.pftrace")], work)
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
                            [*IOTRACE, "report", str(sets[n]), "--format", "json", *spark],
                            work, expect[n])
                        # the nodes as tasks: DuckDB on the executors
                        run(times, f"{label}: SET (raw events)", n,
                            [*IOTRACE, "report", str(sets[n]), "--format", "json",
                             "--target-read", "1GB/s", *spark], work, expect[n])
                        if n <= a.spark_sql_max_nodes:
                            run(times, f"{label}: SET (raw, --spark-sql)", n,
                                [*IOTRACE, "report", str(sets[n]), "--format", "json",
                                 "--target-read", "1GB/s", "--spark-sql", *spark],
                                work, expect[n])
        limited = None
        if a.memory_limit:
            limit, n = parse_size(a.memory_limit), max(sizes)
            disk, mem = parquet_bytes(sets[n])
            with memory_cgroup(limit) as (prefix, cg):
                what = f"raw events, {a.memory_limit} cgroup"
                run(times, f"report SET ({what})", n,
                    [*prefix, *IOTRACE, "report", str(sets[n]), "--format", "json",
                     "--target-read", "1GB/s"], work, expect[n])
                peak = int((cg / "memory.max_usage_in_bytes").read_text())
            limited = (n, disk, mem, limit, peak)
        print(f"one node's trace: {meta['events']:,} events, "
              f"{meta['events_parquet_bytes'] / 1e6:.1f} MB of Parquet; "
              f"medians of {a.reps} interleaved runs (DuckDB) and {a.spark_reps} (Spark, "
              f"local[*]), {os.cpu_count()} CPUs")
        if slow is not None:
            print(f"each set of n > 1 nodes: node n/2 is a slowed node (its loader's workers "
                  f"take {a.slow_prep * 1000:.0f} ms more a sample; rank n/2), the straggler "
                  "a report must name")
        print(f"{'command':40} {'nodes':>5} {'events':>12} {'median s':>9} {'s per node':>10} "
              f"{'peak RSS':>9}  straggler named")
        for (what, n), xs in times.items():
            med = statistics.median(xs)
            # Spark's JVM is not a process the report waits for: no peak
            peak = ("-" if what.startswith("spark")
                    else f"{PEAK.get(f'{what}/{n}', 0) / 1024:.0f} MiB")
            print(f"{what:40} {n:>5} {n * meta['events']:>12,} {med:>9.2f} {med / n:>10.2f} "
                  f"{peak:>9}  {NAMED.get(f'{what}/{n}', '-')}")
        if limited:
            n, disk, mem, limit, peak = limited
            print(f"\nthe {n}-node set: {disk / 2**20:.0f} MiB of events Parquet, "
                  f"{mem / 2**20:.0f} MiB uncompressed; its raw report in a {limit / 2**20:.0f} "
                  f"MiB memory cgroup peaked at {peak / 2**20:.0f} MiB (the cgroup's "
                  "max_usage_in_bytes, page cache included)")
        if WRONG:
            print("\nstraggler not named:\n  " + "\n  ".join(WRONG))
            sys.exit(1)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
