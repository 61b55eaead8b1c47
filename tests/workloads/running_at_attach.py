"""Inside a system call, running, when an attach begins: reads a page-cached
file whole in one preadv per pass, over and over (each call copies the file
in the kernel for a tenth of a second or more; between calls a few
microseconds in Python), until it is killed.

    running_at_attach.py FILE

Prints "ready FD" once the file is cached and the loop starts."""
import os
import sys

fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
buf = bytearray(size)
while os.readv(fd, [buf]):   # into the page cache, and the buffer's pages touched
    pass
print(f"ready {fd}", flush=True)
while True:
    os.preadv(fd, [buf], 0)
