"""Read FILE in CHUNK-byte pieces with an lseek(SEEK_SET) before each read, as
some Lustre clients do: `acc_seek_chunks.py FILE CHUNK`."""
import os
import sys

fd = os.open(sys.argv[1], os.O_RDONLY)
chunk = int(sys.argv[2])
size = os.fstat(fd).st_size
reads = 0
for off in range(0, size, chunk):
    os.lseek(fd, off, os.SEEK_SET)
    os.read(fd, chunk)
    reads += 1
os.close(fd)
print("reads", reads, flush=True)
