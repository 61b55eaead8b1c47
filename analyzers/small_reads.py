"""small-reads: are files read in requests much smaller than the files?

Question: which files does the job read piecemeal, in many requests much smaller
than the file, where one large read (or a few) would do? The classic case is
`np.load` of an .npz sample: numpy reads a zip member in 256 KiB pieces
(`numpy.lib.format.BUFFER_SIZE`), and Python's buffered file under zipfile hands
each to the kernel as a 4 KiB (st_blksize) read and a 252 KiB read, with an
lseek position query between: 8 read calls per MiB, ~1,070 for a 140 MB sample
that one read would fetch. Another is 4 KiB reads of a large file.

Per file, over its read calls (read, pread64, readv, preadv, preadv2 with ret >= 0):
  file_bytes        largest offset + bytes seen on the file (reads or writes)
  median_request_bytes  the smallest request size that at least half of the
                    calls asked for no more than (a count median; p10/p90 alike)
  weighted_median_request_bytes  the same, weighted by bytes moved: half of the
                    file's bytes came in requests of at most this size. Robust to
                    a few tiny header reads next to large ones; the trigger uses it.
Trigger: a file is read in small requests when
  weighted_median_request_bytes <= max_median_request_bytes (512 KiB)
  file_bytes                    >= min_file_bytes           (1 MiB)
  read calls                    >= min_calls_per_file       (16)
and a finding is made when those files carry at least min_bytes_share (10%) of
all bytes read from files.
Severity: high when they carry at least high_bytes_share (50%) of the read bytes
and take at least high_calls_per_mib (4, i.e. 256 KiB or less per call on
average) calls per MiB moved; else warn. fio's 1 MiB sequential reads never fire.

Estimate of the saving: one read per file per pass over it (passes = bytes
read / file_bytes, rounded, at least 1) saves `calls - passes` calls; at the
measured per-call overhead (the intercept of read time against bytes moved, a linear fit
over those reads; when the fit is undefined or outside (0, median call time],
the median call time, an upper bound) that is `est_time_saved_s`.
"""
from __future__ import annotations

from .base import Context, Finding, Rule, file_name
from .rates import human_bytes

MiB = 1 << 20

SIZES = "_small_reads_sizes"   # temp table: calls, bytes, time per (file, request size)

# Per file: calls, bytes, time, extent and request-size medians (count and byte
# weighted), over read calls that did not fail; the flagged files. Parameters:
# the three per-file thresholds.
PER_FILE = f"""
    sizes as (select * from {SIZES} where rd),
    ext as (select file_id, max(max_end) as file_bytes from {SIZES} group by file_id),
    cum as (select *, sum(calls) over w as cc, sum(bytes) over w as cb,
                   sum(calls) over (partition by file_id) as tc,
                   sum(bytes) over (partition by file_id) as tb
            from sizes window w as (partition by file_id order by req_bytes
                                    rows unbounded preceding)),
    per_file as (
        select c.file_id, any_value(f.path) as path, any_value(e.file_bytes) as file_bytes,
               sum(c.calls) as calls, sum(c.bytes) as bytes, sum(c.dur_ns) as dur_ns,
               min(c.req_bytes) filter (where 2 * c.cc >= c.tc) as median_req,
               min(c.req_bytes) filter (where 2 * c.cb >= c.tb) as weighted_median_req
        from cum c join ext e using (file_id) join files f using (file_id)
        group by c.file_id),
    flagged as (select * from per_file
                where weighted_median_req <= ? and file_bytes >= ? and calls >= ?)"""


FLAGGED = "_small_reads_flagged"   # temp table: the flagged files (PER_FILE), made once
# the CTEs the queries after flagged_files use: the sizes and the flagged files
FLAGGED_CTE = f"sizes as (select * from {SIZES} where rd), flagged as (select * from {FLAGGED})"


def flagged_files(ctx: Context, th: dict) -> list[tuple]:
    """(file_id, path, file_bytes, calls, bytes, dur_ns, median_req, weighted_median_req);
    makes the FLAGGED table."""
    ctx.con.execute(f"""create or replace temp table {FLAGGED} as
        with {PER_FILE} select * from flagged""", list(params(th)))
    return ctx.rows(f"""
        select file_id, path, file_bytes, calls, bytes, dur_ns, median_req, weighted_median_req
        from {FLAGGED} order by calls desc, file_id""")


def params(th: dict) -> tuple:
    return (int(th["max_median_request_bytes"]), int(th["min_file_bytes"]),
            int(th["min_calls_per_file"]))


def distribution(ctx: Context, th: dict) -> dict:
    """Request-size percentiles over the flagged files' reads, a power-of-two
    histogram, and the per-call overhead fit."""
    p10, p50, p90, pb = ctx.one(f"""with {FLAGGED_CTE},
        s as (select req_bytes, sum(calls) as calls, sum(bytes) as bytes
              from sizes where file_id in (select file_id from flagged) group by req_bytes),
        c as (select *, sum(calls) over w as cc, sum(bytes) over w as cb,
                     sum(calls) over () as tc, sum(bytes) over () as tb
              from s window w as (order by req_bytes rows unbounded preceding))
        select min(req_bytes) filter (where 10 * cc >= tc),
               min(req_bytes) filter (where 2 * cc >= tc),
               min(req_bytes) filter (where 10 * cc >= 9 * tc),
               min(req_bytes) filter (where 2 * cb >= tb) from c""")
    hist = ctx.rows(f"""with {FLAGGED_CTE}
        select case when req_bytes <= 0 then 0
                    else cast(pow(2, floor(log2(req_bytes))) as bigint) end as b,
               sum(calls), sum(bytes)
        from sizes where file_id in (select file_id from flagged)
        group by b order by b""")
    icept, med_dur = ctx.one(f"""with {FLAGGED_CTE}
        select regr_intercept(i.dur_ns, i.nbytes), median(i.dur_ns)
        from io i where i.dir = 'read' and i.ret >= 0
          and i.file_id in (select file_id from flagged)""")
    if icept is not None and 0 < icept <= med_dur:
        overhead, method = float(icept), "intercept"
    else:
        overhead, method = float(med_dur), "median-call"
    return {"p10": p10, "p50": p50, "p90": p90, "byte_median": pb, "hist": hist,
            "overhead_ns": overhead, "overhead_method": method}


def run(ctx: Context) -> list[Finding]:
    ctx.con.execute(f"""create or replace temp table {SIZES} as
        select file_id, dir = 'read' and ret >= 0 as rd, req_bytes, count(*) as calls,
               sum(nbytes) as bytes, sum(dur_ns) as dur_ns,
               max(off + nbytes) filter (where off >= 0) as max_end
        from io group by all""")
    try:
        return findings(ctx, ctx.th(RULE.id))
    finally:
        ctx.con.execute(f"drop table if exists {FLAGGED}")
        ctx.con.execute(f"drop table if exists {SIZES}")


def findings(ctx: Context, th: dict) -> list[Finding]:
    files = flagged_files(ctx, th)
    if not files:
        return []
    total_read = ctx.one("select coalesce(sum(nbytes), 0) from io where dir = 'read'")[0]
    calls = sum(f[3] for f in files)
    nbytes = sum(f[4] for f in files)
    dur_ns = sum(f[5] for f in files)
    share = nbytes / total_read if total_read else 0.0
    if share < th["min_bytes_share"]:
        return []
    calls_per_mib = calls / max(nbytes / MiB, 1e-9)
    d = distribution(ctx, th)
    # one read per file per pass over it
    passes = {f[0]: max(1, round(f[4] / max(f[2], 1))) for f in files}
    calls_saved = sum(f[3] - passes[f[0]] for f in files)
    qualifier = "about" if d["overhead_method"] == "intercept" else "at most"
    high = share >= th["high_bytes_share"] and calls_per_mib >= th["high_calls_per_mib"]
    top = files[0]
    procs = ctx.rows(f"""with {FLAGGED_CTE}
        select i.pid, any_value(p.cmdline), count(*), sum(nbytes)
        from io i left join processes_once p using (pid)
        where i.dir = 'read' and i.ret >= 0 and i.file_id in (select file_id from flagged)
        group by i.pid order by 3 desc, 1 limit 5""")
    examples = ctx.rows("""
        select ts_ns, pid, tid, off, req_bytes from io
        where dir = 'read' and ret >= 0 and file_id = ? and req_bytes in (?, ?)
        order by ts_ns limit 3""", top[0], top[6], top[7])
    hist = "; ".join(f"{human_bytes(b)}+: {c:,} calls, {human_bytes(v)}"
                     for b, c, v in d["hist"])
    return [Finding(
        id=RULE.id, severity="high" if high else "warn",
        title="Files read in small requests",
        summary=(f"{len(files)} file(s) holding {share:.0%} of the bytes read were read in "
                 f"{calls:,} calls ({calls_per_mib:.1f} per MiB; median request "
                 f"{human_bytes(d['p50'])}, half of the bytes in requests of "
                 f"{human_bytes(d['byte_median'])} or less); one read per file would save "
                 f"{calls_saved:,} calls, {qualifier} "
                 f"{calls_saved * d['overhead_ns'] / 1e9:.3g} s at "
                 f"{d['overhead_ns'] / 1e3:.1f} us per call."),
        recommendation=("Read each file (or each sample) with one large read: store arrays "
                        "as raw .npy (np.load of an .npy reads it in one call; np.load(..., "
                        "mmap_mode='r') maps it), or HDF5/Zarr with chunks of several MiB, "
                        "instead of .npz; otherwise read the whole file into memory first "
                        "(f.read() then np.load(io.BytesIO(...))) or use a buffer of at "
                        "least a few MiB (open(path, 'rb', buffering=8 << 20))."),
        evidence={
            "files": len(files),
            "reads": calls,
            "read_bytes": nbytes,
            "read_bytes_share": share,
            "calls_per_mib": calls_per_mib,
            "p10_request_bytes": d["p10"],
            "median_request_bytes": d["p50"],
            "p90_request_bytes": d["p90"],
            "weighted_median_request_bytes": d["byte_median"],
            "request_size_histogram": hist,
            "read_time_s": dur_ns / 1e9,
            "per_call_overhead_ns": d["overhead_ns"],
            "per_call_overhead_method": d["overhead_method"],
            "calls_saved": calls_saved,
            "est_time_saved_s": calls_saved * d["overhead_ns"] / 1e9,
        },
        files=[{"path": p, "file_bytes": int(fb), "reads": int(c),
                "median_request_bytes": int(m), "weighted_median_request_bytes": int(bm),
                "share": b / total_read}
               for _, p, fb, c, b, _, m, bm in files[:10]],
        processes=[{"pid": pid, "cmdline": cmd, "reads": int(c), "bytes": int(b)}
                   for pid, cmd, c, b in procs],
        examples=[{"ts_ns": ts, "pid": pid, "tid": tid,
                   "what": f"read of {human_bytes(req)} at offset {off:,} of {file_name(top[1])}"}
                  for ts, pid, tid, off, req in examples])]


RULE = Rule(
    id="small-reads",
    title="Small reads of large files",
    question="Which files are read in many requests much smaller than the file?",
    thresholds={"max_median_request_bytes": 512 * 1024, "min_file_bytes": MiB,
                "min_calls_per_file": 16, "min_bytes_share": 0.1,
                "high_bytes_share": 0.5, "high_calls_per_mib": 4},
    run=run,
)
