"""No BPF program stays attached after iotrace ends, however it ends: normal
exit, SIGTERM, kill -9 of iotrace, kill -9 of the recorder. And the job runs
on when iotrace dies."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import IOTRACE, WORKLOADS, needs_root

import iotrace

pytestmark = needs_root()


def bpf_ids(pid: int) -> set[tuple[str, int]]:
    """('prog'|'link', id) of every BPF object whose fd this process holds."""
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            text = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, val = line.partition(":")
            if key in ("prog_id", "link_id"):
                out.add((key[:-3], int(val)))
    return out


def gone(ids) -> bool:
    # links go at once; the kernel frees programs after an RCU grace period
    return wait_for(lambda: not (ids & live_ids()), 15) is not None


def converted_preads(out: Path) -> int:
    if not list((out / "events").glob("part-*.parquet")):
        return 0
    t = iotrace.open_trace(out)
    return t.con.execute("select count(*) from events where op = 'pread64'").fetchone()[0]


def live_ids() -> set[tuple[str, int]]:
    ids = set()
    for kind in ("prog", "link"):
        for _ in range(5):   # bpftool fails if an object goes away while it lists
            res = subprocess.run(["bpftool", kind, "show", "-j"], capture_output=True,
                                 text=True)
            if res.returncode == 0:
                break
            time.sleep(0.1)
        res.check_returncode()
        ids |= {(kind, obj["id"]) for obj in json.loads(res.stdout or "[]")}
    return ids


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def wait_for(pred, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    return None


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def started(tmp_path):
    """iotrace run on a reader that runs until told to stop; yields
    (iotrace process, recorder pid, job pid, ids of its BPF objects, base)."""
    base = tmp_path / "data"
    base.mkdir()
    (base / "data.bin").write_bytes(b"d" * 8192)
    out = tmp_path / "trace"
    tracer = subprocess.Popen([*IOTRACE, "run", "-q", "-o", str(out), "--", sys.executable,
                               str(WORKLOADS / "busy_reader.py"), str(base)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert tracer.stdout.readline().strip() == "started"
    recorder = wait_for(lambda: children(tracer.pid))[0]
    job = wait_for(lambda: children(recorder))[0]
    ids = bpf_ids(recorder)
    assert {k for k, _ in ids} == {"prog", "link"}
    assert ids <= live_ids()
    yield tracer, recorder, job, ids, base, out
    (base / "stop").touch()
    tracer.kill()
    wait_for(lambda: not alive(job), 10)


def test_normal_end_detaches(started):
    tracer, recorder, job, ids, base, out = started
    (base / "stop").touch()
    assert tracer.wait(timeout=60) == 0
    assert gone(ids)


def test_sigterm_stops_job_and_detaches(started):
    tracer, recorder, job, ids, base, out = started
    tracer.send_signal(signal.SIGTERM)
    assert tracer.wait(timeout=60) == 128 + signal.SIGTERM   # the job's own fate
    assert gone(ids)
    assert iotrace.open_trace(out).meta["state"] == "complete"


def test_kill_9_of_iotrace_detaches_and_job_runs_on(started):
    tracer, recorder, job, ids, base, out = started
    # let a segment with the job's reads be converted (they close every second)
    assert wait_for(lambda: converted_preads(out), 30)
    tracer.kill()
    tracer.wait()
    assert wait_for(lambda: not alive(recorder), 30), "recorder outlived iotrace"
    assert gone(ids)
    assert alive(job), "the job must run on when iotrace dies"
    # what was converted before the kill is readable
    assert converted_preads(out) > 0


def test_kill_9_of_recorder_detaches(started):
    tracer, recorder, job, ids, base, out = started
    os.kill(recorder, signal.SIGKILL)
    assert gone(ids), "BPF objects outlived the recorder"
    # iotrace notices, finishes an incomplete trace, and waits for the job,
    # which runs on: then exits with the job's own code
    assert wait_for(lambda: iotrace.open_trace(out).meta["state"] == "incomplete", 30)
    assert alive(job)
    (base / "stop").touch()
    assert tracer.wait(timeout=60) == 0
    assert "the recorder died" in tracer.stderr.read()
