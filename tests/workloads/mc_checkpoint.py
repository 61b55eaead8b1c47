"""A tiny training loop that checkpoints every EVERY steps.

    mc_checkpoint.py KIND OUTDIR CHECKPOINTS EVERY STEP_S

KIND: torch        torch.save(model.state_dict(), f) of two 1024x1024 Linear layers
                   (8 MiB of weights plus biases) to ckpt_<step>.pt
      numpy        np.save(f, weights) of an 8 MiB float32 array to ckpt_<step>.npy
      numpy-small  the same 8 MiB written 4 KiB at a time, unbuffered, to ckpt_<step>.bin
Every checkpoint goes to a file opened here, then f.flush() and os.fsync once.
Each step does a little compute and sleeps so that a step takes STEP_S seconds.
Prints one JSON line: the checkpoint paths in order and the largest array's bytes.
"""
import json
import os
import sys
import time

kind, outdir = sys.argv[1], sys.argv[2]
checkpoints, every, step_s = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])

if kind == "torch":
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 1024))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        x = torch.randn(16, 1024)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    def save(f):
        torch.save(model.state_dict(), f)
    ext = "pt"
    largest = max(t.numel() * t.element_size() for t in model.state_dict().values())
else:
    import numpy as np

    rng = np.random.default_rng(0)
    weights = rng.standard_normal(2 * 1024 * 1024, dtype=np.float32)   # 8 MiB

    def step():
        weights[:4096] -= 0.01 * rng.standard_normal(4096, dtype=np.float32)
    largest = weights.nbytes

    if kind == "numpy":
        def save(f):
            np.save(f, weights)
        ext = "npy"
    else:
        def save(f):
            data = weights.tobytes()
            for i in range(0, len(data), 4096):
                f.write(data[i:i + 4096])
        ext = "bin"

written = []
for n in range(1, checkpoints * every + 1):
    t = time.monotonic()
    step()
    if n % every == 0:
        written.append(os.path.join(outdir, f"ckpt_{n}.{ext}"))
        with open(written[-1], "wb",
                  buffering=0 if kind == "numpy-small" else -1) as f:
            save(f)
            f.flush()
            os.fsync(f.fileno())
    time.sleep(max(0.0, step_s - (time.monotonic() - t)))
print(json.dumps({"checkpoints": written, "largest_array_bytes": largest}), flush=True)
