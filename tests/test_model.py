"""Unit tests of the replay model and the segment converter on synthetic
records (no BPF): path resolution, fd tables across fork/exec/dup/close,
file ids, and the column conversion."""
from __future__ import annotations

import numpy as np

from iotrace.abi import AT_FDCWD, EVENT_DTYPE, OP, S_IFREG, S_IFSOCK
from iotrace.convert import convert
from iotrace.model import Model

O_CLOEXEC = 0o2000000


def ev(op, pid=10, tid=None, ts=0, ret=0, fd=-1, dirfd=-1, flags=0, arg=0,
       dev=0, ino=0, imode=0, **kw):
    r = np.zeros(1, dtype=EVENT_DTYPE)[0]
    r["op"], r["pid"], r["tid"], r["ts_ns"], r["ret"] = OP[op], pid, tid or pid, ts, ret
    r["fd"], r["dirfd"], r["flags"], r["arg"] = fd, dirfd, flags, arg
    r["dev"], r["ino"], r["imode"], r["offset"] = dev, ino, imode, -1
    for k, v in kw.items():
        r[k] = v
    return r


def model_with_root(cwd="/home/u"):
    m = Model()
    m.add_process(10, 1, 0, cwd=cwd)
    return m


def test_relative_paths_follow_cwd_and_dirfd():
    m = model_with_root()
    assert m.apply(ev("openat", dirfd=AT_FDCWD, ret=3, dev=1, ino=5, imode=S_IFREG),
                   b"data/../x.bin\0")[0] == "/home/u/x.bin"
    m.apply(ev("openat", dirfd=AT_FDCWD, ret=4, imode=0o040000), b"/srv/ds\0")
    assert m.apply(ev("openat", dirfd=4, ret=-2), b"a/b.npz\0")[0] == "/srv/ds/a/b.npz"
    m.apply(ev("chdir", ret=0), b"../v\0")
    assert m.procs[10].cwd == "/home/v"
    m.apply(ev("fchdir", fd=4, ret=0), None)
    assert m.procs[10].cwd == "/srv/ds"
    assert m.counters["unresolved_paths"] == 0


def test_unknown_cwd_is_counted_not_guessed():
    m = Model()
    m.add_process(10, 1, 0)            # cwd unknown
    path, _, _ = m.apply(ev("openat", dirfd=AT_FDCWD, ret=-2), b"rel.txt\0")
    assert path == "rel.txt"
    assert m.counters["unresolved_paths"] == 1


def test_fork_copies_fds_exec_drops_cloexec_dup_aliases():
    m = model_with_root()
    m.apply(ev("openat", dirfd=AT_FDCWD, ret=3, flags=O_CLOEXEC), b"/d/keep_not\0")
    m.apply(ev("openat", dirfd=AT_FDCWD, ret=4), b"/d/keep\0")
    m.apply(ev("dup2", fd=4, arg=9, ret=9), None)
    m.apply(ev("proc_fork", ret=11, arg=11), b"python\0")
    child = m.procs[11]
    assert child.ppid == 10 and child.cwd == "/home/u"
    assert {fd: e.path for fd, e in child.fds.items()} == {3: "/d/keep_not", 4: "/d/keep",
                                                           9: "/d/keep"}
    m.apply(ev("proc_exec", pid=11, arg=11), b"python\0-c\0pass\0")
    assert child.cmdline == "python -c pass"
    assert set(child.fds) == {4, 9}
    m.apply(ev("close", pid=11, fd=4, ret=0), None)
    m.apply(ev("close_range", pid=11, fd=5, arg=100, ret=0), None)
    assert child.fds == {}
    assert set(m.procs[10].fds) == {3, 4, 9}     # the parent's table is its own


def test_threads_and_exit_status():
    m = model_with_root()
    m.apply(ev("thread_new", ret=12, arg=12), b"python\0")
    m.apply(ev("task_rename", tid=12), b"loader-0\0")
    m.apply(ev("thread_exit", tid=12, ts=5), None)
    m.apply(ev("proc_exit", ts=9, ret=3 << 8), None)
    assert m.threads[12].pid == 10 and m.threads[12].name == "loader-0"
    assert m.threads[12].exit_ns == 5
    assert m.procs[10].exit_status == 3 << 8 and m.procs[10].exit_ns == 9


def test_rename_resolves_both_paths():
    m = model_with_root()
    p1, p2, _ = m.apply(ev("renameat2", dirfd=AT_FDCWD, arg=AT_FDCWD & 0xFFFFFFFFFFFFFFFF),
                        b"a.tmp\0b\0")
    assert (p1, p2) == ("/home/u/a.tmp", "/home/u/b")


def test_convert_assigns_file_ids_kinds_and_sorts():
    m = model_with_root()
    recs = np.array([
        ev("openat", ts=1, dirfd=AT_FDCWD, ret=3, fd=3, dev=7, ino=42, imode=S_IFREG),
        ev("pread64", ts=5, fd=3, ret=100, dev=7, ino=42, imode=S_IFREG, req_bytes=100,
           offset=0),
        ev("read", ts=3, fd=5, ret=10, imode=S_IFSOCK, fs_magic=0x534F434B),
        ev("pread64", ts=4, fd=8, ret=1, dev=7, ino=43, imode=S_IFREG),
    ], dtype=EVENT_DTYPE)
    t = convert(recs, {0: b"/data/a.bin\0"}, m).to_pydict()
    assert t["ts_ns"] == [1, 3, 4, 5]
    assert t["op"] == ["openat", "read", "pread64", "pread64"]
    assert t["file_id"] == [0, -1, 1, 0]
    assert t["fd_kind"] == ["file", "socket", "file", "file"]
    assert t["path"] == ["/data/a.bin", None, None, None]
    assert m.files[(7, 42)].path == "/data/a.bin"
    assert m.files[(7, 43)].path is None   # an fd we never saw opened


def test_fd_reused_unseen_gives_no_wrong_path():
    """A file read through an fd whose table entry was made for another file
    (the fd was closed and reused where the trace did not see it) gets no
    path, rather than the other file's; counted. Entries from an open and from
    the attach-time /proc snapshot both carry the file's (dev, ino)."""
    from iotrace.model import FdEntry
    m = model_with_root()
    m.procs[10].fds[4] = FdEntry("/data/snap.bin", ident=(7, 50))   # as procfs makes it
    recs = np.array([
        ev("openat", ts=1, dirfd=AT_FDCWD, ret=3, fd=3, dev=7, ino=42, imode=S_IFREG),
        # fd 3 holds ino 42 by its open; ino 44 was put there unseen
        ev("pread64", ts=2, fd=3, ret=1, dev=7, ino=44, imode=S_IFREG),
        ev("pread64", ts=3, fd=4, ret=1, dev=7, ino=50, imode=S_IFREG),   # the snapshot's file
        ev("pread64", ts=4, fd=4, ret=1, dev=7, ino=51, imode=S_IFREG),   # not it
        ev("dup2", ts=5, fd=3, arg=9, ret=9),
        ev("pread64", ts=6, fd=9, ret=1, dev=7, ino=42, imode=S_IFREG),   # the dup's
    ], dtype=EVENT_DTYPE)
    t = convert(recs, {0: b"/data/a.bin\0"}, m).to_pydict()
    paths = {k: f.path for k, f in m.files.items()}
    assert paths == {(7, 42): "/data/a.bin", (7, 44): None, (7, 50): "/data/snap.bin",
                     (7, 51): None}
    assert t["file_id"][-1] == m.files[(7, 42)].file_id
    assert m.counters["fd_identity_mismatches"] == 2
