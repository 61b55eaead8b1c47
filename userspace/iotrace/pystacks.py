"""Python call stacks of the traced job, sampled on the trace's clock.

`iotrace-pysampler` (userspace/pysampler, Rust, py-spy as a library) reads
the stacks of every thread of every Python process of the job from outside
(process_vm_readv: no code change, no pause of the job) at about 100 samples
a second, stamps each with CLOCK_MONOTONIC, and writes them to the spool.
At the end they become two tables:

  pystacks.parquet  one row per sample of one thread: ts_ns, pid, tid (OS
                    thread id, -1 where the interpreter does not say it:
                    CPython before 3.11, threads other than the main one),
                    on_cpu (the thread was running), gil (it held the GIL),
                    stack_id, read_ns (how long the read of the process's
                    stacks took: ts_ns is its middle, so the stack was taken
                    within ts_ns ± read_ns / 2); and one row per failed read of a process's
                    stacks (py-spy refuses a stack that changed while it was
                    read, mostly of a thread running Python code): stack_id
                    -1, tid -1, the moment whose state is unknown
  pyframes.parquet  the stacks: stack_id, depth (0 = outermost), function
                    (qualified name on CPython 3.11+), file, line (the
                    function's first line)

meta.json `py_stacks` says what was sampled and what was not (processes
that are not Python, or that py-spy could not read, with the reason;
samples refused because a stack changed while it was read).
"""
from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Optional

import pyarrow as pa

SPOOL_NAME = "pystacks.txt"
DEFAULT_RATE_HZ = 100

SAMPLES_SCHEMA = pa.schema([("ts_ns", pa.int64()), ("pid", pa.int32()), ("tid", pa.int32()),
                            ("on_cpu", pa.bool_()), ("gil", pa.bool_()),
                            ("stack_id", pa.int32()), ("read_ns", pa.int32())])
FRAMES_SCHEMA = pa.schema([("stack_id", pa.int32()), ("depth", pa.int16()),
                           ("function", pa.string()), ("file", pa.string()),
                           ("line", pa.int32())])


TABLES = (("pystacks", SAMPLES_SCHEMA), ("pyframes", FRAMES_SCHEMA))
_SQL_TYPES = {"int64": "bigint", "int32": "int", "int16": "smallint", "bool": "boolean",
              "string": "string"}


def empty_select(schema: pa.Schema) -> str:
    """SQL for an empty table of that schema, which DuckDB and Spark both
    take: the view of a trace without Python stacks."""
    return "select " + ", ".join(f"cast(null as {_SQL_TYPES[str(f.type)]}) as {f.name}"
                                 for f in schema) + " where false"


def sampler_path() -> Optional[str]:
    env = os.environ.get("IOTRACE_PYSAMPLER")
    if env:
        return env
    here = Path(__file__).resolve().parent
    for cand in (here / "bin" / "iotrace-pysampler",
                 here.parent / "pysampler" / "target" / "release" / "iotrace-pysampler"):
        if cand.exists():
            return str(cand)
    return None


def _realtime() -> None:
    """The sampler's priority (in its child, before exec): real-time
    (SCHED_FIFO 1) where allowed, else nice -10."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        return
    except OSError:
        pass
    try:
        os.nice(-10)
    except OSError:     # no CAP_SYS_NICE (a non-root user with CAP_BPF): as it is
        pass


class PySampler:
    """The sampler process of one session."""

    def __init__(self, spool: Path, rate_hz: int = DEFAULT_RATE_HZ):
        self.out = spool / SPOOL_NAME
        self.rate_hz = rate_hz
        self.proc: Optional[subprocess.Popen] = None
        self.error: Optional[str] = None

    def start(self, roots: list[int]) -> None:
        exe = sampler_path()
        if exe is None:
            self.error = "iotrace-pysampler is not built (make builds it; it needs cargo)"
            return
        try:
            # at the recorder's priority (nice -10): a sampler delayed while the
            # job is busy in the kernel (its I/O, the recorder draining it)
            # samples those moments less often, and the share of samples in
            # the loader then falls short of its share of time (at nice 5, 27%
            # of the samples against 33% of the time on a loaded 2-core
            # machine; 34% against 35% at -10). It takes 2-5% of a core.
            self.proc = subprocess.Popen(
                [exe, "--out", str(self.out), "--rate", str(self.rate_hz), *map(str, roots)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                preexec_fn=_realtime)
        except (OSError, subprocess.SubprocessError) as e:
            self.error = f"cannot start {exe}: {getattr(e, 'strerror', None) or e}"

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        if self.proc.returncode not in (0, -signal.SIGTERM):
            msg = (err or b"").decode(errors="replace").strip().splitlines()
            self.error = (msg[-1] if msg else f"exit status {self.proc.returncode}")

    def write_tables(self, out_dir: Path) -> dict:
        """Converts the spool file into the two tables; returns meta.json's py_stacks."""
        meta: dict = {"sampler": "iotrace-pysampler (py-spy 0.4 library, Python frames)",
                      "rate_hz": self.rate_hz, "samples": 0}
        if self.error:
            meta["error"] = self.error
        if not self.out.exists():
            meta.setdefault("error", "the sampler wrote nothing")
            return meta
        samples, frames, info = parse(self.out)
        meta.update(info)
        from .schema import atomic_write_table
        atomic_write_table(samples, out_dir / "pystacks.parquet")
        atomic_write_table(frames, out_dir / "pyframes.parquet")
        return meta


def parse(path: Path) -> tuple[pa.Table, pa.Table, dict]:
    """The sampler's line file -> (samples, frames, meta counts). A line cut
    short by a crash (the last one) is left out and counted."""
    frames: dict[int, tuple[str, str, int]] = {}
    stacks: dict[str, int] = {}
    cols: dict[str, list] = {k: [] for k in SAMPLES_SCHEMA.names}
    sampled: dict[str, str] = {}
    refused: dict[str, str] = {}
    bad = dup = torn = 0
    end = None
    last, last_key = None, None
    with open(path, "r", encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.endswith("\n"):
                bad += 1
                break
            p = line.rstrip("\n").split("\t")
            kind = p[0]
            try:
                if kind == "S":
                    key = p[5]
                    # one read naming an OS thread twice (a process just
                    # forked: its parent's thread states, copied, not yet
                    # cleared): one sample, the one with frames
                    at = (int(p[1]), int(p[3]))
                    if at == last:
                        dup += 1
                        if key == "" or last_key != "":
                            continue
                        for c in cols.values():
                            c.pop()
                    last, last_key = at, key
                    sid = stacks.get(key)
                    if sid is None:
                        sid = stacks[key] = len(stacks)
                    cols["ts_ns"].append(int(p[1]))
                    cols["pid"].append(int(p[2]))
                    cols["tid"].append(int(p[3]))
                    fl = int(p[4])
                    cols["on_cpu"].append(bool(fl & 1))
                    cols["gil"].append(bool(fl & 2))
                    cols["stack_id"].append(sid)
                    cols["read_ns"].append(min(int(p[6]), 2**31 - 1))
                elif kind == "E":         # a failed read: that moment's state is unknown
                    cols["ts_ns"].append(int(p[1]))
                    cols["pid"].append(int(p[2]))
                    cols["tid"].append(-1)
                    cols["on_cpu"].append(False)
                    cols["gil"].append(False)
                    cols["stack_id"].append(-1)
                    cols["read_ns"].append(0)
                elif kind == "F":
                    ln = int(p[5])
                    if not 0 <= ln < 2**31:
                        # a code object freed or reused while it was read: its
                        # line a stray word (once a pointer), its name and
                        # file no better; the frame is unknown, and counted
                        torn += 1
                        frames[int(p[1])] = ("?", "?", 0)
                    else:
                        frames[int(p[1])] = (p[2], p[4] if p[4] else p[3], ln)
                elif kind == "P":
                    sampled[p[1]] = p[2]
                elif kind == "N":
                    refused[p[1]] = p[2]
                elif kind == "Z":
                    end = [int(x) for x in p[1:7]]
                elif kind not in ("X", "T"):
                    bad += 1
            except (IndexError, ValueError):
                bad += 1
    fcols: dict[str, list] = {k: [] for k in FRAMES_SCHEMA.names}
    for key, sid in stacks.items():
        ids = [int(x) for x in key.split(",")] if key else []
        for depth, fid in enumerate(reversed(ids)):        # the sampler writes the leaf first
            fn, file, ln = frames.get(fid, ("?", "?", 0))
            fcols["stack_id"].append(sid)
            fcols["depth"].append(depth)
            fcols["function"].append(fn)
            fcols["file"].append(file)
            fcols["line"].append(ln)
    info: dict = {"samples": sum(1 for x in cols["stack_id"] if x >= 0), "stacks": len(stacks),
                  "processes_sampled": {k: {"python": v} for k, v in sampled.items()},
                  "processes_not_sampled": refused, "unknown_lines": bad,
                  "duplicate_samples": dup, "torn_frames": torn,
                  "complete": end is not None}
    if end:
        info.update(read_errors=end[1], late_ticks=end[2], ticks=end[3],
                    read_retries=end[4] if len(end) > 4 else None,
                    torn_retries=end[5] if len(end) > 5 else None)
    return (pa.table(cols, schema=SAMPLES_SCHEMA), pa.table(fcols, schema=FRAMES_SCHEMA), info)
