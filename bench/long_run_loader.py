"""A steady data loader for bench/long_run.py: RATE preads a second of CHUNK
bytes each, cycling through FILES files of a data directory, for SECONDS.
Paced in 10 ms steps so the rate stays steady (a behind step catches up).
Prints the number of preads it made and its own seconds, the ground truth
the trace is checked against.

    python3 long_run_loader.py DATA_DIR RATE SECONDS [CHUNK]
"""
import os
import sys
import time

data, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
chunk = int(sys.argv[4]) if len(sys.argv) > 4 else 65536
names = sorted(os.listdir(data))
fds = [os.open(os.path.join(data, n), os.O_RDONLY) for n in names]
sizes = [os.fstat(fd).st_size for fd in fds]
step = 0.01
done = 0
start = time.monotonic()
f = off = 0
while True:
    now = time.monotonic() - start
    if now >= seconds:
        break
    due = int(min(now + step, seconds) * rate)
    while done < due:
        os.pread(fds[f], chunk, off)
        done += 1
        off += chunk
        if off >= sizes[f]:
            off, f = 0, (f + 1) % len(fds)
    time.sleep(max(0.0, (done / rate) - (time.monotonic() - start)))
for fd in fds:
    os.close(fd)
print(done, f"{time.monotonic() - start:.3f}")
