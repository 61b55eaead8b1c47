#!/usr/bin/env python3
"""What `iotrace exporter` costs the jobs it watches.

Each workload runs in a job cgroup below a cgroup root, untraced, with the
exporter following the root, and with the exporter run --no-loop-waits
(started before, stopped after each repetition), interleaved; the ratio is
the workload's own time with the exporter over without, per repetition,
and the table gives its median (min-max). The hook floor is the same run
with programs that do nothing on the hooks the exporter uses for every call
(system calls, user page faults, the scheduler's switches and wake-ups,
page-cache additions): what the kernel's hooks cost before any of
iotrace's work (bench/hook_floor.bpf.c). The last column is the exporter's
time over the floor's: what its programs and daemon add.

Workloads (bench/peers_workloads/loaders.py, their own clocks):
  torch   a PyTorch DataLoader, 2 workers, batch 32, np.load of a 256 KiB
          .npy file per sample (6,000 files): a realistic loader
  npy     np.load of the same 6,000 files in one process
  fio-4k  fio psync 4 KiB random reads of a page-cached 256 MiB file: the
          worst case, a call every few microseconds

Run as root:  .venv/bin/python bench/exporter_cost.py [--reps N]
The table is printed and written to bench/results/exporter-cost-latest.txt.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
LOADERS = BENCH / "peers_workloads" / "loaders.py"
PY = sys.executable
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from cgroups import new_cgroup  # noqa: E402  (tests/cgroups.py)
from overhead import build_hook_floor, hook_floor_running  # noqa: E402

FLOOR_PROGRAMS = ("floor_sys_enter", "floor_sys_exit", "floor_page_fault", "floor_sched_switch",
                  "floor_sched_waking", "floor_cache_add")


def in_cgroup(cg: Path, cmd: list[str]) -> list[str]:
    return ["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh", *cmd]


def run_workload(kind: str, data: Path, cg: Path) -> float:
    if kind == "fio-4k":
        out = subprocess.run(in_cgroup(cg, [
            "fio", "--name=r", f"--filename={data / 'fio.bin'}", "--rw=randread", "--bs=4k",
            "--ioengine=psync", "--invalidate=0", "--size=256m", "--io_size=2g",
            "--output-format=json"]), capture_output=True, text=True, check=True).stdout
        return json.loads(out)["jobs"][0]["read"]["runtime"] / 1e3
    args = ["torch", str(data / "npy"), "--workers", "2"] if kind == "torch" else \
        ["npy", str(data / "npy")]
    out = subprocess.run(in_cgroup(cg, [PY, str(LOADERS), *args]), capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["seconds"]


class Exporter:
    def __init__(self, root: Path, port: int, *extra: str):
        self.proc = subprocess.Popen([PY, "-m", "iotrace", "exporter", "--cgroup-root", str(root),
                                      "--listen", f"127.0.0.1:{port}", *extra],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        end = time.monotonic() + 60
        while time.monotonic() < end:
            try:
                # tracing, not only answering: the port is served while the
                # probes load (the workload would pay for their verification)
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                              timeout=2).read()
                if b"\niotrace_tracing 1.0" in text:
                    return
                time.sleep(0.2)
            except OSError:
                if self.proc.poll() is not None:
                    sys.exit(f"the exporter failed: {self.proc.stderr.read().decode()[-500:]}")
                time.sleep(0.3)
        sys.exit("the exporter did not answer")

    def stop(self):
        self.proc.send_signal(2)
        self.proc.wait(timeout=60)


# the exporter as it runs by default, and without the scheduler hooks of its
# loops' data waits (--no-loop-waits)
MODES = (("exporter", ()), ("no-loop-waits", ("--no-loop-waits",)))


def run_mode(mode: str, kind: str, data: Path, root: Path, job: Path, outside: Path,
             floor_exe: Path) -> float:
    """The workload's own time, untraced, on the hook floor, or under the
    exporter (MODES)."""
    if mode == "untraced":
        return run_workload(kind, data, outside)
    if mode == "floor":
        with hook_floor_running(floor_exe, FLOOR_PROGRAMS):
            return run_workload(kind, data, job)
    exp = Exporter(root, 9400 + os.getpid() % 500, *dict(MODES)[mode])
    try:
        return run_workload(kind, data, job)
    finally:
        exp.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    data = Path(a.dir or tempfile.mkdtemp(prefix="iotrace-exporter-cost-", dir="/var/tmp"))
    if not (data / "npy").exists():
        subprocess.run([PY, str(LOADERS), "make", str(data / "npy"), "npy", "6000", "262144"],
                       check=True)
        (data / "fio.bin").write_bytes(os.urandom(1 << 20) * 256)
    for f in [data / "fio.bin", *(data / "npy").iterdir()]:
        f.read_bytes()
    root = new_cgroup(f"iotrace-bench-{os.getpid()}") or sys.exit("no writable cgroup hierarchy")
    job, outside = root / "job", root.parent / f"iotrace-bench-out-{os.getpid()}"
    job.mkdir(exist_ok=True)
    outside.mkdir(exist_ok=True)
    kinds = ("torch", "npy", "fio-4k")
    times: dict[tuple[str, str], list[float]] = {}
    floor_exe, why = build_hook_floor(data)
    if floor_exe is None:
        sys.exit(f"the hook floor: {why}")
    try:
        # the modes' order rotates each repetition: a run right after an
        # exporter stops (its programs detaching, its files removed) is not
        # always the same mode's
        order = ["untraced", "floor", *(m for m, _ in MODES)]
        for rep in range(a.reps):
            for kind in kinds:
                for mode in order[rep % len(order):] + order[:rep % len(order)]:
                    times.setdefault((kind, mode), []).append(
                        run_mode(mode, kind, data, root, job, outside, floor_exe))
            print(f"rep {rep + 1}/{a.reps} done", file=sys.stderr)
    finally:
        for d in (job, outside, root):
            try:
                d.rmdir()
            except OSError:
                pass
    lines = [f"exporter cost  {datetime.now():%Y-%m-%d %H:%M %z}, kernel {platform.release()}, "
             f"{os.cpu_count()} CPUs (bench/exporter_cost.py --reps {a.reps})",
             "each workload's own time with `iotrace exporter` following its cgroup over "
             "without; ratio: median of the per-repetition ratios (min-max), interleaved;",
             "hook floor: empty programs on the hooks the exporter uses for every call; "
             "over floor: the exporter's time over the floor's", "",
             f"{'workload':10} {'untraced s':>11} {'hook floor':>11} {'exporter s':>11} {'ratio':>8}"
             f"  {'range':12} {'no loop waits s':>16} {'ratio':>8}  {'range':12} {'over floor':>10}"]
    for kind in kinds:
        u = times[(kind, "untraced")]
        fl = times[(kind, "floor")]
        cols = []
        for mode, _ in MODES:
            e = times[(kind, mode)]
            r = [x / y for x, y in zip(e, u)]
            cols.append(f"{statistics.median(e):{11 if mode == 'exporter' else 16}.3f} "
                        f"{statistics.median(r):7.3f}x  {min(r):.3f}-{max(r):.3f}")
        floor_r = statistics.median([x / y for x, y in zip(fl, u)])
        over = statistics.median([x / y for x, y in zip(times[(kind, "exporter")], fl)])
        lines.append(f"{kind:10} {statistics.median(u):11.3f} {floor_r:10.3f}x {cols[0]:34} "
                     f"{cols[1]:34} {over:9.3f}x")
    text = "\n".join(lines) + "\n"
    print(text)
    (BENCH / "results" / "exporter-cost-latest.txt").write_text(text)


if __name__ == "__main__":
    main()
