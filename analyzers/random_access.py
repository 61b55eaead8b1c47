"""random-access: are files read out of order, or with a seek before each read?

Question: which files does the job read non-sequentially (shuffled samples
inside large files: every read jumps), and which does it read with an lseek
before each read (the Lustre pattern: 4 MiB chunks with an lseek between each)?
Non-sequential reads defeat the kernel's readahead and the storage's streaming
bandwidth; on disks and network filesystems they are bound by IOPS or round
trips instead.

A read is *non-sequential* when its offset differs from the end (offset + bytes
returned) of the previous read by the same process on the same fd and file, in
time order (DuckDB `lag` partitioned by pid, fd, file_id). The first read of
each stream is not counted, nor is a read at offset 0 after another read (a
rewind: the file read again from the start, see redundant-io); rewinds are
counted separately. Seeks are lseek calls on the file except position queries
(`lseek(fd, 0, SEEK_CUR)`, Python's `tell()`).

Per file: reads (read-family calls with ret >= 0), non_sequential_share =
non-sequential reads / reads, seeks_per_read = seeks / reads.
Trigger: a file is flagged when it has at least min_reads_per_file (8) reads and
  non_sequential_share >= min_non_sequential_share (0.5)   (random), or
  seeks_per_read       >= min_seeks_per_read       (0.5)   (seek before reads),
and a finding is made when the flagged files carry at least min_bytes_share
(10%) of all bytes read from files.
Severity: high when the *random* files carry at least high_bytes_share (50%) of
the read bytes in requests of at most high_max_median_request_bytes (512 KiB,
median): small random reads, bound by IOPS. Else warn (large random reads, or
sequential reads with a seek before each, which cost a system call and, on
some network filesystems, a round trip each).
"""
from __future__ import annotations

from typing import Optional

from .base import Context, Finding, Rule, file_name
from .rates import human_bytes
from .views import read_streams

# A read's place in its stream (pid, fd, file), and what makes it non-sequential.
LAG = "lag(off + nbytes) over (partition by pid, fd, file_id order by ts_ns) as prev_end"
NONSEQ = "coalesce(prev_end is not null and off <> prev_end and off <> 0, false)"
REWIND = "coalesce(prev_end is not null and off = 0 and prev_end <> 0, false)"
READS = "_random_access_reads"      # temp view: every read, classified

PER_FILE = "_random_access_files"   # temp table: the per-file counts, made once per run

# lseek whence SEEK_CUR = 1; lseek(fd, 0, SEEK_CUR) only asks the position.
PER_FILE_SQL = f"""
create or replace temp table {PER_FILE} as
with sk as (select file_id, count(*) as seeks from events
            where op = 'lseek' and file_id >= 0 and not (flags = 1 and arg = 0)
            group by file_id)
select k.file_id, any_value(f.path) as path, count(*) as reads,
       count(*) filter (where nonseq) as nonseq_reads,
       count(*) filter (where rewind) as rewinds,
       coalesce(any_value(sk.seeks), 0) as seeks, sum(nbytes) as bytes,
       sum(dur_ns) as dur_ns
from {READS} k join files f using (file_id) left join sk using (file_id)
group by k.file_id"""

FLAGGED = f"""
    flagged as (
        select *, nonseq_reads / reads as share, seeks / reads as seeks_per_read,
               nonseq_reads >= ? * reads as random
        from {PER_FILE}
        where reads >= ? and (nonseq_reads >= ? * reads or seeks >= ? * reads))"""


RANDOM_ADVICE = ("Shuffle at the sample or file level, not inside files: read each sample "
                 "(or a shard of contiguous samples) in one sequential pass; store samples "
                 "contiguously in the order they are read (WebDataset/TFRecord shards, one "
                 "file per sample); read larger sequential chunks and prefetch ahead "
                 "(posix_fadvise(POSIX_FADV_SEQUENTIAL/WILLNEED), a larger readahead, more "
                 "DataLoader workers with prefetch_factor).")
SEEK_ADVICE = ("Drop the lseek before each read: the reads are already sequential, so just "
               "read on (or pread at an explicit offset); on network filesystems each seek "
               "can cost a round trip. Read in larger chunks to need fewer calls of either.")


def median_of_counts(counts: list[tuple[int, int]]) -> Optional[int]:
    """quantile_disc(x, 0.5) of values given as sorted (value, count) pairs:
    the value at 0-based rank floor((n - 1) / 2)."""
    n = sum(c for _, c in counts)
    if n == 0:
        return None
    rank = (n - 1) // 2
    for value, c in counts:
        if rank < c:
            return value
        rank -= c
    raise AssertionError("unreachable")


def params(th: dict) -> tuple:
    return (th["min_non_sequential_share"], int(th["min_reads_per_file"]),
            th["min_non_sequential_share"], th["min_seeks_per_read"])


def run(ctx: Context) -> list[Finding]:
    # the reads' stream positions (LAG) come from the shared window pass
    ctx.con.execute(f"""create or replace temp view {READS} as
        select file_id, pid, nbytes, req_bytes, dur_ns, {NONSEQ} as nonseq,
               {REWIND} as rewind, abs(off - prev_end) as jump
        from {read_streams(ctx)}""")
    try:
        ctx.con.execute(PER_FILE_SQL)
        return findings(ctx, ctx.th(RULE.id))
    finally:
        ctx.con.execute(f"drop table if exists {PER_FILE}")
        ctx.con.execute(f"drop view if exists {READS}")


def findings(ctx: Context, th: dict) -> list[Finding]:
    files = ctx.rows(f"""with {FLAGGED}
        select file_id, path, reads, nonseq_reads, rewinds, seeks, bytes, dur_ns,
               share, seeks_per_read, random
        from flagged order by bytes desc, file_id""", *params(th))
    if not files:
        return []
    total_read = ctx.one("select coalesce(sum(nbytes), 0) from io where dir = 'read'")[0]
    nbytes = sum(f[6] for f in files)
    share = nbytes / total_read if total_read else 0.0
    if share < th["min_bytes_share"]:
        return []
    # The counts add up over the files. The medians are over the reads: the
    # request sizes' from their counts (few distinct sizes), the jumps' once
    # for all flagged files and per file only for the files listed.
    reads, nonseq, rewinds, dur_ns = (sum(f[i] for f in files) for i in (2, 3, 4, 7))
    rand_bytes = sum(f[6] for f in files if f[10])
    sizes = ctx.rows(f"""with {FLAGGED}
        select k.req_bytes, fl.random, count(*) from {READS} k join flagged fl using (file_id)
        group by all order by 1""", *params(th))
    median_req = median_of_counts([(r, n) for r, _, n in sizes])
    rand_median_req = median_of_counts([(r, n) for r, rnd, n in sizes if rnd])
    shown = files[:10]
    ids = ",".join(str(int(f[0])) for f in shown)
    jumps = dict(ctx.rows(f"""with {FLAGGED}
        select -1, quantile_disc(k.jump, 0.5) from {READS} k join flagged fl using (file_id)
        where k.nonseq
        union all
        select file_id, quantile_disc(jump, 0.5) from {READS}
        where nonseq and file_id in ({ids}) group by file_id""", *params(th)))
    jump = jumps.get(-1)
    seeks = sum(f[5] for f in files)
    random_share = rand_bytes / total_read
    high = (random_share >= th["high_bytes_share"] and rand_median_req is not None
            and rand_median_req <= th["high_max_median_request_bytes"])
    any_random = any(f[10] for f in files)
    top = files[0]
    procs = ctx.rows(f"""with {FLAGGED}
        select k.pid, any_value(p.cmdline), count(*), count(*) filter (where k.nonseq)
        from {READS} k left join processes_once p using (pid)
        where k.file_id in (select file_id from flagged)
        group by k.pid order by 3 desc, 1 limit 5""", *params(th))
    examples = [{"ts_ns": ts, "pid": pid, "tid": tid,
                 "what": (f"read of {human_bytes(req)} at offset {off:,} of {file_name(top[1])}, "
                          f"previous read ended at {prev:,}")}
                for ts, pid, tid, off, prev, req in ctx.rows(f"""
                    select ts_ns, pid, tid, off, prev_end, req_bytes from
                        (select ts_ns, pid, tid, off, req_bytes, {LAG} from io
                         where dir = 'read' and ret >= 0 and file_id = ?)
                    where {NONSEQ} order by ts_ns limit 3""", top[0])]
    if not examples:   # sequential reads: show the seeks instead
        examples = [{"ts_ns": ts, "pid": pid, "tid": tid,
                     "what": f"lseek from {off:,} to {ret:,} on {top[1]}"}
                    for ts, pid, tid, off, ret in ctx.rows("""
                        select ts_ns, pid, tid, "offset", ret from events
                        where op = 'lseek' and file_id = ? and not (flags = 1 and arg = 0)
                        order by ts_ns limit 3""", top[0])]
    if any_random:
        title = "Files read out of order"
        summary = (f"{nonseq / reads:.0%} of {reads:,} reads of {len(files)} file(s) "
                   f"({share:.0%} of the bytes read) jumped away from where the previous "
                   f"read ended (median jump {human_bytes(jump or 0)}, median request "
                   f"{human_bytes(median_req)}); {seeks / reads:.2f} seeks per read.")
    else:
        title = "A seek before each read"
        summary = (f"{len(files)} file(s) ({share:.0%} of the bytes read) were read "
                   f"sequentially but with {seeks:,} lseek calls for {reads:,} reads "
                   f"({seeks / reads:.2f} per read).")
    return [Finding(
        id=RULE.id, severity="high" if high else "warn", title=title, summary=summary,
        recommendation=RANDOM_ADVICE if any_random else SEEK_ADVICE,
        evidence={
            "files": len(files),
            "reads": reads,
            "non_sequential_reads": nonseq,
            "non_sequential_share": nonseq / reads,
            "rewinds": rewinds,
            "seeks": seeks,
            "seeks_per_read": seeks / reads,
            "median_jump_bytes": jump,
            "median_request_bytes": median_req,
            "read_bytes": nbytes,
            "read_bytes_share": share,
            "random_read_bytes_share": random_share,
            "read_time_s": dur_ns / 1e9,
        },
        files=[{"path": f[1], "reads": int(f[2]), "non_sequential_share": f[8],
                "seeks_per_read": f[9], "median_jump_bytes": jumps.get(f[0]),
                "share": f[6] / total_read} for f in shown],
        processes=[{"pid": pid, "cmdline": cmd, "reads": int(n), "non_sequential_reads": int(ns)}
                   for pid, cmd, n, ns in procs],
        examples=examples)]


RULE = Rule(
    id="random-access",
    title="Random access and seeks",
    question="Which files are read out of order, or with a seek before each read?",
    thresholds={"min_reads_per_file": 8, "min_non_sequential_share": 0.5,
                "min_seeks_per_read": 0.5, "min_bytes_share": 0.1,
                "high_bytes_share": 0.5, "high_max_median_request_bytes": 512 * 1024},
    run=run,
)
