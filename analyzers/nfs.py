"""nfs: where does the time of NFS calls go, and are they the size the mount allows?

Question: for each NFS RPC procedure of the traced processes, how does its
time split into client queue (backlog: waiting for a transport slot),
network + server (rtt: sent to reply) and the rest of the client's work
(execute - backlog - rtt)? Are NFS READs and WRITEs much smaller than the
mount's rsize/wsize? Are there many COMMITs or fsyncs per MiB written? What
throughput does each NFS mount give the job, against the read target? Over
RDMA: how much data moved through RDMA chunks, and how much inline?

Trigger: any RPC or NFS I/O of the traced processes gives an info finding with
the split per procedure (p50/p99). warn when NFS reads or writes have a median
size under `small_share` of rsize/wsize with at least `min_calls` calls (each
costs a round trip), or when COMMITs exceed `max_commits_per_mib` per MiB
written, or fsync/fdatasync calls on NFS files exceed `max_fsyncs_per_mib`
per MiB written; high when the client queue (backlog) is over
`high_backlog_share` of the RPC time (the transport is the bottleneck: more
connections, nconnect=). Per mount, the job's read throughput while it read
from the mount is compared with the read target (--target-read, or GPUs x
per-GPU rate): under the target it is a warn.
"""
from __future__ import annotations

import re

from iotrace.abi import SYNC_OPS, sql_list

from .base import Context, Finding, Rule
from .rates import human_bytes, human_rate

MiB = 1 << 20


def mount_size(opts: str, key: str):
    m = re.search(rf"(?:^|,){key}=(\d+)", opts or "")
    return int(m.group(1)) if m else None


def run(ctx: Context) -> list[Finding]:
    th = ctx.th(RULE.id)
    split = ctx.rows("""
        select coalesce(path2, '?') as proc, count(*),
               quantile_cont(dur_ns, 0.5), quantile_cont(dur_ns, 0.99),
               sum(dur_ns), sum(req_bytes), sum("offset"),
               quantile_cont("offset", 0.5), quantile_cont(req_bytes, 0.5)
        from events where op = 'rpc' group by proc order by 5 desc""")
    nfs_io = ctx.rows("""
        select e.op, count(*), sum(greatest(e.ret, 0)), median(e.req_bytes),
               any_value(f.mount_options), any_value(f.mount_point)
        from events e left join files f using (file_id)
        where e.op in ('nfs_read', 'nfs_write', 'nfs_commit') group by e.op""")
    mounts = per_mount(ctx)
    rdma = rdma_transport(ctx)
    if not split and not nfs_io and not mounts and not rdma:
        return []
    total_ns = sum(r[4] for r in split) or 1
    backlog_share = sum(r[5] for r in split) / total_ns
    rtt_share = sum(r[6] for r in split) / total_ns
    evidence = {
        "rpcs": sum(r[1] for r in split),
        "rpc_time_s": total_ns / 1e9,
        "client_queue_share": backlog_share,
        "network_server_share": rtt_share,
        "client_other_share": max(0.0, 1 - backlog_share - rtt_share),
        "per_procedure": {r[0]: {"calls": r[1], "p50_ms": round(r[2] / 1e6, 3),
                                 "p99_ms": round(r[3] / 1e6, 3),
                                 "p50_rtt_ms": round(r[7] / 1e6, 3),
                                 "p50_queue_ms": round(r[8] / 1e6, 3)} for r in split[:8]},
    }
    io = {r[0]: r for r in nfs_io}
    ra = ctx.one("""select count(*), coalesce(sum(req_bytes), 0) from events
                    where op = 'nfs_readahead'""")
    if ra[0]:
        evidence["readaheads"], evidence["readahead_bytes"] = ra
    notes, severity = [], "info"
    for op, key in (("nfs_read", "rsize"), ("nfs_write", "wsize")):
        if op not in io:
            continue
        _, calls, nbytes, median, opts, mnt = io[op]
        limit = mount_size(opts, key)
        evidence[f"{op}s"] = calls
        evidence[f"{op}_bytes"] = nbytes
        evidence[f"{op}_median_bytes"] = median
        if limit:
            evidence[f"mount_{key}_bytes"] = limit
            if calls >= th["min_calls"] and median < th["small_share"] * limit:
                severity = "warn"
                notes.append(f"{op.split('_')[1]}s median {human_bytes(median)} against "
                             f"{key} {human_bytes(limit)} on {mnt}")
    if "nfs_commit" in io and "nfs_write" in io and io["nfs_write"][2]:
        per_mib = io["nfs_commit"][1] / (io["nfs_write"][2] / MiB)
        evidence["commits"] = io["nfs_commit"][1]
        evidence["commits_per_mib_written"] = per_mib
        if per_mib > th["max_commits_per_mib"]:
            severity = "warn"
            notes.append(f"{per_mib:.1f} COMMITs per MiB written (fsync after small writes)")
    fsyncs = ctx.one(f"""select count(*) from events e join files f using (file_id)
                         where e.op in {sql_list(SYNC_OPS)} and f.fs_type like 'nfs%'""")[0]
    # bytes written to NFS: the WRITE RPCs' when the nfs probes ran, else the
    # job's write calls on NFS files
    written = (io["nfs_write"][2] if "nfs_write" in io
               else sum(m["write_bytes"] for m in mounts.values()))
    if fsyncs:
        evidence["nfs_fsyncs"] = fsyncs
        if written and fsyncs / (written / MiB) > th["max_fsyncs_per_mib"]:
            severity = "warn" if severity == "info" else severity
            notes.append(f"{fsyncs} fsyncs for {human_bytes(written)} written")
    if mounts:
        evidence["mounts"] = mounts
        target = ctx.targets.read_bps
        for mnt, m in mounts.items():
            if target and m["read_bytes"] and m["read_bytes_per_s"] < target:
                severity = "warn" if severity == "info" else severity
                notes.append(f"reads from {mnt} at {human_rate(m['read_bytes_per_s'])}, "
                             f"under the {human_rate(target)} target")
    if rdma:
        evidence["rdma"] = rdma
        if rdma["out_of_mrs"]:
            severity = "warn" if severity == "info" else severity
            notes.append(f"{rdma['out_of_mrs']} RPC marshallings ran out of RDMA memory "
                         "registrations (see rdma-registration)")
    if backlog_share > th["high_backlog_share"]:
        severity = "high"
        notes.append(f"{backlog_share:.0%} of RPC time queued for a transport slot")
    top = ", ".join(f"{r[0]} {r[1]}x p50 {r[2] / 1e6:.2f} ms" for r in split[:3])
    return [Finding(
        id="nfs", severity=severity, title="NFS calls: where the time goes",
        summary=((f"{evidence['rpcs']} RPCs ({top}); their time: "
                  f"{rtt_share:.0%} network+server, {backlog_share:.0%} client queue"
                  if split else "no RPCs recorded (the sunrpc probe was not loaded)")
                 + (f"; {'; '.join(notes)}" if notes else "") + "."),
        recommendation=("Mount with rsize/wsize of 1 MiB and read in requests at least that "
                        "large; use nconnect= (or NFS over RDMA) when RPCs queue for the "
                        "transport; fsync once per checkpoint, not per write; when the "
                        "network+server share dominates, the server or the link is the "
                        "limit: cache hot data on local NVMe."),
        evidence=evidence,
        examples=[{"ts_ns": ts, "what": f"slowest {proc} RPC: {dur / 1e6:.2f} ms"}
                  for ts, dur, proc in ctx.rows("""select ts_ns, dur_ns, path2 from events
                      where op = 'rpc' order by dur_ns desc limit 3""")])]


def per_mount(ctx: Context) -> dict:
    """Syscall bytes per NFS mount, and the read rate while reading from it
    (first read's start to last read's end)."""
    rows = ctx.rows("""
        select mount_point, any_value(mount_options),
               sum(nbytes) filter (where dir = 'read'), sum(nbytes) filter (where dir = 'write'),
               min(ts_ns) filter (where dir = 'read'), max(ts_ns + dur_ns) filter (where dir = 'read')
        from io join files using (file_id) where io.fs_type like 'nfs%'
        group by mount_point order by 3 desc nulls last""")
    out = {}
    for mnt, opts, rd, wr, t0, t1 in rows:
        proto = re.search(r"(?:^|,)proto=(\w+)", opts or "")
        out[mnt or "?"] = {
            "proto": proto.group(1) if proto else None,
            "read_bytes": rd or 0, "write_bytes": wr or 0,
            "read_bytes_per_s": (rd or 0) / max((t1 - t0) / 1e9, 1e-9) if rd else 0.0}
    return out


def rdma_transport(ctx: Context) -> dict:
    """RPC-over-RDMA: RPCs marshalled, bytes moved by RDMA chunks (the server
    writes READ data into write/reply chunks and reads WRITE data from read
    chunks), RPCs sent inline, and registration trouble. The marshal record
    holds the chunk bytes of its own attempt; chunks of attempts that failed
    (out of MRs, no send context) were registered again by the retry and
    count as re-registered, not as data."""
    r = ctx.one("""
        select count(*) filter (where op = 'rpcrdma_marshal'),
               count(*) filter (where op = 'rpcrdma_marshal' and flags <= 2 and mode <= 2),
               coalesce(sum("offset") filter (where op = 'rpcrdma_marshal'), 0),
               coalesce(sum(req_bytes) filter (where op = 'rpcrdma_marshal'), 0),
               coalesce(sum(req_bytes) filter (where op like 'rpcrdma_chunk%'), 0),
               count(*) filter (where op in ('rpcrdma_nomrs', 'rpcrdma_frwr_maperr')),
               count(*) filter (where op = 'rpcrdma_post_send_err'),
               count(*) filter (where op = 'rpcrdma_marshal_failed')
        from events where op like 'rpcrdma%'""")
    if not r or not any(r):
        return {}
    return {"rpcs_marshalled": r[0], "rpcs_inline": r[1],
            "chunk_bytes_written_by_server": r[2], "chunk_bytes_read_by_server": r[3],
            "chunk_bytes_reregistered": max(0, r[4] - r[2] - r[3]),
            "marshal_failures": r[7], "out_of_mrs": r[5], "send_errors": r[6]}


RULE = Rule(
    id="nfs",
    title="NFS and RPC time",
    question="Where does the time of NFS calls go, and are they as large as the mount allows?",
    thresholds={"small_share": 0.25, "min_calls": 64, "max_commits_per_mib": 1.0,
                "max_fsyncs_per_mib": 1.0, "high_backlog_share": 0.5},
    run=run,
)
