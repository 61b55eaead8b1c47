"""Open FILE, read it whole with one os.read, close; N times: `acc_reread.py FILE N`."""
import os
import sys

path, n = sys.argv[1], int(sys.argv[2])
for _ in range(n):
    fd = os.open(path, os.O_RDONLY)
    os.read(fd, os.fstat(fd).st_size)
    os.close(fd)
print("passes", n, flush=True)
