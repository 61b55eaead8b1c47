"""O_DIRECT writes and reads of FILE: N aligned 4 KiB calls, then M calls at a
misaligned offset or size (they fail with EINVAL): `acc_odirect.py FILE N M`."""
import errno
import mmap
import os
import sys

path, n, m = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
buf = mmap.mmap(-1, 1 << 16)          # page-aligned buffer, as O_DIRECT needs
buf.write(b"d" * (1 << 16))
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644)
for i in range(n):
    assert os.pwritev(fd, [memoryview(buf)[:4096]], i * 4096) == 4096
failed = 0
for i in range(m):
    off, size = (100 + i * 4096, 4096) if i % 2 == 0 else (i * 4096, 1000)
    try:
        os.preadv(fd, [memoryview(buf)[:size]], off)
    except OSError as e:
        assert e.errno == errno.EINVAL, e
        failed += 1
os.close(fd)
print("failed", failed, flush=True)
