"""Reads a file in a loop until BASE/stop exists (or 60 s): `busy_reader.py BASE`."""
import os
import sys
import time

base = sys.argv[1]
fd = os.open(f"{base}/data.bin", os.O_RDONLY)
print("started", flush=True)
end = time.monotonic() + 60
while time.monotonic() < end and not os.path.exists(f"{base}/stop"):
    os.pread(fd, 4096, 0)
    time.sleep(0.001)
