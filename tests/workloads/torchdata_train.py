"""A torchdata.nodes input pipeline (PyTorch's composable loader, the
successor of DataLoader's worker processes) as its users write it, feeding
a training loop that times its own waits for data (perf_counter around
next(), the MLPerf Storage definition).

    torchdata_train.py DATA_DIR OUT_JSON [--workers N] [--method thread|process]
                       [--compute S] [--compute-kind busy|sleep] [--prep N]
                       [--batch N] [--epochs N] [--prefetch N]
    torchdata_train.py DATA_DIR --make N      # N sample files of 256 KiB

Pipeline: SamplerWrapper over a RandomSampler of the files, a
ParallelMapper that reads one file and decodes it (--prep rounds of numpy
work on the record: a 256x256 float32 matrix product each) in --workers
threads of the loop's process (--method thread, the default: the work
releases the GIL in numpy) or worker processes (--method process), Batcher,
Prefetcher (--prefetch batches ahead), Loader: the loop iterates the Loader
once an epoch. The loop's step is --compute seconds of numpy work (busy) or
of sleep. Ground truth in OUT_JSON (timed_loop.run): per step the wait and
its span on CLOCK_MONOTONIC, the loop's window, its thread id and pid.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

import timed_loop


class Decode:
    """Reads a sample file and decodes it (picklable: worker processes get it)."""

    def __init__(self, paths: list[str], rounds: int) -> None:
        self.paths, self.rounds = paths, rounds

    def __call__(self, i: int) -> np.ndarray:
        with open(self.paths[i], "rb") as f:
            return timed_loop.decode(f.read(), self.rounds)


def stack(batch: list[np.ndarray]) -> np.ndarray:
    return np.stack(batch)


def main() -> None:
    ap = timed_loop.arg_parser(__doc__)
    ap.add_argument("--method", choices=("thread", "process"), default="thread")
    ap.add_argument("--prefetch", type=int, default=2, help="batches the Prefetcher holds")
    a = ap.parse_args()
    if a.make:
        timed_loop.make_samples(a.data, a.make)
        return

    import torch
    import torchdata.nodes as tn
    paths = sorted(str(p) for p in Path(a.data).glob("sample_*.bin"))
    sampler = torch.utils.data.RandomSampler(range(len(paths)),
                                             generator=torch.Generator().manual_seed(0))
    node = tn.SamplerWrapper(sampler)
    node = tn.ParallelMapper(node, map_fn=Decode(paths, a.prep), num_workers=a.workers,
                             method=a.method, in_order=True)
    node = tn.Batcher(node, batch_size=a.batch, drop_last=True)
    node = tn.Mapper(node, stack)
    node = tn.Prefetcher(node, prefetch_factor=a.prefetch)
    loader = tn.Loader(node)

    def check(batch) -> None:
        assert batch.shape == (a.batch, 256, 256)

    timed_loop.run([loader] * a.epochs, a.out, a.compute, a.compute_kind, check)


if __name__ == "__main__":
    main()
