"""redundant-io: does the job move bytes, or make calls, it did not need to?

Question: are the same bytes read many times; are files written in tiny
writes; is every small write followed by an fsync; are O_DIRECT calls
misaligned (and so fail with EINVAL)? Each pattern is its own finding with
this id.

Re-reads. Per file, the distinct bytes read are the union of the [offset,
offset + bytes) ranges of its reads; reread_factor = bytes read / distinct
bytes (a 1 MiB file read whole 20 times: 20.0). A file fires when
  reread_factor  >= min_reread_factor           (4)
  bytes read - distinct bytes >= min_redundant_read_bytes (16 MiB).
For speed, files that could not fire even if their distinct bytes were only
their longest read are left out first. The others are screened with an upper
bound of the distinct bytes (the smaller of the file's extent and the sum, over
distinct start offsets, of the longest read from each), and the exact union is
sorted out only for those that pass. The bound is exact when re-reads repeat
the same requests or cover the extent; a file re-read only in partly
overlapping requests, scattered over a sparse extent, can be missed (never
reported wrongly).
Severity: warn when the redundant bytes of those files are at least
warn_redundant_share (50%) of all bytes read from files, else info. Never high:
reading a dataset once per epoch is often by design; the finding says what
caching would save.

fsync after every small write. Per file, fsync + fdatasync calls against its
write calls (write, pwrite64, writev, pwritev, pwritev2 with ret >= 0). Fires when
  syncs                >= min_syncs_per_file      (100)
  syncs / writes       >= min_syncs_per_write     (0.5)
  median write request <= max_median_synced_write_bytes (1 MiB).
Severity: high (each sync waits for the device: thousands of them serialise
the writer on storage latency).

Tiny writes. Per file (not already reported for syncs), fires when
  writes               >= min_writes_per_file     (100)
  median write request <= max_median_write_bytes  (4096).
Severity: warn when those files received at least warn_tiny_write_bytes
(1 MiB) in total (a checkpoint or data file written piecemeal), else info (a
log written line by line).

Misaligned O_DIRECT. Read/write calls on a file open with O_DIRECT (the
record's eflags DIRECT: the file's flags at the call, so fds opened before the
trace, dup'ed, or switched with fcntl count too) are misaligned when the offset
or the requested size is not a multiple of direct_io_align_bytes (4096: the
logical block size of 4Kn devices; 512-byte sector devices accept 512-aligned
calls). Severity: high when any misaligned call failed with EINVAL, else warn.
"""
from __future__ import annotations

from iotrace.abi import OPEN_OPS, sql_list

from .base import Context, Finding, Rule, file_name
from .rates import human_bytes

MiB = 1 << 20
EINVAL = 22
OPENS = sql_list(OPEN_OPS)


def top_processes(ctx: Context, direction: str, file_ids) -> list[dict]:
    """The processes behind the calls of `direction` ('read', 'write' or '%' for
    both) on these files, busiest first. The ids go in as one list parameter
    (thousands of files: a literal IN list costs more to plan than to run),
    and the calls are counted before the processes are joined."""
    where = "" if direction == "%" else f"dir = '{direction}' and "
    return [{"pid": pid, "cmdline": cmd, "calls": int(n), "bytes": int(b)}
            for pid, cmd, n, b in ctx.rows(f"""
                with c as (select pid, count(*) as n, sum(nbytes) as b from io
                           where {where}file_id in (select unnest(?))
                           group by pid)
                select c.pid, p.cmdline, c.n, c.b from c left join processes_once p using (pid)
                order by 3 desc, 1 limit 5""", [int(i) for i in file_ids])]


# A read's file and offset in one BIGINT when they fit (file_id < 2^23,
# offsets below 1 TiB): the union of a file's ranges is then one running
# maximum over the reads in key order, with no grouping or partitioning, a
# quarter less time than grouping by (file, offset) first.
PACK_SHIFT = 40


def _packs(ctx: Context) -> bool:
    if hasattr(ctx.con, "spark"):
        return False
    hi_id, hi_end = ctx.one("""select max(file_id), max(off + nbytes) from io
                               where dir = 'read' and nbytes > 0 and off >= 0""")
    return hi_id is None or (hi_id < 1 << (63 - PACK_SHIFT) and hi_end < 1 << PACK_SHIFT)


TOTALS = """
        tot as (select file_id, count(*) as reads, sum(nbytes) as bytes,
                       sum(dur_ns) as dur_ns,
                       max(off + nbytes) filter (where nbytes > 0 and off >= 0)
                       - min(off) filter (where nbytes > 0 and off >= 0) as extent,
                       max(nbytes) as longest
                from io where dir = 'read' and ret >= 0 group by file_id),
        -- distinct bytes >= the longest read: files that cannot fire even then
        -- are left out before the union (most files, and most of the cost)
        maybe as (select file_id from tot where bytes >= ? * longest and bytes - longest >= ?),"""
OPENS_PER_FILE = """
        op as (select file_id, count(*) as opens from events
               where op in """ + OPENS + """ and ret >= 0 and file_id >= 0 group by file_id)"""
SELECT = """
        select t.file_id, f.path, t.reads, t.bytes, u.distinct_bytes, coalesce(o.opens, 0),
               t.dur_ns, t.bytes / u.distinct_bytes as factor
        from cand t join uniq u using (file_id) join files f using (file_id)
             left join op o using (file_id)
        order by t.bytes - u.distinct_bytes desc, t.file_id"""

# Packed: sorted by (file, start, end), each range adds what reaches past the
# furthest end before it; the ends carry the file too, so a file's first range
# is never reached by the file before it.
UNION_PACKED = f"""
        r as (select (file_id::bigint << {PACK_SHIFT}) | off as k,
                     (file_id::bigint << {PACK_SHIFT}) | (off + nbytes) as e
              from io where dir = 'read' and nbytes > 0 and off >= 0
                    and file_id in (select file_id from maybe)),
        m as (select k, e, max(e) over (order by k, e rows between unbounded preceding
                                                          and 1 preceding) as reach
              from r),
        uniq as (select k >> {PACK_SHIFT} as file_id,
                        sum(greatest(0, e - greatest(k, coalesce(reach, k)))) as distinct_bytes
                 from m group by 1),
        cand as (select t.* from tot t join uniq u using (file_id)
                 where t.bytes >= ? * u.distinct_bytes and t.bytes - u.distinct_bytes >= ?),"""

# Three keys: screened first with an upper bound (no sort): the smaller of the
# extent and the sum, over distinct start offsets, of the longest read from
# each; exact when re-reads repeat the same requests. Then the exact union for
# the files that pass, as above, per file.
UNION_KEYS = """
        starts as (select file_id, off as s, max(off + nbytes) as e from io
                   where dir = 'read' and nbytes > 0 and off >= 0
                         and file_id in (select file_id from maybe) group by file_id, off),
        bound as (select file_id, least(any_value(t.extent), sum(e - s)) as upper
                  from starts join tot t using (file_id) group by file_id),
        cand as (select t.* from tot t join bound b using (file_id)
                 where t.bytes >= ? * b.upper and t.bytes - b.upper >= ?),
        m as (select *, max(e) over (partition by file_id order by s
                                     rows between unbounded preceding and 1 preceding)
                        as reach
              from starts where file_id in (select file_id from cand)),
        uniq as (select file_id, sum(greatest(0, e - greatest(s, coalesce(reach, s))))
                                 as distinct_bytes
                 from m group by file_id),"""


def rereads(ctx: Context, th: dict, total_read: int) -> list[Finding]:
    # Distinct bytes of a file = the union of its read ranges.
    union = UNION_PACKED if _packs(ctx) else UNION_KEYS
    files = ctx.rows("with " + TOTALS + union + OPENS_PER_FILE + SELECT,
                     *(th["min_reread_factor"], int(th["min_redundant_read_bytes"])) * 2)
    if not files:
        return []
    reads = sum(f[2] for f in files)
    nbytes = sum(f[3] for f in files)
    distinct = sum(f[4] for f in files)
    redundant = nbytes - distinct
    share = redundant / total_read if total_read else 0.0
    top = files[0]
    return [Finding(
        id=RULE.id, severity="warn" if share >= th["warn_redundant_share"] else "info",
        title="The same bytes read many times",
        summary=(f"{len(files)} file(s) were read {nbytes / distinct:.1f} times over on "
                 f"average: {human_bytes(nbytes)} read for {human_bytes(distinct)} of distinct "
                 f"data, {share:.0%} of all bytes read were re-reads."),
        recommendation=("Read each file once and keep it: cache small, hot files (indexes, "
                        "labels, metadata, a dataset that fits in RAM) in memory in the "
                        "process (or in shared memory for DataLoader workers), open them once "
                        "instead of per sample, and cache remote datasets on local NVMe."),
        evidence={"files": len(files), "reads": reads, "read_bytes": nbytes,
                  "distinct_read_bytes": distinct, "redundant_read_bytes": redundant,
                  "reread_factor": nbytes / distinct, "redundant_read_share": share,
                  "read_time_s": sum(f[6] for f in files) / 1e9},
        files=[{"path": p, "distinct_read_bytes": int(d), "read_bytes": int(b),
                "reread_factor": fac, "opens": int(o)}
               for _, p, _, b, d, o, _, fac in files[:10]],
        processes=top_processes(ctx, "read", [f[0] for f in files]),
        examples=[{"ts_ns": ts, "pid": pid, "tid": tid,
                   "what": f"read of {human_bytes(n)} at offset {off:,} of {file_name(top[1])}"}
                  for ts, pid, tid, off, n in ctx.rows("""
                      select ts_ns, pid, tid, off, nbytes from io
                      where dir = 'read' and file_id = ? and ret > 0
                      order by ts_ns limit 3""", top[0])])]


def writes(ctx: Context, th: dict) -> list[Finding]:
    """The synced-writes and the tiny-writes findings."""
    files = ctx.rows("""
        with w as (select file_id, count(*) as writes, sum(nbytes) as bytes,
                          quantile_disc(req_bytes, 0.5) as median_req, sum(dur_ns) as dur_ns
                   from io where dir = 'write' and ret >= 0 group by file_id),
        s as (select file_id, count(*) as syncs, sum(dur_ns) as sync_ns from events
              where op in ('fsync', 'fdatasync') and file_id >= 0 group by file_id),
        j as (select w.*, f.path, coalesce(s.syncs, 0) as syncs,
                     coalesce(s.sync_ns, 0) as sync_ns
              from w join files f using (file_id) left join s using (file_id))
        select file_id, path, writes, bytes, median_req, dur_ns, syncs, sync_ns,
               syncs >= ? and syncs >= ? * writes and median_req <= ? as synced
        from j
        where (syncs >= ? and syncs >= ? * writes and median_req <= ?)
           or (writes >= ? and median_req <= ?)
        order by writes desc, file_id""",
                     *([int(th["min_syncs_per_file"]), th["min_syncs_per_write"],
                        int(th["max_median_synced_write_bytes"])] * 2),
                     int(th["min_writes_per_file"]), int(th["max_median_write_bytes"]))
    out = []
    synced = [f for f in files if f[8]]
    tiny = [f for f in files if not f[8]]
    if synced:
        n_w, n_s = sum(f[2] for f in synced), sum(f[6] for f in synced)
        sync_s = sum(f[7] for f in synced) / 1e9
        top = synced[0]
        out.append(Finding(
            id=RULE.id, severity="high", title="An fsync after every small write",
            summary=(f"{n_s:,} fsync calls for {n_w:,} writes (median "
                     f"{human_bytes(top[4])}) on {len(synced)} file(s): {sync_s:.3g} s "
                     f"waiting for syncs."),
            recommendation=("Sync once per unit that must be durable, not per write: buffer "
                            "records and write them in large writes, fsync once at the end of "
                            "a checkpoint (write to a temporary file, fsync, rename), or "
                            "group commits; keep the writer off the training loop's path "
                            "(a background thread)."),
            evidence={"files": len(synced), "writes": n_w, "syncs": n_s,
                      "syncs_per_write": n_s / n_w if n_w else None,
                      "median_write_bytes": top[4],
                      "write_bytes": sum(f[3] for f in synced),
                      "sync_time_s": sync_s, "write_time_s": sum(f[5] for f in synced) / 1e9},
            files=[{"path": f[1], "writes": int(f[2]), "syncs": int(f[6]),
                    "median_write_bytes": int(f[4]), "sync_time_s": f[7] / 1e9}
                   for f in synced[:10]],
            processes=top_processes(ctx, "write", [f[0] for f in synced]),
            examples=sync_examples(ctx, top)))
    if tiny:
        n_w, nbytes = sum(f[2] for f in tiny), sum(f[3] for f in tiny)
        top = tiny[0]
        out.append(Finding(
            id=RULE.id, severity="warn" if nbytes >= th["warn_tiny_write_bytes"] else "info",
            title="Tiny writes",
            summary=(f"{n_w:,} writes of {human_bytes(top[4])} (median, busiest file) "
                     f"wrote {human_bytes(nbytes)} to {len(tiny)} file(s), "
                     f"{nbytes / max(n_w, 1):.0f} bytes per call."),
            recommendation=("Buffer writes and write in large pieces (at least a few MiB): "
                            "serialise a checkpoint into memory and write it in one call "
                            "(torch.save to a BytesIO, then one write), or open the file with "
                            "a large buffer (open(path, 'wb', buffering=8 << 20))."),
            evidence={"files": len(tiny), "writes": n_w, "write_bytes": nbytes,
                      "mean_write_bytes": nbytes / max(n_w, 1),
                      "median_write_bytes": top[4],
                      "write_time_s": sum(f[5] for f in tiny) / 1e9},
            files=[{"path": f[1], "writes": int(f[2]), "write_bytes": int(f[3]),
                    "median_write_bytes": int(f[4])} for f in tiny[:10]],
            processes=top_processes(ctx, "write", [f[0] for f in tiny]),
            examples=[{"ts_ns": ts, "pid": pid, "tid": tid,
                       "what": f"write of {human_bytes(r)} to {top[1]}"}
                      for ts, pid, tid, r in ctx.rows("""
                          select ts_ns, pid, tid, req_bytes from io
                          where dir = 'write' and file_id = ? order by ts_ns limit 3""",
                                                      top[0])]))
    return out


def sync_examples(ctx: Context, top) -> list[dict]:
    return [{"ts_ns": ts, "pid": pid, "tid": tid,
             "what": f"{op} of {file_name(top[1])} took {dur / 1e3:.0f} us"}
            for ts, pid, tid, op, dur in ctx.rows("""
                select ts_ns, pid, tid, op, dur_ns from events
                where op in ('fsync', 'fdatasync') and file_id = ?
                order by dur_ns desc limit 3""", top[0])]


def misaligned_direct(ctx: Context, th: dict) -> list[Finding]:
    align = int(th["direct_io_align_bytes"])
    files = ctx.rows("""
        with m as (select *, off % ? <> 0 or req_bytes % ? <> 0 as bad from io where direct)
        select file_id, any_value(path), count(*) as calls,
               count(*) filter (where bad) as misaligned,
               count(*) filter (where bad and ret = -?) as einval,
               count(*) filter (where bad and off % ? <> 0) as bad_offset,
               count(*) filter (where bad and req_bytes % ? <> 0) as bad_size,
               min(ts_ns) filter (where bad) as first_bad
        from m group by file_id having count(*) filter (where bad) > 0
        order by misaligned desc, file_id""", align, align, EINVAL, align, align)
    if not files:
        return []
    calls, bad, einval = (sum(f[i] for f in files) for i in (2, 3, 4))
    top = files[0]
    examples = ctx.rows("""
        select ts_ns, pid, tid, op, off, req_bytes, ret from io
        where file_id = ? and ts_ns >= ? and (off % ? <> 0 or req_bytes % ? <> 0)
        order by ts_ns limit 3""", top[0], top[7], align, align)
    return [Finding(
        id=RULE.id, severity="high" if einval else "warn", title="Misaligned O_DIRECT I/O",
        summary=(f"{bad:,} of {calls:,} calls on {len(files)} file(s) opened with O_DIRECT "
                 f"have an offset or size that is not a multiple of {align}; "
                 f"{einval:,} failed with EINVAL."),
        recommendation=(f"With O_DIRECT, make every offset, size and buffer address a "
                        f"multiple of the device's logical block size ({align} bytes is safe "
                        f"everywhere): pad records, allocate buffers with posix_memalign/"
                        f"mmap, or drop O_DIRECT for these files and use buffered I/O."),
        evidence={"files": len(files), "direct_calls": calls, "misaligned_calls": bad,
                  "einval_calls": einval, "misaligned_offset_calls": sum(f[5] for f in files),
                  "misaligned_size_calls": sum(f[6] for f in files),
                  "align_bytes": align},
        files=[{"path": f[1], "direct_calls": int(f[2]), "misaligned_calls": int(f[3]),
                "einval_calls": int(f[4])} for f in files[:10]],
        processes=top_processes(ctx, "%", [f[0] for f in files]),
        examples=[{"ts_ns": ts, "pid": pid, "tid": tid,
                   "what": f"{op} of {req:,} bytes at offset {off:,} of {file_name(top[1])}: ret {ret}"}
                  for ts, pid, tid, op, off, req, ret in examples])]


def run(ctx: Context) -> list[Finding]:
    th = ctx.th(RULE.id)
    total_read = ctx.one("select coalesce(sum(nbytes), 0) from io where dir = 'read'")[0]
    return rereads(ctx, th, total_read) + writes(ctx, th) + misaligned_direct(ctx, th)


RULE = Rule(
    id="redundant-io",
    title="Redundant I/O",
    question=("Are the same bytes read many times, files written in tiny writes, small "
              "writes each synced, or O_DIRECT calls misaligned?"),
    thresholds={"min_reread_factor": 4, "min_redundant_read_bytes": 16 * MiB,
                "warn_redundant_share": 0.5,
                "min_syncs_per_file": 100, "min_syncs_per_write": 0.5,
                "max_median_synced_write_bytes": MiB,
                "min_writes_per_file": 100, "max_median_write_bytes": 4096,
                "warn_tiny_write_bytes": MiB,
                "direct_io_align_bytes": 4096},
    run=run,
)
