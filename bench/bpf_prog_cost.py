"""Per-program cost of iotrace's BPF programs on a workload (the kernel's
bpf_stats: run count and run time of each program), printed as a table.

    sudo .venv/bin/python bench/bpf_prog_cost.py [--reps 3] [--profile] [-- COMMAND ...]

Default workload: fio, 4 KiB random psync reads of a 64 MiB file in the page
cache (--invalidate=0; the worst case: the call itself is ~1.5 us). The kernel counts only
while kernel.bpf_stats_enabled is 1 (this script sets it and restores it);
counting adds ~20 ns per program run, so the absolute numbers are a little
high. iotrace's programs are sampled with bpftool every 0.2 s while the job
runs (they are gone once iotrace ends); the last sample is the job's total.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STATS = Path("/proc/sys/kernel/bpf_stats_enabled")


def iot_programs() -> dict[str, tuple[int, int]]:
    """name -> (run_cnt, run_time_ns) of the loaded iot_* programs."""
    r = subprocess.run(["bpftool", "prog", "show", "--json"], capture_output=True, text=True)
    out: dict[str, tuple[int, int]] = {}
    for p in json.loads(r.stdout or "[]"):
        name = p.get("name", "")
        if name.startswith("iot_"):
            cnt, ns = out.get(name, (0, 0))
            out[name] = (cnt + p.get("run_cnt", 0), ns + p.get("run_time_ns", 0))
    return out


def one_run(cmd: list[str], out: Path, mode: list[str]) -> tuple[dict, float]:
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "iotrace", "run", "-q", "--no-node-summary",
                             "--force", *mode, "-o", str(out), "--", *cmd],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    last: dict = {}
    while proc.poll() is None:
        cur = iot_programs()
        if cur:
            last = cur
        time.sleep(0.2)
    return last, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--profile", action="store_true",
                    help="trace with iotrace run --profile (in-kernel sums, no per-call records)")
    ap.add_argument("command", nargs="*")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="iotrace-bpfcost-"))
    cmd = args.command
    if not cmd:
        data = work / "data.bin"
        data.write_bytes(b"\1" * (64 << 20))
        subprocess.run(["cat", str(data)], stdout=subprocess.DEVNULL, check=True)
        cmd = ["fio", "--name=r", f"--filename={data}", "--rw=randread", "--bs=4k",
               "--size=64M", "--io_size=256M", "--ioengine=psync", "--invalidate=0",
               "--output-format=json", f"--output={work / 'fio.json'}"]
    # a second after the job, so that the last sample sees all of its runs
    cmd = ["sh", "-c", '"$@"; sleep 1', "job", *cmd]
    before = STATS.read_text().strip()
    STATS.write_text("1\n")
    runs = []
    try:
        for _ in range(args.reps):
            runs.append(one_run(cmd, work / "trace", ["--profile"] if args.profile else []))
    finally:
        STATS.write_text(before + "\n")
    names = sorted({n for r, _ in runs for n in r})
    print(f"BPF program cost{' (--profile)' if args.profile else ''}, {args.reps} runs of: "
          f"{' '.join(cmd)[:100]}")
    print(f"{'program':<28} {'runs':>12} {'ns/run':>8} {'ms total':>10} {'of run wall':>12}")
    rows = []
    for n in names:
        cnt = statistics.median(r.get(n, (0, 0))[0] for r, _ in runs)
        ns = statistics.median(r.get(n, (0, 0))[1] for r, _ in runs)
        wall = statistics.median(w for _, w in runs)
        rows.append((ns, n, cnt, wall))
    for ns, n, cnt, wall in sorted(rows, reverse=True):
        print(f"{n:<28} {cnt:>12,.0f} {ns / cnt if cnt else 0:>8.0f} {ns / 1e6:>10.1f} "
              f"{ns / 1e9 / wall:>12.1%}")
    if (work / "fio.json").exists():
        job = json.loads((work / "fio.json").read_text())["jobs"][0]["read"]
        print(f"fio (last run): {job['total_ios']:,} reads, "
              f"{job['clat_ns']['mean']:.0f} ns mean completion latency")


if __name__ == "__main__":
    main()
