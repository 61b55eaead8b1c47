"""A fixed mix of file calls on files under DIR, the same every run: what a
profile must sum exactly as a full trace records it one call at a time.

    python profile_mix.py DIR [ROUNDS]

Per round, on DIR/data.bin (created, 1 MiB): 8 writes of sizes 1 B..1 MiB
pattern, an fsync, 40 preads of sizes 1 B, 100 B, 4 KiB, 64 KiB, 1 MiB
(8 of each), 16 reads of 4 KiB after an lseek to 0, 4 readv of 3 buffers,
then 10 opens + fstats + closes of DIR/small-K.bin, and 5 preads at an
offset past the end (0 bytes).
"""
import os
import sys

d = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
os.makedirs(d, exist_ok=True)
for k in range(10):
    with open(os.path.join(d, f"small-{k}.bin"), "wb") as f:
        f.write(b"s" * (1000 + k))
path = os.path.join(d, "data.bin")
for r in range(rounds):
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    for size in (1, 10, 100, 1000, 4096, 65536, 262144, 1 << 20):
        os.write(fd, b"w" * size)
    os.fsync(fd)
    for size in (1, 100, 4096, 65536, 1 << 20):
        for i in range(8):
            os.pread(fd, size, i * 4096)
    os.lseek(fd, 0, os.SEEK_SET)
    for _ in range(16):
        os.read(fd, 4096)
    for _ in range(4):
        os.readv(fd, [bytearray(100), bytearray(4096), bytearray(10000)])
    for _ in range(5):
        os.pread(fd, 4096, 1 << 30)
    os.close(fd)
    for k in range(10):
        sfd = os.open(os.path.join(d, f"small-{k}.bin"), os.O_RDONLY)
        os.fstat(sfd)
        os.read(sfd, 65536)
        os.close(sfd)
