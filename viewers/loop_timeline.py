"""The training loop's states over the training window, for the timelines
(Perfetto track, HTML plot): data waits (named by their main cause),
checkpoints, and compute in between; and, per wait, the thread that woke
the loop at its end. Pure data from the report's loop states
(analyzers.waits.LoopStates)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from iotrace.analyzers.waits import STALL_KEYS


@dataclass
class Segment:
    start_ns: int
    end_ns: int
    state: str                      # "data wait", "checkpoint", "compute"
    cause: str = ""                 # a wait's main cause (STALL_KEYS)
    causes_ms: dict = field(default_factory=dict)
    waker: tuple = ()               # (tid, pid, wake ns) of the thread that ended a wait

    @property
    def label(self) -> str:
        return f"data wait: {self.cause}" if self.state == "data wait" else self.state


def segments(st, lo: int, hi: int) -> list[Segment]:
    """The loop's window [lo, hi] cut into waits, checkpoints and compute, in time order."""
    out = []
    for (s, e), per, (tid, pid, wake) in zip(st.waits, st.causes, st.wakers.tolist()):
        cause = STALL_KEYS[int(np.argmax(per))] if per.sum() > 0 else "other"
        out.append(Segment(int(s), int(e), "data wait", cause,
                           {k: round(float(v) / 1e6, 3) for k, v in zip(STALL_KEYS, per) if v > 0},
                           (tid, pid, max(wake, int(s))) if tid > 0 else ()))
    out += [Segment(int(s), int(e), "checkpoint") for s, e in st.checkpoints]
    out.sort(key=lambda x: x.start_ns)
    full, t = [], lo
    for seg in out:
        if seg.end_ns <= t or seg.start_ns >= hi:
            continue
        seg.start_ns = max(seg.start_ns, t)
        if seg.start_ns > t:
            full.append(Segment(t, seg.start_ns, "compute"))
        full.append(seg)
        t = seg.end_ns
    if t < hi:
        full.append(Segment(t, hi, "compute"))
    return full
