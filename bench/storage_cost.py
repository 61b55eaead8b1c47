#!/usr/bin/env python3
"""What the page-cache, page-fault and block-request probes cost: two
recorder builds side by side.

A recorder with them is compared with one built without them (`--base`, e.g.
from an earlier commit) and with no tracing, on workloads that hit exactly the
new probes, interleaved, each repetition rotating the order:

  fio      psync 4 KiB random reads of a 256 MiB page-cached file: µs per I/O
           from fio's JSON (every read pays the page-cache bookkeeping);
  mmap     numpy sums a page-cached 256 MiB .npy opened with mmap_mode='r':
           seconds in the script (file page faults: the fault probe's work);
  anon     numpy fills 1 GiB of fresh memory: seconds in the script (262,144
           anonymous page faults, each looked up and skipped by the probe);
  loader   tests/workloads/train_loader.py, a PyTorch DataLoader with 2 workers
           reading 64 page-cached samples of 1 MiB for 4 epochs, 5 ms of compute
           a step: the loop's own window (what a page-cache-heavy loader pays).

Each variant runs the recorder alone (`iotrace-recorder --spool DIR -- CMD`):
kernel-side cost plus the drain, without the Parquet conversion. Reported:
medians and the median of per-repetition ratios.

Run as root:  .venv/bin/python bench/storage_cost.py --base OLD/iotrace-recorder [--reps N]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from waits_cost import NEW, fio_us, loader_s, print_side_by_side   # the same runs

MMAP = ("import sys, time, numpy as np; t = time.perf_counter(); "
        "a = np.load(sys.argv[1], mmap_mode='r'); s = int(a.sum()); "
        "print(time.perf_counter() - t)")
ANON = ("import time, numpy as np; t = time.perf_counter(); a = np.empty(1 << 27); "
        "a.fill(1.0); print(time.perf_counter() - t)")


def script_s(prefix, code: str, *args: str) -> float:
    out = subprocess.run([*prefix, sys.executable, "-c", code, *args], check=True,
                         capture_output=True, text=True).stdout
    return float(out.split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="a recorder built without these probes")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    import numpy as np
    work = Path(tempfile.mkdtemp(prefix="iotrace-storage-bench-", dir="/var/tmp"))
    try:
        data = work / "fio.bin"
        data.write_bytes(os.urandom(256 << 20))
        arr = work / "a.npy"
        np.save(arr, np.arange(32 << 20, dtype=np.int64))
        ds = work / "ds"
        ds.mkdir()
        for i in range(64):
            (ds / f"sample_{i:03d}.bin").write_bytes(os.urandom(1 << 20))
        variants = {"untraced": None, "base recorder": args.base, "with storage": str(NEW)}
        work_names = ("fio", "mmap", "anon", "loader")
        res = {w: {v: [] for v in variants} for w in work_names}
        names = list(variants)
        for rep in range(args.reps):
            order = names[rep % 3:] + names[:rep % 3]
            for v in order:
                spool = work / "spool"
                pre = [] if variants[v] is None else [variants[v], "--spool", str(spool), "--"]
                for w in work_names:
                    shutil.rmtree(spool, ignore_errors=True)
                    spool.mkdir()
                    # this host reclaims idle page cache: re-warm before each run
                    subprocess.run(["cat", str(data), str(arr), *map(str, ds.iterdir())],
                                   stdout=subprocess.DEVNULL)
                    if w == "fio":
                        res[w][v].append(fio_us(pre, data, work / "fio.json"))
                    elif w == "mmap":
                        res[w][v].append(script_s(pre, MMAP, str(arr)))
                    elif w == "anon":
                        res[w][v].append(script_s(pre, ANON))
                    else:
                        res[w][v].append(loader_s(pre, ds, work / "loader.json"))
            print(f"repetition {rep + 1}/{args.reps} done", file=sys.stderr)
        print_side_by_side(res, dict(zip(work_names, ("µs/IO", "s", "s", "s"))), names,
                           args.reps)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
