"""readahead-missing: does a sequential reader wait on storage for every small read?

Question: when a file is read in order, the kernel reads ahead of the reader
(and around a memory-mapped reader's faults), so most reads find their pages
cached and the device sees large requests. With readahead off - the file
opened with POSIX_FADV_RANDOM, a mapping with MADV_RANDOM, a device or mount
with `read_ahead_kb` 0 - every read of a few KiB misses and waits for its own
small device request: a sequential scan runs at the device's small-request
IOPS instead of its bandwidth.

Per data file (no code, libraries or system files):
  system calls: reads in order (offset = end of the previous read of the same
    process, fd and file), and of them the *missing* reads (that added pages to
    the page cache for the file: `arg` > 0);
  memory mappings: major faults in order (offset at most 2 pages past the
    previous major fault of the same thread on the file).
  bytes_per_miss  bytes a missing read (or major fault) brought in: with
                  readahead, a whole window (128 KiB and more); without, what
                  the read asked for.
Trigger, for a file and an interface:
  missing reads (major faults) >= min_misses (1000),
  in-order share >= min_sequential_share (0.8),
  missing share of the reads >= min_missing_share (0.5; faults: all are misses),
  bytes_per_miss <= max_bytes_per_miss (64 KiB) and <= 2 x the mean read size.
Severity: warn; with a training loop, from the loop's data waits in the
missing reads and faults (impact.py).
"""
from __future__ import annotations

from iotrace.abi import READ_OPS, sql_list

from .base import Context, Finding, Rule
from .rates import human_bytes, human_s
from .views import read_streams

# s: the reads that moved bytes, on data files; prev_end is where the previous
# such read of the stream ended (random_access.LAG over these reads: read_streams).
PER_FILE = """
    with s as (select file_id, off, nbytes, cache_added, dur_ns, prev_moved_end as prev_end
               from read_streams where nbytes > 0
                 and file_id in (select file_id from data_file_ids)),
    rs as (select file_id, count(*) as n,
                  count(prev_end) as n_after,
                  count(*) filter (where off = prev_end) as n_seq,
                  count(*) filter (where cache_added > 0) as n_miss,
                  coalesce(sum(cache_added), 0) as brought, avg(nbytes) as mean_read,
                  coalesce(sum(dur_ns) filter (where cache_added > 0), 0) as miss_ns
           from s group by file_id),
    r as (select rs.file_id, f.path, 'system calls' as iface, n, n_after, n_seq, n_miss,
                 brought, mean_read, miss_ns
          from rs join files f using (file_id)),
    f as (select file_id, path, brought, dur_ns,
                 lag(off) over (partition by tid, file_id order by ts_ns) as prev_off, off
          from data_faults where major),
    m as (select file_id, any_value(path) as path, 'page faults' as iface, count(*) as n,
                 count(prev_off) as n_after,
                 count(*) filter (where off >= prev_off and off <= prev_off + 8192) as n_seq,
                 count(*) as n_miss, sum(brought) as brought, 4096.0 as mean_read,
                 sum(dur_ns) as miss_ns
          from f group by file_id)
    select * from r union all select * from m
    order by miss_ns desc, file_id, iface"""


def run(ctx: Context) -> list[Finding]:
    th = ctx.th("readahead-missing")
    read_streams(ctx)
    hits = []
    for fid, path, iface, n, n_after, n_seq, n_miss, brought, mean_read, miss_ns in \
            ctx.rows(PER_FILE):
        if n_miss < th["min_misses"] or not n_after:
            continue
        per_miss = brought / n_miss
        if (n_seq / n_after >= th["min_sequential_share"]
                and n_miss / n >= th["min_missing_share"]
                and per_miss <= min(th["max_bytes_per_miss"], 2 * mean_read)):
            hits.append((path, iface, n, n_seq / n_after, n_miss, per_miss, miss_ns, brought))
    if not hits:
        return []
    misses = sum(h[4] for h in hits)
    miss_s = sum(h[6] for h in hits) / 1e9
    per_miss = sum(h[7] for h in hits) / misses
    ifaces = sorted({h[1] for h in hits})
    return [Finding(
        id="readahead-missing", severity="warn",
        title=f"No readahead: {misses} in-order reads each waited for "
              f"{human_bytes(per_miss)} from storage",
        summary=(f"The job read {len(hits)} file(s) in order through {' and '.join(ifaces)}, "
                 f"but {misses} of its reads missed the page cache and brought only "
                 f"{human_bytes(per_miss)} each: nothing was read ahead, so each read "
                 f"waited for its own small device request ({human_s(miss_s)} in those reads)."),
        recommendation=(
            "Let the kernel read ahead of sequential reads: drop POSIX_FADV_RANDOM / "
            "MADV_RANDOM where the access is in order (fio: fadvise_hint), check the "
            "device's readahead (`blockdev --getra DEV`, /sys/block/DEV/queue/read_ahead_kb; "
            "128 KiB or more) and the network file system's (NFS: the bdi's read_ahead_kb "
            "under /sys/class/bdi); or read in larger requests (1 MiB and up)."),
        evidence={"missing_reads": int(misses), "bytes_per_miss": int(per_miss),
                  "miss_s": round(miss_s, 3), "interfaces": ifaces},
        files=[{"path": p, "interface": i, "reads": int(n), "sequential_share": round(sq, 3),
                "missing_reads": int(nm), "bytes_per_miss": int(pm),
                "share": round(nm / misses, 4)}
               for p, i, n, sq, nm, pm, _, _ in hits[:10]],
    )]


RULE = Rule(
    id="readahead-missing",
    title="Sequential reads without readahead",
    question="Does a sequential reader wait on storage for every small read?",
    thresholds={"min_misses": 1000, "min_sequential_share": 0.8, "min_missing_share": 0.5,
                "max_bytes_per_miss": 64 << 10},
    run=run,
)

# The calls the finding is about (for its impact): missing reads and major faults.
CALLS = f"((e.op in {sql_list(READ_OPS)} and e.arg > 0) or (e.op = 'page_fault' and e.ret > 0))"
