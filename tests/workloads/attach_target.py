"""A job that is already running when iotrace attaches: `attach_target.py BASE`.

Opens BASE/early.bin, says "ready", waits for BASE/go, then reads early.bin
through the fd opened before the attach (EARLY reads), opens late.bin and
reads it (LATE reads), forks a child that reads child.bin (CHILD reads)."""
import os
import sys
import time

EARLY, LATE, CHILD = 6, 4, 3
base = sys.argv[1]
early = os.open(f"{base}/early.bin", os.O_RDONLY)
print("ready", flush=True)
while not os.path.exists(f"{base}/go"):
    time.sleep(0.01)
for i in range(EARLY):
    os.pread(early, 100, i * 100)
fd = os.open(f"{base}/late.bin", os.O_RDONLY)
for _ in range(LATE):
    os.read(fd, 100)
pid = os.fork()
if pid == 0:
    c = os.open(f"{base}/child.bin", os.O_RDONLY)
    for _ in range(CHILD):
        os.read(c, 100)
    os._exit(0)
os.waitpid(pid, 0)
