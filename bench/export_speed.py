"""How long does the Perfetto export take on a big trace? Budget: 10 M events <= 20 s.

Builds the synthetic training-job trace of bench/report_speed.py (N events,
default 10 M: 8 loader processes x 2 threads, 20,000 files, reads, opens,
futex waits, checkpoint writes), then exports it to a .pftrace once per
repetition and prints the time, the file size and what the size limit did
(slices written, calls merged into runs). With --max-slices above the event
count nothing is merged: that times the full one-slice-per-call export.

    .venv/bin/python bench/export_speed.py [--events 10000000] [--reps 3]
        [--max-slices N] [--findings] [--keep DIR]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import iotrace  # noqa: E402
from iotrace.viewers.perfetto import MAX_SLICES, export  # noqa: E402
from report_speed import make_trace  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--max-slices", type=int, default=MAX_SLICES)
    ap.add_argument("--findings", action="store_true",
                    help="also build the report and put its findings on the timeline "
                         "(timed separately)")
    ap.add_argument("--keep", help="build the trace here and keep it (reused if present)")
    args = ap.parse_args()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="iotrace-pbench-"))
    built = "reused"
    if not (root / "meta.json").exists():
        if root.exists():
            shutil.rmtree(root)
        s = time.perf_counter()
        make_trace(root, args.events)
        built = f"built in {time.perf_counter() - s:.1f} s"
    out = root.parent / (root.name + ".pftrace")
    report = None
    report_s = 0.0
    if args.findings:
        from iotrace.analyzers.base import Targets
        from iotrace.analyzers.report import build_report
        s = time.perf_counter()
        report = build_report(iotrace.open_trace(root), Targets())
        report_s = time.perf_counter() - s
    times, cpus, stats = [], [], {}
    for _ in range(args.reps):
        s, c = time.perf_counter(), time.process_time()
        stats = export(iotrace.open_trace(root), out, report=report, max_slices=args.max_slices)
        times.append(time.perf_counter() - s)
        cpus.append(time.process_time() - c)
    med = statistics.median(times)
    nev = stats["events"]
    print(f"perfetto export: {nev:,} synthetic events ({built}), max_slices {args.max_slices:,}")
    print(f"  export, median of {args.reps}: {med:6.2f} s  (runs: "
          f"{', '.join(f'{x:.2f}' for x in times)})   budget <= 20 s for 10 M events   "
          f"{'ok' if med * 10_000_000 / max(nev, 1) <= 20 else 'OVER BUDGET'}")
    print(f"  CPU time (all threads), median: {statistics.median(cpus):6.2f} s   "
          f"(wall > CPU/2 means other load on this 2-core machine)")
    print(f"  file: {stats['bytes'] / 1e6:,.1f} MB ({stats['bytes'] / max(nev, 1):.1f} B/event)")
    print(f"  slices {stats['slices']:,} (merged slices {stats['merged_slices']:,} holding "
          f"{stats['merged_calls']:,} calls; merge below {stats['merge_below_ns']} ns, "
          f"window {stats['merge_window_ns']} ns), instants {stats['instants']:,}, "
          f"counter points {stats['counter_points']:,}, tracks {stats['tracks']:,}")
    if args.findings:
        print(f"  report for the findings track: {report_s:.2f} s, "
              f"{stats['findings']} finding events")
    if not args.keep:
        shutil.rmtree(root)
        out.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
