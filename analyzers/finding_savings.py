"""What fixing a finding would save the training loop: the what-if model's
prediction (whatif.py) of the change the finding recommends, where the
model could be fitted to the trace; else the bound impact.py set (the
loop's wait during the finding's calls, times the share its fix removes).

A finding about how the producers get their data (small reads, random
access, metadata calls, NFS, refused or small object requests...) is
modelled as the producers' own time in the finding's calls, per batch,
shortened by the share its fix removes (impact.SAVING; the rest is the
data's own transfer): from their fetch time first, the rest from their CPU
time. A throttled store's fix takes away the producers' time in refused
requests and their backoffs whole. A device at its limit is modelled as a
device twice as fast (read_bw x2); reads below the target as reads at the
target. The model then says what that buys: nothing where another stage
(the loop's own compute, the storage's ceiling, the CPUs) sets the pace,
which the bound cannot see. The model's relative change of the step time
is applied to the loop's measured time in the training window.

Findings the model has no term for keep the bound (`saving_basis`
"bound"): lock contention (the producers' lock waits are not part of what
a batch costs them in the model), checkpoints (the loop's own writes, not
its input pipeline), and every finding of a trace without a model.
"""
from __future__ import annotations

from typing import Optional

from . import whatif
from .base import Context, Finding
from .impact import HIGH_SHARE, SAVING, WARN_SHARE, rule_where
from .objstore import THROTTLED

# Findings about the producers' calls: their fix shortens those calls.
CALL_FIXES = {"small-reads", "random-access", "metadata-storm", "redundant-io", "imbalance",
              "nfs", "async-depth", "readahead-wasted", "readahead-missing",
              "mmap-random-faults", "small-objects", "few-in-flight", "list-storm",
              "refetched-objects"}


def _window(pipe: dict) -> tuple[int, int]:
    return int(pipe["from_ns"]), int(pipe["to_ns"])


def _tids(pipe: dict) -> str:
    return ", ".join(str(int(p["tid"])) for p in pipe["producers"]) or "-1"


def producer_call_s(ctx: Context, f: Finding, pipe: dict) -> float:
    """The producers' seconds in the calls the finding is about, within the
    model's window (calls cut at its edges)."""
    where = rule_where(f)
    lo, hi = _window(pipe)
    r = ctx.con.execute(f"""
        select coalesce(sum(least(e.ts_ns + e.dur_ns, {hi}) - greatest(e.ts_ns, {lo})), 0)
        from events e left join files f on f.file_id = e.file_id
        where e.tid in ({_tids(pipe)}) and e.ts_ns < {hi} and e.ts_ns + e.dur_ns > {lo}
          and ({where})""").fetchall()
    return float(r[0][0]) / 1e9


def throttled_s(ctx: Context, pipe: dict) -> dict[int, float]:
    """Each producer's seconds in refused requests, backing off after them,
    and in its retries that succeeded beyond what a first attempt takes (the
    median of those): a retry after a backoff took 43 ms where a first
    attempt took 8 (botocore, a fresh connection); without refusals each
    object takes one first attempt."""
    lo, hi = _window(pipe)
    r = dict(ctx.con.execute(f"""
        with w as (
            select tid, retry, {THROTTLED} as refused,
                   least(ts_ns + dur_ns, {hi}) - greatest(ts_ns, {lo}) as ns
            from requests where tid in ({_tids(pipe)}) and ts_ns < {hi}
              and ts_ns + dur_ns > {lo}),
        first as (select coalesce(median(ns), 0) as m from w where not refused
                  and not coalesce(retry, false))
        select tid, sum(case when refused then ns
                             when coalesce(retry, false) then greatest(ns - m, 0) else 0 end)
        from w, first group by tid""").fetchall())
    return {int(p["tid"]): float(r.get(int(p["tid"])) or 0) / 1e9 + p["backoff"]
            for p in pipe["producers"]}


def _shorten(base: dict, per_batch: float) -> dict:
    """The producers' time per batch shortened: fetch first, then CPU."""
    df = min(per_batch, base["fetch_s"])
    keep = (base["fetch_s"] - df) / base["fetch_s"] if base["fetch_s"] > 0 else 0.0
    return {"fetch_s": base["fetch_s"] - df,
            "fetch_cpu_s": base.get("fetch_cpu_s", 0.0) * keep,
            "prep_cpu_s": max(0.0, base["prep_cpu_s"] - (per_batch - df))}


def changes_for(ctx: Context, f: Finding, base: dict, pipe: dict) -> Optional[tuple[dict, str]]:
    """The model's inputs as the finding's fix would change them, and the
    change in words; None where the model has no term for it."""
    n = max(pipe.get("batches", pipe["steps"]), 1)
    if f.id in CALL_FIXES:
        share = SAVING.get(f.id, 1.0)
        return _shorten(base, share * producer_call_s(ctx, f, pipe) / n), \
            f"the producers' time in these calls {share:.0%} shorter"
    if f.id == "throttled":
        each = throttled_s(ctx, pipe)
        m = _shorten(base, sum(each.values()) / n)
        # the workers' balance without their refusals and backoffs
        m["imbalance"] = whatif.in_order_imbalance(
            pipe, [whatif.busy_time(p) - each[int(p["tid"])]
                   for p in whatif.active_producers(pipe)])
        return m, "no refused requests, no backoff, no slower retries"
    if f.id == "device-at-limit":
        m, why = whatif.apply(base, {"read_bw": (2.0, True)})
        return (m, "the device twice as fast") if not why else None
    if f.id == "below-target" and ctx.targets.read_bps and pipe["span_s"] > 0 \
            and pipe.get("bytes_read"):
        k = ctx.targets.read_bps / (pipe["bytes_read"] / pipe["span_s"])
        if k <= 1 or base["fetch_s"] <= 0:
            return None
        # the reads themselves k times faster, from the page cache too (not
        # apply's read_bw, a storage's rate, which cached reads do not see);
        # a client's backoff after refused requests stays as long
        bo = min(base.get("backoff_s", 0.0), base["fetch_s"])
        m = {"fetch_s": (base["fetch_s"] - bo) / k + bo,
             "fetch_cpu_s": base.get("fetch_cpu_s", 0.0) / k}
        if base["storage_bytes_per_s"]:
            m["storage_bytes_per_s"] = base["storage_bytes_per_s"] * k
        return m, "reads at the target rate"
    return None


def apply_savings(ctx: Context, findings: list[Finding], verdict: dict) -> None:
    """Each finding's saving_s from the model where it has a term for the
    finding's fix (saving_basis "model", with the change modelled in
    saving_change); the bound otherwise (saving_basis "bound")."""
    for f in findings:
        f.saving_basis = "bound" if f.saving_s is not None else None
    loops = verdict.get("loops") or []
    pipe = loops[0].get("pipeline") if loops else None
    if not pipe or not pipe.get("producers"):
        return
    base = whatif.fit(pipe, ctx.meta.get("machine"), pipe.get("bytes_read"))
    t0, _ = whatif.mean_step(base, base)
    budget = verdict.get("time_budget_s", {})
    loop_s = budget.get("window") or 0.0
    if t0 <= 0 or loop_s <= 0:
        return
    wait = budget.get("data_wait", loop_s)     # a saving is never more than the loop waited
    # the model explains the traced run's step within ROUGH: its savings then
    # rank the findings (severity), not what their calls cost
    trusted = abs(base["step_s"] / t0 - 1) <= whatif.ROUGH and verdict.get("status") in \
        ("io-bound", "not-io-bound")
    for f in findings:
        got = changes_for(ctx, f, base, pipe)
        if got is None:
            continue
        changes, words = got
        t1, lim = whatif.mean_step(base, {**base, **changes})
        f.saving_s = round(min(max(0.0, (t0 - t1) / t0) * loop_s, wait), 6)
        f.saving_basis = "model"
        f.saving_change = f"{words}; then limited by {lim}"
        if trusted:
            _severity_from_saving(f, f.saving_s / loop_s)


def _severity_from_saving(f: Finding, share: float) -> None:
    """A fix that buys little is not urgent however long its calls took (small
    reads at a throttled device's ceiling: 17% of the window in the calls,
    3% saved), and one the model says buys much is (a store's refusals)."""
    sev = "high" if share >= HIGH_SHARE else "warn" if share >= WARN_SHARE else "info"
    if sev != f.severity:
        f.summary += (f" Its severity is {sev}, from what fixing it would save "
                      f"({share:.0%} of the training window), not from what its calls cost.")
    f.severity = sev
