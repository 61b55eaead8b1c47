"""async-depth: does an io_uring or libaio reader keep enough requests in flight?

Question: a job that reads through io_uring or libaio can have many requests
in flight at once, which is what lets a fast device (NVMe, a parallel file
system) reach its throughput. Did it, or did it submit one or two at a time
and wait for each, leaving the device idle between requests?

Over each process's io_uring and libaio read requests of the job's data
files (`async_io`):
  busy_ns         time with at least one of its requests in flight
  mean_in_flight  sum of the requests' durations / busy_ns (the queue depth
                  it kept while reading)
  max_in_flight   most requests in flight at once
  storage_share   bytes of block-device reads of those files / bytes the
                  requests read (a depth matters only when the device serves
                  them; page-cache hits complete at submission)
Trigger: requests >= min_requests, storage_share >= min_storage_share and
mean_in_flight < min_depth. Severity and impact from the loop's data waits in
those requests (impact.py); warn without a training loop.
"""
from __future__ import annotations

from iotrace.abi import ASYNC_READ_OPS, sql_list

from .base import Context, Finding, Rule

PER_PROC = """
    with r as (select pid, iface, file_id, ts_ns as s, ts_ns + greatest(dur_ns, 1) as e,
                      dur_ns, nbytes
               from async_io where dir = 'read' and ret >= 0 and file_id not in
                 (select file_id from files where regexp_matches(coalesce(path, ''), ?))),
    edges as (select pid, iface, s as t, 1 as d from r
              union all select pid, iface, e, -1 from r),
    depth as (select pid, iface, t, d, sum(d) over (partition by pid, iface order by t, d
                                                    rows unbounded preceding) as n
              from edges),
    busy as (select pid, iface,
                    sum(case when n > 0 then nt - t else 0 end) as busy_ns, max(n) as max_n
             from (select *, lead(t) over (partition by pid, iface order by t, d) as nt
                   from depth) group by all),
    dev as (select file_id, sum(req_bytes) as dev_bytes from events
            where op = 'block_rq' and flags & 255 = 0 and file_id >= 0 group by file_id),
    tot as (select pid, iface, count(*) as n, sum(nbytes) as bytes, sum(dur_ns) as dur_ns,
                   median(dur_ns) as p50_ns, list(distinct file_id) as fids
            from r group by all)
    select t.pid, t.iface, t.n, t.bytes, t.dur_ns, t.p50_ns, b.busy_ns, b.max_n,
           (select coalesce(sum(dev_bytes), 0) from dev where list_contains(t.fids, dev.file_id))
               as dev_bytes,
           (select any_value(cmdline) from processes p where p.pid = t.pid) as cmdline
    from tot t join busy b using (pid, iface)
    order by t.bytes desc, t.pid, t.iface"""


def run(ctx: Context) -> list[Finding]:
    from .views import NOT_DATA_RE
    th = ctx.th("async-depth")
    out = []
    for pid, iface, n, nbytes, dur_ns, p50, busy_ns, max_n, dev_bytes, cmdline in \
            ctx.rows(PER_PROC, NOT_DATA_RE):
        if n < th["min_requests"] or not nbytes or not busy_ns:
            continue
        share = min(dev_bytes / nbytes, 1.0)
        depth = dur_ns / busy_ns
        if share < th["min_storage_share"] or depth >= th["min_depth"]:
            continue
        out.append(Finding(
            id="async-depth", severity="warn",
            title=f"Shallow {iface} queue: {depth:.1f} requests in flight",
            summary=(f"Process {pid} read through {iface} with {depth:.1f} requests in flight "
                     f"on average (at most {max_n}) over {n} requests served by storage: "
                     f"the device waits between requests."),
            recommendation=(
                f"Keep more requests in flight: submit batches (a larger queue depth, e.g. "
                f"fio's iodepth or the loader's {iface} ring size, 16-64 for NVMe) and reap "
                "completions without waiting for each; or read with more threads or "
                "processes."),
            evidence={"interface": iface, "requests": int(n), "read_bytes": int(nbytes),
                      "mean_in_flight": round(depth, 2), "max_in_flight": int(max_n),
                      "storage_share": round(share, 3),
                      "latency_ms_p50": round(p50 / 1e6, 3), "busy_s": round(busy_ns / 1e9, 3)},
            processes=[{"pid": pid, "cmdline": cmdline, "share": 1.0}],
        ))
    return out


RULE = Rule(
    id="async-depth",
    title="Shallow io_uring/libaio queue",
    question="Does an io_uring or libaio reader keep enough requests in flight?",
    thresholds={"min_requests": 1000, "min_storage_share": 0.5, "min_depth": 4},
    run=run,
)

# The calls the finding is about (for its impact): the async reads.
CALLS = f"e.op in {sql_list(ASYNC_READ_OPS)}"
