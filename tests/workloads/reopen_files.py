"""N files of 4 KiB under DIR, then ROUNDS passes that each open, read and
close every one (an epoch over a dataset): `reopen_files.py DIR N ROUNDS`.
Prints the opens and reads it made on the files."""
import os
import sys

d, n, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(d, exist_ok=True)
paths = [os.path.join(d, f"f{i:05d}.bin") for i in range(n)]
for p in paths:
    with open(p, "wb") as f:
        f.write(b"\x07" * 4096)
opens = reads = 0
for _ in range(rounds):
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        opens += 1
        assert len(os.read(fd, 4096)) == 4096
        reads += 1
        os.close(fd)
print(f"opens {opens} reads {reads}", flush=True)
