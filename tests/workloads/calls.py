"""Makes a known set of file calls under BASE (argv[1]); tests/test_calls.py
checks every one of them in the trace. os.* calls map 1:1 to system calls."""
import os
import sys

base = sys.argv[1]
os.makedirs(f"{base}/sub", exist_ok=True)
os.makedirs(f"{base}/d", exist_ok=True)
with open(f"{base}/d/x.bin", "wb") as f:
    f.write(bytes(range(256)) * 40)          # 10240 bytes

os.chdir(f"{base}/sub")                      # relative paths from here on

fd = os.open("rel.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
for _ in range(3):
    os.write(fd, b"a" * 100)                 # 3 writes of 100 bytes at 0, 100, 200
os.fsync(fd)
os.fdatasync(fd)
os.close(fd)

dirfd = os.open(f"{base}/d", os.O_RDONLY | os.O_DIRECTORY)
fd = os.open("x.bin", os.O_RDONLY, dir_fd=dirfd)   # openat(dirfd, "x.bin")
for _ in range(5):
    os.read(fd, 1000)                        # 5 reads of 1000 at 0, 1000, ... 4000
os.dup2(fd, 50)
os.read(50, 10)                              # via the alias: offset 5000
os.read(50, 10)                              # offset 5010
for off in range(7):
    os.pread(fd, 512, off * 1024)            # 7 preads at 0, 1024, ... 6144
for off in (0, 4096, 8192):
    os.lseek(fd, off, os.SEEK_SET)           # 3 lseeks, SEEK_SET
os.close(50)
os.close(fd)
os.close(dirfd)

try:
    os.open("missing.txt", os.O_RDONLY)      # ENOENT, relative to sub/
except FileNotFoundError:
    pass

os.chdir("..")                               # relative chdir: now BASE
for _ in range(4):
    os.stat("d/x.bin")
os.mkdir("newdir")
os.rename("sub/rel.txt", "newdir/renamed.txt")
os.unlink("newdir/renamed.txt")
