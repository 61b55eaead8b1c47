#!/usr/bin/env python3
"""What sampling the job's Python stacks costs it: `iotrace run` with and
without `--py-stacks`, side by side with the job untraced.

Workloads (tests/workloads/jpeg_train.py: torchvision JPEG decoding and
augmentation feeding a small CNN, 240 images, 2 epochs), the loop's own
window (first request for data to the end of the last step) as the measure:

  w0       num_workers=0: one Python process, the loop decodes itself;
  w2       2 DataLoader workers: three Python processes sampled;
  w4       4 workers on 2 CPUs: five Python processes sampled, every CPU
           busy (the worst case: the sampler's CPU is taken from the job).

Variants, interleaved, each repetition rotating the order: untraced;
`iotrace run --py-stacks 0` (the trace without stacks); `iotrace run` (the
trace with stacks at the default 100 Hz). Reported: medians, and the medians
of per-repetition ratios.

Run as root:  .venv/bin/python bench/pystacks_cost.py [--reps N]
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "workloads" / "jpeg_train.py"
IOTRACE = [sys.executable, "-m", "iotrace", "run", "-q", "--no-node-summary", "--force"]


def loop_s(prefix: list[str], data: Path, out: Path, workers: int) -> float:
    subprocess.run([*prefix, sys.executable, str(JOB), str(data), str(out),
                    "--workers", str(workers), "--epochs", "2"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.loads(out.read_text())["loop_window_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="iotrace-pystacks-bench-", dir="/var/tmp"))
    try:
        data = work / "jpegs"
        subprocess.run([sys.executable, str(JOB), str(data), "--make", "240"], check=True)
        trace = work / "trace"
        variants = {"untraced": [],
                    "traced": [*IOTRACE, "-o", str(trace), "--py-stacks", "0", "--"],
                    "traced+stacks": [*IOTRACE, "-o", str(trace), "--"]}
        loads = {"w0": 0, "w2": 2, "w4": 4}
        names = list(variants)
        res = {w: {v: [] for v in names} for w in loads}
        for rep in range(args.reps):
            order = names[rep % 3:] + names[:rep % 3]
            for w, n in loads.items():
                for v in order:
                    res[w][v].append(loop_s(variants[v], data, work / "out.json", n))
            print(f"repetition {rep + 1}/{args.reps} done", file=sys.stderr)
        print(f"{'workload':<9} {'variant':<14} {'median s':>9} {'x untraced':>11} "
              f"{'x traced':>9}")
        for w in loads:
            for v in names:
                xs = res[w][v]
                un = statistics.median(a / b for a, b in zip(xs, res[w]["untraced"]))
                tr = statistics.median(a / b for a, b in zip(xs, res[w]["traced"]))
                print(f"{w:<9} {v:<14} {statistics.median(xs):>9.3f} {un:>10.3f}x {tr:>8.3f}x")
        print(f"(median of {args.reps} interleaved repetitions; ratios are medians of "
              "per-repetition ratios; the loop's own window)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
