"""Blocks in two system calls once told to, and stays there, so that a trace
that ends meanwhile finds them in progress: the main thread in a read of an
empty pipe, a second thread in a 100 s sleep.

    python blocked_at_end.py DIR

Prints "ready"; once DIR/go exists, prints "blocked FD TID" (the pipe's read
end and the sleeping thread's id) and blocks."""
import os
import sys
import time
from pathlib import Path

from sleeper import start_sleeper

go = Path(sys.argv[1]) / "go"
r, w = os.pipe()
print("ready", flush=True)
while not go.exists():
    time.sleep(0.02)
print(f"blocked {r} {start_sleeper()}", flush=True)
os.read(r, 4096)
