"""DataLoader-style workers: `workers.py METHOD BASE NWORKERS`.

Each worker process reads its own sample file BASE/sample_<i>.bin in CHUNKS
reads of 4096 bytes; two reader threads of the main process pread their own
file PREADS times after naming themselves reader-<k>. The test checks all of
it, per process and per thread."""
import ctypes
import multiprocessing as mp
import os
import sys
import threading

CHUNKS = 16
PREADS = 25


def worker(path):
    fd = os.open(path, os.O_RDONLY)
    for _ in range(CHUNKS):
        os.read(fd, 4096)
    os.close(fd)


def reader(path, k):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(15, f"reader-{k}".encode(), 0, 0, 0)   # PR_SET_NAME
    fd = os.open(path, os.O_RDONLY)
    for i in range(PREADS):
        os.pread(fd, 4096, i * 4096)
    os.close(fd)


if __name__ == "__main__":
    method, base, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ctx = mp.get_context(method)
    procs = [ctx.Process(target=worker, args=(f"{base}/sample_{i}.bin",)) for i in range(n)]
    for p in procs:
        p.start()
    threads = [threading.Thread(target=reader, args=(f"{base}/thread_{k}.bin", k))
               for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for p in procs:
        p.join()
        assert p.exitcode == 0
