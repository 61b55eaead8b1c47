"""A training loop whose steps run in a framework's native runtime (Keras
`model.fit` on TensorFlow): when does it wait for data?

In `model.fit`, the Python thread calls one TensorFlow function per step;
the batch's next() (the `IteratorGetNext` op) and the model's step both run
in that function, on TensorFlow's own threads, while the Python thread waits
for the step as a whole. No Python frame shows the data wait, and the kernel
alone sees only native threads handing work to one another. TensorFlow's
profiler counts the step's input time as the `IteratorGetNext` op's time,
and that op runs on a thread of its own (tf.data's `get_next` pool), which
the kernel shows between the two sides:

- the **runtime** (E): the threads that wake the Python thread at the end of
  its steps (the executor's inter-op threads);
- the **consumers** (G): the threads that the runtime hands the next() to
  and that hand it back, about once a step each way: woken by the runtime,
  one takes the batch from tf.data's buffer (blocked where tf.data's threads
  have none ready), and wakes the runtime again (with several next() calls
  a step, `steps_per_execution`, tf.data's pool spreads them over two
  threads or more);
- the **producers**: the process's other threads (tf.data's readers and
  mappers, and the runtime's threads, which run the ops of tf.data's map
  functions).

The data wait of a step is the consumers' busy time: from the runtime
waking one to its first wake-up of the runtime after its last wait for the
producers (the batch in hand), before it is idle again (it waits for work
only as long as the runtime gives it none), less the Python thread's time
between its steps. The time blocked
for the producers is then fetch / prep / cpu-starved by what they did, the
consumer's own time on CPU transfer, as for any loop (told from the state of
the consumer that takes the most batches).

Measured against TensorFlow's own profiler (the `IteratorGetNextOp::DoCompute`
events of its trace) in tests/test_loader_frame.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from . import intervals as ivl
from .loader_frame import frames_stacks, loop_samples

# (file suffix, function or qualified-name suffix, what it is): the frame that
# runs one whole step (its next() included) in a framework's runtime
STEP_RUNNERS = [
    ("keras/src/backend/tensorflow/trainer.py", "_make_function.<locals>.function",
     "Keras model.fit (TensorFlow)"),
    ("engine/training.py", "make_train_function.<locals>.train_function",
     "Keras 2 model.fit (TensorFlow)"),
]

THRESHOLDS = {
    "min_step_samples": 10,      # of the Python thread in the step frame
}


@dataclass
class RuntimeLoop:
    pid: int
    tid: int                     # the Python thread that calls the steps
    what: str                    # STEP_RUNNERS' name
    # its steps lie between its last sample before the first one in the step
    # frame and its first sample after the last one (a second from that one
    # where there is no such sample)
    first_ns: int
    last_ns: int
    runtime: list[int]           # E
    consumers: list[int]         # G, the one that takes the most batches first; [] where none
    why: str = ""                # why no consumer
    consumer_start_ns: dict = field(default_factory=dict)    # {G: its thread's start}

    @property
    def consumer(self) -> Optional[int]:
        """The consumer that takes the most batches (None where none was seen)."""
        return self.consumers[0] if self.consumers else None


def step_runners(con, th: dict) -> dict[int, tuple[int, str, int, int]]:
    """{pid: (tid, what, from ns, to ns)}: the thread of each process seen
    most in a step-runner frame, in at least min_step_samples samples, and
    the span its steps lie in (RuntimeLoop's first_ns, last_ns)."""
    need = th.get("min_step_samples", THRESHOLDS["min_step_samples"])
    best: dict[int, tuple] = {}
    for (_, _, what), hit in zip(STEP_RUNNERS, frames_stacks(con, STEP_RUNNERS)):
        if not hit:
            continue
        for pid, tid, n in con.execute(f"""
                select pid, tid, count(*) from pystacks
                where tid > 0 and stack_id in ({",".join(map(str, hit))})
                group by all""").fetchall():
            if n >= need and n > best.get(pid, (0,))[0]:
                best[int(pid)] = (int(n), int(tid), what, hit)
    out = {}
    for pid, (_, tid, what, hit) in best.items():
        ts, sid, _ = loop_samples(con, tid)
        i = np.flatnonzero(np.isin(sid, hit))
        lo = int(ts[i[0] - 1]) if i[0] > 0 else int(ts[i[0]]) - int(1e9)
        hi = int(ts[i[-1] + 1]) if i[-1] + 1 < len(ts) else int(ts[i[-1]]) + int(1e9)
        out[pid] = (tid, what, lo, hi)
    return out


def _wake_counts(con, pid: int, lo: int, hi: int) -> dict[tuple[int, int], int]:
    """{(waker, woken): wake-ups} among the process's threads in [lo, hi]."""
    return {(int(a), int(b)): int(n) for a, b, n in con.execute(f"""
        select ret, tid, count(*) from events
        where op = 'offcpu' and pid = {int(pid)} and arg = pid and ret > 0 and ret != tid
          and ts_ns between {int(lo)} and {int(hi)}
        group by all""").fetchall()}


def find(con, pid: int, tid: int, what: str, lo: int, hi: int, th: dict) -> RuntimeLoop:
    """The runtime and consumer threads of a step-running Python thread."""
    wakes = _wake_counts(con, pid, lo, hi)
    need = th["min_deliveries"]
    to_loop = {a: n for (a, b), n in wakes.items() if b == tid}
    # the runtime wakes it once a step or more; a stray wake-up (a timer
    # thread, the allocator's) is not the runtime
    top = max(to_loop.values(), default=0)
    runtime = sorted(a for a, n in to_loop.items() if n >= max(need, 0.1 * top))
    rl = RuntimeLoop(pid, tid, what, lo, hi, runtime, [])
    if not runtime:
        rl.why = (f"no thread of pid {pid} woke the step-running thread {tid} at least "
                  f"{need} times: its steps' runtime was not seen")
        return rl
    side = set(runtime) | {tid}
    steps = sum(to_loop[a] for a in runtime)        # about one wake-up a step
    score: dict[int, int] = {}
    for t in {x for pair in wakes for x in pair} - side:
        to = sum(n for (a, b), n in wakes.items() if a == t and b in side)
        frm = sum(n for (a, b), n in wakes.items() if b == t and a in side)
        if min(to, frm) >= max(need, 0.25 * steps):
            score[t] = min(to, frm)
    if not score:
        rl.why = ("no thread that the runtime hands the next() to and that hands it back "
                  "(tf.data's get-next thread) was seen")
        return rl
    rl.consumers = sorted(score, key=lambda t: -score[t])
    rl.consumer_start_ns = {int(t): int(s) for t, s in con.execute(f"""
        select tid, min(start_ns) from threads
        where tid in ({",".join(map(str, rl.consumers))}) and start_ns is not null
        group by tid""").fetchall()}
    return rl


def consumer_busy(tl, rl: RuntimeLoop, lo: int, hi: int) -> np.ndarray:
    """The consumers' busy spans in [lo, hi] (_busy), as one set, less the
    Python thread's time between its steps (_between_steps): no next() of a
    step runs before the step is called."""
    spans = [_busy(tl, rl, g, lo, hi) for g in rl.consumers]
    if not spans:
        return ivl.EMPTY.copy()
    return ivl.subtract(ivl.union(np.concatenate(spans)), _between_steps(tl, rl, lo, hi))


def _between_steps(tl, rl: RuntimeLoop, lo: int, hi: int) -> np.ndarray:
    """The Python thread's time between its steps: from each wake-up by the
    runtime or a consumer (a step's end) to its next block (the next step
    called). A consumer that found the next next() before it ever waited for
    work (preempted, not parked, while the Python thread ran its callbacks)
    shows no hand-over, and its busy span would run over the time between."""
    off = tl.offcpu(rl.tid, lo, hi)
    woke = (off["wake"] >= 0) & np.isin(off["waker"], rl.runtime + rl.consumers)
    starts = (off["ts_ns"] + off["wake"])[woke]
    return ivl.union(ivl.as_iv(starts, _next_after(off["ts_ns"][off["wake"] >= 0], starts, hi)))


def _next_after(points: np.ndarray, t: np.ndarray, default: int) -> np.ndarray:
    """For each of t, the first of the sorted points after it (default where none)."""
    i = np.searchsorted(points, t, side="right")
    return np.where(i < len(points), points[np.minimum(i, len(points) - 1)], default)


def _busy(tl, rl: RuntimeLoop, g: int, lo: int, hi: int) -> np.ndarray:
    """A consumer's busy spans in [lo, hi]: from each wake-up by the runtime
    (or the Python thread), once on CPU, to its last wake-up of them before
    its next wait for work."""
    side = set(rl.runtime) | {rl.tid}
    off = tl.offcpu(g, lo, hi)
    idle = (off["wake"] >= 0) & np.isin(off["waker"], list(side))
    # handed work, from when it runs (TensorFlow's profiler times the op from
    # then: a consumer waiting for a CPU is the runtime's scheduling)
    starts = off["end_ns"][idle]
    idle_from = off["ts_ns"][idle]                        # waiting for work
    # a pool thread made for the first next() runs it before it ever waits
    # for work (tf.data makes its get-next pool at the first one)
    born = rl.consumer_start_ns.get(g)
    if born is not None and lo <= born < hi:
        starts = np.append(starts, born)
    if len(starts) == 0:
        return ivl.EMPTY.copy()
    # the consumer's wake-ups of the runtime: the batch handed back
    back = []
    for t in side:
        o = tl.offcpu(t, lo, hi)
        m = (o["wake"] >= 0) & (o["waker"] == g)
        back.append((o["ts_ns"] + o["wake"])[m])
    back = np.sort(np.concatenate(back))
    starts, idle_from = np.sort(starts), np.sort(idle_from)
    # busy span i: starts[i] to the next idle start after it, cut at its first
    # hand-back after its last wait for the producers (the batch in hand: the
    # op's done callback wakes the runtime's threads in a burst of a millisecond
    # or so, preempted by them on a busy machine), or its last hand-back
    ends = _next_after(idle_from, starts, hi)
    if len(back):
        j = np.searchsorted(back, ends, side="right") - 1
        last = back[np.maximum(j, 0)]
        handed = (j >= 0) & (last > starts)
        fed = np.sort((off["ts_ns"] + off["wake"])[(off["wake"] >= 0) & ~idle])
        k = np.searchsorted(fed, ends, side="left") - 1
        # (none fed in the window: each span's hand-back is the first after its start)
        after = np.where((k >= 0) & (fed[np.maximum(k, 0)] > starts),
                         fed[np.maximum(k, 0)], starts) if len(fed) else starts
        first = back[np.minimum(np.searchsorted(back, after, side="left"), len(back) - 1)]
        ends = np.where(handed, np.where((first > after) & (first <= last), first, last), ends)
    keep = ends > starts
    return ivl.clip(ivl.union(np.stack([starts[keep], ends[keep]], axis=1)), lo, hi)


def last_step_end(tl, rl: RuntimeLoop, eps: np.ndarray) -> int:
    """The end of the loop's last step: the runtime's first wake-up of the
    Python thread after its last next() ended (the last of eps); its last
    sample in the step frame where none is seen (the samples alone end a
    step or so early: a step is shorter than the sampling interval)."""
    if len(eps) == 0:
        return rl.last_ns
    after = int(eps[-1, 1])
    off = tl.offcpu(rl.tid, after, after + int(60e9))
    woke = off["ts_ns"] + off["wake"]
    m = (off["wake"] >= 0) & np.isin(off["waker"], rl.runtime + rl.consumers) \
        & (woke >= after)
    if not m.any():
        return after
    return int(woke[m].min())
