"""Threads appending to one file at once: ext4/tmpfs serialise writers on the
inode's rwsem, so the kernel reports lock contention. `kernel_lock.py FILE`."""
import os
import sys
import threading

fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
block = b"k" * (1 << 20)


def writer():
    for _ in range(64):
        os.pwrite(fd, block, 0)


threads = [threading.Thread(target=writer) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
