"""Known Python phases on known clocks: the stack sampler's ground truth.

    py_phases.py OUT_JSON [ROUNDS]

The main thread alternates phase_spin() (0.1 s on CPU) and phase_sleep()
(0.1 s asleep) ROUNDS times (default 10), noting each phase's start and end
on CLOCK_MONOTONIC (time.monotonic_ns, the trace's clock); a second thread
sits in side_wait() all along. OUT_JSON: the phases, both thread ids.
"""
import json
import sys
import threading
import time


def phase_spin(s):
    end = time.monotonic() + s
    x = 0
    while time.monotonic() < end:
        x += 1
    return x


def phase_sleep(s):
    time.sleep(s)


def side_wait(ev):
    ev.wait()


def main():
    out, rounds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10
    ev = threading.Event()
    side = threading.Thread(target=side_wait, args=(ev,), name="side")
    side.start()
    time.sleep(0.3)          # the sampler finds the process (it scans every 200 ms)
    phases = []
    for _ in range(rounds):
        for name, fn in (("phase_spin", phase_spin), ("phase_sleep", phase_sleep)):
            a = time.monotonic_ns()
            fn(0.1)
            phases.append([name, a, time.monotonic_ns()])
    ev.set()
    side.join()
    json.dump({"main_tid": threading.get_native_id(), "side_tid": side.native_id,
               "phases": phases}, open(out, "w"))


if __name__ == "__main__":
    main()
