#!/usr/bin/env python3
"""Overhead benchmark for iotrace: how much tracing costs, next to the budgets.

Workload (the worst case for a syscall tracer): fio, psync engine, 4 KiB random
reads of a 256 MiB file that sits in the page cache, so each I/O is one cheap
pread64() (about a microsecond) and nearly all of the tracer's cost shows.
fio runs with --invalidate=0 so it does not drop the page cache first.

Every time is taken from fio's own JSON (read.runtime and read.total_ios), so
the start-up and shutdown of fio and of the tracer are not counted: the figure
is the time per I/O while the I/O loop runs.

It measures:

1. Slowdown. For each repetition, one run each of: fio untraced, fio under
   `iotrace run`, fio under `strace -f -o /dev/null`, and fio untraced while a
   bpftrace script writes one line per pread64 of comm "fio" to a file (it is
   started first and given a second after it reports "Attaching"). The order is
   rotated from one repetition to the next (interleaving, so that drift in the
   machine's load hits every variant alike). Reported: the median time per I/O
   of each variant and the median over repetitions of (variant / untraced of
   the same repetition). strace and bpftrace are 10-50x slower, so they do fewer
   I/Os; the ratio is per I/O, so that does not matter.
2. Event rate. One `iotrace run` of fio with one job per CPU and a larger
   io_size: events captured / traced wall time (meta.json duration_ns), the
   sustained rate (median 0.5 s window of the trace) and the drops the
   recorder reports. The rate the same fio reaches untraced is shown as the
   offered load: one fio job alone cannot issue 1 M reads/s here.
3. Parquet size: meta.json events_parquet_bytes / events of that run.
4. System-wide cost: untraced fio while `iotrace run -- sleep` traces only the
   sleep, against fio with no iotrace running (interleaved, median ratio).

Run as root:  .venv/bin/python bench/overhead.py [--quick] [--reps N] [--dir DIR]
The table is printed and written to bench/results/overhead-latest.txt.
"""
from __future__ import annotations

import argparse
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
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_FILE = BENCH_DIR / "results" / "overhead-latest.txt"
FILE_MIB = 256
BPFTRACE_PROG = ('tracepoint:syscalls:sys_exit_pread64 /comm == "fio"/ '
                 '{ printf("%d %d\\n", tid, args->ret); }')
RUN_TIMEOUT_S = 300

# Budgets (from DESIGN.md "Budgets").
SLOWDOWN_BUDGET, SLOWDOWN_AIM = 1.30, 1.15
PROFILE_BUDGET = 1.15        # profile mode on the worst case
SYSTEM_WIDE_BUDGET = 1.05
EVENTS_PER_S_BUDGET = 2_000_000
BYTES_PER_EVENT_BUDGET = 8.0


class BenchError(Exception):
    """A failure that ends the benchmark with one line on stderr."""


@dataclass
class Config:
    reps: int
    io_size: str          # untraced, iotrace and system-wide runs
    slow_io_size: str     # strace and bpftrace runs
    rate_io_size: str     # event-rate run, per fio job
    rate_jobs: int
    workdir: Path


@dataclass
class Variant:
    name: str
    skip_reason: str | None = None
    ns_per_io: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    drops: int = 0
    hooks: str = ""       # how iotrace hooked system calls (meta.json probes.syscall_hooks)


# ---- helpers -------------------------------------------------------------------

def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if "ERROR" in ln or "error" in ln]
    return (errors or lines or ["(no output)"])[-1]


def run_cmd(cmd: list[str], what: str, timeout: float = RUN_TIMEOUT_S) -> str:
    """Run cmd and return its stdout; raise BenchError with one line if it fails."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{what} took more than {timeout:.0f} s: {' '.join(cmd)}")
    if p.returncode != 0:
        raise BenchError(f"{what} failed (exit {p.returncode}): {last_line(p.stderr or p.stdout)}")
    return p.stdout


def fio_cmd(datafile: Path, io_size: str, jobs: int = 1) -> list[str]:
    cmd = ["fio", "--name=b", f"--filename={datafile}", "--ioengine=psync",
           "--rw=randread", "--bs=4k", f"--size={FILE_MIB}M", f"--io_size={io_size}",
           "--output-format=json", "--invalidate=0"]
    if jobs > 1:
        cmd += [f"--numjobs={jobs}", "--group_reporting"]
    return cmd


def parse_fio(stdout: str) -> dict:
    """fio's read stats (jobs[0].read); fio may print warnings before the JSON."""
    start = stdout.find("{")
    try:
        read = json.loads(stdout[start:])["jobs"][0]["read"]
    except (ValueError, KeyError, IndexError):
        raise BenchError(f"cannot parse fio's JSON output: {last_line(stdout)}")
    if not read.get("total_ios") or not read.get("runtime"):
        raise BenchError("fio reported no reads")
    return read


def ns_per_io(read: dict) -> float:
    return read["runtime"] * 1e6 / read["total_ios"]


def iotrace_bin() -> str:
    beside = Path(sys.executable).parent / "iotrace"
    found = str(beside) if beside.exists() else shutil.which("iotrace")
    if not found:
        raise BenchError("iotrace CLI not found: run `make` first, then use .venv/bin/python")
    return found


def read_meta(trace_dir: Path) -> dict:
    try:
        return json.loads((trace_dir / "meta.json").read_text())
    except (OSError, ValueError) as e:
        raise BenchError(f"cannot read {trace_dir}/meta.json: {e}")


def warm_page_cache(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass


def make_data_file(workdir: Path) -> Path:
    path = workdir / "fio-data.bin"
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for _ in range(FILE_MIB):
            f.write(block)
    warm_page_cache(path)
    return path


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 60) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def descendants(root: int) -> list[tuple[int, str]]:
    """(pid, comm) of every process below root, from /proc."""
    children: dict[int, list[tuple[int, str]]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append((int(entry), comm))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child[0])
    return found


# ---- one fio run per variant ---------------------------------------------------

def fio_untraced(datafile: Path, io_size: str, jobs: int = 1) -> dict:
    return parse_fio(run_cmd(fio_cmd(datafile, io_size, jobs), "fio"))


def fio_iotrace(datafile: Path, io_size: str, trace_dir: Path, jobs: int = 1,
                extra: tuple = ()) -> tuple[dict, dict]:
    cmd = [iotrace_bin(), "run", "-q", "-o", str(trace_dir), "--force", *extra, "--",
           *fio_cmd(datafile, io_size, jobs)]
    read = parse_fio(run_cmd(cmd, "iotrace run"))
    return read, read_meta(trace_dir)


def fio_strace(datafile: Path, io_size: str) -> dict:
    cmd = ["strace", "-f", "-o", "/dev/null", *fio_cmd(datafile, io_size)]
    return parse_fio(run_cmd(cmd, "strace"))


@contextmanager
def bpftrace_running(workdir: Path):
    """bpftrace printing one line per fio pread64, attached before the block runs."""
    out, err = workdir / "bpftrace.out", workdir / "bpftrace.err"
    out.unlink(missing_ok=True)
    with open(err, "w") as errf:
        proc = subprocess.Popen(["bpftrace", "-o", str(out), "-e", BPFTRACE_PROG],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=errf)
    try:
        deadline = time.monotonic() + 30
        while not (out.exists() and "Attaching" in out.read_text(errors="replace")):
            if proc.poll() is not None:
                raise BenchError(f"bpftrace exited: {last_line(err.read_text())}")
            if time.monotonic() > deadline:
                raise BenchError("bpftrace did not attach within 30 s")
            time.sleep(0.1)
        time.sleep(1.0)   # "Attaching" is printed just before the probe attaches
        yield
    finally:
        stop(proc, signal.SIGINT)


def fio_bpftrace(datafile: Path, io_size: str, workdir: Path) -> dict:
    with bpftrace_running(workdir):
        return fio_untraced(datafile, io_size)


@contextmanager
def iotrace_tracing_sleep(trace_dir: Path):
    """`iotrace run -- sleep` active (tracing only the sleep) while the block runs."""
    proc = subprocess.Popen([iotrace_bin(), "run", "-q", "-o", str(trace_dir), "--force",
                             "--", "sleep", "600"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        # Tracing starts before the job's first system call, so once the job
        # has exec'd into `sleep` the probes are live.
        while not any(comm == "sleep" for _, comm in descendants(proc.pid)):
            if proc.poll() is not None:
                raise BenchError(f"iotrace run -- sleep exited: {last_line(proc.stderr.read())}")
            if time.monotonic() > deadline:
                raise BenchError("iotrace run -- sleep did not start within 30 s")
            time.sleep(0.05)
        yield
    finally:
        stop(proc, signal.SIGTERM)   # passed on to sleep; iotrace then finishes the trace


def build_hook_floor(workdir: Path) -> tuple[Path | None, str]:
    """bench/hook_floor.bpf.c and its loader, built into workdir: (loader and
    object, or None with the reason)."""
    repo = BENCH_DIR.parent
    vmlinux = repo / "build" / "vmlinux.h"
    obj, exe = workdir / "hook_floor.bpf.o", workdir / "hook_floor"
    if not vmlinux.exists():
        return None, "skipped (no build/vmlinux.h: run make)"
    for cmd in (["clang", "-O2", "-g", "-target", "bpf", "-D__TARGET_ARCH_x86",
                 f"-I{vmlinux.parent}", "-c", str(BENCH_DIR / "hook_floor.bpf.c"), "-o", str(obj)],
                ["gcc", "-O2", "-o", str(exe), str(BENCH_DIR / "hook_floor.c"), "-lbpf"]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            return None, f"skipped ({cmd[0]} failed: {last_line(r.stderr)})"
    return exe, ""


@contextmanager
def hook_floor_running(exe: Path, programs=("floor_sys_enter", "floor_sys_exit")):
    """Empty programs on iotrace's hooks (by default the system calls')
    while the block runs."""
    proc = subprocess.Popen([str(exe), str(exe.parent / "hook_floor.bpf.o"), *programs],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        if not line.startswith("attached"):
            raise BenchError(f"hook floor did not attach: {last_line(proc.stderr.read())}")
        yield
    finally:
        proc.stdin.close()
        stop(proc)


# ---- the four measurements -----------------------------------------------------

def tool_skip_reason(tool: str) -> str | None:
    return None if shutil.which(tool) else f"skipped: {tool} not installed"


def measure_slowdown(cfg: Config, datafile: Path) -> list[Variant]:
    variants = [Variant("untraced"), Variant("iotrace"), Variant("iotrace --profile"),
                Variant("strace -f", tool_skip_reason("strace")),
                Variant("bpftrace printf", tool_skip_reason("bpftrace"))]
    trace_dir = cfg.workdir / "trace-slowdown"

    def one(v: Variant) -> float:
        if v.name == "untraced":
            return ns_per_io(fio_untraced(datafile, cfg.io_size))
        if v.name in ("iotrace", "iotrace --profile"):
            read, meta = fio_iotrace(datafile, cfg.io_size, trace_dir,
                                     extra=("--profile",) if "profile" in v.name else ())
            v.drops += meta.get("drops", 0)
            v.hooks = meta.get("probes", {}).get("syscall_hooks") or "tracepoint"
            return ns_per_io(read)
        if v.name == "strace -f":
            return ns_per_io(fio_strace(datafile, cfg.slow_io_size))
        return ns_per_io(fio_bpftrace(datafile, cfg.slow_io_size, cfg.workdir))

    for rep in range(cfg.reps):
        warm_page_cache(datafile)
        order = variants[rep % len(variants):] + variants[:rep % len(variants)]
        this_rep = {}
        for v in order:
            if v.skip_reason:
                continue
            try:
                this_rep[v.name] = one(v)
            except BenchError as e:
                if v.name in ("untraced", "iotrace", "iotrace --profile"):
                    raise
                v.skip_reason = f"skipped: {e}"   # a reference tracer failing is not fatal
        base = this_rep["untraced"]
        for v in variants:
            if v.name in this_rep:
                v.ns_per_io.append(this_rep[v.name])
                v.ratios.append(this_rep[v.name] / base)
        progress(f"slowdown rep {rep + 1}/{cfg.reps}: " + ", ".join(
            f"{k} {val:.0f} ns" for k, val in this_rep.items()))
    return variants


def measure_event_rate(cfg: Config, datafile: Path) -> dict:
    warm_page_cache(datafile)
    offered = fio_untraced(datafile, cfg.rate_io_size, cfg.rate_jobs)["iops"]
    trace_dir = cfg.workdir / "trace-rate"
    read, meta = fio_iotrace(datafile, cfg.rate_io_size, trace_dir, cfg.rate_jobs)
    events, wall_s = meta["events"], meta["duration_ns"] / 1e9
    result = dict(events=events, wall_s=wall_s, rate=events / wall_s,
                  drops=meta.get("drops", 0), offered=offered, traced_iops=read["iops"],
                  parquet_bytes=meta["events_parquet_bytes"],
                  sustained=sustained_rate(trace_dir))
    progress(f"event rate: {events} events in {wall_s:.2f} s, drops {result['drops']}")
    return result


def sustained_rate(trace_dir: Path, window_ns: int = 500_000_000) -> float | None:
    """Events per second in the median 0.5 s window of the trace, leaving out the
    first and last windows (fio start-up and exit); None if it cannot be told."""
    try:
        import iotrace
        con = iotrace.open_trace(str(trace_dir)).con
        counts = [n for _, n in con.execute(
            f"select ts_ns // {window_ns} w, count(*) from events group by w order by w"
        ).fetchall()]
    except Exception:   # the figure is a nicety; the rest of the table stands
        return None
    inner = counts[1:-1]
    return statistics.median(inner) * 1e9 / window_ns if inner else None


def measure_system_wide(cfg: Config, datafile: Path) -> dict:
    trace_dir = cfg.workdir / "trace-sleep"
    floor_exe, floor_skip = build_hook_floor(cfg.workdir)
    variants = ["none", "sleep"] + (["floor"] if floor_exe else [])
    base, during, floor, ratios, floor_ratios, sleep_events = [], [], [], [], [], []
    for rep in range(cfg.reps):
        warm_page_cache(datafile)
        got = {}
        for variant in variants[rep % len(variants):] + variants[:rep % len(variants)]:
            if variant == "none":
                got[variant] = ns_per_io(fio_untraced(datafile, cfg.io_size))
            elif variant == "floor":
                with hook_floor_running(floor_exe):
                    got[variant] = ns_per_io(fio_untraced(datafile, cfg.io_size))
            else:
                with iotrace_tracing_sleep(trace_dir):
                    got[variant] = ns_per_io(fio_untraced(datafile, cfg.io_size))
                sleep_events.append(read_meta(trace_dir).get("events", 0))
        base.append(got["none"])
        during.append(got["sleep"])
        ratios.append(got["sleep"] / got["none"])
        if "floor" in got:
            floor.append(got["floor"])
            floor_ratios.append(got["floor"] / got["none"])
        progress(f"system-wide rep {rep + 1}/{cfg.reps}: no iotrace {got['none']:.0f} ns, "
                 f"iotrace on sleep {got['sleep']:.0f} ns"
                 + (f", empty programs {got['floor']:.0f} ns" if "floor" in got else ""))
    return dict(base=statistics.median(base), during=statistics.median(during),
                ratio=statistics.median(ratios), sleep_events=max(sleep_events),
                floor=statistics.median(floor) if floor else None,
                floor_ratio=statistics.median(floor_ratios) if floor else None,
                floor_skip=floor_skip)


# ---- report --------------------------------------------------------------------

def progress(msg: str) -> None:
    print(f"  .. {msg}", file=sys.stderr, flush=True)


def fmt_ratio(ratio: float) -> str:
    return f"{ratio:7.3f}x" if ratio < 10 else f"{ratio:7.1f}x"


def verdict(ok: bool) -> str:
    return "ok" if ok else "OVER BUDGET"


def format_table(cfg: Config, slowdown: list[Variant], rate: dict, system: dict) -> str:
    """The results as a plain-text table: measure, result, budget, verdict."""
    rows: list[tuple[str, ...]] = [
        (f"slowdown vs untraced (median of {cfg.reps} interleaved runs; io_size "
         f"{cfg.io_size}, strace/bpftrace {cfg.slow_io_size})",)]
    for v in slowdown:
        if v.skip_reason:
            rows.append((f"  {v.name}", v.skip_reason, "", ""))
            continue
        ratio = statistics.median(v.ratios)
        value = f"{statistics.median(v.ns_per_io):6.0f} ns/IO {fmt_ratio(ratio)}"
        if v.name == "iotrace":
            aim = "aim met" if ratio <= SLOWDOWN_AIM else "aim not met"
            drops = "" if v.drops == 0 else f", {v.drops} drops"
            rows.append((f"  {v.name} ({v.hooks})", value,
                         f"<= {SLOWDOWN_BUDGET}x (aim {SLOWDOWN_AIM}x)",
                         f"{verdict(ratio <= SLOWDOWN_BUDGET)} ({aim}{drops})"))
        elif v.name == "iotrace --profile":
            rows.append((f"  {v.name} ({v.hooks})", value, f"<= {PROFILE_BUDGET}x",
                         verdict(ratio <= PROFILE_BUDGET)))
        else:
            rows.append((f"  {v.name}", value, "" if v.name == "untraced" else "reference", ""))

    rows.append((f"system-wide cost for untraced processes (median of {cfg.reps} "
                 f"interleaved runs)",))
    rows.append(("  fio, no iotrace running", f"{system['base']:6.0f} ns/IO {fmt_ratio(1)}", "", ""))
    rows.append(("  fio, iotrace traces a sleep", f"{system['during']:6.0f} ns/IO "
                 f"{fmt_ratio(system['ratio'])}", f"<= {SYSTEM_WIDE_BUDGET}x",
                 verdict(system["ratio"] <= SYSTEM_WIDE_BUDGET)))
    if system["floor"] is not None:
        rows.append(("  fio, empty programs on the hooks", f"{system['floor']:6.0f} ns/IO "
                     f"{fmt_ratio(system['floor_ratio'])}", "floor (the kernel's hooks)", ""))
    else:
        rows.append(("  fio, empty programs on the hooks", system["floor_skip"], "", ""))
    rows.append(("  events in the sleep's trace", f"{system['sleep_events']} (fio not traced)",
                 "", ""))

    rows.append((f"event rate (one iotrace run of fio, {cfg.rate_jobs} job(s) x "
                 f"{cfg.rate_io_size})",))
    ok_rate = rate["rate"] >= EVENTS_PER_S_BUDGET and rate["drops"] == 0
    rows.append(("  events / traced wall time", f"{rate['rate'] / 1e6:.3f} M/s, "
                 f"drops {rate['drops']}", f">= {EVENTS_PER_S_BUDGET / 1e6:.0f} M/s, 0 drops",
                 verdict(ok_rate)))
    rows.append(("  events captured", f"{rate['events']} in {rate['wall_s']:.2f} s",
                 "", ""))
    sustained = f"{rate['sustained'] / 1e6:.3f} M/s" if rate["sustained"] else "n/a"
    rows.append(("  sustained (median 0.5 s)", sustained, "", ""))
    rows.append(("  fio IOPS untraced / traced", f"{rate['offered'] / 1e6:.3f} M / "
                 f"{rate['traced_iops'] / 1e6:.3f} M", "", ""))

    rows.append(("trace size (same run)",))
    bpe = rate["parquet_bytes"] / rate["events"]
    rows.append(("  Parquet bytes per event", f"{bpe:.2f}",
                 f"<= {BYTES_PER_EVENT_BUDGET:.0f}", verdict(bpe <= BYTES_PER_EVENT_BUDGET)))

    head = ("measure", "result", "budget", "verdict")
    cells = [r for r in rows if len(r) == 4] + [head]
    widths = [max(len(r[i]) for r in cells) for i in range(4)]

    def line(r):
        if len(r) == 1:   # a section heading
            return r[0]
        return "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()

    out = [line(head), line(tuple("-" * w for w in widths))]
    for r in rows:
        if len(r) == 1 and len(out) > 2:
            out.append("")
        out.append(line(r))
    return ("workload: fio psync 4 KiB random reads of a 256 MiB file in the page cache; "
            "time per I/O\nfrom fio's JSON (tracer start-up excluded)\n\n" + "\n".join(out))


def machine_header() -> str:
    cpu = "unknown CPU"
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                cpu = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    fio_version = run_cmd(["fio", "--version"], "fio --version").strip()
    return (f"iotrace overhead benchmark  {datetime.now().astimezone():%Y-%m-%d %H:%M:%S %z}\n"
            f"kernel {platform.release()}, {cpu}, {os.cpu_count()} CPUs, {fio_version}")


def write_results(text: str) -> None:
    RESULTS_FILE.parent.mkdir(parents=True, exist_ok=True)
    tmp = RESULTS_FILE.with_suffix(".tmp")
    tmp.write_text(text + "\n")
    tmp.replace(RESULTS_FILE)


# ---- main ----------------------------------------------------------------------

def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="fewer repetitions and smaller runs (about a minute)")
    ap.add_argument("--reps", type=int, help="repetitions of the interleaved runs "
                    "(default 5, 3 with --quick)")
    ap.add_argument("--dir", default="/tmp", help="where to put the 256 MiB data file "
                    "and the traces (default /tmp; removed afterwards)")
    return ap.parse_args(argv)


def check_environment(dir_: Path) -> None:
    if os.geteuid() != 0:
        raise BenchError("must run as root (tracing needs it): sudo .venv/bin/python bench/overhead.py")
    if not shutil.which("fio"):
        raise BenchError("fio not installed (apt-get install fio, or `make deps`)")
    iotrace_bin()
    if not dir_.is_dir():
        raise BenchError(f"--dir {dir_}: no such directory")


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    dir_ = Path(args.dir)
    try:
        check_environment(dir_)
        reps = args.reps or (3 if args.quick else 5)
        if reps < 1:
            raise BenchError("--reps must be at least 1")
        with tempfile.TemporaryDirectory(prefix="iotrace-bench-", dir=dir_) as tmp:
            cfg = Config(reps=reps,
                         io_size="1G" if args.quick else "4G",
                         slow_io_size="32M" if args.quick else "128M",
                         rate_io_size="2G" if args.quick else "8G",
                         rate_jobs=os.cpu_count() or 1,
                         workdir=Path(tmp))
            header = machine_header()
            datafile = make_data_file(cfg.workdir)
            slowdown = measure_slowdown(cfg, datafile)
            system = measure_system_wide(cfg, datafile)
            rate = measure_event_rate(cfg, datafile)
        text = header + "\n\n" + format_table(cfg, slowdown, rate, system)
    except BenchError as e:
        print(f"overhead.py: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("overhead.py: interrupted", file=sys.stderr)
        return 130
    print(text, flush=True)
    write_results(text)
    print(f"\n(written to {RESULTS_FILE.relative_to(BENCH_DIR.parent)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
