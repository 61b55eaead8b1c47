"""A Python program with a known set of calls (tests/workloads/calls.py):
relative paths after chdir, openat with a dirfd, dup2 aliases, a failed open.
Every path and count must be exact."""
from __future__ import annotations

import errno
import sys

import pytest

from conftest import WORKLOADS, needs_root, rows, scalar, trace_run

pytestmark = needs_root()


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    base = tmp_path_factory.mktemp("calls").resolve()
    proc, trace = trace_run(base / "trace", sys.executable, str(WORKLOADS / "calls.py"),
                            str(base / "work"))
    assert proc.returncode == 0, proc.stderr
    return base / "work", trace


def ops_on(trace, path):
    return rows(trace, """select op, fd, "offset", req_bytes, ret from events
                          join files using (file_id) where files.path = ? and op not in
                          ('mmap', 'munmap') order by ts_ns""", path)


def test_relative_open_after_chdir_and_writes(traced):
    base, trace = traced
    path = f"{base}/sub/rel.txt"
    opens = rows(trace, "select op, ret from events where path = ? and op like 'open%'", path)
    assert len(opens) == 1 and opens[0][1] >= 0
    writes = [r for r in ops_on(trace, path) if r[0] == "write"]
    assert [(w[2], w[3], w[4]) for w in writes] == [(0, 100, 100), (100, 100, 100),
                                                    (200, 100, 100)]
    syncs = [r[0] for r in ops_on(trace, path) if r[0] in ("fsync", "fdatasync")]
    assert syncs == ["fsync", "fdatasync"]


def test_openat_with_dirfd_and_dup2_alias(traced):
    base, trace = traced
    path = f"{base}/d/x.bin"
    opens = rows(trace, "select op, ret from events where path = ? and op = 'openat' "
                 "and ret >= 0", path)
    assert len(opens) == 2  # written by the script's setup, then opened via dirfd
    fd = opens[1][1]
    reads = [r for r in ops_on(trace, path) if r[0] == "read"]
    assert [(r[1], r[2], r[4]) for r in reads] == (
        [(fd, i * 1000, 1000) for i in range(5)] + [(50, 5000, 10), (50, 5010, 10)])
    preads = [(r[2], r[3], r[4]) for r in ops_on(trace, path) if r[0] == "pread64"]
    assert preads == [(i * 1024, 512, 512) for i in range(7)]
    seeks = rows(trace, """select arg, flags, ret from events join files using (file_id)
                           where files.path = ? and op = 'lseek' and flags = 0 /* SEEK_SET */
                           order by ts_ns""", path)
    assert seeks == [(0, 0, 0), (4096, 0, 4096), (8192, 0, 8192)]
    dups = rows(trace, "select fd, arg, ret from events where op = 'dup2' and pid = ?",
                trace.meta["root_pid"])
    assert dups == [(fd, 50, 50)]


def test_failed_open_has_its_absolute_path(traced):
    base, trace = traced
    failed = rows(trace, "select ret, file_id from events where path = ?",
                  f"{base}/sub/missing.txt")
    assert failed == [(-errno.ENOENT, -1)]


def test_metadata_calls_resolved_after_relative_chdir(traced):
    base, trace = traced
    assert scalar(trace, "select count(*) from events where op = 'chdir' and path = ?",
                  f"{base}") == 1
    assert scalar(trace, "select count(*) from events where op in ('stat', 'newfstatat', "
                  "'statx') and path = ? and (flags & 4096) = 0 /* not AT_EMPTY_PATH */",
                  f"{base}/d/x.bin") == 4
    assert rows(trace, "select op from events where path = ? and op like 'mkdir%'",
                f"{base}/newdir") != []
    assert rows(trace, "select path2 from events where op like 'rename%' and path = ?",
                f"{base}/sub/rel.txt") == [(f"{base}/newdir/renamed.txt",)]
    assert scalar(trace, "select count(*) from events where op like 'unlink%' and path = ?",
                  f"{base}/newdir/renamed.txt") == 1
    assert trace.meta["counters"]["unresolved_paths"] == 0


def test_pipes_and_terminals_are_not_files(traced):
    _, trace = traced
    # every fd with a file_id is a regular file (munmap has a file but no fd)
    assert scalar(trace, "select count(*) from events where file_id >= 0 and fd >= 0 "
                  "and fd_kind <> 'file'") == 0
    # ...and the job's stdout/stderr pipes are seen as pipes
    kinds = {r[0] for r in rows(trace, "select distinct fd_kind from events where fd in (1, 2) "
                                        "and op in ('write', 'close', 'fstat', 'newfstatat')")}
    assert kinds <= {"pipe", "chr", "none"} and "file" not in kinds
    assert scalar(trace, "select count(*) from files where path is null") == 0
