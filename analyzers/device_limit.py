"""device-at-limit: is a block device delivering all it can, and is that too little?

Question: while the job read from storage, was a device's read rate flat at a
ceiling (a bandwidth or IOPS limit: the device's own, a cloud volume's, a
cgroup throttle's) while the job kept waiting on it? Then no change in the
job's code makes the storage faster: the fix is bigger requests (IOPS-bound),
more devices or a faster tier (bandwidth-bound), or more requests in flight
(when the queue is shallow).

Over the job's completed block read requests (`block_rq`) of each device,
the reading span: from the completion that brings the bytes read to
`span_trim_share` (1%) of the total to the one that brings them to 99% (a
small stray read long before or after the bulk does not stretch it; the bytes
of data files place it where the job read any, so that libraries paged in at
the program's start do not either):
  ceiling_bytes_per_s   bytes completed in the span / span (and ceiling_iops:
                        requests / span)
  storage_wait_share    the share of the span during which a job thread was in
                        a read that missed the page cache or bypassed it
                        (O_DIRECT), blocked uninterruptibly inside a file read
                        (pages in the cache but still being read in: readahead
                        held by the limit), in a major fault,
                        or had an io_uring/libaio read in flight: the job
                        asked for more than the storage gave
  mean request size     bytes / requests: under `iops_request_bytes` the
                        device is IOPS-bound (many small requests, shuffled
                        small samples), else bandwidth-bound
  device_busy_share     device service time / span: low while the job waits
                        means the limit is in front of the device (a cgroup
                        throttle, a volume's provisioned rate) or too few
                        requests are in flight
Per-second flatness is not asked for: a throttle or a provisioned volume
releases large requests in bursts, flat only over seconds.
Trigger: read_bytes >= min_read_bytes, span >= min_span_s and
storage_wait_share >= min_wait_share. Severity and impact from the loop's
data waits in those reads (impact.py); warn without a training loop.
"""
from __future__ import annotations

import numpy as np

from iotrace.abi import ASYNC_READ_OPS, EF_DIRECT, EF_NO_COMPLETION, READ_OPS, sql_list

from iotrace.storage_io import REQ_OP_READ, device_name

from . import intervals as ivl
from .base import Context, Finding, Rule
from .rates import human_bytes, human_rate

# The job's storage waits: reads that missed the cache or bypassed it
# (O_DIRECT), major faults, async reads in flight (their intervals; a
# condition on events e).
STORAGE_WAIT_CALLS = (f"((e.op in {sql_list(READ_OPS)}"
                      f" and (e.arg > 0 or e.eflags & {EF_DIRECT} != 0))"
                      f" or (e.op = 'page_fault' and e.ret > 0)"
                      f" or e.op in {sql_list(ASYNC_READ_OPS)})")

# requests whose completion was seen (the others have no service time)
TIMED = f"eflags & {EF_NO_COMPLETION} = 0"
# Per device: all the job's read requests, and the reading span: from the
# completion that brings the bytes read to `trim` of the total to the one that
# brings them to 1 - trim, with the bytes and requests completed within it (a
# stray small read long before or after the bulk, a config file or a
# layout check, does not stretch the span). The span is the data's: where
# the job read data files from the device, only their requests place it (a
# program's own libraries paged in through the same limit at its start can
# be more than the trim and put an idle gap before the bulk); every request
# completed within it counts.
PER_DEVICE = f"""
    with rq as (select mode as dev, ts_ns + dur_ns as done, req_bytes, dur_ns, eflags,
                       case when file_id in (select file_id from data_file_ids)
                            then req_bytes else 0 end as data_bytes
                from events where op = 'block_rq' and ret = 0 and flags & 255 = {REQ_OP_READ}),
    c as (select *, sum(req_bytes) over w as cum, count(*) over w as k,
                 sum(req_bytes) over (partition by dev) as tot,
                 sum(data_bytes) over w as data_cum,
                 sum(data_bytes) over (partition by dev) as data_tot
          from rq window w as (partition by dev order by done, req_bytes
                               rows unbounded preceding)),
    placed as (select *, case when data_tot > 0 then data_cum else cum end as pcum,
                         case when data_tot > 0 then data_tot else tot end as ptot
               from c),
    ends as (select dev, min(done) filter (where pcum >= $trim * ptot) as first_ns,
                    min(done) filter (where pcum >= (1 - $trim) * ptot) as last_ns
             from placed group by dev)
    select c.dev, count(*) as n, sum(req_bytes) as bytes, e.first_ns, e.last_ns,
           max(k) filter (where done <= e.last_ns) - max(k) filter (where done <= e.first_ns)
               as span_n,
           max(cum) filter (where done <= e.last_ns) - max(cum) filter (where done <= e.first_ns)
               as span_bytes,
           median(dur_ns) filter (where {TIMED}) as p50_ns,
           quantile_cont(dur_ns, 0.99) filter (where {TIMED}) as p99_ns,
           sum(dur_ns) filter (where done > e.first_ns and done <= e.last_ns) as busy_ns
    from c join ends e using (dev)
    group by c.dev, e.first_ns, e.last_ns order by bytes desc, c.dev"""


# A read of a file that found its pages in the cache but still being read in
# (readahead started by an earlier read, held by a throttle) adds nothing to
# the cache, yet waits for storage: its thread is off CPU, uninterruptibly
# (offcpu flags bit 2: TASK_UNINTERRUPTIBLE, killable or not), inside the
# read. Those intervals, up to the read's end (calls of one thread do not
# overlap: the last file read that began before an interval holds it when it
# ends after the interval's start).
BLOCKED_IN_READS = f"""
    with x as (select tid, ts_ns, dur_ns, op = 'offcpu' as off,
                      case when op <> 'offcpu' then ts_ns + dur_ns end as read_end
               from events
               where ((op = 'offcpu' and flags & 2 != 0)
                      or (op in {sql_list(READ_OPS)} and file_id >= 0))
                 and ts_ns < $hi and ts_ns + dur_ns > $lo),
    y as (select *, last_value(read_end ignore nulls) over (
                        partition by tid order by ts_ns, off
                        rows between unbounded preceding and 1 preceding) as open_end
          from x)
    select ts_ns, least(ts_ns + dur_ns, open_end) from y
    where off and ts_ns < open_end"""


def covered_ns(ctx: Context, lo: int, hi: int) -> int:
    """Time in [lo, hi) covered by at least one storage-wait interval: the
    storage-wait calls, and the time a thread was blocked inside a file read
    (BLOCKED_IN_READS)."""
    calls = ctx.con.execute(f"""select ts_ns, ts_ns + dur_ns from events e
                                where {STORAGE_WAIT_CALLS}
                                  and ts_ns < {hi} and ts_ns + dur_ns > {lo}""").fetchnumpy()
    blocked = ctx.con.execute(BLOCKED_IN_READS.replace("$hi", str(int(hi)))
                              .replace("$lo", str(int(lo)))).fetchnumpy()
    starts, ends = (np.concatenate([np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)])
                    for a, b in zip(calls.values(), blocked.values()))
    return ivl.total(ivl.union(ivl.clip(ivl.as_iv(starts, ends), lo, hi)))


def run(ctx: Context) -> list[Finding]:
    th = ctx.th("device-at-limit")
    out = []
    per_device = PER_DEVICE.replace("$trim", repr(float(th["span_trim_share"])))
    for dev, n, nbytes, first, last, span_n, span_bytes, p50, p99, busy_ns \
            in ctx.rows(per_device):
        span_ns = (last - first) if first is not None and last is not None else 0
        if nbytes < th["min_read_bytes"] or span_ns < th["min_span_s"] * 1e9:
            continue
        wait_share = covered_ns(ctx, first, last) / span_ns
        if wait_share < th["min_wait_share"]:
            continue
        span_s = span_ns / 1e9
        rate, iops = span_bytes / span_s, span_n / span_s
        mean_req = nbytes / n
        depth = (busy_ns or 0) / span_ns
        iops_bound = mean_req < th["iops_request_bytes"]
        name = device_name(ctx.meta, dev)
        kind = ("IOPS-bound: many small requests" if iops_bound
                else "bandwidth-bound: large requests")
        rec = (f"{name} is {kind} (mean request {human_bytes(mean_req)}). "
               + ("Read larger samples or pack small ones into shards (WebDataset tar, "
                  "TFRecord, HDF5 chunks) so each request moves more bytes; shuffle shard "
                  "order instead of individual samples. "
                  if iops_bound else
                  "Spread the dataset over more devices (striping, several volumes), move it "
                  "to a faster tier (local NVMe cache) or cache it in memory. ")
               + (f"The device itself was busy {depth:.0%} of the time: the limit is in "
                  "front of it (a cgroup I/O throttle, a cloud volume's provisioned rate) "
                  "or the job keeps too few requests in flight; raise the limit, or add "
                  "loader workers or io_uring/libaio depth. " if depth < 0.5 else ""))
        out.append(Finding(
            id="device-at-limit", severity="warn",
            title=f"Reads from {name} limited to {human_rate(rate)}",
            summary=(f"The job waited on storage {wait_share:.0%} of the {span_s:.1f} s it "
                     f"read from {name}, which delivered {human_rate(rate)} "
                     f"({iops:.0f} requests/s): the storage, not the job, set the pace."),
            recommendation=rec.strip(),
            evidence={"device": name, "major": dev >> 20, "minor": dev & 0xFFFFF,
                      "ceiling_bytes_per_s": round(rate), "ceiling_iops": round(iops),
                      "storage_wait_share": round(wait_share, 3),
                      "read_bytes": int(nbytes), "requests": int(n),
                      "mean_request_bytes": round(mean_req),
                      "bound": "iops" if iops_bound else "bandwidth",
                      "device_busy_share": round(depth, 3),
                      "service_ms_p50": round(p50 / 1e6, 3) if p50 is not None else None,
                      "service_ms_p99": round(p99 / 1e6, 3) if p99 is not None else None,
                      "span_s": round(span_s, 3)},
            examples=[{"ts_ns": int(first), "pid": 0, "tid": 0,
                       "what": f"first read request completed on {name}"}],
        ))
    return out


RULE = Rule(
    id="device-at-limit",
    title="Block device at its limit",
    question="Is a device delivering a flat maximum while the job waits on it?",
    thresholds={"min_read_bytes": 16 << 20, "min_span_s": 1.0, "min_wait_share": 0.8,
                "iops_request_bytes": 64 << 10, "span_trim_share": 0.01},
    run=run,
)
