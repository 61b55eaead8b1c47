#!/usr/bin/env python3
"""Cost of iotrace's libibverbs uprobes, per verbs call.

The uprobes sit on the library file for every process (the BPF side keeps only
the traced ones), so three cases matter, measured side by side:

  untraced       no iotrace running
  bystander      an untraced process while `iotrace run -- sleep` traces another
                 (each verbs call takes the entry and return uprobes and is
                 filtered out in BPF)
  traced         under `iotrace run` (each call is recorded)

Workload: bench/verbs_calls.c, N calls of ibv_get_device_list +
ibv_free_device_list (only the first is probed), timed by the program itself,
so tracer start-up is not counted. Repetitions are interleaved, the order
rotated; reported: median ns per call and the median of the per-repetition
differences from untraced (ns added per call).

The probes are forced on (--verbs-lib) since a machine without an RDMA
device does not get them by default. On kernels >= 6.6 they are uprobe_multi
links, else perf uprobes.

Run as root:  .venv/bin/python bench/verbs_uprobe.py [--reps N] [--calls N]
The table is printed and written to bench/results/verbs-uprobe-latest.txt.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
IOTRACE = [sys.executable, "-m", "iotrace"]
RESULTS = BENCH / "results" / "verbs-uprobe-latest.txt"


def system_verbs_lib() -> str:
    """The libibverbs the workload links against (forced on with --verbs-lib:
    without an RDMA device iotrace leaves the verbs probes off)."""
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "libibverbs.so.1 " in line and "=>" in line:
            return line.split("=>")[1].strip()
    raise SystemExit("libibverbs.so.1 not found (apt-get install libibverbs-dev)")


VERBS = ["--verbs-lib", system_verbs_lib()]


def build(tmp: Path) -> Path:
    exe = tmp / "verbs_calls"
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(BENCH / "verbs_calls.c"), "-libverbs"],
                   check=True)
    return exe


def untraced(exe: Path, calls: int) -> float:
    return float(subprocess.run([str(exe), str(calls)], capture_output=True, text=True,
                                check=True).stdout)


def traced(exe: Path, calls: int, tmp: Path) -> float:
    out = tmp / f"t{time.monotonic_ns()}"
    p = subprocess.run([*IOTRACE, "run", "-q", "-o", str(out), *VERBS, "--", str(exe),
                        str(calls)],
                       capture_output=True, text=True, check=True)
    return float(p.stdout)


def bystander(exe: Path, calls: int, tmp: Path) -> float:
    out = tmp / f"s{time.monotonic_ns()}"
    tracer = subprocess.Popen([*IOTRACE, "run", "-q", "-o", str(out), *VERBS, "--", "sleep",
                               "600"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)  # probes attached
        return untraced(exe, calls)
    finally:
        tracer.terminate()
        tracer.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        exe = build(tmp)
        variants = {"untraced": lambda: untraced(exe, a.calls),
                    "bystander": lambda: bystander(exe, a.calls, tmp),
                    "traced": lambda: traced(exe, a.calls, tmp)}
        names = list(variants)
        res = {n: [] for n in names}
        for r in range(a.reps):
            for n in names[r % 3:] + names[:r % 3]:
                res[n].append(variants[n]())
            print(f"rep {r + 1}/{a.reps}: " + ", ".join(f"{n} {res[n][-1]:.0f} ns"
                                                        for n in names), file=sys.stderr)
    lines = [f"# iotrace libibverbs uprobe cost ({datetime.now():%Y-%m-%d %H:%M}, "
             f"{platform.node()}, kernel {platform.release()})",
             f"# {a.calls} ibv_get_device_list+free calls per run, {a.reps} interleaved reps, "
             "medians", "",
             f"{'variant':<12} {'ns/call':>10} {'added ns/call':>14}"]
    for n in names:
        added = statistics.median(x - u for x, u in zip(res[n], res["untraced"]))
        lines.append(f"{n:<12} {statistics.median(res[n]):>10.0f} {added:>14.0f}")
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(text)


if __name__ == "__main__":
    main()
