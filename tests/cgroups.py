"""A cgroup of the tests' (and benchmarks') own to put processes in, and its
removal. No pytest here: bench/ scripts import it too."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

CGROUP_FS = Path("/sys/fs/cgroup")


def new_cgroup(name: str) -> Optional[Path]:
    """A new cgroup: cgroup v2, else v1's pids hierarchy, else v2 mounted
    beside v1 (/sys/fs/cgroup/unified); None where none can be made."""
    for base in (CGROUP_FS, CGROUP_FS / "pids", CGROUP_FS / "unified"):
        if (base / "cgroup.procs").exists():
            try:
                (base / name).mkdir(exist_ok=True)
                return base / name
            except OSError:
                continue
    return None


def remove_cgroup(path: Path) -> None:
    """The cgroup and the cgroups below it, innermost first (they must be empty)."""
    for d in sorted(path.rglob("*"), key=lambda p: -len(p.parts)):
        if d.is_dir():
            d.rmdir()
    path.rmdir()
