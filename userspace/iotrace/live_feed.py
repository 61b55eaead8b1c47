"""The recorder run for live use (`iotrace exporter`, `iotrace top`): a
profile that follows a cgroup tree, whose output is read as it comes and
deleted, so that nothing grows however long it runs.

The recorder (userspace/recorder) writes to a spool directory:
  rates-NNNNNN.bin  each second's sums per process and op (--rates-files:
                    one file a drain, renamed whole; profile.py RATE_DTYPE)
  wakes-NNNNNN.bin  with loop_waits: each second's blocked time per woken
                    thread and waker thread (profile.py WAKE_DTYPE), written
                    before the same drain's rates file
  NNNNNN.ev/.str    the records still kept one by one in a profile: process
                    life and block-device requests (abi.EVENT_DTYPE), whole
                    once the .ev name appears, read in order
and JSON status lines on a pipe (ready, stats every 500 ms, joined, end).
This module starts it, reads the three, and deletes what it read.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path
from typing import Optional

import numpy as np

from .abi import EF_NET_DATA, EVENT_DTYPE
from .convert import read_segment
from .errors import EXIT_ENV, IotraceError
from .live_files import OPEN_CODES
from .profile import FILE_DTYPE, RATE_DTYPE, WAKE_DTYPE, read_rows
from .session import StatusPipe, recorder_path

RATES_RE = re.compile(r"rates-(\d+)\.bin")
WAKES_RE = re.compile(r"wakes-(\d+)\.bin")
FILES_RE = re.compile(r"files-(\d+)\.bin")
SEGMENT_RE = re.compile(r"(\d+)\.ev")


class LiveRecorder:
    """One recorder in profile mode following the processes of a cgroup tree
    (or the process trees of some pids)."""

    def __init__(self, spool: Path, cgroup_root: Optional[str] = None,
                 pids: tuple = (), ringbuf_mb: int = 16, loop_waits: bool = True,
                 http: bool = True, file_sums: bool = False):
        self.spool = spool
        self.args = ["--profile", "--rates-files", "--ringbuf-mb", str(ringbuf_mb)]
        if loop_waits:
            self.args.append("--loop-waits")
        if http:
            self.args.append("--live-http")
        self.file_sums = file_sums
        if file_sums:
            self.args.append("--file-sums")
        if cgroup_root:
            self.args += ["--follow-cgroup", cgroup_root]
        for pid in pids:
            self.args += ["--pid", str(pid)]
        self.proc: Optional[subprocess.Popen] = None
        self.ready: Optional[dict] = None
        self.stats: dict = {}
        self.end: Optional[dict] = None
        self._status: Optional[StatusPipe] = None
        self.joined = 0                     # processes the recorder found in the tree
        self.joined_pids: list[int] = []    # ... not yet taken (take_joined)

    def start(self, timeout: float = 30.0) -> None:
        self.spool.mkdir(parents=True, exist_ok=True)
        rfd, wfd = os.pipe()
        cmd = [recorder_path(), "--spool", str(self.spool), "--status-fd", str(wfd),
               *self.args]
        try:
            self.proc = subprocess.Popen(cmd, pass_fds=(wfd,), stdin=subprocess.DEVNULL)
        except OSError as e:
            raise IotraceError(f"cannot start the recorder {cmd[0]}: {e.strerror}", EXIT_ENV)
        os.close(wfd)
        self._status = StatusPipe(rfd)
        waited = 0.0
        while self.ready is None and self.end is None and waited < timeout:
            if not self.read_status(1.0) and self.proc.poll() is not None:
                break
            waited += 1.0
        if self.ready is None:
            self.stop()
            why = (self.end or {}).get("message") or (self.end or {}).get("error") \
                or "it exited before it was ready (run `iotrace doctor`)"
            raise IotraceError(f"the recorder did not start: {why}", EXIT_ENV)

    def read_status(self, timeout: float = 0.0) -> bool:
        """Reads the status lines waiting (the recorder blocks when the pipe
        is full: call this often)."""
        msgs = self._status.read(timeout) if self._status is not None else None
        for msg in msgs or ():
            kind = msg.get("type")
            if kind == "ready":
                self.ready = msg
            elif kind == "stats":
                self.stats = msg
            elif kind == "joined":
                self.joined += 1
                if isinstance(msg.get("pid"), int):
                    self.joined_pids.append(msg["pid"])
            elif kind in ("end", "error"):
                self.end = msg
        return msgs is not None

    def take_joined(self) -> list[int]:
        """The processes the recorder found in the tree (not by a traced
        process's fork) since the last call."""
        pids, self.joined_pids = self.joined_pids, []
        return pids

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _closed(self, pattern: re.Pattern) -> list[Path]:
        """The spool's closed files of one kind, in the order written."""
        found = (pattern.fullmatch(n) for n in os.listdir(self.spool))
        return [self.spool / m.group(0) for m in sorted(
            (m for m in found if m), key=lambda m: int(m.group(1)))]

    def _take(self, pattern: re.Pattern, dtype: np.dtype) -> np.ndarray:
        """The rows of one kind of drain file written since the last call, deleted."""
        parts = []
        for path in self._closed(pattern):
            parts.append(read_rows(path, dtype))
            path.unlink()
        return np.concatenate(parts) if parts else np.zeros(0, dtype)

    def take_rates(self) -> np.ndarray:
        """The per-second sums per process, op and file device."""
        return self._take(RATES_RE, RATE_DTYPE)

    def take_wakes(self) -> np.ndarray:
        """The per-second wake-up sums (call before take_rates: a drain
        writes its wakes first)."""
        return self._take(WAKES_RE, WAKE_DTYPE)

    def take_files(self) -> np.ndarray:
        """The per-(process, file) sums."""
        return self._take(FILES_RE, FILE_DTYPE)

    def take_records(self) -> tuple[np.ndarray, dict[int, bytes]]:
        """The records of the segments closed since the last call, in order,
        and the payloads of those that carry an HTTP message start, and of
        the opens with file_sums (by index in the records); deleted (the
        other payloads are not needed live)."""
        parts, payloads, n = [], {}, 0
        for path in self._closed(SEGMENT_RE):
            recs, pay = read_segment(path)
            keep = recs["eflags"] & EF_NET_DATA != 0
            if self.file_sums:          # the files' names, for the top files
                keep |= np.isin(recs["op"], OPEN_CODES)
            for i in np.flatnonzero(keep):
                if int(i) in pay:
                    payloads[n + int(i)] = pay[int(i)]
            parts.append(recs)
            n += len(recs)
            path.unlink()
            path.with_suffix(".str").unlink(missing_ok=True)
        return (np.concatenate(parts) if parts else np.zeros(0, EVENT_DTYPE)), payloads

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            while self.proc.poll() is None and timeout > 0:
                self.read_status(0.25)
                timeout -= 0.25
            self.proc.wait(timeout=max(timeout, 0.1))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.read_status(0.0)
        if self._status is not None:
            self._status.close()
            self._status = None
