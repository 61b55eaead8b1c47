"""live_loops.py's choice of a process's loop and its data waits, from
wake-up sums made by hand (the shapes the recorder sends for a DataLoader
with and without a pin-memory thread, a Pool, workers waiting for work, a
burst of short commands, a thread-fed loop). The measured checks against
DLIO and PyTorch's own clocks are in test_exporter.py."""
from __future__ import annotations

import numpy as np

from iotrace.live_loops import LoopWaits
from iotrace.profile import WAKE_DTYPE

MAIN, PIN, FEEDER, W1, W2 = 100, 101, 102, 200, 201


def rows(*r) -> np.ndarray:
    """(sec, pid, tid, waker_pid, waker_tid, wakes, seconds)"""
    return np.array([(s, p, t, wp, wt, 0, n, int(d * 1e9)) for s, p, t, wp, wt, n, d in r],
                    dtype=WAKE_DTYPE)


def tree() -> LoopWaits:
    lw = LoopWaits()
    lw.parent.update({MAIN: 1, W1: MAIN, W2: MAIN})
    lw.ranks[MAIN] = "0"
    return lw


def test_workers_feed_the_main_thread_and_wait_for_work():
    """The main thread woken by its two workers waits for data; the workers,
    woken by the main thread's feeder, wait for work: not counted."""
    lw = tree()
    got = lw.add(rows((10, MAIN, MAIN, W1, W1, 5, 0.2), (10, MAIN, MAIN, W2, W2, 5, 0.1),
                      (11, MAIN, MAIN, W1, W1, 4, 0.3),
                      (10, W1, W1, MAIN, FEEDER, 9, 0.8), (11, W2, W2, MAIN, FEEDER, 9, 0.9),
                      (11, MAIN, FEEDER, MAIN, MAIN, 20, 0.9)))
    assert lw.loops == {MAIN: (MAIN, 0)}
    assert abs(got[MAIN] - 0.6) < 1e-9, got


def test_a_relay_hands_its_waits_to_the_main_thread():
    """A pin-memory thread woken by the workers that wakes the main thread:
    the main thread is the loop, its time woken by the relay counts, the
    relay's own waits (it waits for workers while the loop computes) do not."""
    lw = tree()
    got = lw.add(rows((10, MAIN, PIN, W1, W1, 8, 0.9), (11, MAIN, PIN, W2, W2, 8, 0.9),
                      (10, MAIN, MAIN, MAIN, PIN, 4, 0.25), (11, MAIN, MAIN, MAIN, PIN, 4, 0.15),
                      (11, MAIN, MAIN, MAIN, FEEDER, 3, 0.5)))     # not the relay: not counted
    assert lw.loops == {MAIN: (MAIN, PIN)}
    assert abs(got[MAIN] - 0.4) < 1e-9, got


def test_first_waits_count_once_the_loop_is_found():
    """A loop found in its second drain: its first drain's waits count too,
    once."""
    lw = tree()
    assert lw.add(rows((10, MAIN, MAIN, W1, W1, 1, 0.5))) == {}
    got = lw.add(rows((11, MAIN, MAIN, W1, W1, 3, 0.25)))
    assert abs(got[MAIN] - 0.75) < 1e-9, got
    got = lw.add(rows((12, MAIN, MAIN, W2, W2, 3, 0.125)))
    assert abs(got[MAIN] - 0.125) < 1e-9, got


def test_short_commands_at_start_are_not_a_loop():
    """Children that each wake their parent once as they end, all within one
    second (a launcher's subprocess calls): no loop, nothing counted."""
    lw = LoopWaits()
    lw.parent.update({MAIN: 1, 300: MAIN, 301: MAIN, 302: MAIN, 303: MAIN})
    got = lw.add(rows(*[(10, MAIN, MAIN, c, c, 1, 0.05) for c in (300, 301, 302, 303)]))
    assert got == {} and lw.loops == {}


def test_a_thread_fed_loop_is_not_measured():
    """Reader threads of the loop's own process: no descendant wakes it, so
    it is not a loop here (unknown live, not a 0% wait)."""
    lw = tree()
    got = lw.add(rows((10, MAIN, MAIN, MAIN, 105, 30, 0.7), (11, MAIN, MAIN, MAIN, 106, 30, 0.6)))
    assert got == {} and lw.loops == {}


def test_parents_found_in_proc_and_forgotten_after_exit():
    """A worker whose fork was not seen: its parent from /proc (here, this
    test's own process and its parent)."""
    import os
    lw = LoopWaits()
    assert lw.descends(os.getpid(), os.getppid())
    assert not lw.descends(os.getppid(), os.getpid())
    lw.forked(os.getpid(), 999999)
    assert lw.descends(999999, os.getpid())
