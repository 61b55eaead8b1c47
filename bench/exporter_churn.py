#!/usr/bin/env python3
"""The exporter's memory under job churn: jobs start and end for a while
below its cgroup root (each in a cgroup of its own, made before and removed
after it), and the exporter's and its recorder's resident memory is sampled.

Each job is a short Python process fed by a worker process it forks, which
reads a few new files of its own (so that the set of files grows too, as
datasets do) and hands the job a piece of each through a pipe (so that the
job is a loop fed by a worker, as a DataLoader's); both exit after 2-3 s. A
new job starts every --every seconds, several alive at a time.

Run as root:  .venv/bin/python bench/exporter_churn.py [--minutes M] [--every S]
The table is printed and written to bench/results/exporter-churn-latest.txt.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime
from pathlib import Path

PY = sys.executable
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from cgroups import new_cgroup  # noqa: E402  (tests/cgroups.py)

JOB = r"""
import os, sys, time
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
# a worker process hands the job 20 small "batches" through a pipe, 0.1 s
# apart: the job is a loop fed by a worker, as a DataLoader's, and comes
# and goes through the exporter's loop tables too
r, w = os.pipe()
if os.fork() == 0:
    os.close(r)
    for i in range(20):
        p = os.path.join(d, f"f{i}")
        with open(p, "wb") as f:
            f.write(os.urandom(65536))
        with open(p, "rb") as f:
            os.write(w, f.read()[:64])
        time.sleep(0.1)
    os._exit(0)
os.close(w)
while os.read(r, 64):
    pass
os.wait()
"""


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=5)
    ap.add_argument("--every", type=float, default=0.5)
    a = ap.parse_args()
    root = new_cgroup(f"iotrace-churn-{os.getpid()}") or sys.exit("no writable cgroup hierarchy")
    work = Path(tempfile.mkdtemp(prefix="iotrace-churn-", dir="/var/tmp"))
    port = 9300 + os.getpid() % 500
    exp = subprocess.Popen([PY, "-m", "iotrace", "exporter", "--cgroup-root", str(root),
                            "--listen", f"127.0.0.1:{port}"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            if b"\niotrace_tracing 1.0" in urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/metrics", timeout=2).read():
                break
            time.sleep(0.3)
        except OSError:
            time.sleep(0.3)
    rec = int(subprocess.run(["pgrep", "-P", str(exp.pid), "-f", "iotrace-recorder"],
                             capture_output=True, text=True).stdout.split()[0])
    rows = []
    running: list[tuple[subprocess.Popen, Path]] = []
    n = 0
    t0 = time.monotonic()
    next_sample = t0
    try:
        while time.monotonic() - t0 < a.minutes * 60:
            cg = root / f"job{n}"
            cg.mkdir()
            p = subprocess.Popen(["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh",
                                  PY, "-c", JOB, str(work / f"job{n}")])
            running.append((p, cg))
            n += 1
            for q, c in [x for x in running if x[0].poll() is not None]:
                running.remove((q, c))
                c.rmdir()
                shutil.rmtree(work / c.name, ignore_errors=True)
            if time.monotonic() >= next_sample:
                metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                                 timeout=5).read().decode()
                series = sum(1 for line in metrics.splitlines()
                             if line.startswith("iotrace_") and "cgroup=" in line)
                loops = sum(1 for line in metrics.splitlines()
                            if line.startswith("iotrace_loop_data_wait_seconds_total{"))
                rows.append((time.monotonic() - t0, n, len(running), rss_kib(exp.pid),
                             rss_kib(rec), series, loops))
                next_sample += 30
            time.sleep(a.every)
    finally:
        for q, c in running:
            q.wait()
            c.rmdir()
        exp.send_signal(2)
        exp.wait(timeout=60)
        root.rmdir()
        shutil.rmtree(work, ignore_errors=True)
    lines = [f"exporter under job churn  {datetime.now():%Y-%m-%d %H:%M}, kernel "
             f"{platform.release()}, {os.cpu_count()} CPUs (bench/exporter_churn.py "
             f"--minutes {a.minutes:g} --every {a.every:g})",
             "a job (a cgroup, a process fed 20 batches by a worker process that reads 20 "
             f"new files) starts every {a.every:g} s and ends 2-3 s later; resident memory "
             "sampled every 30 s; loop series: jobs whose data wait is served", "",
             f"{'time s':>7} {'jobs so far':>11} {'alive':>6} {'exporter RSS MiB':>17} "
             f"{'recorder RSS MiB':>17} {'job series':>11} {'loop series':>12}"]
    for t, total, alive, e, r, s, lp in rows:
        lines.append(f"{t:7.0f} {total:11d} {alive:6d} {e / 1024:17.1f} {r / 1024:17.1f} "
                     f"{s:11d} {lp:12d}")
    text = "\n".join(lines) + "\n"
    print(text)
    (Path(__file__).resolve().parent / "results" / "exporter-churn-latest.txt").write_text(text)


if __name__ == "__main__":
    main()
