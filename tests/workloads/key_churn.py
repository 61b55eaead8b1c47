"""N preads cycling through three request sizes (100, 1000 and 4096 bytes)
on one file, so that a profile's two per-thread slots see a new key at
almost every call: `key_churn.py FILE N`."""
import os
import sys

fd = os.open(sys.argv[1], os.O_RDONLY)
sizes = (100, 1000, 4096)
for i in range(int(sys.argv[2])):
    os.pread(fd, sizes[i % 3], 0)
print("done", flush=True)
