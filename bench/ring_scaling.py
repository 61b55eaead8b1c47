"""How a full trace scales with the number of threads writing records at once,
for a lent machine with many CPUs: the bare recorder and a C pread loop,
Python's standard library only (as bench/hooks_raw.py).

    sudo python3 bench/ring_scaling.py RECORDER SYSCALL_LOOP \\
        [--baseline-recorder OTHER] [--threads 4,8,16] [--reps 3] [--json FILE]
    python3 bench/ring_scaling.py --table FILE      # the table of an earlier --json

Each repetition runs, for each thread count, in a rotating order: the loop
untraced; under a full trace; under a profile; and, with --baseline-recorder,
under a full trace by that recorder (e.g. one built from an older commit, to
measure a change side by side). Each thread makes --calls 1-byte preads of a
page-cached file, the cheapest call there is, so the loop offers as many
records a second as the CPUs can make: the table says how much longer the loop
took traced (median of the repetitions' ratios, min-max), the records a second
the trace took in, the drops, and how often a thread waited for one of
iotrace's own ring-buffer locks (counters.own_lock_waits).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from capture_rate import med  # noqa: E402
from hooks_raw import loop, traced  # noqa: E402  (the same runs, one thread or many)

FILE_BYTES = 1 << 20


def run_once(variant: str, recorder: str | None, prog: str, data: Path, threads: int,
             calls: int, work: Path) -> dict:
    if recorder is None:
        return {"loop_s": loop(prog, data, threads, calls, 1)}
    profile = variant == "profile"
    s, end = traced(recorder, prog, data, threads, calls, 1, "auto", profile, work)
    return {"loop_s": s, "recorded": end.get("profile_calls" if profile else "events", 0),
            "drops": end.get("drops", 0) + end.get("profile_overflow", 0),
            "own_lock_waits": end.get("own_lock_waits", 0), "recorder_cpu_s": end.get("cpu_s")}


def table(rows: list[dict]) -> str:
    lines = [f"{'threads':>7}  {'variant':12} {'loop s':>7}  {'x untraced (min-max)':22} "
             f"{'M records/s (min-max)':22} {'drops':>5}  own-lock waits (median)"]
    for t in sorted({r["threads"] for r in rows}):
        base = {r["rep"]: r["loop_s"] for r in rows
                if r["threads"] == t and r["variant"] == "untraced"}
        lines.append(f"{t:7d}  {'untraced':12} {statistics.median(base.values()):7.2f}")
        for v in ("baseline", "full", "profile"):
            rs = [r for r in rows if r["threads"] == t and r["variant"] == v and r["rep"] in base]
            if not rs:
                continue
            ratio = [r["loop_s"] / base[r["rep"]] for r in rs]
            rate = [r["recorded"] / r["loop_s"] / 1e6 for r in rs]
            waits = statistics.median(r["own_lock_waits"] for r in rs)
            lines.append(f"{'':7}  {v:12} {statistics.median(r['loop_s'] for r in rs):7.2f}  "
                         f"{med(ratio, '{:.2f}'):22} {med(rate, '{:.2f}'):22} "
                         f"{sum(r['drops'] for r in rs):5d}  {waits:14,.0f}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recorder", nargs="?", help="iotrace-recorder (static, to carry it)")
    ap.add_argument("syscall_loop", nargs="?", help="bench/syscall_loop.c built")
    ap.add_argument("--baseline-recorder",
                    help="a second recorder traced side by side ('baseline' rows)")
    ap.add_argument("--threads", default="4,8,16",
                    help="thread counts, comma-separated (default 4,8,16)")
    ap.add_argument("--calls", type=int, default=1_000_000,
                    help="preads per thread (default 1,000,000)")
    ap.add_argument("--reps", type=int, default=3, help="interleaved repetitions (default 3)")
    ap.add_argument("--json", help="write every run's figures here, one JSON object a line")
    ap.add_argument("--table", metavar="FILE", help="print the table of an earlier --json and stop")
    a = ap.parse_args()
    if a.table:
        print(table([json.loads(line) for line in Path(a.table).read_text().splitlines() if line]))
        return 0
    if not a.recorder or not a.syscall_loop:
        ap.error("RECORDER and SYSCALL_LOOP are needed (or --table FILE)")
    if os.geteuid() != 0:
        print("ring_scaling.py: the recorder needs root: run it with sudo", file=sys.stderr)
        return 2
    threads = [int(x) for x in a.threads.split(",")]
    variants = {"untraced": None, "full": a.recorder, "profile": a.recorder}
    if a.baseline_recorder:
        variants["baseline"] = a.baseline_recorder
    names = list(variants)
    rows = []
    sink = open(a.json, "w") if a.json else None
    with tempfile.TemporaryDirectory(prefix="ring-scaling-") as tmp:
        work = Path(tmp)
        data = work / "data"
        data.write_bytes(os.urandom(FILE_BYTES))
        print(f"{os.cpu_count()} CPUs; {a.calls:,} 1-byte preads per thread; {a.reps} repetitions",
              flush=True)
        for rep in range(a.reps):
            order = names[rep % len(names):] + names[:rep % len(names)]
            for t in threads:
                for v in order:
                    r = run_once(v, variants[v], a.syscall_loop, data, t, a.calls, work)
                    r.update(rep=rep, threads=t, variant=v)
                    rows.append(r)
                    if sink:
                        sink.write(json.dumps(r) + "\n")
                        sink.flush()
            print(f"rep {rep + 1}/{a.reps} done", flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
