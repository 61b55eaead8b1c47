"""Shared memory freed after the call that drops it: the file_release ground truth.

    shm_release.py OUT_JSON [ROUNDS] [MIB]

Each round makes a MIB MiB file in /dev/shm (default 24 MiB, a DataLoader
batch's size in the DLIO tests), maps it, deletes it and closes its fd,
fills the mapping, and unmaps it: the munmap drops the file's last
reference, and the kernel frees its pages on the way back to user space.
OUT_JSON: per round the CLOCK_MONOTONIC ns (the trace's clock) just before
and just after the unmap, the file's name and size.
"""
import json
import mmap
import os
import sys
import time


def main():
    out = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    size = (int(sys.argv[3]) if len(sys.argv) > 3 else 24) << 20
    done = []
    for i in range(rounds):
        path = f"/dev/shm/iotrace-release-{os.getpid()}-{i}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.ftruncate(fd, size)
        m = mmap.mmap(fd, size)
        os.unlink(path)
        os.close(fd)
        m.write(b"\x01" * size)
        a = time.monotonic_ns()
        m.close()
        b = time.monotonic_ns()
        done.append({"path": path, "bytes": size, "before_ns": a, "after_ns": b})
    with open(out, "w") as f:
        json.dump(done, f)


if __name__ == "__main__":
    main()
