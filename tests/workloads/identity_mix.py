"""File calls on every kind of fd whose identity the recorder reads from the
kernel (struct file, inode, super block), the same every run: a regular file
read by position (read, lseek) and by offset, the same file with O_DIRECT,
a pipe, a Unix socket pair, a TCP connection on loopback and /dev/null.

    python identity_mix.py DIR

Opens DIR/start first: the calls to compare are the ones after it."""
import os
import socket
import sys

d = sys.argv[1]
os.makedirs(d, exist_ok=True)
path = os.path.join(d, "data.bin")
with open(path, "wb") as f:
    f.write(os.urandom(1 << 20))
os.close(os.open(os.path.join(d, "start"), os.O_CREAT | os.O_WRONLY, 0o644))

fd = os.open(path, os.O_RDONLY)
for _ in range(8):
    os.read(fd, 4096)                 # offsets 0, 4096, ... from f_pos
os.lseek(fd, 65536, os.SEEK_SET)
os.read(fd, 100)
os.pread(fd, 512, 8192)
os.fstat(fd)
os.close(fd)

try:
    dfd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = bytearray(4096)
    import mmap
    m = mmap.mmap(-1, 4096)           # page-aligned, as O_DIRECT wants
    for i in range(4):
        os.preadv(dfd, [m], i * 4096)
    os.close(dfd)
except OSError:
    pass                               # a file system without O_DIRECT

r, w = os.pipe()
os.write(w, b"x" * 100)
os.read(r, 100)
os.close(r)
os.close(w)

a, b = socket.socketpair()
a.send(b"y" * 50)
b.recv(50)
a.close()
b.close()

srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
c = socket.create_connection(srv.getsockname())
s, _ = srv.accept()
c.sendall(b"z" * 300)
got = 0
while got < 300:
    got += len(s.recv(300))
for x in (c, s, srv):
    x.close()

null = os.open("/dev/null", os.O_WRONLY)
os.write(null, b"n" * 10)
os.close(null)
