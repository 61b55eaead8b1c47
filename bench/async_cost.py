#!/usr/bin/env python3
"""What the io_uring and libaio probes cost: two recorder builds side by side.

A recorder with them is compared with one built without them (`--base`, e.g.
from an earlier commit) and with no tracing, on fio runs that hit exactly the
new probes, interleaved, each repetition rotating the order. The worst case is
requests served from the page cache (each costs a microsecond or two, so the
per-request probe work shows most):

  uring-1    io_uring 4 KiB random reads, one in flight, page-cached 256 MiB file
  uring-32   the same, 32 in flight (submission and completion in batches)
  aio-32     libaio 4 KiB random reads, 32 in flight, page-cached (buffered
             libaio runs synchronously inside io_submit: the iocb and
             io_getevents probes are all the extra work)

Each variant runs the recorder alone (`iotrace-recorder --spool DIR -- CMD`):
kernel-side cost plus the drain, without the Parquet conversion. Reported:
µs per I/O from fio's JSON (runtime / total_ios), medians and the median of
per-repetition ratios.

Run as root:  .venv/bin/python bench/async_cost.py --base OLD/iotrace-recorder [--reps N]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from waits_cost import NEW, print_side_by_side

RUNS = {
    "uring-1": ["--ioengine=io_uring", "--iodepth=1"],
    "uring-32": ["--ioengine=io_uring", "--iodepth=32", "--iodepth_batch_submit=8",
                 "--iodepth_batch_complete_min=1"],
    "aio-32": ["--ioengine=libaio", "--iodepth=32"],
}


def fio_us(prefix: list[str], data: Path, out: Path, opts: list[str]) -> float:
    subprocess.run([*prefix, "fio", "--name=r", f"--filename={data}", "--rw=randread",
                    "--bs=4k", "--size=256M", "--io_size=64M", "--invalidate=0",
                    *opts, "--output-format=json", f"--output={out}"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = json.loads(out.read_text())["jobs"][0]["read"]
    return r["runtime"] * 1000.0 / r["total_ios"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="a recorder built without these probes")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="iotrace-async-bench-", dir="/var/tmp"))
    try:
        data = work / "fio.bin"
        data.write_bytes(os.urandom(256 << 20))
        variants = {"untraced": None, "base recorder": args.base, "with async": str(NEW)}
        names = list(variants)
        res = {w: {v: [] for v in variants} for w in RUNS}
        for rep in range(args.reps):
            order = names[rep % 3:] + names[:rep % 3]
            for v in order:
                spool = work / "spool"
                pre = [] if variants[v] is None else [variants[v], "--spool", str(spool), "--"]
                for w, opts in RUNS.items():
                    shutil.rmtree(spool, ignore_errors=True)
                    spool.mkdir()
                    # this host reclaims idle page cache: re-warm before each run
                    subprocess.run(["cat", str(data)], stdout=subprocess.DEVNULL)
                    res[w][v].append(fio_us(pre, data, work / "fio.json", opts))
            print(f"repetition {rep + 1}/{args.reps} done", file=sys.stderr)
        print_side_by_side(res, {w: "µs/IO" for w in RUNS}, names, args.reps)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
