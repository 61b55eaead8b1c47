"""N writes of SIZE bytes to FILE, each followed by an fsync (a log or a
checkpoint written record by record): `acc_fsync_writes.py FILE N SIZE [nosync]`.
With `nosync`, the same writes and no fsync at all."""
import os
import sys

path, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sync = sys.argv[4:] != ["nosync"]
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
record = b"r" * size
for _ in range(n):
    os.write(fd, record)
    if sync:
        os.fsync(fd)
os.close(fd)
print("records", n, flush=True)
