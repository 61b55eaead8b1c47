"""What the two ways into system calls cost: fentry/fexit on the traced calls'
kernel functions against the sys_enter/sys_exit tracepoints.

Workload: fio psync 4 KiB random reads of a page-cached file (the worst case),
time per I/O from fio's JSON. Interleaved repetitions (the order rotates) of:

  untraced                    fio alone
  traced, fentry              iotrace run (IOTRACE_HOOKS=fentry) -- fio
  traced, tracepoint          iotrace run (IOTRACE_HOOKS=tracepoint) -- fio
  profile, fentry             iotrace run --profile (IOTRACE_HOOKS=fentry) -- fio
  profile, tracepoint         the same with the tracepoints
  bystander, fentry           fio untraced while iotrace traces a sleep
  bystander, tracepoint       the same with the tracepoints

Medians of (variant / untraced of the same repetition), with min-max. Rows
for fentry say "skipped" on a kernel that refuses fentry programs.

    sudo .venv/bin/python bench/hooks_cost.py [--reps 5] [--io-size 64M]
    sudo .venv/bin/python bench/hooks_cost.py --vm      # in Debian's 6.1 under QEMU

--vm boots /boot/vmlinuz-6.1*-amd64 with virtme-ng in software emulation
(as tests/test_vm.py does) and runs this script there: absolute times under
emulation mean nothing, the ratios within one run do.
"""
from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
IOTRACE = str(Path(sys.executable).parent / "iotrace")


def fio(data: Path, io_size: str) -> float:
    out = subprocess.run(["fio", "--name=b", f"--filename={data}", "--ioengine=psync",
                          "--rw=randread", "--bs=4k", "--size=64M", f"--io_size={io_size}",
                          "--invalidate=0", "--output-format=json"],
                         capture_output=True, text=True, check=True).stdout
    read = json.loads(out[out.index("{"):])["jobs"][0]["read"]
    return read["runtime"] * 1e6 / read["total_ios"]          # ns per I/O


def traced(data: Path, io_size: str, hooks: str, trace: Path, profile: bool = False) -> float:
    env = {**os.environ, "IOTRACE_HOOKS": hooks}
    out = subprocess.run([IOTRACE, "run", "-q", "--no-node-summary", "--force", "-o",
                          str(trace), *(["--profile"] if profile else []), "--",
                          "fio", "--name=b", f"--filename={data}",
                          "--ioengine=psync", "--rw=randread", "--bs=4k", "--size=64M",
                          f"--io_size={io_size}", "--invalidate=0", "--output-format=json"],
                         capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else
                           f"exit {out.returncode}")
    got = json.loads((trace / "meta.json").read_text())["probes"]["syscall_hooks"]
    if got != hooks:
        raise RuntimeError(f"asked for {hooks}, got {got}")
    read = json.loads(out.stdout[out.stdout.index("{"):])["jobs"][0]["read"]
    return read["runtime"] * 1e6 / read["total_ios"]


@contextlib.contextmanager
def tracing_sleep(hooks: str, trace: Path):
    proc = subprocess.Popen([IOTRACE, "run", "-q", "--no-node-summary", "--force", "-o",
                             str(trace), "--", "sleep", "600"], stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "IOTRACE_HOOKS": hooks})
    try:
        deadline = time.monotonic() + 300
        while not (trace / "meta.json").exists() or not any(
                Path(f"/proc/{p}/comm").read_text().strip() == "sleep"
                for p in os.listdir("/proc") if p.isdigit()
                and Path(f"/proc/{p}/comm").exists()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"iotrace did not start: {proc.stderr.read()[-300:]}")
            time.sleep(0.2)
        time.sleep(1.0)
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=300)


def fentry_here() -> bool:
    from iotrace.session import recorder_path
    p = subprocess.run([recorder_path(), "--check"], capture_output=True, text=True,
                       env={**os.environ, "IOTRACE_HOOKS": "fentry"})
    return p.returncode == 0


def measure(reps: int, io_size: str) -> str:
    work = Path(tempfile.mkdtemp(prefix="iotrace-hooks-"))
    data = work / "data.bin"
    data.write_bytes(os.urandom(64 << 20))
    kinds = ["fentry", "tracepoint"] if fentry_here() else ["tracepoint"]
    variants = ["untraced"] + [f"{w}, {k}" for k in kinds
                              for w in ("traced", "profile", "bystander")]
    ns: dict[str, list[float]] = {v: [] for v in variants}
    ratios: dict[str, list[float]] = {v: [] for v in variants}
    for rep in range(reps):
        fio(data, "16M")                                      # warm the page cache
        order = variants[rep % len(variants):] + variants[:rep % len(variants)]
        got = {}
        for v in order:
            if v == "untraced":
                got[v] = fio(data, io_size)
                continue
            what, hooks = v.split(", ")
            if what in ("traced", "profile"):
                got[v] = traced(data, io_size, hooks, work / "t", profile=what == "profile")
            else:
                with tracing_sleep(hooks, work / "s"):
                    got[v] = fio(data, io_size)
        for v in variants:
            ns[v].append(got[v])
            ratios[v].append(got[v] / got["untraced"])
        print("  .. rep %d: " % (rep + 1) + ", ".join(f"{v} {got[v]:.0f} ns" for v in variants),
              file=sys.stderr, flush=True)
    shutil.rmtree(work, ignore_errors=True)
    lines = [f"hooks cost  {time.strftime('%Y-%m-%d %H:%M %z')}, kernel {platform.release()}, "
             f"{os.cpu_count()} CPUs (bench/hooks_cost.py --reps {reps} --io-size {io_size})",
             "fio psync 4 KiB random page-cache reads, ns per I/O from fio; medians of "
             "interleaved repetitions (min-max of the ratio)", ""]
    lines.append(f"{'variant':28} {'ns/IO':>8} {'ratio':>8}  range")
    for v in variants:
        r = ratios[v]
        lines.append(f"{v:28} {statistics.median(ns[v]):8.0f} {statistics.median(r):7.3f}x  "
                     f"{min(r):.3f}-{max(r):.3f}")
    if "fentry" not in kinds:
        lines.append("fentry rows: skipped (this kernel refuses fentry programs)")
    return "\n".join(lines) + "\n"


def in_vm(reps: int, io_size: str) -> str:
    kernels = sorted(glob.glob("/boot/vmlinuz-6.1*-amd64"))
    vng = shutil.which("vng") or str(Path(sys.executable).parent / "vng")
    if not kernels or not os.path.exists(vng):
        sys.exit("hooks_cost --vm: needs Debian's 6.1 kernel (linux-image-amd64) and virtme-ng "
                 "(`make test-deps` and the venv install both)")
    out = ROOT / "build" / "hooks-cost-vm.txt"
    out.unlink(missing_ok=True)
    script = (f"mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing; "
              f"cd {ROOT} && TMPDIR=/run {sys.executable} {HERE / 'hooks_cost.py'} --reps {reps} "
              f"--io-size {io_size} --out {out}")
    env = dict(os.environ, PATH=f"{Path(vng).parent}:{os.environ['PATH']}")
    subprocess.run(["timeout", "3000", vng, "--run", kernels[-1], "--disable-kvm", "--cpus", "2",
                    "--memory", "2G", "--rw", f"--rwdir={ROOT}", "--exec", script], env=env)
    if not out.exists():
        sys.exit("hooks_cost --vm: the VM run did not finish (see the output above)")
    return out.read_text()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--io-size", default="64M")
    ap.add_argument("--vm", action="store_true", help="run in Debian's 6.1 kernel under QEMU")
    ap.add_argument("--out", help=argparse.SUPPRESS)     # the VM's result file
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("hooks_cost: tracing needs root: run it with sudo")
    text = in_vm(args.reps, args.io_size) if args.vm else measure(args.reps, args.io_size)
    if args.out:
        Path(args.out).write_text(text)
        return 0
    print(text)
    name = "hooks-cost-vm-latest.txt" if args.vm else "hooks-cost-latest.txt"
    (HERE / "results" / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
