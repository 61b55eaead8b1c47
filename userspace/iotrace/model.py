"""What the traced job's kernel state looks like, replayed from its events.

The kernel sends paths only as the strings a call was given. Making them
absolute needs each process's working directory and fd table (for dirfd),
which this model keeps up to date from the events that change them: opens,
closes, dups, chdir, fork, exec. Only those events (and the ones carrying a
string) pass through Python one by one; reads and writes never do.

It also keeps the process and thread table, the files registry
(device + inode -> file_id, path, filesystem) and the mmap regions (so a
munmap names its file). Everything it cannot resolve is counted.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Optional

from .abi import AT_FDCWD, FS_MAGIC, NAMED_PAYLOAD_OPS, OP, S_IFMT, S_IFREG

NAMED_OPS = frozenset(OP[n] for n in NAMED_PAYLOAD_OPS)

O_CLOEXEC = 0o2000000
AT_EMPTY_PATH = 0x1000
CLOSE_RANGE_CLOEXEC = 4


@dataclass
class FdEntry:
    path: Optional[str]
    cloexec: bool = False
    # (dev, ino) of the file the fd held when the entry was made (its open,
    # or /proc at attach), where known: a read on the fd with another
    # identity means the fd changed hands unseen, and takes no path from it
    ident: Optional[tuple[int, int]] = None


@dataclass
class Process:
    pid: int
    ppid: int
    cmdline: str = ""
    comm: str = ""
    start_ns: int = 0
    exit_ns: Optional[int] = None
    exit_status: Optional[int] = None  # wait(2) status
    execs: int = 0
    cwd: Optional[str] = None
    fds: dict = field(default_factory=dict)       # fd -> FdEntry
    maps: dict = field(default_factory=dict)      # address -> (length, file_id)
    seen_before_trace: bool = False
    rank: Optional[int] = None         # RANK (or SLURM_PROCID...) in its environment
    local_rank: Optional[int] = None   # LOCAL_RANK (or SLURM_LOCALID)


@dataclass
class Thread:
    tid: int
    pid: int
    name: str = ""
    start_ns: int = 0
    exit_ns: Optional[int] = None


@dataclass
class FileInfo:
    file_id: int
    dev: int
    ino: int
    path: Optional[str]
    fs_magic: int
    kind: str = "file"


def kernel_dev_to_major_minor(dev: int) -> tuple[int, int]:
    """The kernel's internal dev_t (s_dev): 12 bits major, 20 bits minor."""
    return dev >> 20, dev & 0xFFFFF


def path_text(raw) -> str:
    """A path as text for the trace: each byte that is not UTF-8 becomes the
    four characters \\xNN (byte 0xe9 -> "\\xe9"), as Parquet strings must be
    UTF-8. Takes the kernel's bytes or a str from os (surrogate-escaped)."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogateescape")
    return raw.decode("utf-8", "backslashreplace")


def decode_cmdline(raw: bytes) -> str:
    args = raw.rstrip(b"\0").split(b"\0")
    return " ".join(a.decode("utf-8", "replace") for a in args)


class Model:
    def __init__(self) -> None:
        self.procs: dict[int, Process] = {}
        self.threads: dict[int, Thread] = {}
        # earlier lifetimes of a pid (tid) the kernel gave out again during
        # the trace: each stays its own row of the processes (threads) table
        self.past_procs: list[Process] = []
        self.past_threads: list[Thread] = []
        self.files: dict[tuple[int, int], FileInfo] = {}
        self.counters = {
            "unresolved_paths": 0,     # relative path with unknown cwd/dirfd
            "unknown_processes": 0,    # events of a pid never announced
            # calls on an fd whose table entry was made for another file
            # (fd_path): their file is left without a path, not given a wrong one
            "fd_identity_mismatches": 0,
            # page faults and block requests on files the job never opened
            # (the executable and loader the kernel maps at exec)
            "storage_rows_without_file": 0,
            # captured message starts that did not parse as HTTP
            "http_captures_not_http": 0,
        }
        # called with a process after its exec (the session reads its rank
        # from /proc: the environment is not in the events)
        self.exec_hook: Optional[Callable[[Process], None]] = None

    # ---- processes --------------------------------------------------------

    def add_process(self, pid: int, ppid: int, start_ns: int, **kw) -> Process:
        old = self.procs.get(pid)
        if old is not None and old.exit_ns is not None:   # the pid was reused
            self.past_procs.append(old)
        p = Process(pid=pid, ppid=ppid, start_ns=start_ns, **kw)
        self.procs[pid] = p
        t = self.threads.get(pid)
        if t is None or t.exit_ns is not None:
            self.new_thread(Thread(tid=pid, pid=pid, name=p.comm, start_ns=start_ns))
        return p

    def new_thread(self, t: Thread) -> Thread:
        """Registers a thread; an ended one with the same tid is kept as a
        past lifetime (the tid was reused), not overwritten."""
        old = self.threads.get(t.tid)
        if old is not None and old.exit_ns is not None:
            self.past_threads.append(old)
        self.threads[t.tid] = t
        return t

    def all_procs(self) -> list[Process]:
        return self.past_procs + list(self.procs.values())

    def all_threads(self) -> list[Thread]:
        return self.past_threads + list(self.threads.values())

    def proc(self, pid: int, ts: int) -> Process:
        p = self.procs.get(pid)
        if p is None:
            self.counters["unknown_processes"] += 1
            p = self.add_process(pid, 0, ts)
        return p

    def thread(self, tid: int, pid: int, ts: int) -> Thread:
        t = self.threads.get(tid)
        if t is None or t.pid != pid:
            t = self.new_thread(Thread(tid=tid, pid=pid, start_ns=ts))
        return t

    # ---- files ------------------------------------------------------------

    def file_id(self, dev: int, ino: int, imode: int, magic: int, path: Optional[str]) -> int:
        """file_id of a regular file (registering it), -1 for anything else."""
        if (imode & S_IFMT) != S_IFREG or ino == 0:
            return -1
        key = (dev, ino)
        f = self.files.get(key)
        if f is None:
            f = FileInfo(file_id=len(self.files), dev=dev, ino=ino, path=path, fs_magic=magic)
            self.files[key] = f
        elif f.path is None and path is not None:
            f.path = path
        return f.file_id

    def fs_type(self, magic: int) -> str:
        return FS_MAGIC.get(magic, f"0x{magic:x}" if magic else "")

    # ---- paths ------------------------------------------------------------

    def resolve(self, p: Process, dirfd: int, path: str, flags: int = 0) -> Optional[str]:
        """Absolute path of `path` as a call with `dirfd` saw it. `flags` are
        the call's AT_* flags (never open flags: O_DSYNC == AT_EMPTY_PATH)."""
        if path.startswith("/"):
            return os.path.normpath(path) if path != "/" else "/"
        if dirfd == AT_FDCWD:
            base = p.cwd
        else:
            e = p.fds.get(dirfd)
            base = e.path if e else None
        if path == "" and (flags & AT_EMPTY_PATH):
            # fstat through newfstatat(fd, "", AT_EMPTY_PATH): the event has
            # the fd and its file's identity; the path only when we know it
            return base
        if base is None:
            self.counters["unresolved_paths"] += 1
            return path
        return os.path.normpath(os.path.join(base, path))

    # ---- replay -----------------------------------------------------------

    def apply(self, e, payload: Optional[bytes]) -> tuple[Optional[str], Optional[str], int]:
        """Applies one state-changing or string-carrying event.

        e is one numpy record (abi.EVENT_DTYPE). Returns (path, path2, file_id
        override or -2 for "keep the kernel's") for the event's row.
        """
        op = int(e["op"])
        pid = int(e["pid"])
        ts = int(e["ts_ns"])
        ret = int(e["ret"])
        strings = payload.split(b"\0") if payload else []
        s1 = path_text(strings[0]) if strings else None
        s2 = path_text(strings[1]) if len(strings) > 1 else None

        if op in NAMED_OPS:
            return s1, s2, -2    # names (RPC procedure, RDMA peer...), not paths
        if op == OP["proc_fork"]:
            parent = self.proc(pid, ts)
            child = ret
            c = self.add_process(child, pid, ts, cmdline=parent.cmdline,
                                 comm=s1 or parent.comm, cwd=parent.cwd,
                                 rank=parent.rank, local_rank=parent.local_rank)
            c.fds = {fd: FdEntry(x.path, x.cloexec, x.ident) for fd, x in parent.fds.items()}
            c.maps = dict(parent.maps)
            self.threads[child].name = c.comm
            return None, None, -2
        if op == OP["thread_new"]:
            self.proc(pid, ts)
            self.new_thread(Thread(tid=ret, pid=pid, name=s1 or "", start_ns=ts))
            return None, None, -2
        if op == OP["proc_exec"]:
            p = self.proc(pid, ts)
            p.cmdline = decode_cmdline(payload or b"")
            p.execs += 1
            if self.exec_hook:
                self.exec_hook(p)
            p.fds = {fd: x for fd, x in p.fds.items() if not x.cloexec}
            p.maps = {}
            # exec by a non-leader thread: the old tid is gone, the leader stays
            old = int(e["arg"])
            if old != pid:
                t = self.threads.get(old)
                if t:
                    t.exit_ns = ts
            return None, None, -2
        if op == OP["task_rename"]:
            t = self.thread(int(e["tid"]), pid, ts)
            t.name = s1 or ""
            if t.tid == pid:
                self.proc(pid, ts).comm = t.name
            return None, None, -2
        if op == OP["thread_exit"]:
            self.thread(int(e["tid"]), pid, ts).exit_ns = ts
            return None, None, -2
        if op == OP["proc_exit"]:
            p = self.proc(pid, ts)
            self.thread(int(e["tid"]), pid, ts).exit_ns = ts
            p.exit_ns = ts
            p.exit_status = ret
            for t in self.threads.values():
                if t.pid == pid and t.exit_ns is None:
                    t.exit_ns = ts
            return None, None, -2

        p = self.proc(pid, ts)
        dirfd = int(e["dirfd"])
        flags = int(e["flags"])
        fd = int(e["fd"])

        if op in (OP["open"], OP["openat"], OP["openat2"], OP["creat"]):
            path = self.resolve(p, dirfd, s1 or "")
            fid = -2
            if ret >= 0:
                p.fds[ret] = FdEntry(path, bool(flags & O_CLOEXEC),
                                     (int(e["dev"]), int(e["ino"])) if int(e["ino"]) else None)
                fid = self.file_id(int(e["dev"]), int(e["ino"]), int(e["imode"]),
                                   int(e["fs_magic"]), path)
            return path, None, fid
        if op == OP["close"]:
            if ret == 0:
                p.fds.pop(fd, None)
            return None, None, -2
        if op == OP["close_range"]:
            if ret == 0:
                last = int(e["arg"])
                for k in [k for k in p.fds if fd <= k <= last]:
                    if flags & CLOSE_RANGE_CLOEXEC:
                        p.fds[k].cloexec = True
                    else:
                        del p.fds[k]
            return None, None, -2
        if op in (OP["dup"], OP["dup2"], OP["dup3"], OP["fcntl"]):
            if ret >= 0:
                src = p.fds.get(fd)
                cloexec = (op == OP["dup3"] and bool(flags & O_CLOEXEC)) or \
                          (op == OP["fcntl"] and flags == 1030)
                p.fds[ret] = FdEntry(src.path if src else None, cloexec,
                                     src.ident if src else None)
            return None, None, -2
        if op == OP["chdir"]:
            path = self.resolve(p, AT_FDCWD, s1 or "")
            if ret == 0:
                p.cwd = path
            return path, None, -2
        if op == OP["fchdir"]:
            src = p.fds.get(fd)
            if ret == 0:
                p.cwd = src.path if src else None
            return (src.path if src else None), None, -2
        if op in (OP["rename"], OP["renameat"], OP["renameat2"]):
            newdir = AT_FDCWD if op == OP["rename"] else int(e["arg"]) - (1 << 64) \
                if int(e["arg"]) >= (1 << 63) else int(e["arg"])
            return (self.resolve(p, dirfd, s1 or ""),
                    self.resolve(p, newdir, s2 or ""), -2)
        if op == OP["mmap"]:
            if ret >= 0 or ret < -4095:
                addr = ret & 0xFFFFFFFFFFFFFFFF
                fid = self.file_id(int(e["dev"]), int(e["ino"]), int(e["imode"]),
                                   int(e["fs_magic"]), None)
                p.maps[addr] = (int(e["req_bytes"]), fid)
            return None, None, -2
        if op == OP["munmap"]:
            addr = int(e["arg"])
            hit = p.maps.pop(addr, None)
            if hit is None:
                for start, (length, fid) in p.maps.items():
                    if start <= addr < start + length:
                        hit = (length, fid)
                        break
            # No file mapping there: anonymous memory (or mapped before the trace).
            return None, None, (hit[1] if hit else -2)
        if s1 is not None:  # stat family, unlink, mkdir, rmdir
            return self.resolve(p, dirfd, s1, flags), None, -2
        return None, None, -2

    # ---- attach-time snapshot ---------------------------------------------

    def fd_path(self, pid: int, fd: int, ident: Optional[tuple[int, int]] = None
                ) -> Optional[str]:
        """The path the fd table holds for (pid, fd); with `ident`, the (dev,
        ino) a call on the fd saw, None where the table's entry was made for
        another file (the fd was closed and reused where the trace did not
        see it: before the process was traced, or within the segment being
        converted, whose fd table is the segment's last), counted."""
        p = self.procs.get(pid)
        e = p.fds.get(fd) if p else None
        if e is None:
            return None
        if ident is not None and e.ident is not None and e.ident != ident:
            self.counters["fd_identity_mismatches"] += 1
            return None
        return e.path
