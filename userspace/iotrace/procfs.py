"""What /proc says about processes that existed before tracing began."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from .model import FdEntry, Model, Thread, decode_cmdline, path_text


def _read(path: str) -> Optional[bytes]:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def ppid_of(pid: int) -> int:
    raw = _read(f"/proc/{pid}/stat")
    if not raw:
        return 0
    rest = raw[raw.rfind(b")") + 2:].split()
    return int(rest[1])


def descendants(root: int) -> list[int]:
    """root and every process below it, parents first."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            children.setdefault(ppid_of(int(name)), []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        out.append(pid)
        todo.extend(sorted(children.get(pid, [])))
    return out


def kernel_dev(st_dev: int) -> int:
    """stat's dev_t -> the kernel's internal encoding used by the BPF side."""
    return (os.major(st_dev) << 20) | os.minor(st_dev)


# Where launchers put a process's rank (torchrun, Slurm, Open MPI, PMIx, MPICH).
RANK_VARS = (b"RANK", b"SLURM_PROCID", b"OMPI_COMM_WORLD_RANK", b"PMIX_RANK", b"PMI_RANK")
LOCAL_RANK_VARS = (b"LOCAL_RANK", b"SLURM_LOCALID", b"OMPI_COMM_WORLD_LOCAL_RANK",
                   b"MPI_LOCALRANKID")


def read_rank(p) -> None:
    """Sets a process's rank and local rank from its environment, where a
    launcher put them (only these variables are read, nothing else kept)."""
    raw = _read(f"/proc/{p.pid}/environ")
    if not raw:
        return
    env = dict(kv.split(b"=", 1) for kv in raw.split(b"\0") if b"=" in kv)
    for attr, names in (("rank", RANK_VARS), ("local_rank", LOCAL_RANK_VARS)):
        v = next((env[n] for n in names if n in env), None)
        if v is not None and v.strip().isdigit():
            setattr(p, attr, int(v))


def cgroup_dir(path: str) -> str:
    """A cgroup's directory: absolute, or relative to /sys/fs/cgroup."""
    return path if path.startswith("/") else os.path.join("/sys/fs/cgroup", path)


def cgroup_roots(path: str, follow: bool = False) -> list[int]:
    """The processes of a cgroup and of the cgroups below it whose parent is
    not among them: the roots of its process trees. Raises IotraceError.
    follow: the cgroup may be empty, or not there yet (a job about to start)."""
    from .errors import EXIT_ENV, IotraceError
    base = cgroup_dir(path)
    if follow and not os.path.exists(base):
        parent = os.path.dirname(base.rstrip("/"))
        while parent != "/" and not os.path.exists(parent):
            parent = os.path.dirname(parent)
        if not os.path.isfile(os.path.join(parent, "cgroup.procs")):
            raise IotraceError(f"{base}: not under a cgroup file system ({parent} is not a "
                               "cgroup): give a directory under /sys/fs/cgroup", EXIT_ENV)
        return []
    if not os.path.isfile(os.path.join(base, "cgroup.procs")):
        raise IotraceError(f"{base} is not a cgroup (no cgroup.procs): give a directory "
                           "under /sys/fs/cgroup (`cat /proc/PID/cgroup` names a process's)",
                           EXIT_ENV)
    pids: set[int] = set()
    for d, _, names in os.walk(base):
        if "cgroup.procs" in names:
            raw = _read(os.path.join(d, "cgroup.procs")) or b""
            pids.update(int(x) for x in raw.split())
    if not pids and not follow:
        raise IotraceError(f"the cgroup {base} has no processes: attach once the job runs, "
                           "or add --follow to wait for them", EXIT_ENV)
    return sorted(p for p in pids if ppid_of(p) not in pids)


def snapshot_process(model: Model, pid: int, ts: int) -> None:
    """Adds a process that already runs: cmdline, cwd, threads, open fds
    (regular files are registered so their paths are known)."""
    comm = (_read(f"/proc/{pid}/comm") or b"").decode(errors="replace").strip()
    p = model.add_process(pid, ppid_of(pid), ts, comm=comm,
                          cmdline=decode_cmdline(_read(f"/proc/{pid}/cmdline") or b""))
    p.seen_before_trace = True
    read_rank(p)
    try:
        p.cwd = path_text(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        pass
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        tids = [pid]
    for tid in tids:
        name = (_read(f"/proc/{pid}/task/{tid}/comm") or b"").decode(errors="replace").strip()
        model.threads[tid] = Thread(tid=tid, pid=pid, name=name, start_ns=ts)
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        fds = []
    for name in fds:
        fd = int(name)
        try:
            target = path_text(os.readlink(f"/proc/{pid}/fd/{fd}"))
            st = os.stat(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        # Not a path for pipes, sockets, anon inodes: "pipe:[123]" names them.
        path = target[: -len(" (deleted)")] if target.endswith(" (deleted)") else target
        p.fds[fd] = FdEntry(path, ident=(kernel_dev(st.st_dev), st.st_ino))
        if path.startswith("/"):
            model.file_id(kernel_dev(st.st_dev), st.st_ino, st.st_mode, 0, path)


def fuse_daemons() -> list[int]:
    """Processes that hold /dev/fuse open: the FUSE file systems' daemons
    (s3fs, Mountpoint, gcsfuse...), which serve a job's reads on their mounts
    from outside its process tree."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            for fd in (d / "fd").iterdir():
                if os.readlink(fd) == "/dev/fuse":
                    out.append(int(d.name))
                    break
        except OSError:
            continue
    return sorted(out)
