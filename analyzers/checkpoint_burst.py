"""checkpoint-burst: do periodic write bursts (checkpoints) stall the job?

Question: does the job write in periodic bursts (checkpoints); how many, how
often, how big, how long does each take and at what rate; how long does it
wait in fsync; what share of each checkpoint period is the writing thread
blocked in write/fsync/close; is the checkpoint written in many small writes;
and how long would one take at the write target (--target-write)?

Checkpoints: the calls are the opens for writing, writes (write family), syncs
(fsync, fdatasync, sync_file_range) and closes on regular files. Per file, a
session starts at each open for writing (a checkpoint rewritten to the same path
is one session per write) or after `gap_s` without calls on it (a file kept
open); sessions that wrote at least `min_burst_bytes` at no less than
`min_burst_bytes_per_s` count (a log or metrics file written a line at a time is
not a checkpoint). Sessions of any files that overlap or lie within
`merge_gap_s` of each other form one burst, one checkpoint: a checkpoint written
as several files (shards, optimizer state, by one thread or several ranks) is
one. Checkpoints 0.5 s apart are told apart as well as hours apart.

Per burst: bytes (bytes written), duration (first call's start to last call's
end), write rate (bytes / duration), fsyncs and time in them, and blocked time:
the time the busiest writing thread spent inside those open, write, sync and
close calls; loop_blocked (per burst, in the examples): the longest time a
training loop thread (see the verdict) spent in them, 0 when a background
thread or process wrote the checkpoint, null when no loop was found.
blocked_share = mean blocked time per burst / mean interval between burst
starts (the share of each checkpoint period the writing thread was stuck); with
a single burst, blocked time / trace duration. weighted_median_write_bytes: half
the bytes were written in writes of this size or smaller (a count median is
misled by the small header writes of torch.save and np.save).

Trigger: at least `min_bursts` bursts. Severity: high when blocked_share >=
`high_blocked_share` or weighted_median_write_bytes < `small_write_bytes`
(many small writes); warn when blocked_share >= `warn_blocked_share`; else info.
"""
from __future__ import annotations

from .base import Context, Finding, Rule, file_name
from .rates import human_bytes, human_rate, human_s
from .views import WRITE_OPS, sql_list

SYNC_OPS = ("fsync", "fdatasync", "sync_file_range")
OPENS = ("open", "openat", "openat2", "creat")
MAX_LISTED = 100   # bursts listed as examples, in time order
TOP = 5

# Calls tagged with their per-file session, then sessions merged into bursts;
# the table keeps every call of a counted session with its burst number.
CALLS_SQL = f"""
create or replace temp table checkpoint_burst_calls as
with written as (   -- files that received enough bytes to hold a burst at all
    select file_id from events where op in {sql_list(WRITE_OPS)} and file_id >= 0 and ret > 0
    group by file_id having sum(ret) >= $min_bytes),
c as (
    select e.ts_ns, e.dur_ns, e.ts_ns + e.dur_ns as end_ns, e.pid, e.tid, e.file_id,
           case when e.op in {sql_list(WRITE_OPS)} then 'write'
                when e.op in {sql_list(SYNC_OPS)} then 'sync'
                when e.op = 'close' then 'close' else 'open' end as kind,
           case when e.op in {sql_list(WRITE_OPS)} then greatest(e.ret, 0) else 0 end as nbytes
    from events e semi join written w using (file_id)
    where (e.op in {sql_list(WRITE_OPS + SYNC_OPS + ('close',))}
           or (e.op in {sql_list(OPENS)} and e.ret >= 0 and (e.flags & 3) <> 0))),
c1 as (select *, max(end_ns) over (partition by file_id order by ts_ns, end_ns
                                   rows between unbounded preceding and 1 preceding) as prev_end
       from c),
c2 as (select *, sum(case when kind = 'open' or prev_end is null or ts_ns - prev_end >= $gap
                          then 1 else 0 end)
                 over (partition by file_id order by ts_ns, end_ns rows unbounded preceding)
                 as sess
       from c1),
sessions as (
    select file_id, sess, min(ts_ns) as s, max(end_ns) as e from c2 group by file_id, sess
    having sum(nbytes) >= $min_bytes
       and sum(nbytes) / greatest((max(end_ns) - min(ts_ns)) / 1e9, 1e-3) >= $min_rate),
s1 as (select *, max(e) over (order by s, e rows between unbounded preceding
                              and 1 preceding) as prev_e from sessions),
s2 as (select file_id, sess, sum(case when prev_e is null or s - prev_e >= $merge_gap
                                      then 1 else 0 end)
                               over (order by s, e rows unbounded preceding) as burst
       from s1)
select c2.ts_ns, c2.dur_ns, c2.end_ns, c2.pid, c2.tid, c2.file_id, c2.kind, c2.nbytes,
       s2.burst
from c2 join s2 using (file_id, sess)"""

BURSTS_SQL = """
create or replace temp table checkpoint_burst_bursts as
with per_thread as (
    select burst, pid, tid, sum(dur_ns) as ns from checkpoint_burst_calls group by all),
loop as (select burst, max(ns) as loop_blocked_ns from per_thread
         where tid in ($loop_tids) group by burst),
writer as (   -- the thread that spent the most time in the burst's calls
    select burst, pid, tid, ns as blocked_ns from per_thread
    qualify row_number() over (partition by burst order by ns desc, tid) = 1)
select b.burst, min(ts_ns) as start_ns, max(end_ns) - min(ts_ns) as dur_ns,
       sum(nbytes) as bytes, count(*) filter (where kind = 'write') as writes,
       count(distinct file_id) as files,
       count(*) filter (where kind = 'sync') as syncs,
       coalesce(sum(dur_ns) filter (where kind = 'sync'), 0) as sync_ns,
       any_value(w.pid) as pid, any_value(w.tid) as tid, any_value(w.blocked_ns) as blocked_ns,
       coalesce(any_value(l.loop_blocked_ns), 0) as loop_blocked_ns, min(f.path) as path
from checkpoint_burst_calls b join writer w using (burst) left join loop l using (burst)
left join files f using (file_id)
group by b.burst"""

# Over all bursts: intervals between starts, sizes, durations, syncs, blocked time.
STATS_SQL = """
with b as (select *, (start_ns - lag(start_ns) over (order by start_ns)) / 1e9 as interval_s
           from checkpoint_burst_bursts)
select count(*), avg(interval_s), stddev_samp(interval_s), sum(bytes), avg(bytes),
       quantile_disc(bytes, 0.5), avg(dur_ns) / 1e9, max(dur_ns) / 1e9,
       sum(bytes) / greatest(sum(dur_ns) / 1e9, 1e-9), sum(syncs), sum(sync_ns) / 1e9,
       avg(blocked_ns) / 1e9
from b"""

# Write sizes: how many, the median by count, and the size at which half the
# bytes were written in writes of that size or smaller (median by bytes).
WRITES_SQL = """
with w as (select nbytes, sum(nbytes) over (order by nbytes, ts_ns rows unbounded preceding)
                          as cum,
                  sum(nbytes) over () as total
           from checkpoint_burst_calls where kind = 'write' and nbytes > 0)
select count(*), quantile_disc(nbytes, 0.5), min(nbytes) filter (where cum * 2 >= total)
from w"""


def bursts(ctx: Context) -> list[dict]:
    """Every burst, in time order (the rule's unit of account)."""
    th = ctx.th(RULE.id)
    ctx.con.execute(CALLS_SQL.replace("$gap", str(int(th["gap_s"] * 1e9)))
                    .replace("$merge_gap", str(int(th["merge_gap_s"] * 1e9)))
                    .replace("$min_bytes", str(int(th["min_burst_bytes"])))
                    .replace("$min_rate", repr(float(th["min_burst_bytes_per_s"]))))
    loops = ", ".join(str(int(t)) for t in ctx.loop_tids) or "null"
    ctx.con.execute(BURSTS_SQL.replace("$loop_tids", loops))
    keys = ("burst", "start_ns", "dur_ns", "bytes", "writes", "files", "syncs", "sync_ns",
            "pid", "tid", "blocked_ns", "loop_blocked_ns", "path")
    return [dict(zip(keys, r)) for r in ctx.rows(
        f"select {', '.join(keys)} from checkpoint_burst_bursts order by start_ns")]


def report_entry(b: dict, loop_known: bool) -> dict:
    """One burst as the report's `checkpoints` list gives it."""
    return {"ts_ns": b["start_ns"], "duration_s": b["dur_ns"] / 1e9, "bytes": b["bytes"],
            "writes": b["writes"], "files": b["files"], "fsyncs": b["syncs"],
            "fsync_s": b["sync_ns"] / 1e9, "pid": b["pid"], "tid": b["tid"],
            "blocked_s": b["blocked_ns"] / 1e9,
            "loop_blocked_s": b["loop_blocked_ns"] / 1e9 if loop_known else None,
            "path": b["path"]}


def stats(ctx: Context) -> dict:
    keys = ("count", "mean_interval_s", "stdev_interval_s", "total_bytes", "mean_bytes",
            "median_bytes", "mean_duration_s", "max_duration_s", "write_bytes_per_s",
            "fsyncs", "fsync_time_s", "mean_blocked_s")
    ev = dict(zip(keys, ctx.one(STATS_SQL)))
    gap = ev["mean_interval_s"]
    ev["blocked_share"] = min(1.0, ev["mean_blocked_s"] / gap if gap
                              else ev["mean_blocked_s"] / ctx.duration_s)
    ev["writes"], ev["median_write_bytes"], ev["weighted_median_write_bytes"] = \
        ctx.one(WRITES_SQL)
    ev["files"] = ctx.one("select count(distinct file_id) from checkpoint_burst_calls")[0]
    target = ctx.targets.write_bps
    if target:
        ev["target_write_bytes_per_s"] = target
        ev["target_duration_s"] = ev["mean_bytes"] / target
        if gap:
            ev["target_blocked_share"] = min(1.0, ev["target_duration_s"] / gap)
    return ev


def small_writes(ev: dict, th: dict) -> bool:
    w = ev["weighted_median_write_bytes"]
    return w is not None and w < th["small_write_bytes"]


def severity(ev: dict, th: dict) -> str:
    if ev["blocked_share"] >= th["high_blocked_share"] or small_writes(ev, th):
        return "high"
    if ev["blocked_share"] >= th["warn_blocked_share"]:
        return "warn"
    return "info"


def summary(ev: dict, small: bool) -> str:
    every = (f" every {ev['mean_interval_s']:.1f} s" if ev["mean_interval_s"] is not None
             else "")
    text = (f"{ev['count']} write bursts{every} of {human_bytes(ev['mean_bytes'])} on average, "
            f"{human_s(ev['mean_duration_s'])} each at {human_rate(ev['write_bytes_per_s'])} "
            f"({human_s(ev['fsync_time_s'] / ev['count'])} of it in fsync); the writing thread was "
            f"blocked {ev['blocked_share']:.0%} of each period.")
    if small:
        size = human_bytes(ev["weighted_median_write_bytes"])
        text += f" Half the bytes went in writes of {size} or less: many small writes."
    if "target_duration_s" in ev:
        text += (f" At the {human_rate(ev['target_write_bytes_per_s'])} target one would take "
                 f"{human_s(ev['target_duration_s'])}.")
    return text


def recommendation(ev: dict, small: bool) -> str:
    parts = []
    if small:
        parts.append("Serialise the checkpoint to memory and write it in large (MiB) "
                     "sequential writes, or use a format that writes each tensor in one call "
                     "(torch.save to a file, safetensors); small writes cost one system call "
                     "each and scale badly on network file systems.")
    parts.append("Take the checkpoint off the training thread: copy the state to host memory "
                 "and write it from a background thread or process (torch.distributed."
                 "checkpoint.async_save, PyTorch Lightning AsyncCheckpointIO, DeepSpeed/"
                 "Nebula async checkpointing), fsync once at the end, and checkpoint less "
                 "often if a lost interval is cheap.")
    if ev["fsync_time_s"] > 0.5 * ev["mean_duration_s"] * ev["count"]:
        parts.append("Most of the burst is fsync: the page cache absorbs the writes and the "
                     "storage is slower; write to faster local NVMe and copy out "
                     "asynchronously.")
    return " ".join(parts)


def run(ctx: Context) -> list[Finding]:
    th = ctx.th(RULE.id)
    bs = bursts(ctx)
    ctx.checkpoints = bs        # every burst, for the report's own list (and a set's)
    if not bs or len(bs) < th["min_bursts"]:
        return []
    ev = stats(ctx)
    small = small_writes(ev, th)
    total = ev["total_bytes"]
    files = ctx.rows(f"""
        select f.path, sum(nbytes), count(*) filter (where kind = 'write'),
               count(*) filter (where kind = 'sync'), count(distinct burst)
        from checkpoint_burst_calls b left join files f using (file_id)
        group by f.path order by 2 desc, 1 limit {TOP}""")
    procs = ctx.rows(f"""
        select b.pid, any_value(p.cmdline), sum(nbytes), sum(dur_ns)
        from checkpoint_burst_calls b left join processes_once p using (pid)
        group by b.pid order by 3 desc, 1 limit {TOP}""")
    return [Finding(
        id=RULE.id, severity=severity(ev, th), title="Checkpoint write bursts",
        summary=summary(ev, small), recommendation=recommendation(ev, small), evidence=ev,
        files=[{"path": p, "bytes": b, "writes": w, "fsyncs": s, "bursts": k,
                "share": b / max(total, 1)} for p, b, w, s, k in files],
        processes=[{"pid": pid, "cmdline": cmd, "bytes": b, "blocked_s": ns / 1e9,
                    "share": b / max(total, 1)} for pid, cmd, b, ns in procs],
        examples=[{"ts_ns": b["start_ns"], "pid": b["pid"], "tid": b["tid"],
                   "what": (f"burst {i + 1}: {human_bytes(b['bytes'])} in {b['writes']} writes "
                            f"to {b['files']} file{'s' if b['files'] != 1 else ''} "
                            f"({file_name(b['path'])}) in {b['dur_ns'] / 1e9:.3f} s, "
                            f"{b['syncs']} fsync {b['sync_ns'] / 1e9:.3f} s"),
                   "bytes": b["bytes"], "writes": b["writes"], "files": b["files"],
                   "fsyncs": b["syncs"], "duration_s": b["dur_ns"] / 1e9,
                   "fsync_s": b["sync_ns"] / 1e9, "blocked_s": b["blocked_ns"] / 1e9,
                   "loop_blocked_s": (b["loop_blocked_ns"] / 1e9 if ctx.loop_tids else None),
                   "path": b["path"]}
                  for i, b in enumerate(bs[:MAX_LISTED])])]


RULE = Rule(
    id="checkpoint-burst",
    title="Checkpoint write bursts",
    question="Does the job write periodic bursts (checkpoints), and how long do they "
             "block the writing thread?",
    thresholds={"gap_s": 1.0, "merge_gap_s": 0.25, "min_burst_bytes": float(1 << 20),
                "min_burst_bytes_per_s": float(1 << 20), "min_bursts": 2,
                "warn_blocked_share": 0.05, "high_blocked_share": 0.2,
                "small_write_bytes": 65536.0},
    run=run,
)
