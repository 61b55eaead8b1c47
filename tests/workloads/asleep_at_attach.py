"""Asleep in system calls before an attach begins: a second thread sleeps
100 s from the start; the main thread reads its stdin (a pipe the test writes
to once the trace has begun), then reads it again and stays blocked.

Prints "ready TID" (the sleeping thread's id) before the first read, and
"got N" after it."""
import os
import threading
import time

asleep = threading.Event()
tid = []


def sleeper():
    tid.append(threading.get_native_id())
    asleep.set()
    time.sleep(100)


threading.Thread(target=sleeper, daemon=True).start()
asleep.wait()
print(f"ready {tid[0]}", flush=True)
data = os.read(0, 100)
print(f"got {len(data)}", flush=True)
os.read(0, 100)
