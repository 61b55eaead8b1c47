"""Python stacks of the traced job (pystacks.parquet, pyframes.parquet): the
right functions, on the right threads, at the right times on the trace's
clock, against a workload that notes its own phases on CLOCK_MONOTONIC."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from conftest import WORKLOADS, needs_root, rows, trace_run

pytestmark = needs_root()


def phases_trace(tmp_path, *extra):
    out = tmp_path / "phases.json"
    proc, trace = trace_run(tmp_path / "t", sys.executable, str(WORKLOADS / "py_phases.py"),
                            str(out), extra=extra)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return trace, json.loads(out.read_text())


def test_samples_name_the_function_at_its_time(tmp_path):
    trace, truth = phases_trace(tmp_path)
    ps = trace.meta["py_stacks"]
    assert ps["rate_hz"] == 100 and ps["complete"]
    assert str(truth["main_tid"]) in ps["processes_sampled"]
    got = rows(trace, """select s.ts_ns, s.tid, s.on_cpu, f.function, s.read_ns from pystacks s
                         join pyframes f using (stack_id)
                         where f.function in ('phase_spin', 'phase_sleep', 'side_wait')""")
    spans = {name: np.array([(a, b) for n, a, b in truth["phases"] if n == name])
             for name in ("phase_spin", "phase_sleep")}
    ms = 1_000_000
    for name, iv in spans.items():
        mine = [g for g in got if g[3] == name and g[1] == truth["main_tid"]]
        ts = np.array([g[0] for g in mine])
        # 1 s of each phase at 100 Hz, at random (Poisson) times: about 100
        # samples each (sd 10), fewer where a read failed
        assert 55 <= len(ts) <= 150, (name, len(ts))
        # every sample lies in a phase of its function, to a millisecond beyond
        # the time its read took (ts_ns is the read's middle)
        slack = ms + np.array([g[4] for g in mine]) // 2
        i = np.searchsorted(iv[:, 0], ts + slack, side="right") - 1
        assert (i >= 0).all() and (ts <= iv[i, 1] + slack).all(), name
        assert np.median([g[4] for g in mine]) < ms       # a read takes well under 1 ms
        on = [g[2] for g in mine]
        assert np.mean(on) == (pytest.approx(1.0, abs=0.1) if name == "phase_spin"
                               else pytest.approx(0.0, abs=0.1))
    # the second thread: its own OS thread id, asleep in side_wait throughout
    side = [(g[1], g[2], g[0]) for g in got if g[3] == "side_wait"]
    assert len(side) >= 150 and {t for t, _, _ in side} == {truth["side_tid"]}
    # off CPU until the main thread sets its event after the last phase: woken,
    # it runs its way out of side_wait, and a sample may catch it there
    woken = truth["phases"][-1][2]
    assert not [ts for _, c, ts in side if c and ts + ms < woken], woken
    # the frames: outermost first, the function's own file and first line
    depth = rows(trace, """select depth, file, line from pyframes where function = 'phase_spin'
                           limit 1""")[0]
    assert depth[0] >= 1 and depth[1].endswith("py_phases.py") and depth[2] == 16


def test_rate_and_off(tmp_path):
    trace, truth = phases_trace(tmp_path / "fast", "--py-stacks", "250")
    n = rows(trace, f"select count(*) from pystacks where tid = {truth['side_tid']}")[0][0]
    assert n >= 2.5 * 250 * 0.7, n
    trace, _ = phases_trace(tmp_path / "off", "--py-stacks", "0")
    assert "py_stacks" not in trace.meta
    assert rows(trace, "select count(*) from pystacks")[0][0] == 0


def test_job_without_python(tmp_path):
    """A job that is not Python: nothing sampled, and the report says its
    verdict is the kernel's alone, and why."""
    data = tmp_path / "d"
    data.mkdir()
    for i in range(4):
        (data / f"s{i}").write_bytes(b"x" * (1 << 20))
    script = f"for r in 1 2 3; do for f in {data}/s*; do cat $f > /dev/null; sleep 0.05; done; done"
    proc, trace = trace_run(tmp_path / "t", "sh", "-c", script)
    assert proc.returncode == 0
    assert trace.meta["py_stacks"]["samples"] == 0
    assert trace.meta["py_stacks"]["processes_sampled"] == {}
    from iotrace.analyzers.base import Targets
    from iotrace.analyzers.report import build_report
    v = build_report(trace, Targets()).verdict
    assert "Kernel-only verdict" in v["summary"], v["summary"]


def test_one_sample_a_thread_a_read(tmp_path):
    """A read that names one OS thread twice (a process just forked, its
    parent's thread states copied and not yet cleared: seen as an empty stack
    beside the real one at one instant) is one sample, the one with frames:
    two at one instant made the Perfetto stack track end a frame before it
    began. Counted as duplicate_samples. The sampler's own line format."""
    from iotrace.pystacks import parse
    f = tmp_path / "stacks.txt"
    f.write_text("F\t1\t_worker_loop\tworker.py\t\t10\n"
                 "S\t1000\t7\t7\t1\t1\t50\n"
                 "S\t2000\t7\t7\t1\t\t50\n"          # the copy: no frames
                 "S\t2000\t7\t7\t1\t1\t50\n"
                 "S\t2000\t7\t8\t1\t1\t50\n"         # another thread at that instant
                 "S\t3000\t7\t7\t1\t1\t50\n"
                 "S\t3000\t7\t7\t1\t\t50\n"          # the copy after the real one
                 "Z\t5\t0\t0\t3\t0\t0\n")
    samples, frames, info = parse(f)
    got = list(zip(samples.column("ts_ns").to_pylist(), samples.column("tid").to_pylist()))
    assert got == [(1000, 7), (2000, 7), (2000, 8), (3000, 7)], got
    with_frames = set(frames.column("stack_id").to_pylist())
    assert set(samples.column("stack_id").to_pylist()) == with_frames == {0}
    assert info["duplicate_samples"] == 2


def test_torn_frame_is_unknown_and_counted(tmp_path):
    """A frame whose code object was freed or reused while py-spy read it
    comes with a stray word for its line (140048884302112, a pointer, from a
    Grain dataset-API job: the whole trace then failed to read). The frame is
    unknown ('?'), the stack and its samples kept, and the frame counted as
    torn_frames. The sampler's own line format."""
    from iotrace.pystacks import parse
    f = tmp_path / "stacks.txt"
    f.write_text("F\t1\t_worker_loop\tworker.py\t\t10\n"
                 "F\t2\tgarbage\tx.py\t\t140048884302112\n"
                 "F\t3\tneg\ty.py\t\t-5\n"
                 "S\t1000\t7\t7\t1\t1,2\t50\n"
                 "S\t2000\t7\t7\t1\t3\t50\n"
                 "Z\t5\t0\t0\t2\t0\t0\n")
    samples, frames, info = parse(f)
    assert samples.num_rows == 2 and info["samples"] == 2
    got = sorted(zip(frames.column("function").to_pylist(), frames.column("line").to_pylist()))
    assert got == [("?", 0), ("?", 0), ("_worker_loop", 10)], got
    assert info["torn_frames"] == 2
