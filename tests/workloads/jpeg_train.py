"""An image-classification loop as torchvision users write it, timing its own
waits for data (the MLPerf Storage definition: perf_counter around next()).

    jpeg_train.py DATA_DIR OUT_JSON [--workers N] [--batch N] [--epochs N]
                  [--model-width N] [--size PX]
    jpeg_train.py DATA_DIR --make N          # N JPEG files, untraced

The loader is a torch DataLoader over JPEG files decoded with PIL and
augmented with torchvision transforms (RandomResizedCrop, flip, ToTensor,
Normalize); the model a small CNN trained on CPU (one intra-op thread, so
that the 2-core test machine gives it and the loader a core each).
Ground truth in OUT_JSON: per step the wait (time in next()) and the
compute, the loop's window (first request for data to the end of the last
step), its thread id and pid.
"""
from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torchvision import transforms as T


class Jpegs(torch.utils.data.Dataset):
    def __init__(self, files: list[str], size: int):
        self.files = files
        self.tf = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(),
                             T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        with Image.open(self.files[i]) as im:
            return self.tf(im.convert("RGB")), i % 10


def make(d: Path, n: int) -> None:
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        # smooth noise: a photo-like JPEG of about 60 KiB
        base = rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)
        im = Image.fromarray(base).resize((512, 384), Image.BICUBIC)
        im.save(d / f"img_{i:04d}.jpg", quality=90)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--make", type=int)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--model-width", type=int, default=32)
    ap.add_argument("--size", type=int, default=96)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda: the model on the GPU, "
                    "a sync per step (loss.item()), batches copied from pinned memory")
    ap.add_argument("--pin-memory", action="store_true")
    a = ap.parse_args()
    if a.make:
        make(Path(a.data), a.make)
        return
    torch.set_num_threads(1)
    dev = torch.device(a.device)
    files = sorted(str(p) for p in Path(a.data).glob("*.jpg"))
    loader = torch.utils.data.DataLoader(Jpegs(files, a.size), batch_size=a.batch, shuffle=True,
                                         num_workers=a.workers, pin_memory=a.pin_memory)
    w = a.model_width
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, w, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(w, w, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(w, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    waits, computes, spans = [], [], []
    start = None
    for _ in range(a.epochs):
        it = iter(loader)
        while True:
            t = time.perf_counter()
            t_ns = time.monotonic_ns()
            start = start if start is not None else t
            try:
                x, y = next(it)
            except StopIteration:
                break
            c = time.perf_counter()
            waits.append(c - t)
            spans.append((t_ns, time.monotonic_ns()))
            x, y = x.to(dev, non_blocking=True), torch.as_tensor(y).to(dev, non_blocking=True)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            loss.item()                 # the step's end: a GPU sync on cuda
            computes.append(time.perf_counter() - c)
    end = time.perf_counter()
    Path(a.out).write_text(json.dumps({
        "tid": threading.get_native_id(), "pid": os.getpid(), "steps": len(waits),
        "wait_s": waits, "compute_s": computes, "loop_window_s": end - start,
        "au": 1 - sum(waits) / (end - start),
        "wait_spans_ns": spans}))     # each wait on CLOCK_MONOTONIC, the trace's clock


if __name__ == "__main__":
    main()
