"""One epoch of a DataLoader-like pipeline, simulated: what the what-if
model (whatif.py) adds to its steady pace where the producers start anew
each epoch (a PyTorch DataLoader without persistent workers).

Why a simulation and not a formula: an epoch's start is a transient. All P
workers start at once with empty queues, so the loop waits for the first
batch a whole batch's time (not the steady share of it), then takes P
batches that came together; with more workers than CPUs they share the CPUs
and all finish their first batches late and together; an epoch whose
batches do not divide among the workers ends with one worker alone. A few
hundred events per epoch settle it exactly for the model's inputs.

The pipeline: batch i goes to producer i mod P, which makes its batches in
order, each a fetch (f seconds alone; the storage's rate, where it is a
ceiling, shared by the producers fetching) then CPU work (r seconds alone;
the K CPUs shared by the producers on CPU). A producer may hold PREFETCH of
its batches' indices ahead: batch i's index is handed out when the loop
took batch i - PREFETCH * P. The loop takes the batches in order, L seconds
a step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

PREFETCH = 2            # batches a producer holds ahead (DataLoader's prefetch_factor)


@dataclass
class Pipeline:
    producers: int
    fetch_s: float          # one batch's fetch, for a producer alone
    cpu_s: float            # one batch's CPU work, for a producer alone
    loop_s: float           # the loop's step
    cpus: float = math.inf
    # the storage's ceiling as a number of fetches at once at full speed
    # (its rate over one fetch's rate); inf: no ceiling
    fetch_slots: float = math.inf


def epoch(p: Pipeline, n: int) -> list[float]:
    """When the loop took each of n batches, producers and loop starting
    together at 0 with nothing made."""
    P = max(int(p.producers), 1)
    queue: list[list[int]] = [[] for _ in range(P)]     # indices handed out
    phase = [""] * P                                    # "", "fetch", "cpu"
    left = [0.0] * P                                    # alone-seconds left in the phase
    ready: dict[int, float] = {}
    taken: list[float] = []
    handed = min(n, PREFETCH * P)
    for i in range(handed):
        queue[i % P].append(i)
    now, loop_free = 0.0, 0.0

    def begin(w: int) -> None:
        if not phase[w] and queue[w]:
            phase[w], left[w] = "fetch", p.fetch_s
            if left[w] <= 0:
                phase[w], left[w] = "cpu", p.cpu_s

    for w in range(P):
        begin(w)
    while len(taken) < n:
        nxt = len(taken)
        if nxt in ready and loop_free <= now:
            taken.append(max(now, ready[nxt]))
            loop_free = taken[-1] + p.loop_s
            if handed < n:
                queue[handed % P].append(handed)
                begin(handed % P)
                handed += 1
            continue
        fetching = sum(1 for x in phase if x == "fetch")
        on_cpu = sum(1 for x in phase if x == "cpu")
        rate = {"fetch": min(1.0, p.fetch_slots / fetching) if fetching else 1.0,
                "cpu": min(1.0, p.cpus / on_cpu) if on_cpu else 1.0}
        dt = min((left[w] / rate[phase[w]] for w in range(P) if phase[w]), default=math.inf)
        if nxt in ready:
            dt = min(dt, loop_free - now)
        if dt == math.inf:
            raise RuntimeError("epoch_sim: nothing left to happen")   # cannot: a batch is owed
        now += max(dt, 0.0)
        for w in range(P):
            if not phase[w]:
                continue
            left[w] -= dt * rate[phase[w]]
            if left[w] > 1e-12:
                continue
            if phase[w] == "fetch" and p.cpu_s > 0:
                phase[w], left[w] = "cpu", p.cpu_s
                continue
            ready[queue[w].pop(0)] = now
            phase[w] = ""
            begin(w)
    return taken


def restart_extra(p: Pipeline, n: int, restarts: int, startup_s: float) -> float:
    """Seconds the epochs' starts add to a window of (restarts + 1) epochs of
    n batches over the pipeline's steady pace: each restart's start-up and
    its empty pipeline, less what the first epoch gained from the batches
    made during the loop's first wait (the window starts as it ends)."""
    n = max(n, 1)
    t = epoch(p, n)
    done = t[-1] + p.loop_s
    # the steady pace: a long epoch's batches after the first n
    long = epoch(p, 3 * n)
    pace = (long[-1] - long[n - 1]) / (2 * n)
    return (done - t[0] - n * pace) + restarts * (startup_s + done - n * pace)
