"""A Ray Data input pipeline as its users write it, feeding a training loop
that times its own waits for data (perf_counter around next(), the MLPerf
Storage definition).

    ray_train.py DATA_DIR OUT_JSON [--cpus N] [--compute S]
                 [--compute-kind busy|sleep] [--prep N] [--batch N] [--epochs N]
    ray_train.py DATA_DIR --make N      # N sample files of 256 KiB

Pipeline: ray.data.read_binary_files over the sample files, map_batches
that decodes each record (--prep rounds of numpy work: a 256x256 float32
matrix product each), then iter_batches(batch_size=--batch) in the loop.
Ray runs the reads and the decode as tasks in its own worker processes
(--cpus of them: ray.init(num_cpus=...)); the batches come to the loop's
process through Ray's shared-memory object store, and a thread of the
loop's process fetches and formats them ahead of the loop. The loop's step
is --compute seconds of numpy work (busy) or of sleep. Ground truth in
OUT_JSON: per step the wait and its span on CLOCK_MONOTONIC, the loop's
window (the first next() to the last step's end; end_ns: that end on
CLOCK_MONOTONIC), its thread id and pid.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

import timed_loop


def make_decode(rounds: int):
    def decode(batch: dict) -> dict:
        return {"x": np.stack([timed_loop.decode(raw, rounds) for raw in batch["bytes"]])}
    return decode


def main() -> None:
    ap = timed_loop.arg_parser(__doc__, workers=None)
    ap.add_argument("--cpus", type=int, default=2, help="Ray's worker CPUs (ray.init num_cpus)")
    a = ap.parse_args()
    if a.make:
        timed_loop.make_samples(a.data, a.make)
        return

    import ray
    ray.init(num_cpus=a.cpus, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    paths = sorted(str(p) for p in Path(a.data).glob("sample_*.bin"))
    ds = (ray.data.read_binary_files(paths)
          .map_batches(make_decode(a.prep), batch_size=a.batch))

    def check(batch) -> None:
        assert batch["x"].shape == (a.batch, 256, 256)

    timed_loop.run((ds.iter_batches(batch_size=a.batch, batch_format="numpy", drop_last=True)
                    for _ in range(a.epochs)), a.out, a.compute, a.compute_kind, check)
    ray.shutdown()


if __name__ == "__main__":
    main()
