"""`iotrace attach` to a job mid-run: events from then on, the paths of files
opened before the attach (from /proc), and children forked after it."""
from __future__ import annotations

import subprocess
import sys

from conftest import IOTRACE, WORKLOADS, needs_root, rows, scalar, wait_for

import iotrace

pytestmark = needs_root()


def test_attach_mid_run(tmp_path):
    base = tmp_path / "data"
    base.mkdir()
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
    assert reads("late.bin", "read") == [(target.pid, 4, 400)]
    child = reads("child.bin", "read")
    assert len(child) == 1 and child[0][1:] == (3, 300)
    assert rows(trace, "select ppid from processes where pid = ?", child[0][0]) == \
        [(target.pid,)]
    assert rows(trace, "select before_trace from processes where pid = ?", target.pid) == \
        [(True,)]
