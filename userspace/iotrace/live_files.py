"""The files each job read and wrote most, live (`iotrace exporter
--top-files N`, off by default: it exports file names).

The recorder's --file-sums sends, each drain, what each process's reads and
writes of each regular file moved (files-N.bin); a file's name comes from
the record of its first open that a profile keeps (the path as the process
gave it: relative paths stay relative). This keeps the last WINDOW_S
seconds of those sums per job and file, and the names of up to MAX_NAMES
files (the least recently used are forgotten). A file opened before the
recorder followed its process (a process in its first 200 ms, before the
recorder finds it in the cgroup) is named from the process's open file
descriptors (/proc/PID/fd) while it has it open; one whose name is not
known is shown as dev:MAJOR:MINOR:ino:N.
"""
from __future__ import annotations

import os
import time
from collections import OrderedDict, defaultdict, deque

import numpy as np

from .abi import OP_NAMES, OPEN_OPS
from .storage_io import _kernel_dev

WINDOW_S = 10.0
MAX_NAMES = 200_000
OPEN_CODES = [OP_NAMES.index(o) for o in OPEN_OPS]
S_IFMT, S_IFREG = 0o170000, 0o100000


class TopFiles:
    def __init__(self):
        self.names: OrderedDict[tuple[int, int], str] = OrderedDict()
        self.window: deque = deque()       # (monotonic s, {(job, dev, ino): [read, write]})
        self.looked_up: set[tuple[int, int]] = set()   # files searched for in /proc once

    def add_opens(self, recs: np.ndarray, payloads: dict[int, bytes]) -> None:
        """Names of the regular files the records open."""
        ok = np.isin(recs["op"], OPEN_CODES) & (recs["ret"] >= 0) & (recs["ino"] != 0) & \
            ((recs["imode"].astype(np.int64) & S_IFMT) == S_IFREG)
        for i in np.flatnonzero(ok):
            data = payloads.get(int(i))
            if not data:
                continue
            key = (int(recs["dev"][i]), int(recs["ino"][i]))
            self.names[key] = data.split(b"\0")[0].decode("utf-8", errors="replace")
            self.names.move_to_end(key)
        while len(self.names) > MAX_NAMES:
            self.names.popitem(last=False)

    def add(self, rows: np.ndarray, job_of) -> None:
        """One drain's sums per (process, file)."""
        now = time.monotonic()
        if len(rows):
            sums: dict[tuple, list] = defaultdict(lambda: [0, 0])
            jobs = {int(p): job_of(int(p)) for p in np.unique(rows["pid"])}
            for pid, dev, ino, rd, wr in zip(rows["pid"].tolist(), rows["dev"].tolist(),
                                             rows["ino"].tolist(), rows["read_bytes"].tolist(),
                                             rows["write_bytes"].tolist()):
                if (dev, ino) not in self.names and (dev, ino) not in self.looked_up:
                    self._from_fds(pid, dev, ino)
                job = jobs[pid]
                if job is not None:
                    s = sums[(job, dev, ino)]
                    s[0] += rd
                    s[1] += wr
            self.window.append((now, dict(sums)))
        while self.window and now - self.window[0][0] > WINDOW_S:
            self.window.popleft()

    def _from_fds(self, pid: int, dev: int, ino: int) -> None:
        """The file's name from one of the process's open descriptors."""
        if len(self.looked_up) >= MAX_NAMES:
            self.looked_up.clear()
        self.looked_up.add((dev, ino))
        want = os.makedev(*_kernel_dev(dev))
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            return
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
                if st.st_ino == ino and st.st_dev == want:
                    self.names[(dev, ino)] = os.readlink(f"/proc/{pid}/fd/{fd}")
                    return
            except OSError:
                continue

    def name(self, dev: int, ino: int) -> str:
        name = self.names.get((dev, ino))
        if name is not None:
            return name
        major, minor = _kernel_dev(dev)
        return f"dev:{major}:{minor}:ino:{ino}"

    def top(self, n: int) -> dict[str, list[tuple[str, int, int]]]:
        """Per job its n files with the most bytes read and written in the
        window: (name, read bytes, written bytes)."""
        total: dict[tuple, list] = defaultdict(lambda: [0, 0])
        for _, sums in self.window:
            for key, (rd, wr) in sums.items():
                t = total[key]
                t[0] += rd
                t[1] += wr
        per_job: dict[str, list] = defaultdict(list)
        for (job, dev, ino), (rd, wr) in total.items():
            per_job[job].append((rd + wr, dev, ino, rd, wr))
        out = {}
        for job, files in per_job.items():
            files.sort(reverse=True)
            out[job] = [(self.name(dev, ino), rd, wr) for _, dev, ino, rd, wr in files[:n]]
        return out

    def forget(self, jobs: set[str]) -> None:
        for _, sums in self.window:
            for key in [k for k in sums if k[0] in jobs]:
                del sums[key]
