"""multiprocessing workers (fork, spawn, forkserver) and threads: every
worker's reads are in the trace, under the right process, with a parent chain
back to the job; threads belong to their process and carry their names."""
from __future__ import annotations

import sys

import pytest

from conftest import WORKLOADS, needs_root, rows, scalar, trace_run

pytestmark = needs_root()
NWORKERS = 3
CHUNKS, PREADS = 16, 25


def make_files(base):
    base.mkdir(parents=True, exist_ok=True)
    for i in range(NWORKERS):
        (base / f"sample_{i}.bin").write_bytes(b"x" * (CHUNKS * 4096))
    for k in range(2):
        (base / f"thread_{k}.bin").write_bytes(b"y" * (PREADS * 4096))


def ancestors(trace, pid):
    chain = []
    parents = dict(rows(trace, "select pid, ppid from processes"))
    while pid in parents and pid not in chain:
        chain.append(pid)
        pid = parents[pid]
    return chain


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_workers_and_threads(tmp_path, method):
    data = tmp_path / "data"
    make_files(data)
    proc, trace = trace_run(tmp_path / "trace", sys.executable, str(WORKLOADS / "workers.py"),
                            method, str(data), str(NWORKERS))
    assert proc.returncode == 0, proc.stderr
    root = trace.meta["root_pid"]
    assert trace.meta["drops"] == 0

    readers = set()
    for i in range(NWORKERS):
        path = str(data / f"sample_{i}.bin")
        got = rows(trace, """select e.pid, count(*), sum(e.ret) from events e
                             join files f using (file_id)
                             where f.path = ? and e.op = 'read' group by e.pid""", path)
        # one worker process read the whole sample, in CHUNKS reads of 4096
        assert len(got) == 1, got
        pid, calls, nbytes = got[0]
        assert (calls, nbytes) == (CHUNKS, CHUNKS * 4096)
        assert pid != root
        assert root in ancestors(trace, pid)   # its parent chain reaches the job
        readers.add(pid)
    assert len(readers) == NWORKERS

    if method != "fork":
        # spawn/forkserver workers exec a fresh interpreter: its cmdline is recorded
        cmd = scalar(trace, "select cmdline from processes where pid = ?", min(readers))
        assert "multiprocessing" in cmd or "python" in cmd

    for k in range(2):
        path = str(data / f"thread_{k}.bin")
        got = rows(trace, """select e.pid, e.tid, count(*), sum(e.ret) from events e
                             join files f using (file_id)
                             where f.path = ? and e.op = 'pread64' group by e.pid, e.tid""",
                   path)
        assert len(got) == 1, got
        pid, tid, calls, nbytes = got[0]
        assert (pid, calls, nbytes) == (root, PREADS, PREADS * 4096)
        assert tid != root
        assert rows(trace, "select pid, name from threads where tid = ?", tid) == \
            [(root, f"reader-{k}")]

    # every process that did I/O is known, with an exit code
    unknown = scalar(trace, "select count(distinct pid) from events where pid not in "
                            "(select pid from processes)")
    assert unknown == 0
    assert rows(trace, "select exit_code from processes where pid in "
                f"({','.join(map(str, readers))})") == [(0,)] * NWORKERS
