"""A synchronous data-parallel training job on CPU (torch.distributed, gloo):
each rank reads its shard of the dataset in 1 MiB samples, computes a little,
and all-reduces its gradient every step, so every rank waits for the slowest
at each step; at the end every rank saves a checkpoint (its model and a
4 MiB optimizer-like state, written 1 MiB at a time and fsync'd; the rank
CKPT_SLOW_RANK sleeps 0.25 s after each write, like a rank on slow storage).
Prints its steps, bytes read, and the checkpoint's bytes and seconds (from its
first write to the end of its fsync).

    python ddp_train.py SHARD CKPT_DIR   (RANK, WORLD_SIZE, MASTER_ADDR,
                                          MASTER_PORT in the environment)
"""
import io
import os
import sys
import time

import torch
import torch.distributed as dist

SAMPLE = 1 << 20


def main() -> int:
    shard, ckpt_dir = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=60))
    rank = dist.get_rank()
    model = torch.nn.Linear(256, 256)
    steps = 0
    read = 0
    with open(shard, "rb", buffering=0) as f:
        while True:
            buf = f.read(SAMPLE)
            if not buf:
                break
            read += len(buf)
            x = torch.frombuffer(bytearray(buf[:256 * 256 * 4]), dtype=torch.float32)
            x = torch.nan_to_num(x.view(256, 256), 0.0).clamp(-1, 1)
            t = time.perf_counter()
            while time.perf_counter() - t < 0.05:       # the step's compute
                model(x).sum().backward()
            for p in model.parameters():                # the synchronous step
                dist.all_reduce(p.grad)
                p.grad /= dist.get_world_size()
            steps += 1
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "state": torch.zeros(1 << 20)}, buf)
    data = buf.getvalue()
    slow = rank == int(os.environ.get("CKPT_SLOW_RANK", "-1"))
    with open(os.path.join(ckpt_dir, f"rank{rank}.pt"), "wb", buffering=0) as f:
        t = time.perf_counter()
        for i in range(0, len(data), SAMPLE):
            f.write(data[i:i + SAMPLE])
            if slow:
                time.sleep(0.25)
        os.fsync(f.fileno())
        ckpt_s = time.perf_counter() - t
    dist.barrier()
    print(f"rank {rank} steps {steps} read {read} ckpt {len(data)} {ckpt_s:.6f}")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
