"""N preads of 64 bytes, then exit with CODE: `many_reads.py FILE N CODE`."""
import os
import sys

fd = os.open(sys.argv[1], os.O_RDONLY)
for _ in range(int(sys.argv[2])):
    os.pread(fd, 64, 0)
print("done", flush=True)
sys.exit(int(sys.argv[3]))
