"""A DataLoader-style pool: `lb_pool.py BASE NWORKERS SLOW`.

NWORKERS worker processes (fork) split the sample files BASE/sample_<i>.bin
statically, as PyTorch's DataLoader splits batches: worker k reads files
k, k + N, k + 2N... For each file a worker "decodes" for BASE_MS (a sleep),
then reads the whole file in 1 MiB reads. Worker SLOW (-1: none) sleeps
SLOW_MS more before each read. Prints "worker <k> <pid>" per worker."""
import multiprocessing as mp
import os
import sys
import time

BASE_MS, SLOW_MS = 5, 60
CHUNK = 1 << 20


def worker(k, files, slow, out):
    out.put((k, os.getpid()))
    for path in files:
        time.sleep((BASE_MS + (SLOW_MS if slow else 0)) / 1000)
        fd = os.open(path, os.O_RDONLY)
        while os.read(fd, CHUNK):
            pass
        os.close(fd)


if __name__ == "__main__":
    base, n, slow = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    files = sorted(os.path.join(base, f) for f in os.listdir(base) if f.startswith("sample_"))
    ctx = mp.get_context("fork")
    out = ctx.SimpleQueue()
    procs = [ctx.Process(target=worker, args=(k, files[k::n], k == slow, out)) for k in range(n)]
    for p in procs:
        p.start()
    pids = dict(out.get() for _ in procs)
    for p in procs:
        p.join()
        assert p.exitcode == 0
    for k in range(n):
        print("worker", k, pids[k])
