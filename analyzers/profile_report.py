"""The report of a profile (`iotrace run --profile`): what the kernel's sums
can answer, and what needs a full trace.

A profile has, per process, file, op, request-size bucket and latency bucket,
the calls, bytes, time and page-cache bytes (profile_calls), and per second,
process and op the same sums (profile_rates); no call's time stamp and no
off-CPU interval. So it cannot find the training loop or its data waits
(the verdict), nor access patterns, lock waits by lock, or checkpoint bursts.
It can say (each a rule of docs/findings.md, with the full rule's thresholds):

  small-reads       files read in small requests: per file, the byte-weighted
                    median request size is taken at its bucket's upper bound
                    (a power of two: the true size is at most that),
                    and the file's size at the bytes read from it (at least
                    that, a lower bound); the full rule's thresholds.
  metadata-storm    opens, stats, directory reads and closes against data
                    calls: metadata_time_share = their time / (theirs + the
                    read/write family's time on regular files); fires at
                    min_metadata_calls with metadata_time_share >=
                    max_time_share and opens per MiB read >= max_opens_per_mib
                    (the full rule's metadata-bound condition; the data-set and
                    wall-share conditions need paths per call and threads).
  below-target      with a read target: the read rate over the seconds from
                    the first to the last second with reads, against it.
  page-cache        (evidence in the verdict) the share of read bytes the
                    reads had to bring into the page cache (from storage).
"""
from __future__ import annotations

from typing import Optional

from iotrace.abi import META_OPS, OPEN_OPS, READ_OPS, WRITE_OPS, sql_list

from .base import Finding, Targets, severity_rank
from .metadata_storm import RULE as META_RULE
from .rates import human_bytes, human_rate
from .small_reads import RULE as SMALL_RULE
from .thresholds import load_thresholds
from .throughput import RULE as TARGET_RULE

MiB = 1 << 20
RD = sql_list(READ_OPS)
WR = sql_list(WRITE_OPS)
NEEDS_FULL_TRACE = [
    "the verdict: whether the training loop waits for data, its accelerator utilisation "
    "(AU) and the stall causes (needs each call's time and the off-CPU intervals)",
    "random-access, readahead-missing/-wasted, mmap-random-faults (need each call's offset)",
    "lock-contention by lock and holder, imbalance between workers (need each wait)",
    "checkpoint-burst (needs each write's time), async-depth, device-at-limit",
    "object-storage requests and their findings (need the HTTP messages)",
]


def _one(con, sql: str, *params):
    return con.execute(sql, list(params)).fetchone()


def _rows(con, sql: str, *params):
    return con.execute(sql, list(params)).fetchall()


def small_reads(con, th: dict) -> list[Finding]:
    # per file and request-size bucket, then the byte-weighted median bucket
    rows = _rows(con, f"""
        with per as (
            select file_id, req_bytes_max as req, sum(calls) as calls, sum(bytes) as bytes
            from profile_calls where op in {RD} and not keyless and file_id >= 0
            group by file_id, req_bytes_max),
        cum as (select *, sum(bytes) over (partition by file_id order by req
                                           rows unbounded preceding) as cb,
                       sum(bytes) over (partition by file_id) as tb,
                       sum(calls) over (partition by file_id) as tc from per)
        select c.file_id, any_value(f.path), sum(c.calls), sum(c.bytes),
               min(c.req) filter (where 2 * c.cb >= c.tb) as wmed
        from cum c join files f using (file_id)
        group by c.file_id
        having sum(c.bytes) >= ? and sum(c.calls) >= ?
           and min(c.req) filter (where 2 * c.cb >= c.tb) <= ?
        order by sum(c.calls) desc, c.file_id""",
                 int(th["min_file_bytes"]), int(th["min_calls_per_file"]),
                 int(th["max_median_request_bytes"]))
    total = _one(con, f"select coalesce(sum(bytes), 0) from profile_calls "
                      f"where op in {RD} and file_id >= 0")[0]
    if not rows or not total:
        return []
    calls = sum(r[2] for r in rows)
    nbytes = sum(r[3] for r in rows)
    share = nbytes / total
    if share < th["min_bytes_share"]:
        return []
    per_mib = calls / max(nbytes / MiB, 1e-9)
    sev = "high" if share >= th["high_bytes_share"] and per_mib >= th["high_calls_per_mib"] \
        else "warn"
    med = sorted(r[4] for r in rows)[len(rows) // 2]
    return [Finding(
        id="small-reads", severity=sev, title=SMALL_RULE.title,
        summary=(f"{len(rows):,} file{'s' if len(rows) > 1 else ''} carrying {share:.0%} of the bytes read are read in "
                 f"requests of at most {human_bytes(med)} (byte-weighted median): "
                 f"{calls:,} calls, {per_mib:.1f} per MiB (from the profile's size buckets)"),
        recommendation=("read each file in one large request (or a few MiB at a time): "
                        "raw .npy or HDF5 instead of .npz, a larger buffer, or a loader "
                        "that reads whole samples; a full trace shows where each call "
                        "comes from"),
        evidence={"files": len(rows), "read_calls": int(calls), "bytes_read": int(nbytes),
                  "bytes_share": share, "calls_per_mib": per_mib,
                  "weighted_median_request_bytes_at_most": int(med)},
        files=[{"path": r[1], "calls": int(r[2]), "bytes": int(r[3]),
                "weighted_median_request_bytes_at_most": int(r[4]), "share": r[3] / total}
               for r in rows[:10]])]


def metadata_storm(con, th: dict) -> list[Finding]:
    opens_sql, meta_sql = sql_list(OPEN_OPS), sql_list(META_OPS)
    meta_calls, meta_ns, opens, data_ns, rd = _one(con, f"""
        select coalesce(sum(calls) filter (where op in {opens_sql} or op in {meta_sql}
                                           or (op = 'close' and file_id >= 0)), 0),
               coalesce(sum(dur_ns) filter (where op in {opens_sql} or op in {meta_sql}
                                            or (op = 'close' and file_id >= 0)), 0),
               coalesce(sum(calls) filter (where op in {opens_sql}), 0),
               coalesce(sum(dur_ns) filter (where (op in {RD} or op in {WR})
                                            and file_id >= 0), 0),
               coalesce(sum(bytes) filter (where op in {RD} and file_id >= 0), 0)
        from profile_calls""")
    if meta_calls < th["min_metadata_calls"]:
        return []
    time_share = meta_ns / max(meta_ns + data_ns, 1)
    opens_per_mib = opens / (rd / MiB) if rd else float("inf")
    if time_share < th["max_time_share"] or opens_per_mib < th["max_opens_per_mib"]:
        return []
    peak = _one(con, f"""
        select coalesce(max(n), 0) from (
            select ts_ns, sum(calls) as n from profile_rates
            where op in {opens_sql} or op in {meta_sql} or op = 'close' group by ts_ns)""")[0]
    return [Finding(
        id="metadata-storm", severity="info", title=META_RULE.title,
        summary=(f"{meta_calls:,} opens, stats, directory reads and closes took {time_share:.0%} "
                 f"of the time in file-system calls, {opens_per_mib:.1f} opens per MiB read "
                 f"(up to {peak:,} metadata calls in one second)"),
        recommendation=("pack small files into larger shards (WebDataset tar, HDF5, "
                        "TFRecord), cache stat results, open each file once; a full trace "
                        "says which directories and whether it costs the loop"),
        evidence={"metadata_calls": int(meta_calls), "opens": int(opens),
                  "metadata_time_share": time_share, "opens_per_mib": opens_per_mib,
                  "metadata_calls_per_s_peak": int(peak)})]


def below_target(con, targets: Targets, th: dict) -> list[Finding]:
    if not targets.read_bps:
        return []
    first, last, total = _one(con, f"""
        select min(ts_ns), max(ts_ns), coalesce(sum(bytes), 0) from profile_rates
        where op in {RD} and bytes > 0""")
    if not total:
        return []
    span_s = (last - first) / 1e9 + 1
    rate = total / span_s
    if rate >= targets.read_bps:
        return []
    sev = "high" if rate < th["high_ratio"] * targets.read_bps else "warn"
    return [Finding(
        id="below-target", severity=sev, title=TARGET_RULE.title,
        summary=(f"read {human_rate(rate)} over the {span_s:.0f} s with reads, "
                 f"{rate / targets.read_bps:.0%} of the target {human_rate(targets.read_bps)}"),
        recommendation=("a full trace says whether the loop waits for it (the verdict) and "
                        "why; then look at the findings on request sizes and metadata"),
        evidence={"read_bytes_per_s": rate, "target_bytes_per_s": targets.read_bps,
                  "reading_span_s": span_s, "bytes_read": int(total)})]


def totals(con) -> dict:
    calls, rd, wr, cache_rd, rd_ns, keyless = _one(con, f"""
        select coalesce(sum(calls), 0),
               coalesce(sum(bytes) filter (where op in {RD}), 0),
               coalesce(sum(bytes) filter (where op in {WR}), 0),
               coalesce(sum(cache_bytes) filter (where op in {RD}), 0),
               coalesce(sum(dur_ns) filter (where op in {RD}), 0),
               coalesce(sum(calls) filter (where keyless), 0)
        from profile_calls""")
    seconds, peak = _one(con, f"""
        select count(*), coalesce(max(b), 0) from (
            select ts_ns, sum(bytes) as b from profile_rates where op in {RD}
            group by ts_ns having sum(bytes) > 0)""")
    return {"calls": int(calls), "bytes_read": int(rd), "bytes_written": int(wr),
            "read_from_storage_bytes": int(cache_rd),
            "read_from_storage_share": cache_rd / rd if rd else None,
            "read_time_s": rd_ns / 1e9, "seconds_with_reads": int(seconds),
            "read_bytes_per_s_peak": int(peak), "calls_without_key": int(keyless)}


def build_profile_report(trace, targets: Targets, thresholds_path: Optional[str] = None):
    from .report import VERDICT, Report   # noqa: PLC0415 - report imports the rules
    thresholds = load_thresholds([SMALL_RULE, META_RULE, TARGET_RULE, VERDICT], thresholds_path)
    con = trace.con
    if not con.execute("select count(*) from information_schema.tables "
                       "where table_name = 'profile_calls'").fetchone()[0]:
        from iotrace.errors import EXIT_TRACE, IotraceError
        raise IotraceError(f"{trace.root} is a profile without its tables (profile/): it "
                           "was cut short before the first snapshot", EXIT_TRACE)
    t = totals(con)
    findings = (small_reads(con, thresholds[SMALL_RULE.id])
                + metadata_storm(con, thresholds[META_RULE.id])
                + below_target(con, targets, thresholds[TARGET_RULE.id]))
    findings.sort(key=lambda f: -severity_rank(f.severity))
    storage = t["read_from_storage_share"]
    budget = (f"read {human_bytes(t['bytes_read'])}"
              + (f" ({storage:.0%} of it brought in from storage, the rest found in the "
                 f"page cache)" if storage is not None else "")
              + f", wrote {human_bytes(t['bytes_written'])}; peak read rate "
                f"{human_rate(t['read_bytes_per_s_peak'])} in a second")
    verdict = {
        "status": "profile",
        "summary": ("Profile (calls summed in kernel): whether the training loop waits for "
                    "data needs a full trace (iotrace run without --profile); below, what "
                    "the sums show."),
        "budget_line": budget, "totals": t, "needs_full_trace": NEEDS_FULL_TRACE,
        "t0_ns": 0,
    }
    return Report(trace=str(trace.root), targets=targets, verdict=verdict, findings=findings,
                  rules_run=["small-reads", "metadata-storm", "below-target"])
