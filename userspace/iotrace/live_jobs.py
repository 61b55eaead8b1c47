"""Training jobs on a node as cgroups: each cgroup below a root whose path
relative to it matches a pattern is a job (a Kubernetes pod's, a Slurm
job's), labelled with that relative path; a process belongs to the
outermost such cgroup above it. Used by `iotrace exporter` and `iotrace top`.

A process is placed by /proc/PID/cgroup when first seen; one gone before
that inherits its parent's job (the recorder's fork records). A job whose
cgroup is removed is kept a grace period (its processes' last sums arrive
as they exit), then forgotten.
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Optional

from .procfs import cgroup_dir
from .tracedir import mount_table

CGROUP_FS = Path("/sys/fs/cgroup")
GONE_GRACE_S = 15.0         # a removed job's series stay this long
EXITED_KEEP_S = 60.0        # an exited process's job is remembered this long


def cgroup_root_dir(root: str) -> Path:
    """A cgroup's directory: absolute, or relative to /sys/fs/cgroup."""
    return Path(cgroup_dir(root))


def hierarchy(path: Path) -> tuple[Path, Optional[frozenset]]:
    """The cgroup file system a directory is in: its mount point, and its
    controllers (None: the unified, cgroup v2, hierarchy), from mountinfo;
    a machine may mount v1 hierarchies beside v2 (/sys/fs/cgroup/pids,
    /sys/fs/cgroup/unified)."""
    best: tuple[Path, Optional[frozenset]] = (CGROUP_FS, None)
    for mnt, fstype, opts in mount_table().values():
        mnt = Path(mnt)
        if fstype not in ("cgroup", "cgroup2") or not (path == mnt or mnt in path.parents) \
                or len(mnt.parts) < len(best[0].parts):
            continue
        best = (mnt, None if fstype == "cgroup2" else frozenset(
            o for o in opts.split(",") if o not in ("rw", "ro")
            and not o.startswith(("clone_children", "xattr", "nsdelegate",
                                  "memory_recursiveprot", "release_agent"))))
    return best


class Jobs:
    def __init__(self, root: str, match: Optional[str] = None,
                 forget_after_s: float = GONE_GRACE_S):
        self.root = cgroup_root_dir(root)
        self.forget_after_s = forget_after_s
        self.mount, self.controllers = hierarchy(self.root)
        self.pattern = re.compile(match) if match else None
        self._pid_job: dict[int, Optional[str]] = {}
        self._exited: dict[int, float] = {}
        self.live: set[str] = set()
        self.gone: dict[str, float] = {}     # job -> when its cgroup went
        self.unplaced_pids = 0               # processes seen with no job

    def job_of_path(self, rel: str) -> Optional[str]:
        """The outermost matching cgroup of a path relative to the root."""
        parts = [p for p in rel.split("/") if p]
        for i in range(1, len(parts) + 1):
            cand = "/".join(parts[:i])
            if self.pattern is None or self.pattern.fullmatch(cand):
                return cand
        return None

    def _read_pid(self, pid: int) -> Optional[str]:
        try:
            text = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            raise LookupError(pid) from None
        for line in text.splitlines():
            hid, _, rest = line.partition(":")
            ctl, _, path = rest.partition(":")
            mine = hid == "0" and not ctl if self.controllers is None else \
                frozenset(ctl.split(",")) == self.controllers
            if not mine:
                continue
            full = self.mount / path.lstrip("/")
            try:
                rel = full.relative_to(self.root)
            except ValueError:
                return None
            return self.job_of_path(str(rel))
        return None

    def job_of(self, pid: int) -> Optional[str]:
        if pid in self._pid_job:
            return self._pid_job[pid]
        try:
            job = self._read_pid(pid)
        except LookupError:
            return None             # gone before it was placed: not cached
        self._pid_job[pid] = job
        if job is None:
            self.unplaced_pids += 1
        return job

    def forked(self, parent: int, child: int) -> None:
        """A process made by a traced one: its job unless /proc says otherwise."""
        if child not in self._pid_job:
            try:
                self._pid_job[child] = self._read_pid(child)
            except LookupError:
                self._pid_job[child] = self.job_of(parent)

    def exited(self, pid: int) -> None:
        self._exited[pid] = time.monotonic()

    def scan(self) -> tuple[set[str], set[str]]:
        """The jobs whose cgroups exist now; returns (new ones, ones to
        forget: gone for the grace period)."""
        now = time.monotonic()
        seen: set[str] = set()
        if self.root.is_dir():
            for dirpath, dirnames, _ in os.walk(self.root):
                rel = os.path.relpath(dirpath, self.root)
                if rel == ".":
                    continue
                job = self.job_of_path(rel)
                if job:
                    seen.add(job)
                    dirnames[:] = []        # its sub-cgroups are the same job
        new = seen - self.live
        for job in self.live - seen:
            self.gone.setdefault(job, now)
        for job in seen:
            self.gone.pop(job, None)
        self.live = seen
        forget = {j for j, t in self.gone.items() if now - t >= self.forget_after_s}
        for j in forget:
            del self.gone[j]
        for pid, t in list(self._exited.items()):
            if now - t >= EXITED_KEEP_S:
                self._exited.pop(pid)
                self._pid_job.pop(pid, None)
        return new, forget


def _ppid_comm(pid: int) -> tuple[int, str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    comm = text[text.index("(") + 1:text.rindex(")")]
    return int(text[text.rindex(")") + 2:].split()[1]), comm


class PidJobs:
    """`iotrace top --pid N ...`: each traced process tree is a job, named by
    its root's pid and command; a process belongs to the root above it."""

    def __init__(self, pids: list[int]):
        self._pid_job: dict[int, Optional[str]] = {}
        for p in pids:
            try:
                comm = _ppid_comm(p)[1]
            except (OSError, ValueError):
                comm = "?"
            self._pid_job[p] = f"{p} {comm}"
        self.live = set(self._pid_job.values())
        self.gone: dict[str, float] = {}
        self.unplaced_pids = 0

    def job_of(self, pid: int) -> Optional[str]:
        if pid in self._pid_job:
            return self._pid_job[pid]
        seen, p = [], pid
        try:
            while p > 1 and p not in self._pid_job and len(seen) < 64:
                seen.append(p)
                p = _ppid_comm(p)[0]
        except (OSError, ValueError):
            return None
        job = self._pid_job.get(p)
        for q in seen:
            self._pid_job[q] = job
        return job

    def forked(self, parent: int, child: int) -> None:
        if child not in self._pid_job:
            self._pid_job[child] = self.job_of(parent)

    def exited(self, pid: int) -> None:
        pass

    def scan(self) -> tuple[set[str], set[str]]:
        return set(), set()
