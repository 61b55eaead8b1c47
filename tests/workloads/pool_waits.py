"""Reader threads that wait, for work or for a lock.

    pool_waits.py DIR idle  N   a ThreadPoolExecutor of 4 reads DIR's files, one
                                task at a time while the main thread computes
                                20 ms per file: its threads wait for work
    pool_waits.py DIR lock  N   4 threads read DIR's files N times, each read
                                under one shared threading.Lock (h5py imported,
                                never used: a library loaded is not the lock)
    pool_waits.py DIR make  N   make N files of 1 MiB

Prints the reader threads' native ids, one a line."""
from __future__ import annotations

import concurrent.futures as cf
import os
import sys
import threading
import time


def read(path: str) -> int:
    with open(path, "rb") as f:
        return len(f.read())


def main() -> None:
    d, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "make":
        os.makedirs(d, exist_ok=True)
        for i in range(n):
            with open(os.path.join(d, f"f{i:03d}.bin"), "wb") as f:
                f.write(os.urandom(1 << 20))
        return
    files = sorted(os.path.join(d, x) for x in os.listdir(d))
    tids: set[int] = set()
    if mode == "idle":
        def task(p: str) -> int:
            tids.add(threading.get_native_id())
            return read(p)
        with cf.ThreadPoolExecutor(4) as pool:
            for _ in range(n):
                for p in files:
                    pool.submit(task, p).result()
                    end = time.perf_counter() + 0.02
                    while time.perf_counter() < end:
                        pass
    else:
        import h5py  # noqa: F401 - loaded, not used
        lock = threading.Lock()

        def reader(k: int) -> None:
            tids.add(threading.get_native_id())
            for _ in range(n):
                for p in files[k::4]:
                    with lock:
                        read(p)
        ts = [threading.Thread(target=reader, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    print("\n".join(map(str, sorted(tids))))


if __name__ == "__main__":
    main()
