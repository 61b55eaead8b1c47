"""The training loop's data waits, live (`iotrace exporter`, `iotrace top`).

The recorder's --loop-waits sums, per second, how long each thread of the
followed jobs was blocked until another thread of theirs woke it
(wakes-N.bin: woken pid and tid, waker pid and tid, wake-ups, seconds off
CPU). A live profile has no Python stacks and no per-call records, so the
loop and its waits are found from those sums alone, per process:

- A thread woken by a thread of one of the process's descendants waits for
  data for that long: the loader's worker processes hand it a batch. The
  workers, woken by their parent (indices to load), wait for work: that is
  not counted.
- The process's loop is its main thread when the main thread is woken that
  way. A thread of the process woken that way that wakes the main thread in
  turn is a relay (PyTorch's pin-memory thread): the main thread's time
  woken by it counts too. Otherwise (a loop on another thread) the thread
  woken most that way is the loop.
- A process is a loop only with at least MIN_WAKES such wake-ups, in
  MIN_SECONDS different seconds, in the last WINDOW_S seconds. A process that loads its own data, or takes it from
  threads of its own, is not measured live: it has no series (unknown, not
  zero); `iotrace run` finds those loops from a full trace.

What it cannot see: time on CPU inside the loader's next() (unpickling,
collating), which a full trace with Python stacks counts; the loop's
freeing of the batches' shared memory (file_release records), which a full
trace counts in its waits; a wait still in progress (counted when it ends,
in the second it ends).
"""
from __future__ import annotations

import time
from collections import defaultdict
from typing import Optional

import numpy as np

from .profile import WAKE_DTYPE

WINDOW_S = 10          # seconds of wake-ups the loop is chosen from
MIN_WAKES = 3          # wake-ups by descendants in the window to call a process a loop
MIN_SECONDS = 2        # ... in this many seconds of it at least (not a burst of
                       # short commands run at start, each waking its parent as it ends)
KEEP_EXITED_S = 60.0   # an exited process's parent is kept this long (late rows)
RANK_VARS = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


def _proc_ppid(pid: int) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # the name (field 2) may hold spaces and parentheses: fields after its last ')'
    return int(stat[stat.rindex(")") + 2:].split()[1])


def proc_rank(pid: int) -> str:
    """The rank a launcher gave the process (its environment), or pid:N."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    except OSError:
        env = {}
    for var in RANK_VARS:
        v = env.get(var.encode())
        if v is not None and v.isdigit():
            return v.decode()
    return f"pid:{pid}"


class LoopWaits:
    """Finds the loops and adds up their data waits from the wake-up sums."""

    def __init__(self):
        self.parent: dict[int, Optional[int]] = {}
        self.exited_at: dict[int, float] = {}
        self.window = np.zeros(0, WAKE_DTYPE)
        self.window_kind = np.zeros(0, np.int8)
        # pid -> (loop tid, relay tid or 0), as chosen at the last add()
        self.loops: dict[int, tuple[int, int]] = {}
        self.ranks: dict[int, str] = {}

    # ---- process tree -----------------------------------------------------
    def forked(self, parent: int, child: int) -> None:
        self.parent[child] = parent

    def exited(self, pid: int) -> None:
        self.exited_at[pid] = time.monotonic()
        now = self.exited_at[pid]
        for p in [p for p, t in self.exited_at.items() if now - t > KEEP_EXITED_S]:
            del self.exited_at[p]
            self.parent.pop(p, None)
            self.loops.pop(p, None)
            self.ranks.pop(p, None)

    def joined(self, pid: int) -> None:
        """A process found in the tree, not by its fork: its parent now,
        while /proc has it (a worker may be gone when its wake-ups arrive)."""
        if self.parent.get(pid) is None:
            self.parent[pid] = _proc_ppid(pid)

    def _ppid(self, pid: int) -> Optional[int]:
        if self.parent.get(pid) is None:
            self.parent[pid] = _proc_ppid(pid)
        return self.parent[pid]

    def descends(self, pid: int, ancestor: int) -> bool:
        for _ in range(16):
            pid = self._ppid(pid)
            if not pid or pid <= 1:
                return False
            if pid == ancestor:
                return True
        return False

    # ---- the sums -----------------------------------------------------------
    CHILD, THREAD, OTHER = 1, 2, 0

    def _kinds(self, rows: np.ndarray) -> np.ndarray:
        kinds = np.zeros(len(rows), np.int8)
        memo: dict[tuple[int, int], bool] = {}
        for i, (pid, wpid) in enumerate(zip(rows["pid"].tolist(), rows["waker_pid"].tolist())):
            if wpid == pid:
                kinds[i] = self.THREAD
                continue
            key = (wpid, pid)
            if key not in memo:
                memo[key] = self.descends(wpid, pid)
            if memo[key]:
                kinds[i] = self.CHILD
        return kinds

    def _choose(self) -> None:
        """Each process's loop (and relay) from the window's wake-ups."""
        w, k = self.window, self.window_kind
        loops: dict[int, tuple[int, int]] = {}
        child = w[k == self.CHILD]
        if not len(child):
            self.loops = loops
            return
        direct: dict[int, dict[int, list]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
        seconds: dict[tuple[int, int], set] = defaultdict(set)
        for sec, pid, tid, n, d in zip(child["sec"].tolist(), child["pid"].tolist(),
                                       child["tid"].tolist(), child["wakes"].tolist(),
                                       child["dur_ns"].tolist()):
            direct[pid][tid][0] += n
            direct[pid][tid][1] += d
            seconds[(pid, tid)].add(sec)
        thread = w[k == self.THREAD]
        woke_main: dict[tuple[int, int], int] = defaultdict(int)
        for pid, tid, wtid, n in zip(thread["pid"].tolist(), thread["tid"].tolist(),
                                     thread["waker_tid"].tolist(), thread["wakes"].tolist()):
            if tid == pid:
                woke_main[(pid, wtid)] += n
        for pid, by_tid in direct.items():
            top = max(by_tid, key=lambda t: by_tid[t][1])
            if top != pid and woke_main.get((pid, top), 0) >= MIN_WAKES:
                tid, relay = pid, top       # the main thread, fed by a relay
            else:
                tid, relay = top, 0
            if by_tid[top][0] >= MIN_WAKES and len(seconds[(pid, top)]) >= MIN_SECONDS:
                loops[pid] = (tid, relay)
        for pid in loops:
            if pid not in self.ranks:
                self.ranks[pid] = proc_rank(pid)
        self.loops = loops

    def add(self, rows: np.ndarray) -> dict[int, float]:
        """Takes a drain's wake-up sums; returns the new data-wait seconds
        per loop process (only processes that are loops now)."""
        if not len(rows):
            return {}
        kinds = self._kinds(rows)
        self.window = np.concatenate([self.window, rows])
        self.window_kind = np.concatenate([self.window_kind, kinds])
        keep = self.window["sec"] + WINDOW_S > int(self.window["sec"].max())
        self.window, self.window_kind = self.window[keep], self.window_kind[keep]
        before = self.loops
        self._choose()
        # a process that has just become a loop: its waits in the window
        # before this drain count too (a job's first waits come before it
        # has MIN_WAKES of them)
        new = {pid for pid in self.loops if pid not in before}
        older = self.window[:len(self.window) - len(rows)] if new else rows[:0]
        mask = np.isin(older["pid"], list(new)) if new else np.zeros(0, bool)
        older_kinds = self.window_kind[:len(self.window) - len(rows)][mask] if new else kinds[:0]
        older = older[mask]
        every = np.concatenate([older, rows])
        every_kinds = np.concatenate([older_kinds, kinds])
        out: dict[int, float] = defaultdict(float)
        for pid, tid, wtid, d, kind in zip(every["pid"].tolist(), every["tid"].tolist(),
                                           every["waker_tid"].tolist(),
                                           every["dur_ns"].tolist(), every_kinds.tolist()):
            loop = self.loops.get(pid)
            if loop is None or tid != loop[0]:
                continue
            if kind == self.CHILD or (kind == self.THREAD and loop[1] and wtid == loop[1]):
                out[pid] += d / 1e9
        return dict(out)

    def rank(self, pid: int) -> str:
        return self.ranks.get(pid) or proc_rank(pid)
