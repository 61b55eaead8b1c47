"""A WebDataset input pipeline (tar shards streamed in order, the format of
LAION-scale training) as its users write it, feeding a training loop that
times its own waits for data (perf_counter around next(), the MLPerf
Storage definition).

    wds_train.py DATA_DIR OUT_JSON [--workers N] [--compute S]
                 [--compute-kind busy|sleep] [--prep N] [--batch N] [--epochs N]
    wds_train.py DATA_DIR --make N      # N samples of 256 KiB in tar shards of 32

Pipeline: wds.WebDataset over the shards (DATA_DIR/shard-*.tar), a map that
decodes each sample's .bin (--prep rounds of numpy work: a 256x256 float32
matrix product each) and takes its .cls, batched(--batch). With --workers 0
the loop iterates the pipeline itself (the shards read and decoded in its
own thread, inside the pipeline's generator); with N > 0, wds.WebLoader
(PyTorch's DataLoader) runs it in N worker processes, a shard each at a
time. The loop's step is --compute seconds of numpy work (busy) or of sleep.
Ground truth in OUT_JSON (timed_loop.run): per step the wait and its span on
CLOCK_MONOTONIC, the loop's window, its thread id and pid.
"""
from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import numpy as np

import timed_loop

PER_SHARD = 32


def make(d: str, n: int) -> None:
    p = Path(d)
    p.mkdir(parents=True, exist_ok=True)
    for s in range(0, n, PER_SHARD):
        with tarfile.open(p / f"shard-{s // PER_SHARD:05d}.tar", "w") as tar:
            for i in range(s, min(n, s + PER_SHARD)):
                for ext, data in (("bin", os.urandom(timed_loop.SAMPLE)),
                                  ("cls", str(i % 10).encode())):
                    info = tarfile.TarInfo(f"sample{i:06d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))


def decoder(rounds: int):
    def decode(sample: dict) -> tuple[np.ndarray, int]:
        return timed_loop.decode(sample["bin"], rounds), int(sample["cls"])
    return decode


def main() -> None:
    ap = timed_loop.arg_parser(__doc__, workers=0)
    a = ap.parse_args()
    if a.make:
        make(a.data, a.make)
        return

    import webdataset as wds
    shards = sorted(str(p) for p in Path(a.data).glob("shard-*.tar"))
    ds = (wds.WebDataset(shards, shardshuffle=False,
                         nodesplitter=wds.single_node_only,
                         workersplitter=wds.split_by_worker)
          .map(decoder(a.prep)).batched(a.batch, partial=False))
    loader = ds if a.workers == 0 else wds.WebLoader(ds, batch_size=None,
                                                     num_workers=a.workers)

    def check(batch) -> None:
        assert len(batch[0]) == a.batch and batch[0][0].shape == (256, 256), type(batch)

    timed_loop.run([loader] * a.epochs, a.out, a.compute, a.compute_kind, check)


if __name__ == "__main__":
    main()
