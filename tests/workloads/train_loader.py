"""A tiny training loop fed by a data loader, timing its own waits for data.

    train_loader.py DATA_DIR OUT_JSON [--loader torch|threads|pool|procs|hf|plain|s3]
                    [--workers N]
                    [--compute S] [--compute-kind cpu|sleep] [--prep S]
                    [--pin-memory] [--epochs N] [--persistent-workers] [--batch N]
                    [--side-cpu SECONDS] [--exit-stagger S]

DATA_DIR holds sample_*.bin files (one sample each, read whole). The loop
trains a small torch model (or sleeps, with --compute-kind sleep) for
`--compute` seconds per step; each loader worker spends `--prep` seconds of
its own CPU per sample (a stand-in for decoding). Loaders:
  torch    torch.utils.data.DataLoader (worker processes when --workers > 0)
  threads  reader threads filling a queue.Queue (like tf.data or DALI)
  pool     multiprocessing.Pool.imap, a batch per chunk (its result-handler
           thread reads the workers' pipe and wakes the loop only when it waits)
  hf       a Hugging Face dataset (Arrow, memory-mapped: read by page faults)
           made from the samples by `--make-hf` (untraced), behind a DataLoader
  procs    worker processes of its own (multiprocessing) put samples on a
           queue; after the last, the loader joins them in turn, worker k
           leaving (k + 1) x --exit-stagger seconds after its last sample
           (a flush, a cleanup): the call that ends the data waits for them
  plain    the loop reads the files itself, in order
  s3       DataLoader workers GET the samples from an S3 endpoint with boto3
           (--endpoint URL --bucket B; keys sample_*.bin, put there by
           --make-s3 from DATA_DIR's files, untraced)
Ground truth in OUT_JSON: per step, the time the loop waited for its next
batch (perf_counter around next()), the compute time, and the window from
the first request for data to the end of the last step. With --side-cpu, a
side process (side_cpu.py) works SECONDS of CPU for each batch the loop
takes, its CPU clock in OUT_JSON.side.json.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch


def prep(raw: bytes, cpu_s: float) -> np.ndarray:
    """Decode stand-in: `cpu_s` seconds of this thread's CPU spent on the sample."""
    arr = np.frombuffer(raw, dtype=np.uint8)
    end = time.thread_time() + cpu_s
    acc = 0
    while time.thread_time() < end:
        acc += int(arr[:65536].astype(np.int32).sum())
    return arr[:4096].astype(np.float32) / 255.0 + acc * 0


READ_SIZE = [0]         # --read-size: bytes a read() call (0: the whole file in one)


def read_sample(path: str) -> bytes:
    # unbuffered with --read-size: each read() the system call asked
    with open(path, "rb", buffering=0 if READ_SIZE[0] else -1) as f:
        if not READ_SIZE[0]:
            return f.read()
        parts = []
        while True:
            b = f.read(READ_SIZE[0])
            if not b:
                return b"".join(parts)
            parts.append(b)


class Samples(torch.utils.data.Dataset):
    def __init__(self, files: list[str], prep_s: float):
        self.files, self.prep_s = files, prep_s

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        return torch.from_numpy(prep(read_sample(self.files[i]), self.prep_s))


class S3Samples(torch.utils.data.Dataset):
    """Each sample an object, fetched whole with get_object: one client per
    worker process, made there (boto3 clients are not fork-safe)."""
    def __init__(self, keys: list[str], args):
        self.keys, self.prep_s, self.endpoint, self.bucket = keys, args.prep, args.endpoint, args.bucket
        self.client = None

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, i):
        if self.client is None:
            self.client = s3_client(self.endpoint)
        raw = self.client.get_object(Bucket=self.bucket, Key=self.keys[i])["Body"].read()
        return torch.from_numpy(prep(raw, self.prep_s))


def s3_client(endpoint: str):
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                        aws_secret_access_key="testing", region_name="us-east-1",
                        config=Config(retries={"mode": "standard", "max_attempts": 10},
                                      s3={"addressing_style": "path"}))


def make_s3(files, args) -> None:
    c = s3_client(args.endpoint)
    for f in files:
        c.put_object(Bucket=args.bucket, Key=os.path.basename(f), Body=read_sample(f))


def s3_batches(files, args):
    ds = S3Samples([os.path.basename(f) for f in files], args)
    return torch.utils.data.DataLoader(ds, batch_size=args.batch, num_workers=args.workers,
                                       shuffle=False)


LOADERS: list = []      # --persistent-workers: one DataLoader for every epoch


def torch_batches(files, args):
    if LOADERS:
        return LOADERS[0]
    ds = Samples(files, args.prep)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=args.batch, num_workers=args.workers, shuffle=False,
        pin_memory=args.pin_memory, persistent_workers=args.persistent_workers)
    if args.persistent_workers:
        LOADERS.append(loader)
    return loader


def thread_batches(files, args):
    """Reader threads put samples on a bounded queue; the loop takes batches."""
    q: queue.Queue = queue.Queue(maxsize=2 * args.batch)
    work: queue.Queue = queue.Queue()
    for f in files:
        work.put(f)

    def reader():
        while True:
            try:
                f = work.get_nowait()
            except queue.Empty:
                q.put(None)
                return
            q.put(torch.from_numpy(prep(read_sample(f), args.prep)))

    threads = [threading.Thread(target=reader, name=f"reader{i}", daemon=True)
               for i in range(max(args.workers, 1))]
    for t in threads:
        t.start()
    yield from batched(until_done(q, len(threads)), args.batch)


def until_done(q, producers: int):
    """The samples on q until each producer has put its None."""
    done = 0
    while done < producers:
        s = q.get()
        if s is None:
            done += 1
        else:
            yield s


def batched(samples, size: int):
    """Samples (tensors) stacked `size` at a time, the rest last."""
    batch = []
    for s in samples:
        batch.append(s)
        if len(batch) == size:
            yield torch.stack(batch)
            batch = []
    if batch:
        yield torch.stack(batch)


def pool_sample(job: tuple[str, float]) -> np.ndarray:
    path, prep_s = job
    return prep(read_sample(path), prep_s)


POOL = []      # one pool for all epochs, made before the loop, as `with Pool(n)` would


def pool_batches(files, args):
    arrays = POOL[0].imap(pool_sample, [(f, args.prep) for f in files], chunksize=args.batch)
    yield from batched((torch.from_numpy(a) for a in arrays), args.batch)


def procs_worker(k: int, files: list, prep_s: float, q, stagger: float) -> None:
    for f in files:
        q.put(prep(read_sample(f), prep_s))
    q.put(None)
    time.sleep((k + 1) * stagger)       # its cleanup before it exits


def procs_batches(files, args):
    ctx = mp.get_context("fork")
    q = ctx.Queue(maxsize=2 * args.batch)
    n = max(args.workers, 1)
    procs = [ctx.Process(target=procs_worker, args=(k, files[k::n], args.prep, q,
                                                     args.exit_stagger))
             for k in range(n)]
    for p in procs:
        p.start()
    yield from batched((torch.from_numpy(s) for s in until_done(q, n)), args.batch)
    for p in procs:             # in the call that ends the data: one at a time
        p.join()


def make_hf(data: str) -> None:
    import datasets
    files = sorted(str(p) for p in Path(data).glob("sample_*.bin"))
    ds = datasets.Dataset.from_dict({"x": [np.frombuffer(Path(f).read_bytes(), dtype=np.uint8)
                                           for f in files]})
    ds.save_to_disk(str(Path(data) / "hf"))


def hf_batches(files, args):
    import datasets
    ds = datasets.load_from_disk(str(Path(args.data) / "hf")).with_format("torch")
    return torch.utils.data.DataLoader(ds, batch_size=args.batch, num_workers=args.workers,
                                       shuffle=False, collate_fn=lambda rows: torch.stack(
                                           [r["x"].float()[:4096] / 255.0 for r in rows]))


def plain_batches(files, args):
    for i in range(0, len(files), args.batch):
        yield torch.stack([torch.from_numpy(prep(read_sample(f), args.prep))
                           for f in files[i:i + args.batch]])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--loader", default="torch",
                    choices=("torch", "threads", "pool", "procs", "hf", "plain", "s3"))
    ap.add_argument("--endpoint", help="the S3 endpoint of --loader s3")
    ap.add_argument("--bucket", default="data")
    ap.add_argument("--make-s3", action="store_true", help="put DATA_DIR's samples in --bucket and exit")
    ap.add_argument("--make-hf", action="store_true", help="make DATA_DIR/hf and exit")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--compute", type=float, default=0.02)
    ap.add_argument("--compute-kind", default="cpu", choices=("cpu", "sleep"))
    ap.add_argument("--prep", type=float, default=0.0)
    ap.add_argument("--pin-memory", action="store_true")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--persistent-workers", action="store_true",
                    help="--loader torch: one DataLoader whose workers live across epochs")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--read-size", type=int, default=0,
                    help="bytes a read() call of a sample (default: the whole file in one)")
    ap.add_argument("--exit-stagger", type=float, default=0.0,
                    help="--loader procs: worker k exits (k + 1) x this many seconds after "
                         "its last sample")
    ap.add_argument("--side-cpu", type=float, default=0.0,
                    help="a side process works this many seconds of CPU for each batch the "
                         "loop takes (side_cpu.py)")
    args = ap.parse_args()
    READ_SIZE[0] = args.read_size
    torch.set_num_threads(1)
    files = sorted(str(p) for p in Path(args.data).glob("sample_*.bin"))
    model = torch.nn.Sequential(torch.nn.Linear(4096, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    if args.make_hf:
        return make_hf(args.data)
    if args.make_s3:
        return make_s3(files, args)
    make = {"torch": torch_batches, "threads": thread_batches, "pool": pool_batches,
            "procs": procs_batches,
            "hf": hf_batches, "plain": plain_batches, "s3": s3_batches}
    if args.loader == "pool":
        # before the loop's clock: made in its first next(), the pool's start
        # (a fork of this process, 100 ms and more on a loaded machine) was a
        # wait by the loop's clock, outside the loader's next() for iotrace
        POOL.append(mp.get_context("fork").Pool(max(args.workers, 1)))
    side = subprocess.Popen([sys.executable, str(Path(__file__).with_name("side_cpu.py")),
                             str(args.side_cpu), args.out + ".side.json"],
                            stdin=subprocess.PIPE) if args.side_cpu > 0 else None
    waits, computes, epoch_waits = [], [], []
    first_request = None
    t_start = t_end = time.perf_counter()
    t_start_ns = t_end_ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    for _ in range(args.epochs):
        epoch_waits.append(0.0)
        it = iter(make[args.loader](files, args))
        while True:
            t0 = time.perf_counter()
            if first_request is None:
                first_request = t0
            try:
                x = next(it)
            except StopIteration:
                break
            t1 = time.perf_counter()
            if side is not None:
                side.stdin.write(b"x")
                side.stdin.flush()
            if args.compute_kind == "sleep":
                time.sleep(args.compute)
            else:
                end = time.perf_counter() + args.compute
                while time.perf_counter() < end:      # train on the batch until time is up
                    opt.zero_grad()
                    model(x.float()).pow(2).mean().backward()
                    opt.step()
            waits.append(t1 - t0)
            epoch_waits[-1] += t1 - t0
            computes.append(time.perf_counter() - t1)
            # the window ends with the last step: the call that raises
            # StopIteration (a loader joining its workers) is none
            t_end, t_end_ns = time.perf_counter(), time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        del it
    if side is not None:
        side.stdin.close()
        side.wait()
    Path(args.out).write_text(json.dumps({
        "pid": os.getpid(), "tid": threading.get_native_id(),
        "steps": len(waits), "wait_s": waits, "compute_s": computes,
        "epoch_wait_s": epoch_waits,
        "window_s": t_end - t_start,
        # from the first request for a batch (after the loader was made) to
        # the end of the last step
        "loop_window_s": t_end - (first_request or t_start),
        "start_ns": t_start_ns, "end_ns": t_end_ns}))
    for pool in POOL:       # after the loop's clock stopped
        pool.close()
        pool.join()


if __name__ == "__main__":
    main()
