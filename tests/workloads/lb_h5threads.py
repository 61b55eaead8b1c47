"""Threads reading one HDF5 file through h5py.

    lb_h5threads.py make FILE NTHREADS          one 4 MiB float32 dataset per thread
    lb_h5threads.py read FILE NTHREADS ROUNDS   the threads read them

In `read`, NTHREADS threads (named h5reader-<k>) share one h5py.File, meet at
a barrier, then each reads its own dataset in 1 MiB slices, ROUNDS times
over. h5py lets one thread into HDF5 at a time (its global lock), so the
threads' reads of the file never run at the same time. Prints one line per
thread: "<tid> h5reader-<k>"."""
import ctypes
import sys
import threading

import h5py
import numpy as np

ROWS, COLS = 1024, 1024          # 4 MiB of float32 per dataset
SLICE = 256                      # rows per read: 1 MiB


def make(path, n):
    with h5py.File(path, "w") as f:
        for k in range(n):
            f.create_dataset(f"d{k}", data=np.full((ROWS, COLS), k, dtype=np.float32))


def reader(f, k, rounds, barrier, tids):
    ctypes.CDLL(None).prctl(15, f"h5reader-{k}".encode(), 0, 0, 0)   # PR_SET_NAME
    tids[k] = threading.get_native_id()
    ds = f[f"d{k}"]
    barrier.wait()
    for _ in range(rounds):
        for r in range(0, ROWS, SLICE):
            assert ds[r:r + SLICE][0, 0] == k


def read(path, n, rounds):
    tids = [0] * n
    barrier = threading.Barrier(n)
    with h5py.File(path, "r") as f:
        threads = [threading.Thread(target=reader, args=(f, k, rounds, barrier, tids))
                   for k in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for k, tid in enumerate(tids):
        print(tid, f"h5reader-{k}")


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]))
    else:
        read(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
