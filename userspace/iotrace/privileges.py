"""Who the job runs as, and whether we may trace at all."""
from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from typing import Optional

CAP_SYS_NICE, CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 23, 21, 38, 39


def effective_caps() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


def can_trace() -> bool:
    """CAP_BPF + CAP_PERFMON, or CAP_SYS_ADMIN, in the effective set: what
    loading and attaching the probes needs. root has them (unless a container
    took them away: then uid 0 is not enough); a non-root user granted them
    (setpriv/capsh ambient capabilities, systemd AmbientCapabilities=) may trace."""
    caps = effective_caps()
    has = lambda c: bool(caps >> c & 1)  # noqa: E731
    return has(CAP_SYS_ADMIN) or (has(CAP_BPF) and has(CAP_PERFMON))


@dataclass
class InvokingUser:
    uid: int
    gid: int
    groups: list[int]
    name: str
    home: str


def invoking_user() -> Optional[InvokingUser]:
    """The user behind sudo, if iotrace runs as root through sudo."""
    if os.geteuid() != 0 or "SUDO_UID" not in os.environ:
        return None
    uid = int(os.environ["SUDO_UID"])
    gid = int(os.environ.get("SUDO_GID", uid))
    if uid == 0:
        return None
    try:
        pw = pwd.getpwuid(uid)
        name, home = pw.pw_name, pw.pw_dir
        groups = os.getgrouplist(name, gid)
    except KeyError:
        name, home, groups = os.environ.get("SUDO_USER", str(uid)), "/", [gid]
    return InvokingUser(uid, gid, groups, name, home)


def job_env(user: Optional[InvokingUser]) -> dict:
    env = dict(os.environ)
    if user:
        env.update(HOME=user.home, USER=user.name, LOGNAME=user.name)
    return env


def chown_tree(root: str, user: Optional[InvokingUser]) -> None:
    if not user:
        return
    for dirpath, dirnames, filenames in os.walk(root):
        os.chown(dirpath, user.uid, user.gid)
        for name in filenames:
            try:
                os.chown(os.path.join(dirpath, name), user.uid, user.gid)
            except FileNotFoundError:
                pass
