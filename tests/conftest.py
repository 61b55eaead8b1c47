"""Shared helpers: run iotrace for real (root, real BPF) and open the trace."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import iotrace

ROOT = Path(__file__).resolve().parent.parent
IOTRACE = [sys.executable, "-m", "iotrace"]
WORKLOADS = Path(__file__).resolve().parent / "workloads"


@pytest.fixture(scope="session")
def lockwait_bin(tmp_path_factory):
    """tests/workloads/lockwait.c built once: threads timing their own mutex waits."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed")
    out = tmp_path_factory.mktemp("bin") / "lockwait"
    subprocess.run(["gcc", "-O2", "-pthread", "-o", str(out), str(WORKLOADS / "lockwait.c")],
                   check=True)
    return out


def needs_root():
    return pytest.mark.skipif(os.geteuid() != 0, reason="tracing needs root (real BPF)")


def iotrace_cmd(*args: str, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 300)
    return subprocess.run([*IOTRACE, *args], **kw)


def trace_run(out: Path, *command: str, extra: tuple = (), **kw):
    """`iotrace run -o out -- command`; returns (completed process, Trace)."""
    proc = iotrace_cmd("run", "-q", "-o", str(out), *extra, "--", *command, **kw)
    trace = iotrace.open_trace(out) if (out / "meta.json").exists() else None
    return proc, trace


def rows(trace, query: str, *params):
    return trace.con.execute(query, list(params)).fetchall()


def scalar(trace, query: str, *params):
    return trace.con.execute(query, list(params)).fetchone()[0]
