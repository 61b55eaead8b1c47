"""nfs: where does the time of NFS calls go, and are they the size the mount allows?

Question: for each NFS RPC procedure of the traced processes, how does its
time split into client queue (backlog: waiting for a transport slot),
network + server (rtt: sent to reply) and the rest of the client's work
(execute - backlog - rtt)? Are NFS READs and WRITEs much smaller than the
mount's rsize/wsize? Are there many COMMITs per MiB written?

Trigger: any RPC or NFS I/O of the traced processes gives an info finding with
the split per procedure (p50/p99). warn when NFS reads or writes have a median
size under `small_share` of rsize/wsize with at least `min_calls` calls (each
costs a round trip), or when COMMITs exceed `max_commits_per_mib` per MiB
written; high when the client queue (backlog) is over `high_backlog_share` of
the RPC time (the transport is the bottleneck: more connections, nconnect=).
"""
from __future__ import annotations

import re

from .base import Context, Finding, Rule
from .rates import human_bytes

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
    if not split and not nfs_io:
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
    if backlog_share > th["high_backlog_share"]:
        severity = "high"
        notes.append(f"{backlog_share:.0%} of RPC time queued for a transport slot")
    top = ", ".join(f"{r[0]} {r[1]}x p50 {r[2] / 1e6:.2f} ms" for r in split[:3])
    return [Finding(
        id="nfs", severity=severity, title="NFS calls: where the time goes",
        summary=(f"{evidence['rpcs']} RPCs ({top}); their time: "
                 f"{rtt_share:.0%} network+server, {backlog_share:.0%} client queue"
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


RULE = Rule(
    id="nfs",
    title="NFS and RPC time",
    question="Where does the time of NFS calls go, and are they as large as the mount allows?",
    thresholds={"small_share": 0.25, "min_calls": 64, "max_commits_per_mib": 1.0,
                "high_backlog_share": 0.5},
    run=run,
)
