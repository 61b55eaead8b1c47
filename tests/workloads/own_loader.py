"""A loop over a loader of its own: a generator that np.loads each sample and
sorts it (in-loop prep, on the loop's CPU), timing its own waits.

    own_loader.py DATA_DIR OUT_JSON [--compute S] [--epochs N]
    own_loader.py DATA_DIR --make N        # N samples of 4 MiB, untraced
    own_loader.py DATA_DIR OUT_JSON --only-load   # np.load each file (--epochs times), nothing else

Ground truth in OUT_JSON as train_loader.py's: per step the wait (time in
next()), the window, the loop's thread id.
"""
import argparse
import json
import os
import threading
import time
from pathlib import Path

import numpy as np


def batches(files, epochs):
    for _ in range(epochs):
        for f in files:
            a = np.load(f)
            yield np.sort(a, axis=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--make", type=int)
    ap.add_argument("--compute", type=float, default=0.05)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--only-load", action="store_true")
    a = ap.parse_args()
    d = Path(a.data)
    if a.make:
        d.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(0)
        for i in range(a.make):
            np.save(d / f"s{i:03d}.npy", rng.random((512, 1024)))
        return
    files = sorted(str(p) for p in d.glob("*.npy"))
    waits = []
    start = time.perf_counter()
    if a.only_load:       # a script that only loads: all of its time is loading
        for f in files * a.epochs:
            t = time.perf_counter()
            np.load(f)
            waits.append(time.perf_counter() - t)
    else:
        it = batches(files, a.epochs)
        while True:
            t = time.perf_counter()
            try:
                next(it)
            except StopIteration:
                break
            waits.append(time.perf_counter() - t)
            end = time.perf_counter() + a.compute
            while time.perf_counter() < end:
                pass
    window = time.perf_counter() - start
    Path(a.out).write_text(json.dumps({
        "tid": threading.get_native_id(), "pid": os.getpid(), "steps": len(waits),
        "wait_s": waits, "loop_window_s": window, "au": 1 - sum(waits) / window}))


if __name__ == "__main__":
    main()
