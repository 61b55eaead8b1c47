"""A known number of calls, then idle until killed: what an attach in
profile mode must sum exactly although the threads never exit while traced.

    python calls_then_idle.py FILE N THREADS

Prints "ready" and waits for a line on stdin; then each of THREADS threads
(besides the main one) makes N preads of 4 KiB and N preads of 100 bytes of
FILE, then the main thread N more of 4 KiB; it writes "done" (one write) and
sleeps."""
import os
import sys
import threading
import time

path, n, nthreads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fd = os.open(path, os.O_RDONLY)
print("ready", flush=True)
sys.stdin.readline()


def reads(sizes):
    for size in sizes:
        for i in range(n):
            os.pread(fd, size, (i * 4096) % (1 << 20))


workers = [threading.Thread(target=reads, args=((4096, 100),)) for _ in range(nthreads)]
for w in workers:
    w.start()
for w in workers:
    w.join()
reads((4096,))                     # the main thread's last calls: its reads,
os.write(1, b"done\n")             # and this one write

while True:
    time.sleep(60)
