"""readahead-wasted: did readahead bring in data the job never read?

Question: the kernel reads ahead of a sequential reader, and around each page
fault of a memory mapping (read-around: `read_ahead_kb` of the device, 128 KiB
by default, several MiB on some virtual disks and network file systems). For a
job that reads a few KiB here and there - random samples out of a large file,
`arr[idx]` on a memory-mapped array - most of those bytes are never used: the
device moves many times what the job needs, and a device-bound job runs that
many times slower.

Per data file (no code, libraries or system files), over the job's reads
(system calls, io_uring, libaio) and page faults on its mappings:
  brought  bytes the job's reads and faults added to the page cache for the file
           (demand misses and their readahead / read-around; `arg` of a read,
           `ret` of a fault, `cache_fill` of async reads: docs/trace-format.md)
  used     at most: the bytes the reads returned (counting re-reads) plus, for
           each fault, the fault-around window it could map (fault_window_bytes,
           the kernel's default 64 KiB: a page is only readable through a mapping
           once a fault mapped it)
  wasted   brought - used: at least this much was read from storage and never
           read by the job (a lower bound: a fault that mapped one page is
           counted as using 64 KiB)
Trigger, over the data files together:
  wasted >= min_wasted_bytes (16 MiB) and wasted / brought >= min_wasted_share (0.3)
Severity: warn at or above high_wasted_share (0.5), else info; with a training
loop, from its cost: the loop's data waits in the calls and faults that
brought the bytes (impact.py).
"""
from __future__ import annotations

from .base import Context, Finding, Rule
from .rates import human_bytes

PER_FILE = """
    with r as (select file_id, any_value(path) as path, sum(cache_added) as brought,
                      sum(nbytes) as used, count(*) as n
               from data_io where dir = 'read' group by file_id),
    a as (select file_id, any_value(path) as path, sum(nbytes) as used, count(*) as n
          from all_data_io where iface <> 'syscall' and dir = 'read' group by file_id),
    c as (select file_id, sum(ret) as brought from events
          where op = 'cache_fill' and file_id in (select file_id from a) group by file_id),
    m as (select file_id, any_value(path) as path, sum(brought) as brought,
                 count(*) as faults, count(*) filter (where major) as majors
          from data_faults group by file_id),
    ids as (select file_id from r union select file_id from a union select file_id from m),
    f as (
    select ids.file_id, coalesce(r.path, a.path, m.path) as path,
           coalesce(r.brought, 0) + coalesce(c.brought, 0) + coalesce(m.brought, 0) as brought,
           coalesce(r.used, 0) + coalesce(a.used, 0) + coalesce(m.faults, 0) * ? as used,
           coalesce(r.n, 0) + coalesce(a.n, 0) as reads, coalesce(m.faults, 0) as faults,
           coalesce(m.majors, 0) as majors, coalesce(m.brought, 0) as fault_brought
    from ids left join r using (file_id) left join a using (file_id)
         left join c using (file_id) left join m using (file_id))
    select * from f order by brought - used desc, file_id"""


def run(ctx: Context) -> list[Finding]:
    th = ctx.th("readahead-wasted")
    rows = [r for r in ctx.rows(PER_FILE, int(th["fault_window_bytes"])) if r[2] > r[3]]
    brought = sum(r[2] for r in rows)
    wasted = sum(r[2] - r[3] for r in rows)
    if not brought or wasted < th["min_wasted_bytes"] or wasted / brought < th["min_wasted_share"]:
        return []
    share = wasted / brought
    faults = sum(r[5] for r in rows)
    majors = sum(r[6] for r in rows)
    fault_brought = sum(r[7] for r in rows)
    via = ("page faults on memory-mapped files (read-around)" if fault_brought >= brought / 2
           else "reads (readahead)")
    per_major = fault_brought / majors if majors else 0
    return [Finding(
        id="readahead-wasted", severity="warn" if share >= th["high_wasted_share"] else "info",
        title=f"Readahead wasted: at least {100 * share:.0f}% of the bytes read from storage "
              "were never used",
        summary=(f"The job's {via} brought {human_bytes(brought)} of its data files into the "
                 f"page cache, of which at least {human_bytes(wasted)} were never read by it"
                 + (f" (each major fault brought {human_bytes(per_major)})" if majors else "")
                 + ": the storage moved data the job did not need."),
        recommendation=(
            "For random access, stop the kernel reading ahead: madvise(MADV_RANDOM) on the "
            "mapping (Python: `mmap.mmap(...).madvise(mmap.MADV_RANDOM)`), "
            "posix_fadvise(POSIX_FADV_RANDOM) on the file, or read samples with pread of their "
            "exact size instead of through a mapping. If the device's readahead is large "
            "(`blockdev --getra`, /sys/block/DEV/queue/read_ahead_kb), lower it for random "
            "workloads; better, store samples so that a batch reads contiguous bytes (shards, "
            "record files)."),
        evidence={"brought_bytes": int(brought), "wasted_bytes_at_least": int(wasted),
                  "wasted_share_at_least": round(share, 4), "reads": int(sum(r[4] for r in rows)),
                  "faults": int(faults), "major_faults": int(majors),
                  "bytes_per_major_fault": int(per_major)},
        files=[{"path": p, "brought_bytes": int(b), "wasted_bytes_at_least": int(b - u),
                "share": round((b - u) / wasted, 4)}
               for _, p, b, u, *_ in rows[:10]],
    )]


RULE = Rule(
    id="readahead-wasted",
    title="Readahead brings data the job never reads",
    question="Did readahead or read-around bring in data the job never read?",
    thresholds={"min_wasted_bytes": 16 << 20, "min_wasted_share": 0.3,
                "high_wasted_share": 0.5, "fault_window_bytes": 64 << 10},
    run=run,
)

