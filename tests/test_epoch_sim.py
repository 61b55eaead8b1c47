"""The epoch simulation behind the what-if model's epoch restarts
(analyzers/epoch_sim.py), against timelines worked out by hand."""
from __future__ import annotations

import pytest

from iotrace.analyzers.epoch_sim import Pipeline, epoch, restart_extra

MS = 1e-3


def test_producers_the_limit():
    """2 workers, 80 ms a batch, a 20 ms step: the first two batches come
    together at 80 ms, then two every 80 ms; the epoch of 12 ends 40 ms
    (one batch's steady share) after a steady stream's would."""
    p = Pipeline(producers=2, fetch_s=0, cpu_s=80 * MS, loop_s=20 * MS)
    t = epoch(p, 12)
    assert t[:5] == pytest.approx([80 * MS, 100 * MS, 160 * MS, 180 * MS, 240 * MS])
    # one restart: 40 ms late; the first epoch in the window (from its first
    # batch) 40 ms early, as two batches were ready at once
    assert restart_extra(p, 12, 1, 0.0) == pytest.approx(0.0, abs=1e-9)
    assert restart_extra(p, 12, 2, 5 * MS) == pytest.approx(40 * MS + 2 * 5 * MS, abs=1e-9)


def test_loop_the_limit():
    """A 40 ms step with 2 workers of 80 ms: the loop never waits once the
    first batch came, which it waited a whole batch for: a restart costs 80
    ms, and the window's first epoch nothing."""
    p = Pipeline(producers=2, fetch_s=0, cpu_s=80 * MS, loop_s=40 * MS)
    t = epoch(p, 12)
    assert t == pytest.approx([80 * MS + i * 40 * MS for i in range(12)])
    assert restart_extra(p, 12, 1, 0.0) == pytest.approx(80 * MS, abs=1e-9)


def test_more_producers_than_cpus():
    """4 workers of 80 ms of CPU on 2 CPUs share them: all four first
    batches at 160 ms; a 13th batch, alone, takes its 80 ms."""
    p = Pipeline(producers=4, fetch_s=0, cpu_s=80 * MS, loop_s=10 * MS, cpus=2)
    t = epoch(p, 13)
    assert t[:4] == pytest.approx([160 * MS, 170 * MS, 180 * MS, 190 * MS])
    assert t[4] == pytest.approx(320 * MS)
    assert t[12] == pytest.approx(480 * MS + 80 * MS)


def test_storage_shared():
    """2 workers whose fetches (50 ms alone) share a storage that serves one
    at full speed: their first fetches end together at 100 ms."""
    p = Pipeline(producers=2, fetch_s=50 * MS, cpu_s=0, loop_s=1 * MS, fetch_slots=1)
    assert epoch(p, 2) == pytest.approx([100 * MS, 101 * MS])
