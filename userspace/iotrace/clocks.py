"""Clock pairs that put the traces of several hosts on one time axis.

Event times (`ts_ns`) are the host's CLOCK_MONOTONIC (the BPF clock): each
host's own, with its own origin. A trace records pairs of (monotonic,
realtime, TAI) readings at its start, every few seconds and at its end, and
the kernel's own view of how well its realtime clock is synchronised
(adjtimex: NTP/PTP discipline, estimated and maximum error). On one axis,
an event's wall time is ts_ns + (realtime - monotonic) of the pair nearest
in time; across hosts it is as good as the hosts' synchronisation (the
stated bound) plus the pair's own read error.
"""
from __future__ import annotations

import ctypes
import time
from typing import Optional

CLOCK_TAI = getattr(time, "CLOCK_TAI", 11)
STA_UNSYNC = 0x0040
TIME_ERROR = 5


class _Timex(ctypes.Structure):
    # struct timex of <sys/timex.h> (x86-64 / arm64 layout: longs and ints)
    _fields_ = [("modes", ctypes.c_uint), ("offset", ctypes.c_long), ("freq", ctypes.c_long),
                ("maxerror", ctypes.c_long), ("esterror", ctypes.c_long),
                ("status", ctypes.c_int), ("constant", ctypes.c_long),
                ("precision", ctypes.c_long), ("tolerance", ctypes.c_long),
                ("time_sec", ctypes.c_long), ("time_usec", ctypes.c_long),
                ("tick", ctypes.c_long), ("ppsfreq", ctypes.c_long), ("jitter", ctypes.c_long),
                ("shift", ctypes.c_int), ("stabil", ctypes.c_long), ("jitcnt", ctypes.c_long),
                ("calcnt", ctypes.c_long), ("errcnt", ctypes.c_long), ("stbcnt", ctypes.c_long),
                ("tai", ctypes.c_int), ("_pad", ctypes.c_int * 11)]


def sample() -> dict:
    """One (monotonic, realtime, TAI) reading: of three tries, the one whose
    two monotonic reads bracket the others most tightly; `err_ns` is half
    that bracket."""
    best = None
    for _ in range(3):
        m0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        rt = time.clock_gettime_ns(time.CLOCK_REALTIME)
        try:
            tai = time.clock_gettime_ns(CLOCK_TAI)
        except OSError:
            tai = None
        m1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        if best is None or m1 - m0 < best[1] - best[0]:
            best = (m0, m1, rt, tai)
    m0, m1, rt, tai = best
    return {"monotonic_ns": (m0 + m1) // 2, "realtime_ns": rt, "tai_ns": tai,
            "err_ns": (m1 - m0 + 1) // 2}


def sync_state() -> Optional[dict]:
    """The kernel's view of its realtime clock's discipline (adjtimex, read
    only): whether NTP/PTP keeps it synchronised and the error bounds it
    states. None where the call is not available."""
    try:
        # the process's own symbols (libc's among them): find_library("c")
        # would run `ldconfig -p` in a subprocess at the end of every trace
        libc = ctypes.CDLL(None, use_errno=True)
        tx = _Timex()
        state = libc.adjtimex(ctypes.byref(tx))
    except (OSError, AttributeError):
        return None
    if state < 0:
        return None
    synced = state != TIME_ERROR and not tx.status & STA_UNSYNC
    return {"synchronized": bool(synced), "max_error_us": int(tx.maxerror),
            "est_error_us": int(tx.esterror), "tai_offset_s": int(tx.tai)}


class ClockLog:
    """Pairs taken at the start, every `every_s` seconds and at the end."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.every_s = every_s
        self.samples: list[dict] = []
        self._last = 0.0

    def tick(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last >= self.every_s:
            self.samples.append(sample())
            self._last = now

    def meta(self) -> dict:
        return {"samples": self.samples, "sync": sync_state()}


def offset_ns(clock: dict, at_monotonic_ns: Optional[int] = None) -> int:
    """realtime - monotonic of the pair nearest `at_monotonic_ns` (default:
    the median pair): add it to a ts_ns for the wall time."""
    s = clock.get("samples") or []
    if not s:
        raise ValueError("no clock samples")
    if at_monotonic_ns is None:
        offs = sorted(x["realtime_ns"] - x["monotonic_ns"] for x in s)
        return offs[len(offs) // 2]
    x = min(s, key=lambda x: abs(x["monotonic_ns"] - at_monotonic_ns))
    return x["realtime_ns"] - x["monotonic_ns"]


def pair_error_ns(clock: dict) -> int:
    """The pairs' own error: their read error and their spread (a clock
    slewed during the trace): how well ts_ns maps to this host's realtime."""
    s = clock.get("samples") or []
    if not s:
        return 0
    offs = [x["realtime_ns"] - x["monotonic_ns"] for x in s]
    return max(x["err_ns"] for x in s) + (max(offs) - min(offs)) // 2


def error_bound_ns(clock: dict) -> Optional[int]:
    """How far this host's wall times may be off true time: the kernel's
    stated maximum error plus the pairs' read error and their spread (a
    clock slewed during the trace). None when the kernel says it is not
    synchronised."""
    sync = clock.get("sync") or {}
    if not clock.get("samples") or not sync.get("synchronized"):
        return None
    return sync["max_error_us"] * 1000 + pair_error_ns(clock)
