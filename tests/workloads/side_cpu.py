"""A job's side process that works for each batch the loop takes, on the
CPUs the pipeline shares (a runtime's executor, a metrics process): for each
byte read from its stdin (the loop writes one a step) it works SECONDS of
its own CPU time; it exits when stdin is closed. Ground truth in OUT_JSON:
its CPU clock against the monotonic clock, sampled at each byte and at the
end, [[monotonic_ns, cpu_ns], ...].

    side_cpu.py SECONDS OUT_JSON
"""
import json
import os
import sys
import time


def main() -> None:
    work, out = float(sys.argv[1]), sys.argv[2]
    samples = []
    while True:
        samples.append((time.clock_gettime_ns(time.CLOCK_MONOTONIC), time.process_time_ns()))
        got = os.read(0, 1)
        if not got:
            break                           # stdin closed: the loop is done
        end = time.process_time() + work
        while time.process_time() < end:
            pass
    samples.append((time.clock_gettime_ns(time.CLOCK_MONOTONIC), time.process_time_ns()))
    with open(out, "w") as f:
        json.dump(samples, f)


if __name__ == "__main__":
    main()
