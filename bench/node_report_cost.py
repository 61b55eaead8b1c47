#!/usr/bin/env python3
"""What a node's report from raw events costs, split into what grows with
its events and what every node pays whatever its size: the case for
analysing a trace set's nodes in one pass.

Takes one trace (or records bench/set_report_speed.py's loader run) and
makes two more of it: its first eighth of time (fewer events) and eight
copies of its events laid end to end in time (8x the events, the same
processes and files). Times the report (build_report, DuckDB on one thread,
as a set's node workers run it) of each, medians of --reps interleaved
runs, and counts its SQL statements and the seconds inside them (the rest
is Python). A straight line through the 1x and 8x reports gives the fixed
part (the intercept) and the part per node's worth of events (the slope):
a set of N nodes analysed a node at a time pays N x (fixed + slope); one
pass over all of them would pay about fixed + N x slope.

    .venv/bin/python bench/node_report_cost.py [--trace DIR] [--reps 3]
"""
from __future__ import annotations

import argparse
import glob
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))


class Counting:
    """A DuckDB connection that counts its statements and the time in them."""

    def __init__(self, con) -> None:
        self._con, self.n, self.s = con, 0, 0.0

    def __getattr__(self, name):
        attr = getattr(self._con, name)
        if name not in ("execute", "sql", "query"):
            return attr

        def timed(*a, **k):
            t = time.perf_counter()
            r = attr(*a, **k)
            if name == "execute":       # sql/query are lazy: their fetch runs them
                self.s += time.perf_counter() - t
            self.n += 1
            return r
        return timed


def events(trace: Path) -> pa.Table:
    return pa.concat_tables(pq.read_table(p) for p in sorted(glob.glob(f"{trace}/events/*.parquet")))


def variant(src: Path, dst: Path, table: pa.Table) -> Path:
    shutil.copytree(src, dst)
    for p in (dst / "events").glob("*.parquet"):
        p.unlink()
    pq.write_table(table, dst / "events" / "part-000000.parquet")
    return dst


def report_once(trace: Path) -> tuple[float, int, float]:
    from iotrace.analyzers.base import Targets
    from iotrace.analyzers.report import build_report
    from iotrace.trace import open_trace
    t0 = time.perf_counter()
    tr = open_trace(trace)
    tr.con.execute("set threads = 1")
    tr.con = counting = Counting(tr.con)
    build_report(tr, Targets())
    dt = time.perf_counter() - t0
    tr.con._con.close()
    return dt, counting.n, counting.s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, help="a trace directory (default: record one; root)")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="iotrace-node-cost-", dir="/var/tmp"))
    try:
        src = args.trace
        if src is None:
            import set_report_speed
            print("recording one node's trace ...", file=sys.stderr, flush=True)
            src = set_report_speed.record(work)
        meta = json.loads((src / "meta.json").read_text())
        lo, hi = meta["start_monotonic_ns"], meta["end_monotonic_ns"]
        ev = events(src)
        span = hi - lo
        ts = ev.schema.get_field_index("ts_ns")
        eighth = ev.filter(pc.less(ev["ts_ns"], lo + span // 8))
        eight = pa.concat_tables(
            ev.set_column(ts, "ts_ns", pc.add(ev["ts_ns"], pa.scalar(k * span, ev["ts_ns"].type)))
            for k in range(8))
        traces = {"1/8 of the time": variant(src, work / "eighth", eighth), "1x": src,
                  "8x the events": variant(src, work / "eight", eight)}
        for t in (traces["8x the events"],):       # its meta spans the copies' time
            m = json.loads((t / "meta.json").read_text())
            m["end_monotonic_ns"] = lo + 8 * span
            (t / "meta.json").write_text(json.dumps(m))
        runs: dict[str, list] = {k: [] for k in traces}
        for _ in range(args.reps):
            for k, t in traces.items():
                runs[k].append(report_once(t))
        rows = {}
        print(f"one node's trace: {ev.num_rows:,} events; DuckDB, 1 thread; medians of "
              f"{args.reps} interleaved runs")
        print(f"{'trace':<18}{'events':>12}{'report s':>10}{'SQL s':>8}{'Python s':>10}"
              f"{'statements':>12}{'ms a statement':>16}")
        for k, r in runs.items():
            n_ev = {"1/8 of the time": eighth, "1x": ev, "8x the events": eight}[k].num_rows
            wall = statistics.median(x[0] for x in r)
            sql = statistics.median(x[2] for x in r)
            n = int(statistics.median(x[1] for x in r))
            rows[k] = wall
            print(f"{k:<18}{n_ev:>12,}{wall:>10.3f}{sql:>8.3f}{wall - sql:>10.3f}{n:>12}"
                  f"{1000 * sql / max(n, 1):>16.2f}")
        slope = (rows["8x the events"] - rows["1x"]) / 7
        fixed = rows["1x"] - slope
        print(f"\nper node: {fixed:.3f} s fixed + {slope:.3f} s per node's worth of events "
              f"({fixed / rows['1x']:.0%} of a node's report is fixed)")
        for n in (64, 256):
            print(f"{n} nodes, one thread: a node at a time {n * rows['1x']:.1f} s; "
                  f"one pass (fixed once) about {fixed + n * slope:.1f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
