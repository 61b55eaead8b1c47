"""A small training-like job: a data loader with worker processes reading
.npz samples, a training loop, and a checkpoint written every few steps.

    python examples/train_like.py --data DIR [--steps 300] [--workers 2]
                                  [--ckpt-every 100] [--ckpt-mb 16] [--timing FILE]

The dataset is made on first use (not traced: run --prepare-only first)."""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import time

import numpy as np

SAMPLES = 48
SAMPLE_FLOATS = 256 * 1024   # 1 MiB of float32 per sample


def prepare(data: str) -> None:
    os.makedirs(data, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(SAMPLES):
        path = os.path.join(data, f"sample_{i:04d}.npz")
        if not os.path.exists(path):
            np.savez(path, x=rng.random(SAMPLE_FLOATS, dtype=np.float32), y=np.int64(i % 10))


def load_sample(path: str) -> float:
    """What a Dataset.__getitem__ does: np.load an .npz and touch the arrays."""
    with np.load(path) as z:
        return float(z["x"][:16].sum()) + float(z["y"])


def checkpoint(path: str, step: int, mb: int) -> None:
    state = np.full(mb * 1024 * 1024 // 4, step, dtype=np.float32)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        np.save(f, state)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", required=True)
    # 300 steps of 10 ms: a window of about 3.5 s, enough to judge (120, 1.4 s
    # with two waits, were "too little to judge")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--ckpt-every", type=int, default=100)
    ap.add_argument("--ckpt-mb", type=int, default=16)
    ap.add_argument("--prepare-only", action="store_true")
    ap.add_argument("--timing", metavar="FILE",
                    help="write the loop's own clock around next() here (JSON: the "
                         "seconds it waited for data, its window, AU = 1 - wait / window)")
    args = ap.parse_args()
    prepare(args.data)
    if args.prepare_only:
        return
    files = sorted(os.path.join(args.data, f) for f in os.listdir(args.data)
                   if f.endswith(".npz"))
    order = [random.Random(step).choice(files)
             for step in range(args.steps * args.batch)]
    ckpt = os.path.join(args.data, "checkpoint.npy")
    wait = 0.0
    with mp.get_context("fork").Pool(args.workers) as pool:
        batches = pool.imap(load_sample, order, chunksize=args.batch)
        start = time.perf_counter()
        for step in range(1, args.steps + 1):
            asked = time.perf_counter()
            for _ in range(args.batch):
                next(batches)
            wait += time.perf_counter() - asked
            time.sleep(0.01)                     # the "GPU" step
            if step % args.ckpt_every == 0:
                checkpoint(ckpt, step, args.ckpt_mb)
        window = time.perf_counter() - start
    if args.timing:
        with open(args.timing, "w") as f:
            json.dump({"wait_s": wait, "loop_window_s": window, "au": 1 - wait / window}, f)
    print(f"trained {args.steps} steps on {len(files)} samples, "
          f"{args.steps // args.ckpt_every} checkpoints")


if __name__ == "__main__":
    main()
