#!/usr/bin/env python3
"""Peers side by side: the same workloads under several I/O tracers.

For each workload and tool: the slowdown (the workload's own time traced /
untraced, same repetition; median with min-max), the completeness (read calls
on the workload's data files that the tool's output holds / the read calls the
workload issued, its own ground truth) and the size of the tool's output on
disk per event it holds.

Workloads (each reports its own loop time and its own call count):
  fio-4k     fio psync 4 KiB random reads of a page-cached 256 MiB file
             (--invalidate=0; time and total_ios from fio's JSON)
  fio-1m     fio psync 1 MiB sequential reads of the same file (page cache)
  files      20,000 files of 100 KiB, each opened and read whole with one
             os.read (Python; count by construction)
  npy        np.load(path) of 4,000 .npy files of 256 KiB (reads counted by the
             kernel per thread: /proc/thread-self/io syscr around each load)
  torch      a PyTorch DataLoader, 2 workers, batch 32, whose Dataset
             np.load()s one of the same .npy files per sample (counted the same
             way in the workers, summed through the batches)
The workloads live in bench/peers_workloads/loaders.py.

Tools (rows):
  untraced          the workload alone
  iotrace           `iotrace run -q -o DIR --force -- CMD` (full capture)
  iotrace profile   `iotrace run --profile ...` (sums in the kernel; completeness
                    from DIR/profile/calls.parquet)
  darshan default   LD_PRELOAD libdarshan.so, DXT on, default memory and records
  darshan large     the same with MAX_RECORDS 131072 and DARSHAN_MODMEM=512
  dftracer          LD_PRELOAD libdftracer_preload.so (pydftracer), DATA_DIR the
                    workload's data directory, with metadata (sizes, fds)
  bpftrace          one line printed per read/pread64 exit on a file of the data
                    directory (filtered in the kernel by the directory's inode)
  strace            `strace -f -o FILE CMD`
A tool that is missing or fails gets a "skipped: why" cell, never a crash.

Run as root:  .venv/bin/python bench/peers.py [--quick] [--reps N] [--dir DIR]
The table is printed and written to bench/results/peers-latest.txt.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable, Optional

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
LOADERS = BENCH_DIR / "peers_workloads" / "loaders.py"
RESULTS_FILE = BENCH_DIR / "results" / "peers-latest.txt"
RUN_TIMEOUT_S = 600
READ_OPS = ("read", "pread64", "readv", "preadv", "preadv2")
FIO_FILE_MIB = 256


class BenchError(Exception):
    """A failure that ends the benchmark (or, inside a tool, skips its cell)."""


def progress(msg: str) -> None:
    print(f"  .. {msg}", file=sys.stderr, flush=True)


def last_line(text: str) -> str:
    """The line of a tool's output that best says why it failed."""
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    rejected = [ln for ln in lines if "unrecognized option" in ln or "no such option" in ln.lower()]
    errors = [ln for ln in lines if "error" in ln.lower() or "fail" in ln.lower()]
    return (rejected or errors or lines or ["(no output)"])[-1][:160]


def dir_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def stop(proc: subprocess.Popen, sig: int = signal.SIGINT, timeout: float = 60) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---- workloads -------------------------------------------------------------------

@dataclass
class Workload:
    name: str
    title: str
    data_dir: Path
    cmd: list[str]
    parse: Callable[[str], tuple[float, int]]    # stdout -> (seconds, read calls issued)
    unit: str                                     # what one call is, for the table
    skip_reason: Optional[str] = None


def parse_fio(stdout: str) -> tuple[float, int]:
    start = stdout.find("{")
    try:
        read = json.loads(stdout[start:])["jobs"][0]["read"]
    except (ValueError, KeyError, IndexError):
        raise BenchError(f"cannot parse fio's JSON: {last_line(stdout)}")
    if not read.get("total_ios") or not read.get("runtime"):
        raise BenchError("fio reported no reads")
    return read["runtime"] / 1e3, int(read["total_ios"])


def parse_loader(stdout: str) -> tuple[float, int]:
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                out = json.loads(line)
                return float(out["seconds"]), int(out["reads"])
            except (ValueError, KeyError):
                break
    raise BenchError(f"workload printed no result: {last_line(stdout)}")


def warm(path: Path) -> None:
    """Read a file or every file of a directory, so that it is in the page cache."""
    paths = [path] if path.is_file() else [p for p in path.iterdir() if p.is_file()]
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.read(1 << 20):
                pass


@dataclass
class Sizes:
    fio_4k_io: str
    fio_1m_io: str
    files: int
    file_kib: int
    npy: int
    npy_kib: int


def make_workloads(work: Path, py: str, sizes: Sizes, torch_ok: Optional[str]) -> list[Workload]:
    fio_dir, files_dir, npy_dir = work / "data-fio", work / "data-files", work / "data-npy"
    fio_file = fio_dir / "data.bin"

    def fio(rw: str, bs: str, io_size: str) -> list[str]:
        return ["fio", "--name=b", f"--filename={fio_file}", "--ioengine=psync",
                f"--rw={rw}", f"--bs={bs}", f"--size={FIO_FILE_MIB}M", f"--io_size={io_size}",
                "--output-format=json", "--invalidate=0"]

    ws = [
        Workload("fio-4k", f"fio psync 4 KiB random reads, page cache ({sizes.fio_4k_io} "
                 f"of a {FIO_FILE_MIB} MiB file; time from fio's JSON)",
                 fio_dir, fio("randread", "4k", sizes.fio_4k_io), parse_fio, "pread64"),
        Workload("fio-1m", f"fio psync 1 MiB sequential reads, page cache ({sizes.fio_1m_io} "
                 f"over the same file)",
                 fio_dir, fio("read", "1m", sizes.fio_1m_io), parse_fio, "pread64"),
        Workload("files", f"{sizes.files:,} files of {sizes.file_kib} KiB, open + one "
                 f"read + close each (Python os.read)",
                 files_dir, [py, str(LOADERS), "files", str(files_dir)], parse_loader, "read"),
        Workload("npy", f"np.load of {sizes.npy:,} .npy files of {sizes.npy_kib} KiB "
                 f"(5 reads each: buffered header read, then numpy.fromfile via stdio on a dup'd fd)",
                 npy_dir, [py, str(LOADERS), "npy", str(npy_dir)], parse_loader, "read"),
        Workload("torch", f"PyTorch DataLoader, 2 workers, batch 32, np.load per sample "
                 f"(the same {sizes.npy:,} files)",
                 npy_dir, [py, str(LOADERS), "torch", str(npy_dir), "--workers", "2",
                           "--batch", "32"], parse_loader, "read", skip_reason=torch_ok),
    ]
    return ws


def make_data(work: Path, py: str, sizes: Sizes, wanted: set[str]) -> None:
    if wanted & {"fio-4k", "fio-1m"}:
        d = work / "data-fio"
        d.mkdir()
        block = os.urandom(1 << 20)
        with open(d / "data.bin", "wb") as f:
            for _ in range(FIO_FILE_MIB):
                f.write(block)
    if "files" in wanted:
        run_checked([py, str(LOADERS), "make", str(work / "data-files"), "files",
                     str(sizes.files), str(sizes.file_kib * 1024)], "making the files")
    if wanted & {"npy", "torch"}:
        run_checked([py, str(LOADERS), "make", str(work / "data-npy"), "npy",
                     str(sizes.npy), str(sizes.npy_kib * 1024)], "making the .npy files")


def run_checked(cmd: list[str], what: str, env: Optional[dict] = None,
                timeout: float = RUN_TIMEOUT_S) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{what} took more than {timeout:.0f} s")
    except OSError as e:
        raise BenchError(f"{what}: {e}")
    if p.returncode != 0:
        raise BenchError(f"{what} failed (exit {p.returncode}): "
                         f"{last_line(p.stderr or p.stdout)}")
    return p.stdout


# ---- tools -----------------------------------------------------------------------

@dataclass
class Outcome:
    seconds: float
    issued: int
    captured: Optional[int] = None    # read calls on the data files in the tool's output
    out_bytes: Optional[int] = None   # size of the tool's output on disk
    events: Optional[int] = None      # events (or, for a profile, calls) that output holds
    # Figures for the notes column, by label ("{:.1f} B/event of events/*.parquet"):
    # the median over the repetitions goes in the label's {}.
    extra: dict[str, float] = field(default_factory=dict)


@dataclass
class Tool:
    name: str
    skip_reason: Optional[str] = None

    def run(self, w: Workload, scratch: Path) -> Outcome:   # pragma: no cover
        raise NotImplementedError


class Untraced(Tool):
    def run(self, w, scratch):
        secs, issued = w.parse(run_checked(w.cmd, w.name))
        return Outcome(secs, issued)


def iotrace_bin() -> Optional[str]:
    beside = Path(sys.executable).parent / "iotrace"
    return str(beside) if beside.exists() else shutil.which("iotrace")


class Iotrace(Tool):
    def __init__(self, name: str, profile: bool):
        super().__init__(name)
        self.profile = profile
        self.bin = iotrace_bin()
        if not self.bin:
            self.skip_reason = "skipped: iotrace CLI not found (run `make`, use .venv/bin/python)"

    def argv(self, out: Path, cmd: list[str]) -> list[str]:
        return [self.bin, "run", "-q", *(["--profile"] if self.profile else []),
                "-o", str(out), "--force", "--", *cmd]

    def check(self, scratch: Path) -> None:
        """A profile run of `true`: skip the row with the CLI's reason if it fails."""
        if self.skip_reason or not self.profile:
            return
        out = scratch / "profile-check"
        try:
            run_checked(self.argv(out, ["true"]), "iotrace run --profile", timeout=120)
        except BenchError as e:
            # "/path/to/iotrace-recorder: unrecognized option" -> "iotrace-recorder: ..."
            self.skip_reason = "skipped: " + re.sub(r"/\S*/(iotrace-recorder)", r"\1", str(e))
            return
        if not (out / "profile").is_dir():
            self.skip_reason = "skipped: iotrace run --profile wrote no DIR/profile/"

    def run(self, w, scratch):
        out = scratch / "trace"
        secs, issued = w.parse(run_checked(self.argv(out, w.cmd), f"iotrace run ({w.name})"))
        meta = json.loads((out / "meta.json").read_text())
        import iotrace  # the package is installed in the venv beside the CLI
        prefix = str(w.data_dir) + "/"
        ops = ", ".join(f"'{o}'" for o in READ_OPS)
        extra = {"{:,.0f} drops": meta["drops"]} if meta.get("drops") else {}
        if not self.profile:
            t = iotrace.open_trace(str(out))
            captured = t.con.execute(
                f"select count(*) from events e join files f on e.file_id = f.file_id "
                f"where e.op in ({ops}) and starts_with(f.path, ?)", [prefix]).fetchone()[0]
            if meta.get("events") and meta.get("events_parquet_bytes"):
                extra["events/*.parquet alone {:.1f} B/event"] = (
                    meta["events_parquet_bytes"] / meta["events"])
            return Outcome(secs, issued, captured, dir_bytes(out), int(meta["events"]),
                           extra)
        return Outcome(secs, issued, *self.profile_counts(out, prefix, ops), extra)

    @staticmethod
    def profile_counts(out: Path, prefix: str, ops: str) -> tuple[int, int, int]:
        """(read calls on the data files, bytes of the trace, calls the profile sums)."""
        import duckdb
        calls = out / "profile" / "calls.parquet"
        if not calls.exists():
            found = sorted((out / "profile").glob("*.parquet"))
            raise BenchError(f"unknown profile layout: no profile/calls.parquet "
                             f"({', '.join(p.name for p in found) or 'no Parquet files'})")
        con = duckdb.connect()
        cols = {r[0] for r in con.execute(f"describe select * from read_parquet('{calls}')").fetchall()}
        if not {"op", "calls", "file_id"} <= cols or not (out / "files.parquet").exists():
            raise BenchError(f"unknown profile layout: calls.parquet has {sorted(cols)}")
        captured = con.execute(
            f"select coalesce(sum(c.calls), 0) from read_parquet('{calls}') c "
            f"join read_parquet('{out / 'files.parquet'}') f on c.file_id = f.file_id "
            f"where c.op in ({ops}) and starts_with(f.path, ?)", [prefix]).fetchone()[0]
        total = con.execute(f"select coalesce(sum(calls), 0) from read_parquet('{calls}')"
                            ).fetchone()[0]
        return int(captured), dir_bytes(out), int(total)


class Darshan(Tool):
    """LD_PRELOAD libdarshan.so (non-MPI), DXT tracing; counts DXT POSIX read segments."""

    def __init__(self, name: str, prefix: Path, large: bool):
        super().__init__(name)
        self.prefix, self.large = prefix, large
        self.lib = prefix / "lib" / "libdarshan.so"
        self.parser = prefix / "bin" / "darshan-dxt-parser"
        if not self.lib.exists() or not os.access(self.parser, os.X_OK):
            self.skip_reason = (f"skipped: no Darshan install under {prefix} (darshan-runtime "
                                f"built --without-mpi, and darshan-util; --darshan-prefix)")

    def env(self, logdir: Path, scratch: Path) -> dict:
        env = dict(os.environ, LD_PRELOAD=str(self.lib), DARSHAN_ENABLE_NONMPI="1",
                   DXT_ENABLE_IO_TRACE="1", DARSHAN_LOGPATH=str(logdir))
        if self.large:
            cfg = scratch / "darshan.conf"
            cfg.write_text("MAX_RECORDS 131072 POSIX,DXT_POSIX,STDIO\n")
            env.update(DARSHAN_CONFIG_PATH=str(cfg), DARSHAN_MODMEM="512",
                       DARSHAN_NAMEMEM="64")
        return env

    def run(self, w, scratch):
        logdir = scratch / "darshan-logs"
        logdir.mkdir()
        env = self.env(logdir, scratch)
        secs, issued = w.parse(run_checked(w.cmd, f"{w.name} under Darshan", env=env))
        logs = sorted(p for p in logdir.rglob("*") if p.is_file())
        if not logs:
            raise BenchError("Darshan wrote no log")
        captured = events = incomplete = past_eof = 0
        prefix = str(w.data_dir) + "/"
        sizes: dict[str, int] = {}
        for log in logs:
            text = run_checked([str(self.parser), "--show-incomplete", str(log)],
                               "darshan-dxt-parser")
            if "contains incomplete data" in text:
                incomplete += 1
            name = ""
            for line in text.splitlines():
                if line.startswith("# DXT, file_id:"):
                    name = line.split("file_name:", 1)[1].strip()
                elif line.startswith(" X_POSIX"):
                    events += 1
                    f = line.split()    # module rank wt/rd segment offset length start end
                    if f[2] != "read" or not name.startswith(prefix):
                        continue
                    if name not in sizes:
                        sizes[name] = os.stat(name).st_size
                    # Bytes read at or past the end of a file that never changed size
                    # are another fd's reads that Darshan charged to this file (it
                    # kept a stale fd after a close it did not see): not the file's.
                    if int(f[5]) > 0 and int(f[4]) >= sizes[name]:
                        past_eof += 1
                    else:
                        captured += 1
        extra = {"{:.0f} log(s)": len(logs)}
        if incomplete:
            extra["{:.0f} marked incomplete (out of memory)"] = incomplete
        if past_eof:
            extra["{:,.0f} reads past EOF (another fd's) not counted"] = past_eof
        return Outcome(secs, issued, captured, sum(dir_bytes(p) for p in logs), events, extra)


def find_dftracer(explicit: Optional[str], py: str) -> Optional[Path]:
    if explicit:
        return Path(explicit)
    try:
        purelib = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()"
                                  "['purelib'])"], capture_output=True, text=True,
                                 timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    lib = Path(purelib) / "dftracer" / "lib" / "libdftracer_preload.so"
    return lib if lib.exists() else None


def dftracer_version(lib: Path) -> str:
    """pydftracer's version from the dist-info beside the library, if any."""
    site = lib.parent.parent.parent
    found = sorted(site.glob("pydftracer-*.dist-info"))
    return found[-1].name[len("pydftracer-"):-len(".dist-info")] if found else "unknown version"


class DFTracer(Tool):
    def __init__(self, name: str, lib: Optional[Path]):
        super().__init__(name)
        self.lib = lib
        if lib is None:
            self.skip_reason = ("skipped: pydftracer not installed in the workload's venv "
                                "(pip install pydftracer, or --dftracer-lib PATH)")
        elif not lib.exists():
            self.skip_reason = f"skipped: {lib} not found"

    def run(self, w, scratch):
        logdir = scratch / "dftracer"
        logdir.mkdir()
        env = dict(os.environ, LD_PRELOAD=str(self.lib), DFTRACER_ENABLE="1",
                   DFTRACER_INIT="PRELOAD", DFTRACER_LOG_FILE=str(logdir / "trace"),
                   DFTRACER_DATA_DIR=str(w.data_dir), DFTRACER_INC_METADATA="1",
                   DFTRACER_TRACE_COMPRESSION="0")
        secs, issued = w.parse(run_checked(w.cmd, f"{w.name} under DFTracer", env=env))
        logs = sorted(p for p in logdir.iterdir() if p.is_file())
        if not logs:
            raise BenchError("DFTracer wrote no trace file")
        captured = events = 0
        name_re = re.compile(r'"name":"([^"]*)"')
        for log in logs:
            with open(log, errors="replace") as f:
                for line in f:
                    if '"ph":"X"' not in line:
                        continue
                    events += 1
                    m = name_re.search(line)
                    if m and m.group(1) in READ_OPS + ("pread",):
                        captured += 1     # DATA_DIR: only the data files are traced
        return Outcome(secs, issued, captured, sum(dir_bytes(p) for p in logs), events,
                       {"{:.0f} file(s)": len(logs)})


class Bpftrace(Tool):
    PROG = ("tracepoint:syscalls:sys_enter_read,tracepoint:syscalls:sys_enter_pread64 "
            "/(*(curtask->files->fdt->fd + args->fd))->f_path.dentry->d_parent->d_inode->i_ino"
            " == {ino}/ {{ @r[tid] = 1; }} "
            "tracepoint:syscalls:sys_exit_read,tracepoint:syscalls:sys_exit_pread64 "
            "/@r[tid]/ {{ printf(\"%d %d\\n\", tid, args->ret); delete(@r[tid]); }}")

    def __init__(self, name: str):
        super().__init__(name)
        if not shutil.which("bpftrace"):
            self.skip_reason = "skipped: bpftrace not installed"

    def run(self, w, scratch):
        out, err = scratch / "bpftrace.out", scratch / "bpftrace.err"
        prog = self.PROG.format(ino=w.data_dir.stat().st_ino)
        with open(err, "w") as errf:
            proc = subprocess.Popen(["bpftrace", "-o", str(out), "-e", prog],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=errf)
        try:
            deadline = time.monotonic() + 60
            while not (out.exists() and "Attaching" in out.read_text(errors="replace")):
                if proc.poll() is not None:
                    raise BenchError(f"bpftrace exited: {last_line(err.read_text())}")
                if time.monotonic() > deadline:
                    raise BenchError("bpftrace did not attach within 60 s")
                time.sleep(0.1)
            time.sleep(1.0)    # "Attaching" is printed just before the probes attach
            secs, issued = w.parse(run_checked(w.cmd, w.name))
        finally:
            stop(proc, signal.SIGINT)
        lines = [ln for ln in out.read_text(errors="replace").splitlines()
                 if re.match(r"^\d+ -?\d+$", ln)]
        return Outcome(secs, issued, len(lines), out.stat().st_size, len(lines))


class Strace(Tool):
    """strace -f -o FILE; reads on the data files found by following fds per process."""
    LINE = re.compile(r"^(\d+)\s+(?:<\.\.\. (\w+) resumed>|(\w+)\()(.*)$")

    def __init__(self, name: str):
        super().__init__(name)
        if not shutil.which("strace"):
            self.skip_reason = "skipped: strace not installed"

    def run(self, w, scratch):
        out = scratch / "strace.out"
        secs, issued = w.parse(run_checked(["strace", "-f", "-o", str(out), *w.cmd],
                                           f"strace ({w.name})"))
        captured, events = self.count(out, str(w.data_dir) + "/")
        return Outcome(secs, issued, captured, out.stat().st_size, events)

    @classmethod
    def count(cls, path: Path, prefix: str) -> tuple[int, int]:
        """(reads on files under prefix, system calls in the file)."""
        fds: dict[int, dict[int, str]] = {}           # pid -> fd -> path
        pending: dict[int, tuple[str, str]] = {}      # pid -> (call, args so far)
        captured = events = 0
        ret_re = re.compile(r"\)\s+=\s+(-?\d+)")
        with open(path, errors="replace") as f:
            for line in f:
                m = cls.LINE.match(line)
                if not m:
                    continue
                pid = int(m.group(1))
                if m.group(2):                       # "<... read resumed>..."
                    call, args = pending.pop(pid, (m.group(2), ""))
                    args += m.group(4)
                else:
                    call, args = m.group(3), m.group(4)
                    events += 1
                    if args.endswith("<unfinished ...>"):
                        pending[pid] = (call, args)
                        if call in READ_OPS:         # the call was made: count it now
                            fd = args.split(",", 1)[0]
                            if fd.isdigit() and fds.get(pid, {}).get(int(fd), "").startswith(prefix):
                                captured += 1
                        continue
                table = fds.setdefault(pid, {})
                r = ret_re.findall(args)
                ret = int(r[-1]) if r else -1
                if call in READ_OPS:
                    if m.group(2):
                        continue                     # counted when it started
                    fd = args.split(",", 1)[0]
                    if fd.isdigit() and table.get(int(fd), "").startswith(prefix):
                        captured += 1
                elif call in ("open", "openat", "openat2", "creat") and ret >= 0:
                    p = re.search(r'"((?:[^"\\]|\\.)*)"', args)
                    if p:
                        table[ret] = p.group(1)
                elif call in ("dup", "dup2", "dup3") and ret >= 0:
                    old = args.split(",", 1)[0].strip()
                    if old.isdigit() and int(old) in table:
                        table[ret] = table[int(old)]
                elif call == "fcntl" and "F_DUPFD" in args and ret >= 0:
                    old = args.split(",", 1)[0].strip()
                    if old.isdigit() and int(old) in table:
                        table[ret] = table[int(old)]
                elif call == "close":
                    fd = re.match(r"\s*(\d+)", args)   # "4) = 0" or "4 <unfinished ...>) = 0"
                    if fd:
                        table.pop(int(fd.group(1)), None)
                elif call in ("clone", "clone3", "fork", "vfork") and ret > 0:
                    # a thread (CLONE_FILES) shares the table, a child gets a copy
                    fds[ret] = table if "CLONE_FILES" in args else dict(table)
        return captured, events


# ---- measurement -----------------------------------------------------------------

@dataclass
class Cell:
    ratios: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    completeness: list[float] = field(default_factory=list)
    bytes_per_event: list[float] = field(default_factory=list)
    events: list[int] = field(default_factory=list)
    issued: list[int] = field(default_factory=list)
    extra: dict[str, list[float]] = field(default_factory=dict)
    skip: Optional[str] = None


def measure(tools: list[Tool], workloads: list[Workload], reps: int,
            work: Path) -> dict[tuple[str, str], Cell]:
    cells = {(w.name, t.name): Cell() for w in workloads for t in tools}
    for w in workloads:     # a first, uncounted run of each: caches, lazy set-up
        if not w.skip_reason:
            warm(w.data_dir)
            try:
                run_checked(w.cmd, f"{w.name} (warm-up)")
            except BenchError as e:
                w.skip_reason = f"skipped: {e}"
    progress("warm-up runs done")
    for rep in range(reps):
        order = tools[rep % len(tools):] + tools[:rep % len(tools)]
        for w in workloads:
            if w.skip_reason:
                continue
            got: dict[str, Outcome] = {}
            for t in order:
                cell = cells[(w.name, t.name)]
                if t.skip_reason or cell.skip:
                    continue
                # Right before each run: other jobs on a shared machine drop the page
                # cache (tests do), and an idle page can be reclaimed within a minute.
                warm(w.data_dir)
                scratch = Path(tempfile.mkdtemp(prefix=f"{w.name}-", dir=work))
                try:
                    got[t.name] = t.run(w, scratch)
                except BenchError as e:
                    if isinstance(t, Untraced):     # no baseline: this repetition is lost
                        progress(f"{w.name} untraced, rep {rep + 1}: {e}")
                        continue
                    cell.skip = f"failed: {e}"
                    progress(f"{w.name} / {t.name}: {cell.skip}")
                except Exception as e:            # a parser's surprise: skip the cell
                    cell.skip = f"failed: {type(e).__name__}: {e}"
                    progress(f"{w.name} / {t.name}: {cell.skip}")
                finally:
                    shutil.rmtree(scratch, ignore_errors=True)
            base = got.get("untraced")
            for name, o in got.items():
                cell = cells[(w.name, name)]
                cell.seconds.append(o.seconds)
                cell.issued.append(o.issued)
                if base:
                    cell.ratios.append(o.seconds / base.seconds)
                if o.captured is not None and o.issued:
                    cell.completeness.append(o.captured / o.issued)
                if o.out_bytes is not None and o.events:
                    cell.bytes_per_event.append(o.out_bytes / o.events)
                    cell.events.append(o.events)
                for label, value in o.extra.items():
                    cell.extra.setdefault(label, []).append(value)
            progress(f"rep {rep + 1}/{reps} {w.name}: " + ", ".join(
                f"{n} {o.seconds:.2f}s" + (f" {o.captured}/{o.issued}" if o.captured is not None
                                          else "") for n, o in got.items()))
    return cells


# ---- report ----------------------------------------------------------------------

def med_range(vals: list[float], fmt: str) -> str:
    if not vals:
        return "-"
    m = fmt.format(statistics.median(vals))
    if len(vals) == 1 or min(vals) == max(vals):
        return m
    return f"{m} ({fmt.format(min(vals))}-{fmt.format(max(vals))})"


def ratio_fmt(vals: list[float]) -> str:
    fmt = "{:.2f}x" if max(vals) < 10 else "{:.1f}x"
    return med_range(vals, fmt)


def format_table(tools: list[Tool], workloads: list[Workload],
                 cells: dict[tuple[str, str], Cell], reps: int) -> str:
    head = ("tool", "slowdown", "completeness", "B/event", "events", "notes")
    out = []
    for w in workloads:
        out.append(f"{w.name}: {w.title}")
        if w.skip_reason:
            out.append(f"  {w.skip_reason}")
            out.append("")
            continue
        rows = []
        for t in tools:
            c = cells[(w.name, t.name)]
            if t.skip_reason or (c.skip and not c.seconds):
                rows.append((t.name, t.skip_reason or c.skip))
                continue
            issued = statistics.median(c.issued) if c.issued else 0
            if isinstance(t, Untraced):
                secs = statistics.median(c.seconds)
                rows.append((t.name, f"{secs:.3f} s", f"{issued:,.0f} {w.unit} issued",
                             "-", "-", f"{secs / issued * 1e6:.2f} us/call" if issued else ""))
                continue
            notes = [label.format(statistics.median(vals)) for label, vals in c.extra.items()]
            notes = ", ".join(notes + ([c.skip] if c.skip else []))
            rows.append((t.name, ratio_fmt(c.ratios) if c.ratios else "-",
                         med_range(c.completeness, "{:.3f}"),
                         med_range(c.bytes_per_event, "{:.1f}"),
                         f"{statistics.median(c.events):,.0f}" if c.events else "-", notes))
        full = [r for r in rows if len(r) == 6] + [head]
        widths = [max(len(r[i]) for r in full) for i in range(5)]
        widths[0] = max(len(r[0]) for r in rows + [head])

        def line(r):
            if len(r) == 2:
                return f"  {r[0].ljust(widths[0])}  {r[1]}"
            return "  " + "  ".join(c.ljust(wd) for c, wd in zip(r[:5], widths)) + \
                ("  " + r[5] if r[5] else "")
        out.append(line(head).rstrip())
        out.append(line(tuple("-" * wd for wd in widths) + ("",)).rstrip())
        out.extend(line(r).rstrip() for r in rows)
        out.append("")
    return "\n".join(out).rstrip()


def legend(reps: int) -> str:
    return (f"Medians of {reps} interleaved repetitions (the tools' order rotates each "
            f"repetition), min-max in brackets.\n"
            "slowdown: the workload's own loop time (fio: its JSON runtime) traced / untraced "
            "of the same\n  repetition, so tracer start-up and output conversion are not in it.\n"
            "completeness: read calls on the workload's data files found in the tool's output / "
            "read calls\n  the workload issued (fio total_ios; by construction; or the kernel's "
            "per-thread syscr count).\n"
            "B/event: the tool's whole output on disk / the events it holds (iotrace: the trace "
            "directory\n  / meta.json events; profile: / calls summed; Darshan: logs / DXT "
            "segments; DFTracer: .pfw\n  / its \"X\" lines; strace, bpftrace: bytes / lines).")


def machine_header(tool_versions: list[str]) -> str:
    cpu = "unknown CPU"
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                cpu = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"iotrace peers side by side  {datetime.now().astimezone():%Y-%m-%d %H:%M:%S %z}\n"
            f"kernel {platform.release()}, {cpu}, {os.cpu_count()} CPUs\n"
            + "\n".join(tool_versions))


def version_of(cmd: list[str]) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        text = (p.stdout or p.stderr).strip().splitlines()
        return text[0].strip() if text else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "not installed"


def write_results(text: str) -> None:
    RESULTS_FILE.parent.mkdir(parents=True, exist_ok=True)
    tmp = RESULTS_FILE.with_suffix(".tmp")
    tmp.write_text(text + "\n")
    tmp.replace(RESULTS_FILE)


# ---- main ------------------------------------------------------------------------

ALL_TOOLS = ("untraced", "iotrace", "iotrace profile", "darshan default", "darshan large",
             "dftracer", "bpftrace", "strace")
ALL_WORKLOADS = ("fio-4k", "fio-1m", "files", "npy", "torch")


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="3 repetitions of smaller workloads (a few minutes)")
    ap.add_argument("--reps", type=int, help="repetitions (default 5, 3 with --quick)")
    ap.add_argument("--dir", default="/tmp", help="where the data files and the tools' output "
                    "go (a temporary directory, removed at the end; default /tmp)")
    ap.add_argument("--darshan-prefix", default="/opt/darshan",
                    help="a Darshan install: lib/libdarshan.so (darshan-runtime built "
                    "--without-mpi) and bin/darshan-dxt-parser (darshan-util); default "
                    "/opt/darshan, skipped when absent")
    ap.add_argument("--dftracer-lib", help="libdftracer_preload.so (default: pydftracer's, "
                    "in the workloads' Python environment; skipped when absent)")
    ap.add_argument("--python", help="Python for the loader workloads, with numpy (and "
                    "torch for the DataLoader); default: the repository's .venv")
    ap.add_argument("--tools", default=",".join(ALL_TOOLS),
                    help="comma-separated subset of: " + ", ".join(ALL_TOOLS))
    ap.add_argument("--workloads", default=",".join(ALL_WORKLOADS),
                    help="comma-separated subset of: " + ", ".join(ALL_WORKLOADS))
    ap.add_argument("--no-write", action="store_true",
                    help=f"do not write {RESULTS_FILE.relative_to(REPO)}")
    return ap.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        if os.geteuid() != 0:
            raise BenchError("must run as root (iotrace and bpftrace need it)")
        if not shutil.which("fio"):
            raise BenchError("fio not installed (apt-get install fio, or `make deps`)")
        dir_ = Path(args.dir)
        if not dir_.is_dir():
            raise BenchError(f"--dir {dir_}: no such directory")
        reps = args.reps or (3 if args.quick else 5)
        if reps < 1:
            raise BenchError("--reps must be at least 1")
        want_tools = [t.strip() for t in args.tools.split(",") if t.strip()]
        want_wl = [w.strip() for w in args.workloads.split(",") if w.strip()]
        bad = [t for t in want_tools if t not in ALL_TOOLS] + \
              [w for w in want_wl if w not in ALL_WORKLOADS]
        if bad:
            raise BenchError(f"unknown tool or workload: {', '.join(bad)}")
        if "untraced" not in want_tools:
            want_tools.insert(0, "untraced")
        py = args.python or str(REPO / ".venv" / "bin" / "python")
        if not Path(py).exists():
            py = sys.executable
        if subprocess.run([py, "-c", "import numpy"], capture_output=True).returncode:
            raise BenchError(f"{py} has no numpy: give --python, or run `make`")
        torch_ok = None
        if subprocess.run([py, "-c", "import torch"], capture_output=True).returncode:
            torch_ok = f"skipped: no torch in {py} (`make test` installs it)"
        sizes = (Sizes("256M", "2G", 5000, 100, 1000, 256) if args.quick
                 else Sizes("1G", "8G", 20000, 100, 4000, 256))

        dft_lib = find_dftracer(args.dftracer_lib, py)
        all_tools: dict[str, Tool] = {
            "untraced": Untraced("untraced"),
            "iotrace": Iotrace("iotrace", profile=False),
            "iotrace profile": Iotrace("iotrace profile", profile=True),
            "darshan default": Darshan("darshan default", Path(args.darshan_prefix), False),
            "darshan large": Darshan("darshan large", Path(args.darshan_prefix), True),
            "dftracer": DFTracer("dftracer", dft_lib),
            "bpftrace": Bpftrace("bpftrace"),
            "strace": Strace("strace"),
        }
        tools = [all_tools[n] for n in ALL_TOOLS if n in want_tools]
        if all_tools["iotrace"].skip_reason and "iotrace" in want_tools:
            raise BenchError(all_tools["iotrace"].skip_reason)
        versions = [
            f"{version_of(['fio', '--version'])}, {version_of(['strace', '-V'])}, "
            f"{version_of(['bpftrace', '--version'])}",
            f"Darshan: {args.darshan_prefix}"
            + (f" ({version_of([str(Path(args.darshan_prefix) / 'bin' / 'darshan-config'), '--version'])})"
               if (Path(args.darshan_prefix) / "bin" / "darshan-config").exists() else " (absent)")
            + f"; DFTracer: " + (f"pydftracer {dftracer_version(dft_lib)} ({dft_lib})"
                                 if dft_lib else "absent"),
        ]
        with tempfile.TemporaryDirectory(prefix="iotrace-peers-", dir=dir_) as tmp:
            work = Path(tmp)
            header = machine_header(versions)
            for t in tools:
                if isinstance(t, Iotrace) and "iotrace" in t.name:
                    t.check(work)
                if t.skip_reason:
                    progress(f"{t.name}: {t.skip_reason}")
            workloads = [w for w in make_workloads(work, py, sizes, torch_ok)
                         if w.name in want_wl]
            progress("making the data files")
            make_data(work, py, sizes, {w.name for w in workloads if not w.skip_reason})
            os.sync()    # the new files' writeback would otherwise slow the first runs
            cells = measure(tools, workloads, reps, work)
        text = (header + "\n\n" + legend(reps) + "\n\n"
                + format_table(tools, workloads, cells, reps))
    except BenchError as e:
        print(f"peers.py: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("peers.py: interrupted", file=sys.stderr)
        return 130
    print(text, flush=True)
    if not args.no_write:
        write_results(text)
        print(f"\n(written to {RESULTS_FILE.relative_to(REPO)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
