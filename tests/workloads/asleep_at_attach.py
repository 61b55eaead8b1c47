"""Asleep in system calls before an attach begins: a second thread sleeps
100 s from the start; the main thread reads its stdin (a pipe the test writes
to once the trace has begun), then reads it again and stays blocked.

Prints "ready TID" (the sleeping thread's id) before the first read, and
"got N" after it."""
import os

from sleeper import start_sleeper

print(f"ready {start_sleeper()}", flush=True)
data = os.read(0, 100)
print(f"got {len(data)}", flush=True)
os.read(0, 100)
