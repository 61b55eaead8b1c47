"""`iotrace attach` to a job mid-run: events from then on, the paths of files
opened before the attach (from /proc), and children forked after it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from cgroups import new_cgroup
from conftest import IOTRACE, WORKLOADS, attached, needs_root, rows, scalar, wait_for

import iotrace

pytestmark = needs_root()


@pytest.fixture(params=["ext4", "overlay"])
def data_dir(request, tmp_path):
    """The job's files on the test file system, or on an overlay (a
    container's root): the fd opened before the attach is named from /proc,
    whose identity of the file must match the kernel's."""
    base = tmp_path / "data"
    if request.param == "ext4":
        base.mkdir()
        yield base
        return
    parts = {k: tmp_path / k for k in ("lower", "upper", "work")}
    for d in (*parts.values(), base):
        d.mkdir()
    opts = "lowerdir={lower},upperdir={upper},workdir={work}".format(**parts)
    if subprocess.run(["mount", "-t", "overlay", "overlay", "-o", opts, str(base)]).returncode:
        pytest.skip("cannot mount an overlay here")
    try:
        yield base
    finally:
        subprocess.run(["umount", "-l", str(base)])


def test_attach_mid_run(tmp_path, data_dir):
    base = data_dir
    for name in ("early.bin", "late.bin", "child.bin"):
        (base / name).write_bytes(b"z" * 1000)
    target = subprocess.Popen([sys.executable, str(WORKLOADS / "attach_target.py"), str(base)],
                              stdout=subprocess.PIPE, text=True)
    assert target.stdout.readline().strip() == "ready"
    out = tmp_path / "trace"
    tracer = subprocess.Popen([*IOTRACE, "attach", "-q", "--pid", str(target.pid), "-o", str(out)],
                              stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: (out / "meta.json").exists()), "attach never became ready"
        (base / "go").touch()
        assert target.wait(timeout=60) == 0
        # the process tree has exited: attach ends by itself
        assert tracer.wait(timeout=60) == 0, tracer.stderr.read()
    finally:
        target.kill()
        tracer.kill()
    trace = iotrace.open_trace(out)
    assert trace.meta["mode"] == "attach" and trace.meta["state"] == "complete"

    def reads(name, op):
        return rows(trace, """select e.pid, count(*), sum(e.ret) from events e join files f
                              using (file_id) where f.path = ? and e.op = ? group by e.pid""",
                    str(base / name), op)

    # opened before the attach: no open event, but the path is known
    assert scalar(trace, "select count(*) from events where path = ?",
                  str(base / "early.bin")) == 0
    assert reads("early.bin", "pread64") == [(target.pid, 6, 600)]
    if base.is_mount():
        assert scalar(trace, "select fs_type from files where path = ?",
                      str(base / "early.bin")) == "overlay"
    assert trace.meta["counters"]["fd_identity_mismatches"] == 0
    assert reads("late.bin", "read") == [(target.pid, 4, 400)]
    child = reads("child.bin", "read")
    assert len(child) == 1 and child[0][1:] == (3, 300)
    assert rows(trace, "select ppid from processes where pid = ?", child[0][0]) == \
        [(target.pid,)]
    assert rows(trace, "select before_trace from processes where pid = ?", target.pid) == \
        [(True,)]


def test_attach_every_process_tree_of_a_cgroup(tmp_path):
    """Two jobs in one cgroup (a pod, a Slurm job) and one outside it:
    `attach --cgroup` traces both jobs, their children, and not the third."""
    import os
    import pytest
    cg = new_cgroup(f"iotrace-attach-{os.getpid()}")
    if cg is None:
        pytest.skip("no writable cgroup hierarchy")
    jobs = {}
    try:
        for name in ("in1", "in2", "out"):
            base = tmp_path / name
            base.mkdir()
            for f in ("early.bin", "late.bin", "child.bin"):
                (base / f).write_bytes(b"z" * 1000)
            p = subprocess.Popen([sys.executable, str(WORKLOADS / "attach_target.py"),
                                  str(base)], stdout=subprocess.PIPE, text=True)
            assert p.stdout.readline().strip() == "ready"
            if name != "out":
                (cg / "cgroup.procs").write_text(str(p.pid))
            jobs[name] = (p, base)
        out = tmp_path / "trace"
        rel = str(cg.relative_to("/sys/fs/cgroup"))
        tracer = subprocess.Popen([*IOTRACE, "attach", "-q", "--cgroup", rel, "-o", str(out)],
                                  stderr=subprocess.PIPE, text=True)
        assert wait_for(lambda: (out / "meta.json").exists()), "attach never became ready"
        for p, base in jobs.values():
            (base / "go").touch()
        assert all(p.wait(timeout=60) == 0 for p, _ in jobs.values())
        assert tracer.wait(timeout=60) == 0, tracer.stderr.read()
    finally:
        for p, _ in jobs.values():
            p.kill()
        with __import__("contextlib").suppress(OSError):
            cg.rmdir()
    trace = iotrace.open_trace(out)
    assert sorted(trace.meta["options"]["pids"]) == sorted(jobs[n][0].pid for n in ("in1", "in2"))
    per_dir = dict(rows(trace, """select regexp_extract(f.path, '/(in1|in2|out)/', 1), count(*)
                                  from events e join files f using (file_id)
                                  where e.op in ('read', 'pread64') group by 1"""))
    # each job: 6 early preads, 4 late reads, 3 reads by its forked child
    assert per_dir == {"in1": 13, "in2": 13}


def test_attach_needs_a_target(tmp_path):
    res = subprocess.run([*IOTRACE, "attach", "-o", str(tmp_path / "t")],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "--cgroup" in res.stderr
    res = subprocess.run([*IOTRACE, "attach", "--cgroup", "no/such/cgroup", "-o",
                          str(tmp_path / "t")], capture_output=True, text=True)
    assert res.returncode == 3 and "not a cgroup" in res.stderr


def test_follow_a_cgroup_from_before_the_job(tmp_path):
    """What a Slurm prolog/epilog pair does: `attach --cgroup JOB --follow`
    before the job's cgroup exists; two job steps join it one after the other
    (the first has exited when the second starts) and are traced whole; a
    process outside it is not; SIGINT (the epilog) ends the trace."""
    import os
    import signal
    import time
    import pytest
    base_cg = new_cgroup(f"iotrace-follow-{os.getpid()}")
    if base_cg is None:
        pytest.skip("no writable cgroup hierarchy")
    job_cg = base_cg / "job_42"
    out = tmp_path / "trace"
    rel = str(job_cg.relative_to("/sys/fs/cgroup"))
    tracer = subprocess.Popen([*IOTRACE, "attach", "-q", "--cgroup", rel, "--follow",
                               "-o", str(out)], stderr=subprocess.PIPE, text=True)
    steps, outside = {}, None
    try:
        assert wait_for(lambda: (out / "meta.json").exists()), "attach never became ready"
        job_cg.mkdir()                        # the job starts: the scheduler makes its cgroup

        def start(name, join=True):
            d = tmp_path / name
            d.mkdir()
            for f in ("early.bin", "late.bin", "child.bin"):
                (d / f).write_bytes(b"z" * 1000)
            # like slurmstepd: the step's process enters the job's cgroup, then runs the job
            pre = f"echo $$ > {job_cg}/cgroup.procs && " if join else ""
            p = subprocess.Popen(["sh", "-c", f'{pre}exec "$@"', "sh", sys.executable,
                                  str(WORKLOADS / "attach_target.py"), str(d)],
                                 stdout=subprocess.PIPE, text=True)
            assert p.stdout.readline().strip() == "ready"
            return p, d

        for name in ("step1", "step2"):
            p, d = start(name)
            if name == "step1":
                outside = start("outside", join=False)
                (outside[1] / "go").touch()
            time.sleep(1.0)                   # > the 200 ms the recorder takes to see it
            (d / "go").touch()
            assert p.wait(timeout=60) == 0
            steps[name] = p
            time.sleep(0.5)                   # no process left in the cgroup: still tracing
            assert tracer.poll() is None, tracer.stderr.read()
        tracer.send_signal(signal.SIGINT)     # the epilog
        assert tracer.wait(timeout=120) == 0, tracer.stderr.read()
    finally:
        tracer.kill()
        for p in [*steps.values(), *([outside[0]] if outside else [])]:
            p.kill()
        with __import__("contextlib").suppress(OSError):
            job_cg.rmdir()
            base_cg.rmdir()
    trace = iotrace.open_trace(out)
    assert trace.meta["state"] == "complete" and trace.meta["options"]["follow"] is True
    per_dir = dict(rows(trace, """select regexp_extract(f.path, '/(step1|step2|outside)/', 1),
                                         count(*)
                                  from events e join files f using (file_id)
                                  where e.op in ('read', 'pread64')
                                    and regexp_matches(f.path, '/(step1|step2|outside)/')
                                  group by 1"""))
    # each step: 6 preads of a file opened before it joined, 4 reads, 3 by its child
    # (a step found by the 200 ms scan before its Python started also has the
    # reads of Python's start-up: not counted here). A step found while Python
    # starts reads start-up files on fds whose open came before the scan, and
    # that fd may hold early.bin by the time /proc is read: those reads must not
    # be charged to early.bin (the fd table's entries carry the file's identity).
    per_file = dict(rows(trace, """
        select regexp_extract(f.path, '/((step1|step2|outside)/[a-z]+)[.]bin$', 1), count(*)
        from events e join files f using (file_id)
        where e.op in ('read', 'pread64') and regexp_matches(f.path, '/(step1|step2|outside)/')
        group by 1"""))
    detail = rows(trace, """
        select e.pid, e.tid, e.op, f.path, e.ret, e.ts_ns from events e join files f using (file_id)
        where regexp_matches(f.path, '/(step1|step2|outside)/') order by e.ts_ns""")
    for step in ("step1", "step2"):
        assert per_file.get(f"{step}/late") == 4 and per_file.get(f"{step}/child") == 3, detail
        assert per_file.get(f"{step}/early", 0) == 6, detail
    assert set(per_dir) == {"step1", "step2"}, detail
    cmd = dict(rows(trace, "select pid, cmdline from processes"))
    assert all("attach_target.py" in cmd[p.pid] for p in steps.values()), cmd


def asleep_target() -> tuple[subprocess.Popen, int]:
    """Starts tests/workloads/asleep_at_attach.py: its main thread asleep in a
    read of its stdin (a pipe), a second thread in a 100 s sleep. Returns the
    process and the sleeping thread's id."""
    target = subprocess.Popen([sys.executable, str(WORKLOADS / "asleep_at_attach.py")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    _, sleeper = target.stdout.readline().split()
    time.sleep(0.3)   # the main thread asleep in its read
    return target, int(sleeper)


def wake_read_then_stop(target: subprocess.Popen, tracer: subprocess.Popen) -> None:
    """Writes 5 bytes to the asleep_target's pipe (its first read returns with
    them, its second stays asleep), then ends the trace with SIGINT."""
    target.stdin.write("hello")
    target.stdin.flush()
    assert target.stdout.readline().split() == ["got", "5"]
    time.sleep(0.5)
    tracer.send_signal(signal.SIGINT)
    assert tracer.wait(timeout=120) == 0, tracer.stderr.read()


def test_follow_records_the_calls_of_a_process_that_joins_inside_them(tmp_path):
    """A process moved into a followed cgroup while its main thread is asleep
    in a read of a pipe and its second thread in a 100 s sleep: once the
    recorder's scan finds it, those calls are recorded from then, as at an
    attach (eflags BEGAN_BEFORE): the read, which returns when the test
    writes to the pipe, whole (5 bytes, fd 0, a pipe); the sleep, still
    asleep at the end, UNFINISHED too; the second read, entered after, is
    UNFINISHED only. Before, the first read was lost."""
    import os
    cg = new_cgroup(f"iotrace-join-{os.getpid()}")
    if cg is None:
        pytest.skip("no writable cgroup hierarchy")
    out = tmp_path / "trace"
    rel = str(cg.relative_to("/sys/fs/cgroup"))
    tracer = subprocess.Popen([*IOTRACE, "attach", "-q", "--cgroup", rel, "--follow",
                               "-o", str(out)], stderr=subprocess.PIPE, text=True)
    target = None
    try:
        assert wait_for(lambda: (out / "meta.json").exists()), "attach never became ready"
        target, sleeper = asleep_target()
        (cg / "cgroup.procs").write_text(str(target.pid))
        time.sleep(1.0)                       # > the 200 ms the recorder takes to see it
        wake_read_then_stop(target, tracer)
    finally:
        tracer.kill()
        if target:
            target.kill()
            target.wait()
        with __import__("contextlib").suppress(OSError):
            cg.rmdir()
    trace = iotrace.open_trace(out)
    got = rows(trace, """select op, tid, eflags & 3072, fd, req_bytes, ret, fd_kind
                         from events where eflags & 3072 != 0 and pid = ?
                         order by ts_ns, op""", target.pid)
    began, asleep, later = 2048, 2048 | 1024, 1024
    want = [("clock_nanosleep", sleeper, asleep, None, None, 0, None),
            ("read", target.pid, began, 0, 100, 5, "pipe"),
            ("read", target.pid, later, 0, 100, 0, "pipe")]
    if trace.meta["probes"].get("syscall_hooks") == "fentry":
        del want[1]   # fexit misses the return of a call that entered before its trampoline
    assert [g[:3] for g in got] == [w[:3] for w in want], got
    assert [g[3:] for g in got[1:]] == [w[3:] for w in want[1:]], got
    assert trace.meta["counters"]["calls_began_before"] == (2 if len(want) == 3 else 1)


def test_slurm_prolog_and_epilog_scripts(tmp_path):
    """examples/slurm's prolog and epilog as slurmd runs them (root, the job's
    SLURM_* variables; a stub scontrol says the job asked for a trace; the
    job's cgroup is where Slurm puts it on cgroup v1, or v2): the job step
    that joins the cgroup after the prolog is traced whole, and the epilog
    leaves a complete trace in TRACES/JOBID/host=NODE."""
    import os
    import pytest
    import socket
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent / "examples" / "slurm"
    job = str(90000 + os.getpid() % 10000)
    v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
    parent = (Path("/sys/fs/cgroup/system.slice/slurmstepd.scope") if v2
              else Path("/sys/fs/cgroup/freezer/slurm/uid_0"))
    made = [d for d in (parent.parent, parent) if not d.exists()]   # removed at the end
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        pytest.skip("cannot make Slurm's cgroup directories here")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "scontrol").write_text(f"#!/bin/sh\necho 'JobId={job} Comment=iotrace'\n")
    (bindir / "scontrol").chmod(0o755)
    env = dict(os.environ, SLURM_JOB_ID=job, SLURM_JOB_UID="0",
               PATH=f"{bindir}:{os.environ['PATH']}",
               IOTRACE=str(Path(sys.executable).parent / "iotrace"),
               IOTRACE_TRACES=str(tmp_path / "traces"), IOTRACE_RUN_DIR=str(tmp_path / "run"))
    cg = parent / f"job_{job}"
    step = None
    try:
        assert subprocess.run(["sh", str(root / "iotrace-prolog.sh")], env=env,
                              timeout=60).returncode == 0
        cg.mkdir()                                        # slurmstepd starts the job
        d = tmp_path / "data"
        d.mkdir()
        for f in ("early.bin", "late.bin", "child.bin"):
            (d / f).write_bytes(b"z" * 1000)
        step = subprocess.Popen(["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh",
                                 sys.executable, str(WORKLOADS / "attach_target.py"), str(d)],
                                stdout=subprocess.PIPE, text=True)
        assert step.stdout.readline().strip() == "ready"
        __import__("time").sleep(1.0)
        (d / "go").touch()
        assert step.wait(timeout=60) == 0
        assert subprocess.run(["sh", str(root / "iotrace-epilog.sh")], env=env,
                              timeout=400).returncode == 0
    finally:
        if step:
            step.kill()
        for c in (cg, *reversed(made)):
            with __import__("contextlib").suppress(OSError):
                c.rmdir()
    out = tmp_path / "traces" / job / f"host={socket.gethostname().split('.')[0]}"
    trace = iotrace.open_trace(out)
    assert trace.meta["state"] == "complete"
    assert (out / "summary" / "node_report.json").exists()
    assert scalar(trace, """select count(*) from events e join files f using (file_id)
                            where e.op in ('read', 'pread64') and f.path like ?""",
                  f"{d}/%") == 13
    assert not (tmp_path / "run" / f"{job}.pid").exists()


def test_calls_in_progress_when_the_trace_ends(tmp_path):
    """A read of an empty pipe and a 100 s sleep, both entered after the
    attach and not returned when it is stopped (SIGINT): each is in the trace
    once, flagged UNFINISHED, with ret 0 and its arguments, lasting to the
    moment tracing stopped; the summary names them. No other call is."""
    target = subprocess.Popen([sys.executable, str(WORKLOADS / "blocked_at_end.py"),
                               str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert target.stdout.readline().strip() == "ready"
    out = tmp_path / "trace"
    try:
        with attached(target.pid, out):
            (tmp_path / "go").touch()
            _, fd, sleeper = target.stdout.readline().split()
            time.sleep(0.5)
        assert target.poll() is None
    finally:
        target.kill()
    trace = iotrace.open_trace(out)
    got = rows(trace, """select op, tid, fd, req_bytes, ret, fd_kind, ts_ns, ts_ns + dur_ns
                         from events where eflags & 1024 != 0 order by op""")
    assert [g[:2] for g in got] == [("clock_nanosleep", int(sleeper)), ("read", target.pid)], got
    assert got[1][2:6] == (int(fd), 4096, 0, "pipe"), got
    assert got[0][4] == 0, got
    # both run to the stop, after every call that returned (the print that
    # said "blocked" among them)
    (stop,) = {g[7] for g in got}
    printed = scalar(trace, """select max(ts_ns + dur_ns) from events
                               where op = 'write' and eflags & 1024 = 0 and pid = ?""",
                     target.pid)
    assert got[1][6] >= printed and stop > printed + 0.3e9, (got, printed)
    assert scalar(trace, "select max(ts_ns + dur_ns) from events where eflags & 1024 = 0") \
        <= stop
    assert trace.meta["counters"]["calls_unfinished"] == 2
    summ = json.loads(subprocess.run([*IOTRACE, "summary", "--format", "json", str(out)],
                                     capture_output=True, text=True, check=True).stdout)
    assert sorted(c["op"] for c in summ["unfinished_calls"]) == ["clock_nanosleep", "read"]


def test_calls_in_progress_when_the_attach_begins(tmp_path):
    """A read of a pipe and a 100 s sleep, both asleep before the attach: the
    read, which returns during the trace, is recorded whole (5 bytes, its fd,
    pipe) from when tracing began (eflags BEGAN_BEFORE); the sleep, still
    asleep at the stop, is both BEGAN_BEFORE and UNFINISHED; a second read,
    entered during the trace, is UNFINISHED only. With fentry hooks the first
    read is not seen (fexit misses the return of a call that entered before
    its trampoline): it is counted (calls_return_unseen)."""
    target, sleeper = asleep_target()
    out = tmp_path / "trace"
    tracer = subprocess.Popen([*IOTRACE, "attach", "-q", "--pid", str(target.pid),
                               "-o", str(out)], stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: (out / "meta.json").exists()), "attach never became ready"
        wake_read_then_stop(target, tracer)
    finally:
        target.kill()
        tracer.kill()
    trace = iotrace.open_trace(out)
    got = rows(trace, """select op, tid, eflags & 3072, fd, req_bytes, ret, fd_kind, ts_ns
                         from events where eflags & 3072 != 0 order by ts_ns, op""")
    first = min(r[0] for r in rows(trace, "select ts_ns from events where eflags & 3072 = 0"))
    began, asleep, later = 2048, 2048 | 1024, 1024
    if trace.meta["probes"].get("syscall_hooks") == "fentry":
        got.insert(1, ("read", target.pid, began, 0, 100, 5, "pipe", got[0][7]))
    assert [g[:3] for g in got] == [("clock_nanosleep", sleeper, asleep),
                                    ("read", target.pid, began),
                                    ("read", target.pid, later)], got
    assert got[1][3:7] == (0, 100, 5, "pipe"), got
    assert got[2][3:7] == (0, 100, 0, "pipe"), got
    # the two that began before: from when tracing began, before anything else
    assert got[0][7] == got[1][7] <= first, (got, first)
    # with fentry hooks the first read returned unseen: counted, not silent
    unseen = 1 if trace.meta["probes"].get("syscall_hooks") == "fentry" else 0
    assert (trace.meta["counters"]["calls_began_before"],
            trace.meta["counters"]["calls_unfinished"],
            trace.meta["counters"]["calls_entry_unseen"],
            trace.meta["counters"]["calls_return_unseen"]) == (2, 2, 0, unseen)


def test_a_call_that_returns_before_the_attach_looks_is_counted(tmp_path):
    """A read asleep before the attach that returns after the attach has
    traced its process but before it looks for calls in progress (the
    recorder held there by a test-only pause): its entry was never seen, so
    it cannot be recorded; it is counted, exactly once
    (counters.calls_entry_unseen = 1), and the summary says so. The 100 s
    sleep, still asleep when the attach looks, is recorded from then
    (BEGAN_BEFORE); the second read, entered once the process was traced, as
    any call. With fentry hooks the read's return is
    not seen at all (fexit misses calls that entered before its trampoline):
    nothing to count."""
    target, sleeper = asleep_target()
    out, pause = tmp_path / "trace", tmp_path / "pause"
    env = dict(os.environ, IOTRACE_TEST_PAUSE_BEFORE_SCAN=str(pause))
    tracer = subprocess.Popen([*IOTRACE, "attach", "-q", "--pid", str(target.pid),
                               "-o", str(out)], stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert wait_for(pause.exists), "the recorder never paused"
        target.stdin.write("hello")          # the first read returns now
        target.stdin.flush()
        assert target.stdout.readline().split() == ["got", "5"]
        time.sleep(0.5)                      # and the second is asleep
        pause.unlink()
        assert wait_for(lambda: (out / "meta.json").exists()), "attach never became ready"
        time.sleep(0.5)
        tracer.send_signal(signal.SIGINT)
        assert tracer.wait(timeout=120) == 0, tracer.stderr.read()
    finally:
        target.kill()
        tracer.kill()
    trace = iotrace.open_trace(out)
    reads = rows(trace, """select eflags & 3072, ret from events
                           where op = 'read' and pid = ? and fd = 0 order by ts_ns""",
                 target.pid)
    sleeps = rows(trace, "select eflags & 3072 from events where op = 'clock_nanosleep' "
                         "and tid = ?", sleeper)
    counters = trace.meta["counters"]
    if trace.meta["probes"].get("syscall_hooks") == "fentry":
        assert (counters["calls_entry_unseen"], counters["calls_return_unseen"]) == (0, 0)
        return
    # the read that returned in the pause is not there; the second, entered
    # in the pause, is whole (unfinished at the stop)
    assert reads == [(1024, 0)], reads
    assert sleeps == [(2048 | 1024,)], sleeps
    assert (counters["calls_entry_unseen"], counters["calls_began_before"]) == (1, 1), counters
    summ = subprocess.run([*IOTRACE, "summary", str(out)], capture_output=True, text=True,
                          check=True).stdout
    assert "calls entry unseen 1" in summ, summ


def _attach_to_running_reads(tmp_path, data, attempt):
    """Attach to running_at_attach.py reading `data` for a second; the
    trace's preadv rows (eflags & 3072, fd, req_bytes, ret, path), its
    counters and probes, and the fd the workload printed."""
    target = subprocess.Popen([sys.executable, str(WORKLOADS / "running_at_attach.py"),
                               str(data)], stdout=subprocess.PIPE, text=True)
    out = tmp_path / f"trace{attempt}"
    try:
        word, fd = target.stdout.readline().split()
        assert word == "ready"
        time.sleep(0.5)
        with attached(target.pid, out):
            time.sleep(1.0)
    finally:
        target.kill()
    trace = iotrace.open_trace(out)
    reads = rows(trace, """select e.eflags & 3072, e.fd, e.req_bytes, e.ret, f.path
                           from events e left join files f using (file_id)
                           where e.op like 'preadv%' and e.pid = ? order by e.ts_ns""", target.pid)
    return reads, trace.meta["counters"], trace.meta["probes"], int(fd)


def test_call_running_when_the_attach_begins(tmp_path):
    """A thread inside a read that is running, not asleep, when the attach
    begins (each of its preadv calls, preadv2 in Python, copies a 1 GiB
    page-cached file for a fifth of a second): with the tracepoint hooks that
    read is recorded whole from when tracing began (eflags BEGAN_BEFORE, all
    1 GiB, its fd and file), and every later one as any call. With fentry hooks it is not
    seen (fexit misses the return of a call that entered before its
    trampoline): none is BEGAN_BEFORE, and that read is counted
    (calls_return_unseen).

    The attach marks the process traced, then looks for its calls in
    progress: a read that returns in between (the recorder preempted on a
    busy machine) has its return seen without its entry, and is counted
    (calls_entry_unseen) instead; the attach is then tried again, up to
    three times, for the BEGAN_BEFORE case."""
    size = 1 << 30
    data = tmp_path / "big.bin"
    with open(data, "wb") as f:
        f.truncate(size)   # a hole: read as zeros, cached like data, no disk
    for attempt in range(3):
        reads, counters, probes, fd = _attach_to_running_reads(tmp_path, data, attempt)
        assert len(reads) >= 3, reads
        whole = (fd, size, size, str(data))
        later = reads[1:-1] if reads[-1][0] & 1024 else reads[1:]   # the last may be unfinished
        assert [r[1:] for r in later] == [whole] * len(later), reads
        assert all(r[0] == 0 for r in later), reads
        if probes.get("syscall_hooks") == "fentry":
            # the read running at the attach is lost to fexit: counted
            assert reads[0][0] == 0 and reads[0][1:] == whole, reads
            assert (counters["calls_began_before"], counters["calls_return_unseen"]) == (0, 1)
            return
        if counters["calls_began_before"] == 1:
            assert reads[0] == (2048, *whole), reads
            assert (counters["calls_return_unseen"], counters["calls_entry_unseen"]) == (0, 0)
            return
        # the read running at the attach returned before the scan: counted
        # (or, rarely, the attach fell in the microseconds between two reads)
        assert reads[0] == (0, *whole), reads
        assert counters["calls_began_before"] == 0, counters
        assert counters["calls_entry_unseen"] in (0, 1), counters
    raise AssertionError("three attaches in a row lost the running read to the scan's delay")
