"""Faults while tracing. For each: the job finishes with its own exit code and
its output untouched, the trace stays readable, and meta.json and the summary
say what happened. Ground truth comes from the workloads themselves: the
output they write (a known sha256), the calls they make by construction.

- the trace's disk fills up mid-run;
- the ring buffer overflows: drops counted exactly, and when they happened;
- kill -9 of iotrace, or of the recorder alone, at random moments;
- 1,000 short processes and 10,000 threads; a pid reused inside one trace;
- attach to a process that exits during the attach, to one that is not
  there or not ours to trace; two iotrace instances on the same job.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import IOTRACE, ROOT, UNPRIVILEGED, WORKLOADS, iotrace_cmd, needs_root, rows, scalar, trace_run
from conftest import wait_for as wait_until
from test_cleanup import alive, bpf_ids, children, gone, wait_for
from test_errors import one_line

import iotrace
from iotrace.convert import read_segment

pytestmark = needs_root()
PY = sys.executable


def ticker_sha(n: int) -> str:
    """What tests/workloads/ticker.py writes to job.out, by construction."""
    h = hashlib.sha256()
    for i in range(n):
        h.update(bytes([i % 251]) * 4096)
    return h.hexdigest()


def job_output_ok(d: Path, n: int) -> None:
    want = ticker_sha(n)
    assert hashlib.sha256((d / "job.out").read_bytes()).hexdigest() == want
    assert (d / "job.sha").read_text() == want


@pytest.fixture(scope="module")
def cbin(tmp_path_factory):
    """tests/workloads/storm.c (static: no loader preads) and pidreuse.c, built once."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed")
    out = tmp_path_factory.mktemp("bin")
    subprocess.run(["gcc", "-O2", "-static", "-pthread", "-o", str(out / "storm"),
                    str(WORKLOADS / "storm.c")], check=True)
    subprocess.run(["gcc", "-O2", "-o", str(out / "pidreuse"), str(WORKLOADS / "pidreuse.c")],
                   check=True)
    return out


@pytest.fixture
def data(tmp_path):
    f = tmp_path / "data.bin"
    f.write_bytes(os.urandom(4096))
    return f


def preadvs_of(trace, path) -> int:
    """storm's calls (preadv: no other program here makes them)."""
    return scalar(trace, """select count(*) from events e join files f using (file_id)
                            where e.op = 'preadv' and f.path = ?""", str(path))


# ---- the trace's disk fills up --------------------------------------------------


def test_disk_full_job_output_untouched_trace_incomplete(tmp_path):
    """-o on a 32 MiB tmpfs; the job writes 250 chunks to another disk (200
    preads each), and 3/4 of the way fills the trace's disk with a ballast file.
    Tracing stops, the job runs on to its own code 7 and output, and the
    trace keeps what was written before, saying why it is short."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mnt)], check=True)
    try:
        job = tmp_path / "job"
        job.mkdir()
        res = iotrace_cmd("run", "-q", "--no-node-summary", "-o", str(mnt / "t"), "--", PY,
                          str(WORKLOADS / "ticker.py"), str(job), "250", "7", "200",
                          str(mnt / "ballast"))
        assert res.returncode == 7, res.stderr
        job_output_ok(job, 250)
        line = one_line(res.stderr)
        assert "the disk is full; the job ran on" in line and str(mnt / "t") in line
        meta = json.loads((mnt / "t" / "meta.json").read_text())
        # the space held from the start for this write was given back
        assert not (mnt / "t" / ".spool" / "reserve.space").exists()
        assert meta["state"] == "incomplete"
        assert meta["error"] == "stopped tracing early: the disk is full"
        assert meta["exit_status"] == {"code": 7, "signal": None}
        assert meta["counters"]["events_lost_unwritten"] >= 0
        # what was written before the disk filled is readable, and said to be short
        out = iotrace_cmd("summary", str(mnt / "t"))
        assert out.returncode == 0, out.stderr
        assert "incomplete" in out.stdout
        t = iotrace.open_trace(mnt / "t")
        assert scalar(t, "select count(*) from events") == meta["events"]
        # the first part of the run: chunks written and read back before the fill
        writes = scalar(t, """select count(*) from events e join files f using (file_id)
                              where f.path = ? and e.op = 'write'""", str(job / "job.out"))
        assert 0 < writes < 250 and meta["events"] > 0
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


# ---- the ring buffer overflows ----------------------------------------------------


def test_ring_overflow_drops_exact_and_when(tmp_path, cbin, data):
    """A 1 MiB ring buffer (about 10,000 records) while the recorder is
    stopped (SIGSTOP) and 4 threads make 100,000 preadv calls: the ring fills
    for certain. Every one is in the trace or counted dropped; meta.json says
    when the drops happened; the summary and the report say what share of
    the time they touch, and the trace after the burst is whole."""
    go, done = tmp_path / "go", tmp_path / "burst-done"
    script = (f"while [ ! -e {go} ]; do sleep 0.02; done; {cbin / 'storm'} {data} 0 4 25000; "
              f"touch {done}; sleep 1.2; {cbin / 'storm'} {data} 0 1 10; exit 3")
    out = tmp_path / "t"
    tracer = subprocess.Popen([*IOTRACE, "run", "-q", "--no-node-summary", "--ringbuf-mb", "1",
                               "-o", str(out), "--", "sh", "-c", script],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        recorder = wait_for(lambda: children(tracer.pid))[0]
        assert wait_for(lambda: (out / "meta.json").exists())
        time.sleep(0.3)
        os.kill(recorder, signal.SIGSTOP)
        try:
            go.touch()
            assert wait_until(done.exists, 60)
        finally:
            os.kill(recorder, signal.SIGCONT)
        stdout, stderr = tracer.communicate(timeout=60)
    finally:
        tracer.kill()
    assert tracer.returncode == 3, stderr
    assert stdout.splitlines() == ["procs 0 threads 4 preads 100000",
                                   "procs 0 threads 1 preads 10"]
    t = iotrace.open_trace(out)
    m = t.meta
    dropped = m["drops_by_op"].get("preadv", 0)
    assert dropped > 50_000, m["drops_by_op"]
    # exact: each call storm made is a row or a drop
    assert preadvs_of(t, data) + dropped == 100_010
    assert m["drops"] >= sum(m["drops_by_op"].values())
    # when: intervals (0.5 s) that add up to the drops, inside the trace
    iv = m["drop_intervals"]
    assert iv and sum(k for _, _, k in iv) == m["drops"]
    end = m["start_monotonic_ns"] + m["duration_ns"]
    assert all(m["start_monotonic_ns"] <= a < b <= end for a, b, _ in iv)
    secs, n = iotrace.trace.drop_time(m, 0, 1 << 62)
    assert n == m["drops"] and 0 < secs < m["duration_ns"] / 1e9
    # the ring was read again after the burst: the second storm is all there
    assert rows(t, "select exit_code from processes where cmdline like '%storm % 0 1 10'") == [(0,)]
    assert scalar(t, "select count(*) from events where op = 'preadv' and ts_ns > ?",
                  max(b for _, b, _ in iv)) >= 10
    # shown: the summary's line and the report's share of its window
    s = iotrace_cmd("summary", str(out))
    assert f"{m['drops']} dropped" in s.stdout
    dur = m["duration_ns"] / 1e9
    assert f"records dropped (ring buffer full) in {secs:.1f} s of the {dur:.1f} s traced " \
           f"({secs / dur:.0%})" in " ".join(s.stdout.split())
    r = iotrace_cmd("report", str(out), "--format", "json")
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)["verdict"]
    d = v["drops"]
    assert d["records"] == m["drops"]
    lo, hi = v["training_window"]["start_ns"], v["training_window"]["end_ns"]
    wsecs, wn = iotrace.trace.drop_time(m, lo, hi)
    assert d["in_window"] == wn and d["window_s_affected"] == round(wsecs, 3)
    assert 0 < d["window_share_affected"] <= 1
    assert f"{m['drops']:,} records were dropped (ring buffer full)" in v["summary"]
    assert f"({d['window_share_affected']:.0%})" in v["summary"]


def test_threads_on_every_cpu_write_records_at_once(tmp_path, cbin, data):
    """16 threads (or twice as many as CPUs), each making 150,000 preadv
    calls: 2.4 M records, more than the 64 MiB ring holds, from threads that
    keep every CPU busy and contend for the ring's lock.
    - A record written from the lock's own contention tracepoint took that
      lock again on the same CPU (on 16 CPUs an 8-thread loop all but stopped:
      a quarter-second timeout per wait, records dropped).
    - A recorder at the job's priority got a 17th of the 2 CPUs here and
      dropped 37,000-167,000 records; it runs at nice -10, the job at its own.
    Every call is in the trace, none dropped, no program skipped; the
    tracer's own lock waits are counted, not recorded as the job's."""
    threads = max(16, 2 * (os.cpu_count() or 2))
    t0 = time.monotonic()
    proc, trace = trace_run(tmp_path / "t", str(cbin / "storm"), str(data), "0",
                            str(threads), "150000")
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["procs", "0", "threads", str(threads),
                                   "preads", str(threads * 150_000)]
    m = trace.meta
    assert m["probes"]["recorder_nice"] == -10
    assert m["drops"] == 0 and m["counters"]["probe_misses"] == 0, m["counters"]
    assert preadvs_of(trace, data) == threads * 150_000
    assert "own_lock_waits" in m["counters"]
    assert took < 180, took


def test_job_keeps_its_nice_value(tmp_path):
    """The recorder raises its own priority, not the job's: a job started
    under `nice -n 5 iotrace run` runs at 5, and at 0 without it."""
    code = "import os; print(os.nice(0))"
    for prefix, want in (([], 0), (["nice", "-n", "5"], 5)):
        out = tmp_path / f"t{want}"
        res = subprocess.run([*prefix, *IOTRACE, "run", "-q", "--no-node-summary", "-o",
                              str(out), "--", PY, "-c", code],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        assert res.stdout.split() == [str(want)]
        meta = json.loads((out / "meta.json").read_text())
        assert meta["probes"]["recorder_nice"] == -10


def test_summary_says_tracer_lock_waits_are_not_losses(tmp_path):
    """counters.own_lock_waits is iotrace's cost: the summary says so on a
    line of its own, not among what was lost or cut."""
    from synth import ev, synth_trace
    synth_trace(tmp_path / "t", [ev("pread64", ts=0, dur=1000, off=0, req=1, ret=1,
                                    file_id=0)],
                files=[(0, "/data/a.bin")],
                meta={"counters": {"own_lock_waits": 7_972_351, "probe_misses": 3}})
    out = iotrace_cmd("summary", str(tmp_path / "t"))
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert ("the job's threads waited 7,972,351 times for the lock of iotrace's own ring "
            "buffer") in text
    cut = [line for line in out.stdout.splitlines() if "not resolved or cut" in line]
    assert len(cut) == 1 and "probe misses 3" in cut[0] and "own lock" not in cut[0]


def test_summary_says_recorder_could_not_raise_priority(tmp_path):
    """Records dropped while the recorder ran at the job's priority (no
    CAP_SYS_NICE): the drops line says what to grant; at -10 it does not."""
    from synth import ev, synth_trace
    for nice in (0, -10):
        synth_trace(tmp_path / f"t{nice}", [ev("pread64", ts=0, dur=1000, off=0, req=1, ret=1,
                                               file_id=0)],
                    files=[(0, "/data/a.bin")],
                    meta={"drops": 500, "drop_intervals": [[0, 500_000_000, 500]],
                          "start_monotonic_ns": 0, "duration_ns": 2_000_000_000,
                          "probes": {"recorder_nice": nice}})
        out = iotrace_cmd("summary", str(tmp_path / f"t{nice}"))
        assert out.returncode == 0, out.stderr
        text = " ".join(out.stdout.split())
        assert "records dropped (ring buffer full)" in text
        assert ("the recorder ran at nice 0, not -10: grant it CAP_SYS_NICE" in text) == \
            (nice == 0), text


# ---- kill -9 of iotrace or of the recorder, at random moments ---------------------

TICKS = 300           # ticker.py: 300 chunks, 10 ms apart (3.5 s or so traced)
_rng = random.Random(20261124)
KILLS = [(who, round(_rng.uniform(0.1, 3.0), 2))
         for who in ("iotrace", "recorder", "iotrace", "recorder") * 2]


@pytest.mark.parametrize("who, delay", KILLS, ids=[f"{w}-{d}s" for w, d in KILLS])
def test_kill_9(tmp_path, who, delay):
    """kill -9 of `who` `delay` s after the job started. The job must end
    with its own code 5 and its whole output: seen by a subreaper above
    iotrace (tests/workloads/subreaper.py) when iotrace is killed, passed on
    by iotrace (itself a subreaper) when the recorder is. No BPF program or link of
    the recorder is left; the trace opens, holds the job's writes up to about
    the last second before the kill, and meta.json says how it ended."""
    job = tmp_path / "job"
    job.mkdir()
    out, result = tmp_path / "t", tmp_path / "reaped.json"
    wrapper = subprocess.Popen(
        [PY, str(WORKLOADS / "subreaper.py"), str(result), "--", *IOTRACE, "run", "-q",
         "--no-node-summary", "-o", str(out), "--", PY, str(WORKLOADS / "ticker.py"),
         str(job), str(TICKS), "5"], stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: (job / "job.started").exists(), 60)
        started = time.monotonic()
        tracer = wait_for(lambda: children(wrapper.pid))[0]
        recorder = wait_for(lambda: children(tracer))[0]
        jobpid = wait_for(lambda: children(recorder))[0]
        ids = bpf_ids(recorder)
        assert {k for k, _ in ids} == {"prog", "link"}
        time.sleep(max(0.0, delay - (time.monotonic() - started)))
        killed_at = time.monotonic_ns()
        os.kill(tracer if who == "iotrace" else recorder, signal.SIGKILL)
        assert gone(ids), "BPF programs or links outlived the kill"
        _, stderr = wrapper.communicate(timeout=60)
    finally:
        wrapper.kill()
    reaped = {int(k): v for k, v in json.loads(result.read_text())["status"].items()}
    # the job ran to its end: its own code and its whole output
    if who == "iotrace":      # the job was the recorder's child: now the wrapper's
        assert reaped[jobpid] == 5 << 8
    else:                     # iotrace adopted it (a subreaper), waited, passed its code
        assert jobpid not in reaped and reaped[tracer] == 5 << 8, stderr
        assert "the recorder died" in one_line(stderr)
    job_output_ok(job, TICKS)
    assert "Traceback" not in stderr
    # the trace opens, and says how it ended
    s = iotrace_cmd("summary", str(out))
    assert s.returncode == 0, s.stderr
    t = iotrace.open_trace(out)
    m = t.meta
    if who == "iotrace":
        assert m["state"] == "recording" and "recording" in s.stdout
        assert "no iotrace is recording it any more (killed?)" in " ".join(s.stdout.split())
        sj = json.loads(iotrace_cmd("summary", "--format", "json", str(out)).stdout)
        assert sj["abandoned"] is True
        # what stayed in the spool is counted: every whole record of its segments
        left = sum(len(read_segment(p)[0]) for p in (out / ".spool").glob("*.ev"))
        assert sj["unconverted_records"] == left
        assert f"({left:,} records left unconverted in .spool/)" in " ".join(s.stdout.split())
        assert "stop_reason" not in m
    else:
        assert m["state"] == "incomplete" and "incomplete" in s.stdout
        assert m["stop_reason"] == "recorder-died"
    # the job's writes up to about the last second before the kill are there,
    # in order, each of 4 KiB at its place
    writes = rows(t, """select e.ts_ns, e."offset", e.ret from events e join files f
                        using (file_id) where f.path = ? and e.op = 'write' order by ts_ns""",
                  str(job / "job.out"))
    assert [(o, r) for _, o, r in writes] == [(i * 4096, 4096) for i in range(len(writes))]
    assert all(ts < killed_at for ts, _, _ in writes)
    # (segments close every second; iotrace converts each within 0.25 s, and
    # after a recorder's death every closed one; margin for a loaded machine)
    traced_s = (killed_at - m["start_monotonic_ns"]) / 1e9
    gap_s = (killed_at - writes[-1][0]) / 1e9 if writes else traced_s
    assert gap_s < 2.5 or traced_s < 2.5, f"the trace ends {gap_s:.2f} s before the kill"


# ---- 1,000 processes and 10,000 threads; a pid reused -----------------------------


def test_thousand_processes_ten_thousand_threads(tmp_path, cbin, data):
    """storm: 1,000 child processes and 10,000 threads, each 2 preadv calls
    on the data file (22,000 by construction). Every process and thread is one row,
    every call is there, and nothing was dropped."""
    proc, t = trace_run(tmp_path / "t", str(cbin / "storm"), str(data), "1000", "10000", "2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "procs 1000 threads 10000 preads 22000"
    m = t.meta
    assert m["state"] == "complete" and m["drops"] == 0
    root = m["root_pid"]
    assert preadvs_of(t, data) == 22_000
    assert scalar(t, "select count(*) from processes") == m["processes"] == 1001
    assert scalar(t, "select count(*) from processes where ppid = ?", root) == 1000
    assert rows(t, """select count(*), count(distinct exit_code) from processes
                      where exit_code = 0""") == [(1001, 1)]
    assert scalar(t, "select count(*) from threads") == m["threads"] == 11_001
    assert scalar(t, "select threads from processes where pid = ?", root) == 10_001
    assert rows(t, """select op, count(*) from events where op in
                      ('proc_fork', 'thread_new', 'thread_exit', 'proc_exit')
                      group by op order by op""") == \
        [("proc_exit", 1001), ("proc_fork", 1000), ("thread_exit", 10_000),
         ("thread_new", 10_000)]
    # every process and thread made its 2 calls
    assert rows(t, """select count(*), min(n), max(n) from (select tid, count(*) n from events
                      e join files f using (file_id) where f.path = ? and op = 'preadv'
                      group by tid)""", str(data)) == [(11_000, 2, 2)]


def test_pid_reused_inside_one_trace_is_two_processes(tmp_path, cbin, data):
    """pidreuse: a child makes 3 preads and exits 3; a second child gets the
    same pid (clone3 set_tid), makes 5 and exits 5. Two rows of processes
    (and threads), each with its own calls, not one merged process."""
    proc, t = trace_run(tmp_path / "t", str(cbin / "pidreuse"), str(data))
    if proc.returncode == 1 and "clone3" in proc.stderr:
        pytest.skip(f"cannot choose a pid here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    pid = int(proc.stdout)
    lives = rows(t, """select start_ns, exit_ns, exit_code, threads from processes
                       where pid = ? order by start_ns""", pid)
    assert [(code, n) for _, _, code, n in lives] == [(3, 1), (5, 1)]
    (s1, e1, _, _), (s2, e2, _, _) = lives
    assert s1 < e1 < s2 < e2
    assert t.meta["processes"] == 3
    assert rows(t, "select count(*) from threads where tid = ?", pid) == [(2,)]
    per_life = [scalar(t, """select count(*) from events e join files f using (file_id)
                             where f.path = ? and e.op = 'pread64' and e.pid = ?
                               and e.ts_ns between ? and ?""", str(data), pid, s, e)
                for s, e, _, _ in lives]
    assert per_life == [3, 5]


# ---- attach -------------------------------------------------------------------------


@pytest.mark.parametrize("lifetime", [0.6, 1.0, 1.6])
def test_attach_to_a_process_that_exits_during_attach(tmp_path, lifetime):
    """The process (not our child: no zombie) exits `lifetime` s after
    `attach` starts, while the probes load or just after. Either iotrace says
    in one line that it exited (exit 3, no directory left), or the trace is
    complete and ended with it (exit 0). It never hangs."""
    out = tmp_path / "t"
    pid = int(subprocess.run(["sh", "-c", f"sleep {lifetime} >/dev/null 2>&1 & echo $!"],
                             capture_output=True, text=True, check=True).stdout)
    res = iotrace_cmd("attach", "-q", "--no-node-summary", "-p", str(pid), "-o", str(out),
                      timeout=30)
    if res.returncode == 3:
        assert f"process {pid} exited" in one_line(res.stderr) or \
            f"no process with pid {pid}" in one_line(res.stderr)
        assert not out.exists()
    else:
        assert res.returncode == 0, res.stderr
        m = iotrace.open_trace(out).meta
        assert m["state"] == "complete" and m["stop_reason"] == "exited"


def test_attach_to_a_zombie_does_not_hang(tmp_path):
    """A process that exited but was not reaped: its exit was before the
    attach, so it is not waited for."""
    z = subprocess.Popen(["true"])
    assert wait_until(lambda: not alive(z.pid), 10)     # a zombie now, ours to reap
    try:
        res = iotrace_cmd("attach", "-q", "-p", str(z.pid), "-o", str(tmp_path / "t"),
                          timeout=30)
        assert res.returncode == 3
        assert f"process {z.pid} exited" in one_line(res.stderr)
        assert not (tmp_path / "t").exists()
    finally:
        z.wait()


def test_attach_to_a_pid_just_freed(tmp_path):
    p = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True)
    pid = int(p.stdout)
    res = iotrace_cmd("attach", "-p", str(pid), "-o", str(tmp_path / "t"))
    assert res.returncode == 3
    assert f"no process with pid {pid}" in one_line(res.stderr)
    assert not (tmp_path / "t").exists()


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv")
def test_attach_not_permitted(tmp_path):
    """Without privileges attach refuses in one line (exit 3) before anything."""
    os.chmod(tmp_path, 0o777)
    res = subprocess.run([*UNPRIVILEGED, *IOTRACE, "attach", "-p", "1", "-o", str(tmp_path / "t")],
                         capture_output=True, text=True, cwd=tmp_path,
                         env=dict(os.environ, PYTHONPATH=str(ROOT / "userspace")))
    assert res.returncode == 3
    assert "root" in one_line(res.stderr)
    assert not (tmp_path / "t").exists()


def test_two_instances_trace_the_same_job(tmp_path):
    """`iotrace run` on a job and `iotrace attach` to it at the same time:
    each has its own probes and ring buffer, so both traces are complete and
    both hold every one of the job's 200 writes and 200 preads of job.out;
    the job's code 6 comes through `run`."""
    job = tmp_path / "job"
    job.mkdir()
    a, b = tmp_path / "a", tmp_path / "b"
    # the job waits for `go` before its calls, so that both traces see all of them
    script = (f"import os, runpy, sys, time\n"
              f"open('{job}/ready', 'w').close()\n"
              f"while not os.path.exists('{job}/go'): time.sleep(0.01)\n"
              f"sys.argv = ['ticker.py', '{job}', '200', '6']\n"
              f"runpy.run_path('{WORKLOADS / 'ticker.py'}', run_name='__main__')\n")
    run = subprocess.Popen([*IOTRACE, "run", "-q", "--no-node-summary", "-o", str(a), "--",
                            PY, "-c", script], stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: (job / "ready").exists(), 60)
        jobpid = json.loads((a / "meta.json").read_text())["root_pid"]
        att = subprocess.Popen([*IOTRACE, "attach", "-q", "--no-node-summary", "-p",
                                str(jobpid), "-o", str(b)], stderr=subprocess.PIPE, text=True)
        try:
            assert wait_for(lambda: (b / "meta.json").exists(), 60)
            (job / "go").touch()
            assert run.wait(timeout=60) == 6, run.stderr.read()
            assert att.wait(timeout=60) == 0, att.stderr.read()
        finally:
            att.kill()
    finally:
        run.kill()
    job_output_ok(job, 200)
    for out in (a, b):
        t = iotrace.open_trace(out)
        assert t.meta["state"] == "complete" and t.meta["drops"] == 0
        assert rows(t, """select e.op, count(*), sum(e.ret) from events e join files f
                          using (file_id) where f.path = ? and e.op in ('write', 'pread64')
                          and e.pid = ? group by e.op order by e.op""",
                    str(job / "job.out"), jobpid) == [("pread64", 200, 200 * 4096),
                                                       ("write", 200, 200 * 4096)]
