"""How many events per second can iotrace capture without a drop? Budget: >= 2 M/s.

The workload is the fastest a job can offer: bench/syscall_loop.c, THREADS
threads each making CALLS 1-byte preads of a page-cached file (about 0.3 us
a call untraced). Per thread count, interleaved repetitions of:

  untraced   the loop alone: the call rate it offers (calls / its own seconds)
  traced     under `iotrace run` (full capture, default 64 MiB ring): the
             rate the loop reached traced, the events captured per second of
             the loop, the drops (meta.json), the recorder's CPU seconds

A rate limited by the traced job itself (each call pays the probes) is not a
capture limit: drops say whether the drain kept up. Medians with min-max.

    sudo .venv/bin/python bench/capture_rate.py [--threads 1,2,4] [--calls 2000000] [--reps 3]
        [--baseline-recorder OTHER/build/iotrace-recorder]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUDGET = 2_000_000


def build(work: Path) -> Path:
    exe = work / "syscall_loop"
    subprocess.run(["gcc", "-O2", "-pthread", "-o", str(exe), str(HERE / "syscall_loop.c")],
                   check=True)
    return exe


def iotrace_bin() -> str:
    return str(Path(sys.executable).parent / "iotrace")


def loop(exe: Path, data: Path, threads: int, calls: int, trace: Path | None,
         recorder: str | None = None) -> dict:
    cmd = [str(exe), str(data), str(threads), str(calls)]
    if trace:
        cmd = [iotrace_bin(), "run", "-q", "--no-node-summary", "--force", "-o", str(trace),
               "--", *cmd]
    env = dict(os.environ, IOTRACE_RECORDER=recorder) if recorder else None
    out = subprocess.run(cmd, capture_output=True, text=True, check=True,
                         env=env).stdout.split()
    n, secs = int(out[-2]), float(out[-1])
    r = {"calls_per_s": n / secs, "secs": secs, "calls": n}
    if trace:
        meta = json.loads((trace / "meta.json").read_text())
        captured = int(meta["events"])
        r.update(events_per_s=captured / secs, drops=int(meta.get("drops") or 0),
                 dropped_preads=int((meta.get("drops_by_op") or {}).get("pread64", 0)),
                 recorder_cpu_s=meta.get("recorder_cpu_s") or 0.0,
                 own_lock_waits=int((meta.get("counters") or {}).get("own_lock_waits") or 0),
                 events=captured)
    return r


def med(xs: list[float], fmt: str) -> str:
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2,4")
    ap.add_argument("--calls", type=int, default=2_000_000, help="per thread")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--baseline-recorder", metavar="PATH",
                    help="also trace with this iotrace-recorder (another build), interleaved: "
                         "a before/after of a recorder change in one run")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("capture_rate: tracing needs root: run it with sudo", file=sys.stderr)
        return 3
    work = Path(tempfile.mkdtemp(prefix="iotrace-rate-"))
    exe = build(work)
    data = work / "one.bin"
    data.write_bytes(os.urandom(4096))
    rows = []
    kinds = ["untraced", "traced"] + (["baseline"] if args.baseline_recorder else [])
    for t in [int(x) for x in args.threads.split(",")]:
        got: dict[str, list[dict]] = {k: [] for k in kinds}
        for rep in range(args.reps):
            for kind in kinds[rep % len(kinds):] + kinds[:rep % len(kinds)]:
                r = loop(exe, data, t, args.calls, None if kind == "untraced" else work / "trace",
                         args.baseline_recorder if kind == "baseline" else None)
                got[kind].append(r)
            print(f"  .. {t} thread(s) rep {rep + 1}: " + ", ".join(
                f"{k} {got[k][-1]['calls_per_s'] / 1e6:.2f} M calls/s" +
                ("" if k == "untraced" else f" (drops {got[k][-1]['drops']}, own lock waits "
                                             f"{got[k][-1]['own_lock_waits']})") for k in kinds),
                  file=sys.stderr, flush=True)
        rows.append((t, got["untraced"], got["traced"]))
        if args.baseline_recorder:
            rows.append((f"{t} base", got["untraced"], got["baseline"]))
    head = (f"capture rate  {time.strftime('%Y-%m-%d %H:%M %z')}, kernel {platform.release()}, "
            f"{os.cpu_count()} CPUs (bench/capture_rate.py --calls {args.calls} "
            f"--reps {args.reps})\n"
            "workload: THREADS threads of 1-byte preads of a page-cached file (C loop); "
            "medians (min-max)\n")
    if args.baseline_recorder:
        head += (f"rows 'N base': traced with the recorder {args.baseline_recorder} "
                 "(interleaved with the others)\n")
    lines = [f"{'threads':>7}  {'offered untraced M calls/s':>26}  {'traced M calls/s':>18}  "
             f"{'captured M events/s':>20}  {'drops':>6}  {'own lock waits':>14}  "
             f"{'recorder CPU s':>14}"]
    best = 0.0
    for t, un, tr in rows:
        if isinstance(t, int):
            best = max(best, statistics.median([r["events_per_s"] for r in tr]))
        lines.append(
            f"{t:>7}  {med([r['calls_per_s'] / 1e6 for r in un], '{:.2f}'):>26}  "
            f"{med([r['calls_per_s'] / 1e6 for r in tr], '{:.2f}'):>18}  "
            f"{med([r['events_per_s'] / 1e6 for r in tr], '{:.2f}'):>20}  "
            f"{max(r['drops'] for r in tr):>6}  "
            f"{statistics.median([r['own_lock_waits'] for r in tr]):>14,.0f}  "
            f"{med([r['recorder_cpu_s'] for r in tr], '{:.2f}'):>14}")
    drops = sum(r["drops"] for t, _, tr in rows if isinstance(t, int) for r in tr)
    lines.append(f"best captured rate {best / 1e6:.2f} M events/s with {drops} drops in all "
                 f"runs; budget >= {BUDGET / 1e6:.0f} M/s, 0 drops: "
                 + ("ok" if best >= BUDGET and not drops else
                    "not reached" + (" (the traced loop offers less: each call pays the probes)"
                                     if not drops else "")))
    text = head + "\n".join(lines) + "\n"
    print(text)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "capture-rate-latest.txt").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
