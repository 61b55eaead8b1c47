#!/usr/bin/env python3
"""Workloads for bench/peers.py that report their own time and their own call counts.

  loaders.py make  DIR KIND N SIZE   create N data files for KIND (files: raw bytes,
                                     npy/torch: float32 .npy arrays of SIZE bytes of data)
  loaders.py files DIR               open + one os.read(fd, size) + close per file
  loaders.py npy   DIR               np.load(path) of every .npy file
  loaders.py torch DIR [--workers 2] [--batch 32]
                                     a PyTorch DataLoader whose Dataset np.load()s a file
                                     per sample

Each run prints one JSON line on stdout:
  seconds  the loop's own wall time (imports, listing the directory and
           process start-up excluded, so a tracer's start-up is not counted)
  reads    the read-family system calls the loop made on the data files: for
           `files` by construction (one os.read per file, its length checked);
           for `npy` and `torch` from the kernel's own per-process count
           (/proc/thread-self/io syscr, read before and after each np.load, the
           reads of that file itself subtracted), summed over the
           DataLoader's worker processes through the batches
  opens    files opened
  files    files read
Data-file reads are all the loop does between the two counts, so `reads` is
the ground truth a tracer's capture is compared against.
"""
from __future__ import annotations

import json
import os
import sys
import time


def syscr() -> int:
    """The calling process's read-family system calls so far (kernel count)."""
    with open("/proc/thread-self/io", "rb", buffering=0) as f:
        data = f.read(4096)
    for line in data.split(b"\n"):
        if line.startswith(b"syscr:"):
            return int(line.split()[1])
    raise RuntimeError("no syscr in /proc/thread-self/io")


def syscr_cost() -> int:
    """Reads that syscr() itself adds between two readings (its own read)."""
    a = syscr()
    b = syscr()
    return b - a


def list_files(d: str, suffix: str = "") -> list[str]:
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(suffix))


def make(d: str, kind: str, n: int, size: int) -> None:
    os.makedirs(d, exist_ok=True)
    if kind == "files":
        block = os.urandom(size)
        for i in range(n):
            with open(os.path.join(d, f"f{i:06d}.bin"), "wb") as f:
                f.write(block)
        return
    import numpy as np
    a = np.random.default_rng(0).random(size // 4, dtype=np.float32)
    for i in range(n):
        np.save(os.path.join(d, f"s{i:06d}.npy"), a)


def run_files(d: str) -> dict:
    paths = list_files(d, ".bin")
    size = os.stat(paths[0]).st_size
    t0 = time.perf_counter()
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        if len(os.read(fd, size)) != size:
            raise SystemExit(f"short read of {p}")
        os.close(fd)
    secs = time.perf_counter() - t0
    return dict(seconds=secs, reads=len(paths), opens=len(paths), files=len(paths))


def counted_load(path: str, cost: int):
    """np.load(path) and the read system calls it made (kernel count)."""
    import numpy as np
    before = syscr()
    a = np.load(path)
    return a, syscr() - before - cost


def run_npy(d: str) -> dict:
    import numpy as np
    paths = list_files(d, ".npy")
    cost = syscr_cost()
    # Two loads before the clock starts: the first does numpy's lazy imports
    # (reads of other files, so it is not counted), the second is counted; both
    # read the data file alike, and a tracer sees both: 2x in `reads`.
    np.load(paths[0])
    reads = 2 * counted_load(paths[0], cost)[1]
    t0 = time.perf_counter()
    total = 0.0
    for p in paths:
        a, n = counted_load(p, cost)
        reads += n
        total += float(a[0])
    secs = time.perf_counter() - t0
    return dict(seconds=secs, reads=reads, opens=len(paths) + 2, files=len(paths))


class NpyDataset:
    def __init__(self, paths: list[str]):
        self.paths = paths
        self.cost = None

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        import torch
        if self.cost is None:           # once per worker process
            self.cost = syscr_cost()
        a, n = counted_load(self.paths[i], self.cost)
        return torch.from_numpy(a), n


def run_torch(d: str, workers: int, batch: int) -> dict:
    import torch
    from torch.utils.data import DataLoader
    import numpy as np
    torch.set_num_threads(1)
    paths = list_files(d, ".npy")
    # Lazy imports before the workers fork, as in run_npy: two loads, 2x counted.
    torch.from_numpy(np.load(paths[0]))
    warm = 2 * counted_load(paths[0], syscr_cost())[1]
    loader = DataLoader(NpyDataset(paths), batch_size=batch, shuffle=False,
                        num_workers=workers)
    t0 = time.perf_counter()
    reads, samples, total = warm, 0, 0.0
    for x, n in loader:
        reads += int(n.sum())
        samples += x.shape[0]
        total += float(x[:, 0].sum())   # a little work per batch, as a step would
    secs = time.perf_counter() - t0
    return dict(seconds=secs, reads=reads, opens=samples + 2, files=samples)


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "make":
        make(argv[1], argv[2], int(argv[3]), int(argv[4]))
        return 0
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    kind, d = argv[0], argv[1]
    if kind == "files":
        out = run_files(d)
    elif kind == "npy":
        out = run_npy(d)
    elif kind == "torch":
        workers = int(argv[argv.index("--workers") + 1]) if "--workers" in argv else 2
        batch = int(argv[argv.index("--batch") + 1]) if "--batch" in argv else 32
        out = run_torch(d, workers, batch)
    else:
        print(f"unknown workload {kind}", file=sys.stderr)
        return 2
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
