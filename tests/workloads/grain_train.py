"""A Grain input pipeline (Google's data loader for JAX) as its users write
it, feeding a training loop that times its own waits for data
(perf_counter around next(), the MLPerf Storage definition).

    grain_train.py DATA_DIR OUT_JSON [--workers N] [--compute S]
                   [--compute-kind busy|sleep] [--prep N] [--batch N] [--epochs N]
                   [--api loader|dataset]
    grain_train.py DATA_DIR --make N      # N sample files of 256 KiB

Pipeline: a RandomAccessDataSource that reads one file per record, a
MapTransform that decodes it (--prep rounds of numpy work on the record:
a 256x256 float32 matrix product each), Batch, grain.DataLoader with
--workers worker processes (Grain's own pool: its workers put each batch in
shared memory and a thread of the loop's process reads it ahead; 0: all in
the loop's thread). --api dataset: the same steps in Grain's dataset API
(MapDataset.source ... batch, to_iter_dataset(), mp_prefetch with --workers
worker processes). The loop's step is --compute seconds of numpy work
(busy) or of sleep. Ground truth in OUT_JSON: per step the wait and its
span on CLOCK_MONOTONIC, the loop's window (the first next() to the last
step's end; end_ns: that end on CLOCK_MONOTONIC), its thread id and pid.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

import timed_loop


class Files:
    """A Grain data source: record i is the bytes of the i-th file."""

    def __init__(self, d: str) -> None:
        self.paths = sorted(str(p) for p in Path(d).glob("sample_*.bin"))

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> bytes:
        with open(self.paths[i], "rb") as f:
            return f.read()


def make_decode(rounds: int):
    import grain.python as grain

    class Decode(grain.MapTransform):
        def map(self, raw: bytes) -> np.ndarray:
            return timed_loop.decode(raw, rounds)

    return Decode()


def main() -> None:
    ap = timed_loop.arg_parser(__doc__)
    ap.add_argument("--api", choices=("loader", "dataset"), default="loader",
                    help="grain.DataLoader, or the dataset API (MapDataset ... "
                         "to_iter_dataset().mp_prefetch())")
    a = ap.parse_args()
    if a.make:
        timed_loop.make_samples(a.data, a.make)
        return

    import grain.python as grain
    source = Files(a.data)
    if a.api == "loader":
        loader = grain.DataLoader(
            data_source=source,
            sampler=grain.IndexSampler(num_records=len(source), shard_options=grain.NoSharding(),
                                       shuffle=True, num_epochs=a.epochs, seed=0),
            operations=[make_decode(a.prep), grain.Batch(a.batch, drop_remainder=True)],
            worker_count=a.workers)
    else:
        loader = (grain.MapDataset.source(source).shuffle(seed=0).repeat(a.epochs)
                  .map(make_decode(a.prep)).batch(a.batch, drop_remainder=True)
                  .to_iter_dataset())
        if a.workers:
            loader = loader.mp_prefetch(grain.MultiprocessingOptions(num_workers=a.workers))
    def check(batch) -> None:
        assert batch.shape == (a.batch, 256, 256)

    timed_loop.run([loader], a.out, a.compute, a.compute_kind, check)

if __name__ == "__main__":
    main()
