#!/usr/bin/env python3
"""What recording the waits costs: two recorder builds side by side.

The wait probes (sched_switch, sched_waking, and the blocking calls poll,
select, epoll_wait, sleeps, recv/send, connect, accept, ioctl) are compared
with a recorder built without them (`--base`, e.g. built from an earlier
commit), on two workloads, interleaved, each repetition rotating the order:

  fio      psync 4 KiB random reads of a 256 MiB page-cached file (the worst
           case for a syscall tracer): µs per I/O from fio's own JSON;
  loader   tests/workloads/train_loader.py: a PyTorch DataLoader with 2
           workers feeding a loop that computes 5 ms a step on 64 samples of
           1 MiB, 4 epochs: the loop's own window (first batch request to the end),
           the time a realistic loader takes.

Each variant runs the recorder alone (`iotrace-recorder --spool DIR -- CMD`),
so the figures are the kernel-side cost plus the drain, without the Parquet
conversion. Reported: medians and the median of per-repetition ratios.

Run as root:  .venv/bin/python bench/waits_cost.py --base OLD/iotrace-recorder [--reps N]
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NEW = ROOT / "build" / "iotrace-recorder"


def print_side_by_side(res: dict, units: dict, names: list, reps: int) -> None:
    """The table of the side-by-side benchmarks: per workload and variant the
    median, and the medians of its per-repetition ratios to the untraced run
    and to the base recorder (res[workload][variant] = one value per rep)."""
    print(f"{'workload':<9} {'variant':<14} {'median':>12} {'x untraced':>11} {'x base':>8}")
    for w, unit in units.items():
        for v in names:
            xs = res[w][v]
            vs_un = statistics.median(a / b for a, b in zip(xs, res[w]["untraced"]))
            vs_base = statistics.median(a / b for a, b in zip(xs, res[w]["base recorder"]))
            print(f"{w:<9} {v:<14} {statistics.median(xs):>9.3f} {unit:<5}"
                  f"{vs_un:>8.3f}x {vs_base:>7.3f}x")
    print(f"(median of {reps} interleaved repetitions; ratios are medians of "
          "per-repetition ratios)")


def fio_us(prefix: list[str], data: Path, out: Path) -> float:
    subprocess.run([*prefix, "fio", "--name=r", f"--filename={data}", "--rw=randread",
                    "--bs=4k", "--ioengine=psync", "--size=256M", "--io_size=128M",
                    "--invalidate=0", "--output-format=json", f"--output={out}"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = json.loads(out.read_text())["jobs"][0]["read"]
    return r["runtime"] * 1000.0 / r["total_ios"]


def loader_s(prefix: list[str], data: Path, out: Path) -> float:
    subprocess.run([*prefix, sys.executable, str(ROOT / "tests/workloads/train_loader.py"),
                    str(data), str(out), "--workers", "2", "--compute", "0.005",
                    "--epochs", "4"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.loads(out.read_text())["loop_window_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="a recorder built without the wait probes")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="iotrace-waits-bench-", dir="/var/tmp"))
    try:
        data = work / "fio.bin"
        data.write_bytes(os.urandom(256 << 20))
        ds = work / "ds"
        ds.mkdir()
        for i in range(64):
            (ds / f"sample_{i:03d}.bin").write_bytes(os.urandom(1 << 20))
        subprocess.run(["cat", str(data), *map(str, ds.iterdir())], stdout=subprocess.DEVNULL)
        variants = {"untraced": None, "base recorder": args.base, "with waits": str(NEW)}
        res = {w: {v: [] for v in variants} for w in ("fio", "loader")}
        names = list(variants)
        for rep in range(args.reps):
            order = names[rep % 3:] + names[:rep % 3]
            for v in order:
                spool = work / "spool"
                shutil.rmtree(spool, ignore_errors=True)
                spool.mkdir()
                pre = [] if variants[v] is None else [variants[v], "--spool", str(spool), "--"]
                res["fio"][v].append(fio_us(pre, data, work / "fio.json"))
                shutil.rmtree(spool, ignore_errors=True)
                spool.mkdir()
                res["loader"][v].append(loader_s(pre, ds, work / "loader.json"))
            print(f"repetition {rep + 1}/{args.reps} done", file=sys.stderr)
        print_side_by_side(res, {"fio": "µs/IO", "loader": "s"}, names, args.reps)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
