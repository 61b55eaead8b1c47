"""imbalance: is the reading spread evenly over the workers and kept going?

Question: how many reads are in flight at once, do some loader workers
(processes, or the threads of one process) read much more or much slower than
the others, and are there stretches where the job reads nothing at all?

Data reads: read calls (not failed) on the dataset's files: regular files
that are not code, libraries or system files (.py, .pyc, .so, /proc, /sys,
/etc, /run, /lib, /usr/lib, /usr/share, Python's lib), in directories that
hold at least 1% of the bytes read from such files (the verdict's dataset: a
config file read at start-up does not stretch the reading span).
Workers: the processes that do data reads, or their threads when fewer
than two processes count; a reader counts as a worker when it made at least
`min_worker_reads` reads and read at least `min_worker_bytes_ratio` of the
median reader's bytes (so a main process that reads one index file is not
a worker). A worker's read rate is its bytes over its reading span (its first
read's start to its last read's end): a worker that reads slowly, in tiny
chunks, or that works long between reads has a low rate. The slowest worker
is the one with the lowest rate.

Skew: bytes_skew_ratio = max / median of the workers' bytes (one worker
reads much more); rate_skew_ratio = median / min of their read rates (one
worker is slow: under a static split, such as PyTorch's DataLoader handing
batch i to worker i mod N, it paces the epoch); skew_ratio is the larger.
In flight: max_in_flight is the most data reads in progress at once (a sweep
over +1 at each start, -1 at each end), mean_in_flight the summed read time
over the reading span (first data read to last). Idle gaps: stretches of
the reading span longer than `idle_gap_s` with no data read in progress;
idle_share is their total over the span.

Trigger: two or more workers and skew_ratio >= `warn_skew` (severity warn,
high from `high_skew`); or idle_share >= `idle_share` (severity info: the
gaps may be compute the reads should overlap, or a job that is simply not
I/O-bound). One finding with every number.
"""
from __future__ import annotations

import statistics
from typing import NamedTuple

import numpy as np

from .base import Context, Finding, Rule
from .rates import human_rate
from .views import mem_available

# The job's data reads, gathered once per run into this temporary table: the
# sweep's sort over a table is several times faster than over the io view.
READS = "imbalance_data_reads"
SWEEP_ROW_BYTES = 48        # numpy bytes per read in the sweep, at the peak


class Worker(NamedTuple):
    key: int                 # pid, or tid for worker threads
    pid: int
    reads: int
    bytes: int
    read_ns: int             # summed read time
    span_ns: int             # first read's start to last read's end
    first_ns: int

    @property
    def rate(self) -> float:
        return self.bytes / (self.span_ns / 1e9)

    @property
    def mean_latency_ns(self) -> float:
        return self.read_ns / self.reads


class Timeline(NamedTuple):
    max_in_flight: int
    read_ns: int
    first_ns: int
    last_ns: int
    gaps: int                # idle gaps longer than the threshold
    longest_gap_ns: int
    idle_ns: int
    top_gaps: list           # [{"t": gap start, "gap": ns}], longest first


def load_reads(ctx: Context) -> None:
    ctx.con.execute(f"""
        create or replace temp table {READS} as
        select pid, tid, ts_ns as s, ts_ns + greatest(dur_ns, 1) as e, dur_ns, nbytes
        from data_io where dir = 'read' and file_id in (select file_id from data_files)""")


def readers(ctx: Context, key: str) -> list[Worker]:
    return [Worker(*r) for r in ctx.rows(f"""
        select {key}, any_value(pid), count(*), sum(nbytes), sum(dur_ns), max(e) - min(s), min(s)
        from {READS} group by {key} order by {key}""")]


def workers(ctx: Context, th: dict) -> tuple[str, list[Worker]]:
    """('process' | 'thread', workers): processes when two or more are workers,
    else threads. A worker made min_worker_reads reads and read at least
    min_worker_bytes_ratio of the median of such readers' bytes."""
    def pick(rows: list[Worker]) -> list[Worker]:
        steady = [w for w in rows if w.reads >= th["min_worker_reads"]]
        if not steady:
            return []
        median = statistics.median(w.bytes for w in steady)
        return [w for w in steady if w.bytes >= th["min_worker_bytes_ratio"] * median]
    procs = pick(readers(ctx, "pid"))
    if len(procs) >= 2:
        return "process", procs
    return "thread", pick(readers(ctx, "tid"))


def sweep_numpy(s: np.ndarray, e: np.ndarray, gap_ns: int) -> tuple:
    """The sweep's numbers (max in flight, idle gaps, longest, idle ns, the three
    longest as [{t, gap}]) from sorted arrays, the same as the SQL sweep's: the
    count in flight peaks just after a start (ends at or before it have ended);
    an idle gap opens where the running maximum of the ends, in start order,
    falls short of the next start (gap_ns >= 0, and every read ends after it
    starts)."""
    if len(s) == 0:
        return 0, 0, 0, 0, []
    # stable sorts: timsort, linear on the nearly sorted times of a trace.
    # In place where it can be: every new array is memory touched for the
    # first time, a cost as large as the sorts' on large traces.
    order = np.argsort(s, kind="stable")
    ss, ebs = s[order], e[order]
    del order
    es = np.sort(e, kind="stable")
    # ends at or before each start (side="right": an end equal to a start
    # counts); the starts are sorted, so each search begins where the last ended
    ended = np.searchsorted(es, ss, side="right")
    del es
    ended -= np.arange(1, len(ss) + 1, dtype=ended.dtype)     # -(reads in flight)
    in_flight_max = -int(ended.min())
    del ended
    reach = np.maximum.accumulate(ebs, out=ebs)[:-1]
    gap = ss[1:]
    gap -= reach
    idle = gap > gap_ns
    g, t = gap[idle], reach[idle]
    top = [{"t": int(t[i]), "gap": int(g[i])} for i in np.lexsort((t, -g))[:3]]
    return (max(in_flight_max, 0), int(idle.sum()), int(g.max()) if len(g) else 0,
            int(g.sum()), top)


def timeline(ctx: Context, gap_ns: int) -> Timeline:
    """Reads in flight and idle gaps from one sweep: +1 at each read's start, -1 at
    its end (ends first at equal times); the running sum is the number in flight,
    and an end that brings it to 0 opens a gap that lasts until the next start.
    In numpy when the reads' starts and ends fit in a tenth of the memory
    available (twice as fast as the SQL window), else in SQL."""
    read_ns, first, last, n = ctx.one(f"select sum(dur_ns), min(s), max(e), count(*) "
                                      f"from {READS}")
    if n * SWEEP_ROW_BYTES <= 0.1 * mem_available():
        x = ctx.con.execute(f"select s, e from {READS}").fetchnumpy()
        swept = sweep_numpy(np.asarray(x["s"], dtype=np.int64),
                            np.asarray(x["e"], dtype=np.int64), gap_ns)
        return Timeline(swept[0], read_ns, first, last, *swept[1:4], swept[4])
    # (t, d) sorts as one key k = 2t + (d + 1) / 2: ends (d = -1) first at equal times.
    # The three longest gaps are picked from the idle rows alone.
    swept = ctx.one(f"""
        with x as (select s as t, 1 as d, s * 2 + 1 as k from {READS}
                   union all select e as t, -1 as d, e * 2 as k from {READS}),
        w as materialized (
            select t, c, gap, c = 0 and gap > {gap_ns} as idle
            from (select t, sum(d) over (order by k rows unbounded preceding) as c,
                         case when d = -1 then lead(t) over (order by k) - t end as gap
                  from x)),
        longest as (select t, gap from w where idle order by gap desc, t limit 3),
        a as (select coalesce(max(c), 0) as c, count(*) filter (where idle) as gaps,
                     coalesce(max(gap) filter (where idle), 0) as longest_ns,
                     coalesce(sum(gap) filter (where idle), 0) as idle_ns
              from w),
        b as (select list({{'t': t, 'gap': gap}}) as gaps3 from longest)
        select a.c, a.gaps, a.longest_ns, a.idle_ns, b.gaps3 from a cross join b""")
    # the three longest gaps, longest first (an aggregate's list has no order
    # in every engine: sorted here)
    top = sorted(swept[4] or [], key=lambda g: (-g["gap"], g["t"]))
    return Timeline(swept[0], read_ns, first, last, *swept[1:4], top)


def describe(kind: str, ws: list[Worker], slow: Worker | None, big: Worker | None,
             skew_kind: str, severity: str, tl: Timeline, idle_share: float,
             th: dict) -> tuple[str, str]:
    """(summary, recommendation)."""
    who = f"worker {kind}"
    median_rate = statistics.median(w.rate for w in ws) if ws else 0
    parts, recs = [], []
    if severity != "info" and skew_kind == "rate":
        parts.append(f"{who} {slow.key} read at {human_rate(slow.rate)}, "
                     f"{median_rate / slow.rate:.1f}x slower than the median of {len(ws)} "
                     f"workers ({human_rate(median_rate)})")
        recs.append(f"Find why {who} {slow.key} is slow: its files (size, filesystem, cold "
                    "cache), its request size, its work between reads. With a static split "
                    "(PyTorch's DataLoader gives batch i to worker i mod N) the slowest worker "
                    "paces the whole epoch: even out the samples, or hand out work "
                    "dynamically.")
    elif severity != "info":
        median = statistics.median(w.bytes for w in ws)
        parts.append(f"{who} {big.key} read {big.bytes / median:.1f}x the median worker's "
                     f"bytes ({len(ws)} workers)")
        recs.append("Split the data evenly over the workers, by bytes rather than by file "
                    "count (shards of equal size), so that none of them reads for the others.")
    if idle_share >= th["idle_share"]:
        parts.append(f"no data read was in progress for {idle_share:.0%} of the reading span "
                     f"({tl.gaps} gaps over {th['idle_gap_s']:g} s, the longest "
                     f"{tl.longest_gap_ns / 1e9:.2f} s)")
        recs.append("Reads stop for long stretches: if compute runs meanwhile, prefetch so "
                    "that reading overlaps it (DataLoader prefetch_factor, more workers, "
                    "persistent_workers=True); if the job is not I/O-bound, these gaps are "
                    "expected.")
    summary = "; ".join(parts)
    return summary[0].upper() + summary[1:] + ".", " ".join(recs)


def judge(ctx: Context, th: dict) -> list[Finding]:
    tl = timeline(ctx, int(th["idle_gap_s"] * 1e9))
    if tl.read_ns is None:
        return []
    span_ns = max(tl.last_ns - tl.first_ns, 1)
    idle_share = tl.idle_ns / span_ns
    kind, ws = workers(ctx, th)
    bytes_skew = rate_skew = 1.0
    slow = big = None
    if len(ws) >= 2:
        bytes_skew = max(w.bytes for w in ws) / max(statistics.median(w.bytes for w in ws), 1)
        slow = min(ws, key=lambda w: (w.rate, w.key))
        big = max(ws, key=lambda w: (w.bytes, -w.key))
        rate_skew = statistics.median(w.rate for w in ws) / max(slow.rate, 1e-9)
    skew = max(bytes_skew, rate_skew)
    skew_kind = "rate" if rate_skew >= bytes_skew else "bytes"

    if len(ws) >= 2 and skew >= th["warn_skew"]:
        severity = "high" if skew >= th["high_skew"] else "warn"
    elif idle_share >= th["idle_share"]:
        severity = "info"
    else:
        return []

    summary, recommendation = describe(kind, ws, slow, big, skew_kind, severity, tl,
                                       idle_share, th)
    cmdlines = dict(ctx.rows("select pid, any_value(cmdline) from processes group by pid"))
    examples = [{"ts_ns": g["t"], "what": f"{g['gap'] / 1e9:.3f} s with no data read"}
                for g in tl.top_gaps]
    if severity != "info":
        examples.insert(0, {"ts_ns": slow.first_ns, "pid": slow.pid,
                            "what": f"slowest worker {kind} {slow.key} starts reading"})
    total = sum(w.bytes for w in ws) or 1
    return [Finding(
        id=RULE.id, severity=severity,
        title="Reads stop for long stretches" if severity == "info"
        else "Read workers are unbalanced",
        summary=summary, recommendation=recommendation,
        evidence={
            "workers": len(ws),
            "worker_kind": kind,
            "median_worker_bytes": statistics.median(w.bytes for w in ws) if ws else 0,
            "max_worker_bytes": max((w.bytes for w in ws), default=0),
            "min_worker_bytes": min((w.bytes for w in ws), default=0),
            "bytes_skew_ratio": bytes_skew,
            "rate_skew_ratio": rate_skew,
            "skew_ratio": skew,
            "skew_kind": skew_kind,
            "slowest_worker": slow.key if slow else None,
            "slowest_pid": slow.pid if slow else None,
            "slowest_read_bytes_per_s": slow.rate if slow else None,
            "median_read_bytes_per_s": statistics.median(w.rate for w in ws) if ws else None,
            "slowest_mean_latency_ns": slow.mean_latency_ns if slow else None,
            "median_mean_latency_ns": (statistics.median(w.mean_latency_ns for w in ws)
                                       if ws else None),
            "max_in_flight": tl.max_in_flight,
            "mean_in_flight": tl.read_ns / span_ns,
            "reading_span_s": span_ns / 1e9,
            "idle_gap_count": tl.gaps,
            "longest_idle_gap_s": tl.longest_gap_ns / 1e9,
            "idle_s": tl.idle_ns / 1e9,
            "idle_share": idle_share,
        },
        processes=[{"pid": w.pid, "cmdline": cmdlines.get(w.pid),
                    **({"tid": w.key} if kind == "thread" else {}),
                    "reads": w.reads, "bytes": w.bytes, "share": w.bytes / total,
                    "read_bytes_per_s": w.rate, "mean_latency_ns": w.mean_latency_ns,
                    "span_s": w.span_ns / 1e9}
                   for w in sorted(ws, key=lambda w: (w.rate, w.key))],
        examples=examples[:3])]


def run(ctx: Context) -> list[Finding]:
    load_reads(ctx)
    try:
        return judge(ctx, ctx.th(RULE.id))
    finally:
        ctx.con.execute(f"drop table if exists {READS}")


RULE = Rule(
    id="imbalance",
    title="Concurrency and worker imbalance",
    question=("How many reads are in flight, do some workers read much more or much slower "
              "than the others, and when does the job read nothing?"),
    thresholds={"warn_skew": 2.0, "high_skew": 4.0, "min_worker_reads": 4,
                "min_worker_bytes_ratio": 0.25, "idle_gap_s": 0.1, "idle_share": 0.3},
    run=run,
)
