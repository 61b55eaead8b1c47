"""The training loop the pipeline workloads share (grain_train.py,
ray_train.py): it times each next() with perf_counter (the MLPerf Storage
definition of a data wait), computes --compute seconds a step (numpy work,
or a sleep), and writes the ground truth: per step the wait and its span on
CLOCK_MONOTONIC, the loop's window (the first next() to the last step's end;
end_ns: that end on CLOCK_MONOTONIC), its thread id and pid."""
from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, Optional

import numpy as np

SAMPLE = 256 << 10


def make_samples(d: str, n: int) -> None:
    """n sample files of 256 KiB of random bytes in d."""
    p = Path(d)
    p.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (p / f"sample_{i:05d}.bin").write_bytes(os.urandom(SAMPLE))


def decode(raw: bytes, rounds: int) -> np.ndarray:
    """A sample's decode, as the pipeline workloads do it: its first 256 KiB
    as a 256x256 float32 image, then `rounds` of numpy work on it (a matrix
    product and a tanh each)."""
    a = np.frombuffer(raw, np.uint8).astype(np.float32).reshape(256, 1024)[:, :256]
    a = a / 255.0
    for _ in range(rounds):
        a = np.tanh(a @ a.T / 256.0)
    return a


def arg_parser(doc: str, workers: Optional[int] = 2) -> argparse.ArgumentParser:
    """The pipeline workloads' common arguments: DATA_DIR, OUT_JSON, --make N,
    --workers (its default; None: no such argument), --compute,
    --compute-kind, --prep, --batch and --epochs."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("data")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--make", type=int, metavar="N")
    if workers is not None:
        ap.add_argument("--workers", type=int, default=workers)
    ap.add_argument("--compute", type=float, default=0.02)
    ap.add_argument("--compute-kind", choices=("busy", "sleep"), default="busy")
    ap.add_argument("--prep", type=int, default=4, help="rounds of decode work a sample")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=2)
    return ap


def busy(seconds: float, m: np.ndarray) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        m = np.tanh(m @ m / 128.0)


def run(epochs: Iterable[Iterable], out: str, compute: float, kind: str,
        check: Callable[[object], None]) -> None:
    """Steps over each iterable of epochs (one for a loader that runs its
    epochs itself), each batch checked; the next() that raises StopIteration
    is not a step, and not in the window."""
    m = np.random.default_rng(0).random((128, 128), dtype=np.float32)
    waits, spans = [], []
    start = end = end_ns = None
    for batches in epochs:
        it = iter(batches)
        if start is None:
            start = time.perf_counter()
        while True:
            t, t_ns = time.perf_counter(), time.monotonic_ns()
            try:
                batch = next(it)
            except StopIteration:
                break
            waits.append(time.perf_counter() - t)
            spans.append((t_ns, time.monotonic_ns()))
            check(batch)
            if kind == "sleep":
                time.sleep(compute)
            else:
                busy(compute, m)
            end, end_ns = time.perf_counter(), time.monotonic_ns()
    window = end - start
    Path(out).write_text(json.dumps({
        "wait_s": waits, "loop_window_s": window, "au": 1 - sum(waits) / window,
        "wait_spans_ns": spans, "steps": len(waits), "end_ns": end_ns,
        "tid": threading.get_native_id(), "pid": os.getpid()}))
