"""The short summary printed at the end of a run and by `iotrace summary`."""
from __future__ import annotations

import platform
import re
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
from rich.console import Console
from rich.table import Table

from .doctor import skipped_by_reason
from .abi import EF_BEGAN_BEFORE, EF_UNFINISHED, EVENT_DTYPE, FAILED_SQL, WRITE_OPS, sql_list
from .analyzers.rates import human_bytes
from .endpoints import endpoints
from .storage_io import files_and_devices
from .trace import READ_OPS_SQL, WRITE_OPS_SQL, Trace, drop_time, is_profile

# Per file, copies count as reads of their input file (file_id is the input).
FILE_WRITE_OPS_SQL = sql_list(WRITE_OPS)


@dataclass
class Summary:
    events: int
    bytes_read: int
    bytes_written: int
    files: int
    processes: int
    threads: int
    drops: int
    duration_s: float
    ops: list
    top_files: list
    counters: dict
    calls: int = 0       # a profile's calls, summed in kernel (events are what it kept)
    # the longest calls still in progress when tracing stopped:
    # (op, file or fd kind, seconds, pid, tid, began before an attach: seconds
    # is a lower bound)
    unfinished: list = field(default_factory=list)


def _profile_sums(t: Trace, top: int):
    """A profile's totals, ops and top files from its in-kernel sums."""
    rd, wr, calls = t.con.execute(f"""
        select coalesce(sum(bytes) filter (where op in {READ_OPS_SQL}), 0),
               coalesce(sum(bytes) filter (where op in {WRITE_OPS_SQL}), 0),
               coalesce(sum(calls), 0)
        from profile_calls""").fetchone()
    ops = t.con.execute(f"""
        select op, sum(calls)::bigint as calls,
               coalesce(sum(bytes) filter (where op in {READ_OPS_SQL}
                                           or op in {WRITE_OPS_SQL}), 0)::bigint as bytes,
               sum(dur_ns) / 1e9 as time_s, sum(errors)::bigint as errors
        from profile_calls group by op order by calls desc""").fetchall()
    top_files = t.con.execute(f"""
        select f.path,
               coalesce(sum(c.bytes) filter (where c.op in {READ_OPS_SQL}), 0)::bigint as rd,
               coalesce(sum(c.bytes) filter (where c.op in {FILE_WRITE_OPS_SQL}), 0)::bigint
                   as wr,
               sum(c.calls)::bigint as calls
        from profile_calls c join files f using (file_id)
        group by f.path order by rd + wr desc, calls desc limit {int(top)}""").fetchall()
    return int(rd), int(wr), int(calls), ops, top_files


def summarize(t: Trace, top: int = 5) -> Summary:
    events, rd, wr = t.con.execute(f"""
        select count(*),
               coalesce(sum(ret) filter (where op in {READ_OPS_SQL} and ret > 0), 0),
               coalesce(sum(ret) filter (where op in {WRITE_OPS_SQL} and ret > 0), 0)
        from events""").fetchone()
    ops = t.con.execute(f"""
        select op, count(*) as calls,
               coalesce(sum(ret) filter (where ret > 0 and (op in {READ_OPS_SQL}
                                                  or op in {WRITE_OPS_SQL})), 0) as bytes,
               sum(dur_ns) / 1e9 as time_s,
               count(*) filter (where {FAILED_SQL}) as errors
        from events group by op order by calls desc""").fetchall()
    top_files = t.con.execute(f"""
        select f.path,
               coalesce(sum(e.ret) filter (where e.op in {READ_OPS_SQL} and e.ret > 0), 0) as rd,
               coalesce(sum(e.ret) filter (where e.op in {FILE_WRITE_OPS_SQL} and e.ret > 0), 0)
                   as wr,
               count(*) as calls
        from events e join files f using (file_id)
        group by f.path order by rd + wr desc, calls desc limit {int(top)}""").fetchall()
    meta = t.meta
    calls = 0
    if is_profile(meta):
        rd, wr, calls, ops, top_files = _profile_sums(t, top)
    return Summary(
        events=events, bytes_read=rd, bytes_written=wr, calls=calls,
        files=t.con.execute("select count(*) from files").fetchone()[0],
        processes=t.con.execute("select count(*) from processes").fetchone()[0],
        threads=t.con.execute("select count(*) from threads").fetchone()[0],
        drops=int(meta.get("drops") or 0),
        duration_s=(meta.get("duration_ns") or 0) / 1e9,
        ops=ops, top_files=top_files, counters=meta.get("counters", {}),
        unfinished=t.con.execute(f"""
            select e.op, coalesce(f.path, e.path, nullif(e.fd_kind, 'none'), ''), e.dur_ns / 1e9,
                   e.pid, e.tid,
                   e.eflags & {EF_BEGAN_BEFORE} != 0
            from events e left join files f using (file_id)
            where e.eflags & {EF_UNFINISHED} != 0
            order by e.dur_ns desc, e.tid limit 3""").fetchall())


def unconverted_records(root: Path) -> int:
    """Records a killed iotrace left in the trace's spool, not converted (whole
    records of its segments; a torn tail is not counted)."""
    try:
        return sum(f.stat().st_size // EVENT_DTYPE.itemsize
                   for f in (root / ".spool").glob("*.ev"))
    except OSError:
        return 0


def abandoned(meta: dict) -> bool:
    """A trace in `recording` whose iotrace is gone (this host only)."""
    pid = meta.get("iotrace_pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or \
            meta.get("host") != platform.node():
        return False
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True
    return b"iotrace" not in cmd


def print_summary(t: Trace, console: Console) -> None:
    s = summarize(t)
    meta = t.meta
    state = meta.get("state")
    console.print(f"[bold]iotrace[/bold] {t.root}  ({meta.get('mode')}, {s.duration_s:.2f} s"
                  + (f", [yellow]{state}[/yellow]" if state != "complete" else "") + ")")
    if state == "recording" and abandoned(meta):
        left = unconverted_records(t.root)
        console.print("  [yellow]no iotrace is recording it any more (killed?): the trace "
                      "ended abruptly; its events parts are whole, the last second or so "
                      f"is missing ({left:,} records left unconverted in .spool/)[/yellow]")
    drops = f"[red]{s.drops} dropped[/red]" if s.drops else "0 dropped"
    if is_profile(meta):
        console.print(f"  profile: {s.calls:,} calls summed in kernel, {s.events:,} events "
                      f"kept to name files and processes ({drops}), read "
                      f"{human_bytes(s.bytes_read)}, wrote {human_bytes(s.bytes_written)}, "
                      f"{s.files:,} files, {s.processes} processes")
    else:
        console.print(f"  {s.events:,} events ({drops}), read {human_bytes(s.bytes_read)}, "
                      f"wrote {human_bytes(s.bytes_written)}, {s.files:,} files, "
                      f"{s.processes} processes, {s.threads} threads")
    if s.drops and meta.get("drop_intervals"):
        secs, _ = drop_time(meta, 0, 1 << 62)
        span = s.duration_s or 1e-9
        nice = meta.get("probes", {}).get("recorder_nice")
        # a recorder that could not raise its priority competes with a busy job
        starved = (f"; the recorder ran at nice {nice}, not -10: grant it CAP_SYS_NICE"
                   if nice is not None and nice > -10 else "")
        console.print(f"  [red]records dropped[/red] (ring buffer full) in {secs:.1f} s of the "
                      f"{s.duration_s:.1f} s traced ({secs / span:.0%}): counts there are lower "
                      f"bounds; raise --ringbuf-mb{starved}")
    # page-cache bytes added outside reads and faults are not a loss: shown
    # below; nor are calls in progress at the start or the end (in the trace;
    # the longest of the end's shown here)
    lost = {k: v for k, v in s.counters.items()
            if v and k not in ("cache_other_bytes", "calls_unfinished", "calls_began_before",
                               "own_lock_waits")}
    if s.counters.get("own_lock_waits"):
        console.print(f"  [dim]the job's threads waited {s.counters['own_lock_waits']:,} times "
                      "for the lock of iotrace's own ring buffer (its cost, not the job's: "
                      "not in the lock table)[/dim]")
    if s.unfinished:
        n = s.counters.get("calls_unfinished", len(s.unfinished))
        longest = "; ".join(f"{op}{' of ' + what if what else ''} for "
                            f"{'at least ' if before else ''}{secs:.2f} s "
                            f"(pid {pid}, thread {tid})"
                            for op, what, secs, pid, tid, before in s.unfinished)
        console.print(f"  [yellow]calls in progress when tracing stopped:[/yellow] {n:,} "
                      f"(eflags UNFINISHED), the longest: {longest}")
    if lost:
        console.print("  [yellow]not resolved or cut:[/yellow] "
                      + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in lost.items()))
    # a module not loaded (no NFS mount, no RDMA device): nothing to see
    # there, one quiet line; anything else is worth a warning
    modules_off = []
    for why, probes in skipped_by_reason(meta.get("probes", {}).get("skipped", [])).items():
        m = re.match(r"module (\S+) not loaded \((.*)\)", why)
        if m:
            modules_off.append(f"{m.group(1)} ({m.group(2)})")
        else:
            console.print(f"  [yellow]probes skipped[/yellow] ({why}): {', '.join(probes)}")
    for late in tls_seen_late(t):
        conns = late["connections_before"]
        missed = (f"; {conns} connection(s) it opened before then, whose requests until then "
                  f"are not in the trace" if conns else "")
        console.print(f"  [yellow]TLS seen late:[/yellow] {late['path']} (pid {late['pid']}) was "
                      f"probed {late['after_ms']:.0f} ms after the process ran or loaded it; its "
                      f"TLS calls before then are not in the trace (a program iotrace runs "
                      f"itself, and the system's libraries, are probed before it starts)"
                      + missed)
    for lib in meta.get("probes", {}).get("verbs_libraries_not_probed", []):
        console.print(f"  [yellow]RDMA verbs not traced:[/yellow] the job loaded {lib}, not the "
                      f"library probed; rerun with --verbs-lib {lib}")
    if modules_off:
        console.print(f"  [dim]probes off, module not loaded when tracing started: "
                      f"{', '.join(modules_off)}[/dim]")
    ops = Table(title=None, box=None, pad_edge=False, header_style="bold")
    for col, justify in (("op", "left"), ("calls", "right"), ("bytes", "right"),
                         ("time s", "right"), ("errors", "right")):
        ops.add_column(col, justify=justify)
    for op, calls, nbytes, time_s, errors in s.ops[:12]:
        ops.add_row(op, f"{calls:,}", human_bytes(nbytes) if nbytes else "",
                    f"{time_s:.3f}", f"{errors:,}" if errors else "")
    console.print(ops)
    if s.top_files:
        files = Table(box=None, pad_edge=False, header_style="bold")
        files.add_column("top files", overflow="fold")
        files.add_column("read", justify="right")
        files.add_column("written", justify="right")
        files.add_column("calls", justify="right")
        for path, rd, wr, calls in s.top_files:
            files.add_row(path or "?", human_bytes(rd), human_bytes(wr), f"{calls:,}")
        console.print(files)
    print_storage(t, console)
    print_endpoints(t, console)


def tls_seen_late(t: Trace) -> list[dict]:
    """The TLS libraries and Go programs probed only after their process ran
    or mapped them (meta.json probes.tls_probed_after_start), each with the
    number of connections of that process that began before its probes were
    in (`connections_before`, None where the trace does not say when): the
    requests those carried until then are missing from the trace."""
    out = []
    for late in t.meta.get("probes", {}).get("tls_probed_after_start", []):
        n = None
        if late.get("probed_ns"):
            try:
                n = int(t.con.execute("select count(*) from connections where pid = ? and ts_ns < ?",
                                      [late["pid"], late["probed_ns"]]).fetchall()[0][0])
            except duckdb.Error:        # a trace without a connections table (a profile)
                pass
        out.append({**late, "connections_before": n})
    return out


def print_endpoints(t: Trace, console: Console) -> None:
    """HTTP requests per endpoint, and connections iotrace could not read."""
    ep = endpoints(t)
    for e in ep["endpoints"]:
        codes = ", ".join(f"{k} x{n}" for k, n in e["status_counts"].items())
        extra = ""
        if e["throttled"] or e["retries"]:
            extra = f"; [yellow]{e['throttled']} throttled, {e['retries']} retries[/yellow]"
        console.print(
            f"  endpoint {e['host']}:{e['port']}{' (TLS)' if e['tls'] else ''}: "
            f"{e['requests']:,} requests ({codes}), got {human_bytes(e['object_bytes_read'])}"
            f" at {human_bytes(e['read_bytes_per_s'])}/s, put "
            f"{human_bytes(e['object_bytes_written'])}; first byte p50 "
            f"{(e['ttfb_ms_p50'] or 0):.1f} ms, up to {e['max_in_flight']} in flight{extra}")
    for f in ep.get("fuse_daemons", []):
        ops = ", ".join(f"{k} x{n}" for k, n in f["by_opcode"].items())
        console.print(
            f"  FUSE daemon {f['daemon_pid']} ({f['cmdline'][:40]}): {f['requests']:,} requests "
            f"for the job ({ops}), {f['tied_to_job_calls']:,} tied to its calls; "
            f"{f['http_requests']:,} HTTP requests ({human_bytes(f['http_bytes'])}) "
            f"made while serving them")
    for o in ep["opaque_connections"]:
        named = ""
        if o.get("server_name") or o.get("alpn"):
            named = " (" + ", ".join(x for x in (
                o.get("server_name"), o.get("alpn") and f"offers {o['alpn']}") if x) + ")"
        why = ("TLS iotrace does not see" if o.get("tls_connections") else
               "TLS iotrace does not see, or not HTTP")
        if o.get("http2_offered"):
            why = "HTTP/2 offered, which iotrace does not parse, or TLS it does not see"
        console.print(
            f"  [yellow]connections not read as HTTP[/yellow] to {o['host']}:{o['port']}"
            f"{named}: {o['connections']} ({human_bytes(o['bytes_received'])} in, "
            f"{human_bytes(o['bytes_sent'])} out; {why})")


def print_storage(t: Trace, console: Console) -> None:
    """Page cache against storage for the files read, and the block devices."""
    io = files_and_devices(t)
    hit = sum(f["cache_hit_bytes"] for f in io["files"])
    miss = sum(f["cache_miss_bytes"] for f in io["files"])
    via = {k: sum(f["by_interface"][k]["read_bytes"] + f["by_interface"][k]["write_bytes"]
                  for f in io["files"]) for k in ("mmap", "io_uring", "libaio")}
    direct = sum(f["direct_read_bytes"] for f in io["files"])
    also = "; ".join(f"{human_bytes(n)} through {k}" for k, n in via.items() if n)
    if direct:
        also = "; ".join(x for x in (also, f"{human_bytes(direct)} read with O_DIRECT") if x)
    if hit + miss:
        console.print(f"  page cache: {human_bytes(miss)} read from storage, "
                      f"{human_bytes(hit)} served from memory "
                      f"({100 * hit / (hit + miss):.0f}% hits)" + (f"; {also}" if also else ""))
    elif also:
        console.print(f"  {also}")
    for d in io["devices"]:
        console.print(f"  device {d['name']}: read {human_bytes(d['read_bytes'])} in "
                      f"{d['reads']:,} requests, wrote {human_bytes(d['write_bytes'])} in "
                      f"{d['writes']:,}; service p50 {d['service_ms_p50']:.2f} ms, "
                      f"up to {d['max_in_flight']} in flight")


def summary_json(t: Trace) -> dict:
    """`iotrace summary --format json`: the totals, then per file and per
    block device (docs/report-json.md)."""
    s = summarize(t)
    return {
        "trace": str(t.root), "state": t.meta.get("state"),
        # `recording`, but its iotrace is gone: ended abruptly
        "abandoned": t.meta.get("state") == "recording" and abandoned(t.meta),
        # records the killed iotrace left in .spool/, not converted (lost)
        "unconverted_records": unconverted_records(t.root),
        "duration_s": s.duration_s,
        "capture": t.meta.get("capture", "full"), "profile_calls": s.calls,
        "events": s.events, "dropped": s.drops,
        "dropped_in_s": round(drop_time(t.meta, 0, 1 << 62)[0], 3),
        "bytes_read": s.bytes_read,
        "bytes_written": s.bytes_written, "processes": s.processes, "threads": s.threads,
        "counters": s.counters,
        "tls_seen_late": tls_seen_late(t),
        "unfinished_calls": [{"op": op, "what": what, "seconds": secs, "pid": pid, "tid": tid,
                              "began_before": before}
                             for op, what, secs, pid, tid, before in s.unfinished],
        "ops": [{"op": op, "calls": calls, "bytes": nbytes, "time_s": time_s,
                 "errors": errors} for op, calls, nbytes, time_s, errors in s.ops],
        **files_and_devices(t),
        **endpoints(t),
    }
