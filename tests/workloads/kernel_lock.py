"""Threads appending to one file at once: ext4/tmpfs serialise writers on the
inode's rwsem, so the kernel reports lock contention. `kernel_lock.py FILE`.
A barrier starts the writers together, and each writes for at least 0.5 s,
so they overlap however the scheduler starts them."""
import os
import sys
import threading
import time

fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
block = b"k" * (1 << 20)
start = threading.Barrier(4)


def writer():
    start.wait()
    end = time.monotonic() + 0.5
    n = 0
    while n < 64 or time.monotonic() < end:
        os.pwrite(fd, block, 0)
        n += 1


threads = [threading.Thread(target=writer) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
