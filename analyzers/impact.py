"""What each finding costs the training loop, and its severity from that cost.

A finding about how data is read (small reads, random access, metadata
calls, lock waits, NFS...) costs the loop the part of its data waits during
which the producers were in the calls the finding is about: the stall
analysis (waits.py) attributes every instant of a data wait to the producer
calls in progress then. A checkpoint finding costs the loop the time it was
blocked writing checkpoints. Severity follows the cost as a share of the
training window: high at or above 10%, warn at or above 2%, info below; a
finding that costs nothing says so. (finding_savings.py then sets it from
what the fix would save, where the what-if model fits the trace.)
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from iotrace.abi import OPEN_OPS, READ_OPS, SYNC_OPS, WRITE_OPS, sql_list

from . import intervals as ivl
from .base import Context, Finding
from .async_depth import CALLS as ASYNC_CALLS
from .device_limit import STORAGE_WAIT_CALLS
from .mmap_random import CALLS as MMAP_RANDOM_CALLS
from .objstore import NET_CALLS, SAME_REQUEST, THROTTLED
from .readahead_missing import CALLS as READAHEAD_MISSING_CALLS
from .views import META_OPS
from .rates import human_s
from .verdict import too_little
from .waits import Waits

HIGH_SHARE, WARN_SHARE = 0.10, 0.02

# The calls each rule's finding is about (a condition on events e, files f).
RULE_CALLS = {
    "small-reads": f"e.op in {sql_list(READ_OPS)}",
    "random-access": f"e.op in {sql_list(READ_OPS + ('lseek',))}",
    "metadata-storm": f"e.op in {sql_list(META_OPS)}",
    "redundant-io": f"e.op in {sql_list(READ_OPS + WRITE_OPS + SYNC_OPS)}",
    "below-target": f"e.op in {sql_list(READ_OPS + OPEN_OPS)}",
    "imbalance": f"e.op in {sql_list(READ_OPS)}",
    "nfs": f"e.op in {sql_list(READ_OPS + WRITE_OPS + SYNC_OPS)}",
    "lock-contention": "e.op in ('futex', 'lock_contention')",
    "device-at-limit": STORAGE_WAIT_CALLS,
    "async-depth": ASYNC_CALLS,
    "readahead-wasted": STORAGE_WAIT_CALLS,
    "readahead-missing": READAHEAD_MISSING_CALLS,
    "mmap-random-faults": MMAP_RANDOM_CALLS,
    # object storage: the network side of the requests (backoff sleeps of
    # throttled threads are added in finding_cost)
    "throttled": NET_CALLS, "small-objects": NET_CALLS, "few-in-flight": NET_CALLS,
    "list-storm": NET_CALLS, "refetched-objects": NET_CALLS,
}
# Rules whose calls are limited to the files the finding names.
BY_FILE = {"small-reads", "random-access", "redundant-io", "imbalance", "readahead-wasted",
           "readahead-missing", "mmap-random-faults"}
# What fixing it would save, as a share of its cost (the rest is the data's own transfer).
SAVING = {"small-reads": 0.5, "random-access": 0.5, "metadata-storm": 0.8,
          "redundant-io": 0.5, "lock-contention": 0.8, "below-target": 1.0,
          "imbalance": 0.5, "nfs": 0.5, "device-at-limit": 0.5,
          "async-depth": 0.5, "readahead-wasted": 0.5, "readahead-missing": 0.8,
          "mmap-random-faults": 0.5, "throttled": 0.8, "small-objects": 0.5,
          "few-in-flight": 0.5, "list-storm": 0.8, "refetched-objects": 0.5}


def _quote(p: str) -> str:
    return "'" + p.replace("'", "''") + "'"


BACKOFF_SLEEPS = "e.op in ('nanosleep', 'clock_nanosleep', 'select', 'pselect6', 'poll', 'ppoll')"


def _throttled_cost(ctx: Context) -> float:
    """Seconds of the loop's data wait attributed to throttling: its threads'
    network calls inside refused requests, and their sleeps from a refused
    request's end to its retry (the SDK's backoff)."""
    iv = ctx.rows(f"""
        with r as (select tid, ts_ns, ts_ns + dur_ns as end_ns, {THROTTLED} as thr,
                          lead(ts_ns) over (partition by tid, {SAME_REQUEST}
                                            order by ts_ns) as next_ts
                   from requests)
        select tid, ts_ns, end_ns, 0 from r where thr
        union all
        select tid, end_ns, next_ts, 1 from r where thr and next_ts > end_ns""")
    if not iv:
        return 0.0
    calls = ctx.rows(f"""
        select w.tid, w.ts_ns, w.cost_ns, case when {NET_CALLS} then 0 else 1 end
        from wait_cost w join events e on e.tid = w.tid and e.ts_ns = w.ts_ns
        where {NET_CALLS} or {BACKOFF_SLEEPS}""")
    if not calls:
        return 0.0
    iv_a, c_a = np.array(iv, dtype=np.int64), np.array(calls, dtype=np.float64)
    total = 0.0
    # a network call inside a refused request, a sleep inside a backoff
    for tid, kind in {(int(t), int(k)) for t, _, _, k in iv}:
        m = (iv_a[:, 0] == tid) & (iv_a[:, 3] == kind)
        spans = ivl.union(ivl.as_iv(iv_a[m, 1], iv_a[m, 2]))
        cm = (c_a[:, 0] == tid) & (c_a[:, 3] == kind)
        total += float(c_a[cm, 2][ivl.covered(spans, c_a[cm, 1].astype(np.int64))].sum())
    return total / 1e9


def rule_where(f: Finding) -> Optional[str]:
    """The calls the finding is about (a condition on events e and files f),
    limited to its files where the rule names them; None if none."""
    where = RULE_CALLS.get(f.id)
    if where is None:
        return None
    paths = [x["path"] for x in f.files if x.get("path")]
    if f.id in BY_FILE and paths:
        where += f" and f.path in ({', '.join(map(_quote, paths))})"
    return where


def finding_cost(ctx: Context, w: Waits, f: Finding) -> float:
    if f.id == "checkpoint-burst":
        return float(w.budget.get("checkpoint", 0.0))
    if f.id not in RULE_CALLS:
        return 0.0
    if f.id == "throttled":
        return _throttled_cost(ctx)
    return ctx.wait_cost_s(rule_where(f))


def apply_impact(ctx: Context, w: Waits, findings: list[Finding]) -> None:
    win = w.budget.get("window", 0.0) or ctx.duration_s
    for f in findings:
        f.rule_severity = f.severity
        cost = finding_cost(ctx, w, f)
        f.impact_s = round(cost, 6)
        f.impact_share = round(cost / win, 4) if win > 0 else 0.0
        f.saving_s = round(cost * SAVING.get(f.id, 1.0), 6)
        if not w.loops or too_little(w, ctx.th("verdict")):
            continue          # no loop (or too little of it) to measure cost against:
                              # the rule's own severity stands
        f.severity = ("high" if f.impact_share >= HIGH_SHARE else
                      "warn" if f.impact_share >= WARN_SHARE else "info")
        if cost <= 0:
            f.summary += " It cost the training loop no measurable time."
        else:
            f.summary += (f" It explains {human_s(cost)} of the loop's time "
                          f"({f.impact_share:.0%} of the training window).")
