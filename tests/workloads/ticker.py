"""A job with known output over a known time: `ticker.py DIR N CODE [EXTRA [FILL]]`.
Creates DIR/job.started, then every 10 ms appends chunk i (4 KiB of the
byte i % 251) to DIR/job.out and reads it back with pread (and EXTRA more
16-byte preads of it, default 0), N times; then writes the sha256 of
job.out to DIR/job.sha and exits with CODE. With FILL, at chunk 3N/4 it writes
the file FILL until its disk is full (and goes on)."""
import hashlib
import os
import sys
import time

d, n, code = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
extra = int(sys.argv[4]) if len(sys.argv) > 4 else 0
fill = sys.argv[5] if len(sys.argv) > 5 else None
open(os.path.join(d, "job.started"), "w").close()
fd = os.open(os.path.join(d, "job.out"), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
h = hashlib.sha256()
for i in range(n):
    chunk = bytes([i % 251]) * 4096
    os.write(fd, chunk)
    assert os.pread(fd, 4096, i * 4096) == chunk
    for _ in range(extra):
        os.pread(fd, 16, 0)
    h.update(chunk)
    if fill and i == n * 3 // 4:
        with open(fill, "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * (1 << 20))
            except OSError:
                pass
    time.sleep(0.01)
os.close(fd)
with open(os.path.join(d, "job.sha"), "w") as f:
    f.write(h.hexdigest())
sys.exit(code)
