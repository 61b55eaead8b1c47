"""rdma-registration: did RDMA memory registration fail or run out?

Question: did the job's RDMA memory registrations fail (ibv_reg_mr and
friends returning NULL, typically ENOMEM from the locked-memory limit or the
adapter's MR/translation tables), did NFS over RDMA run out of registered
MRs for its chunks (xprtrdma_nomrs_err, DMA mapping errors, MR pool
allocation failures), or did the kernel refuse an MR (ib_core mr_alloc)?

Trigger: a failed userspace registration, a DMA mapping or MR allocation
error gives a high finding: each one failed a transfer. NFS over RDMA running
out of MRs stalls the RPC until MRs are recycled: warn, and high when it hit
more than `high_out_of_mrs_share` of the RPCs marshalled. Evidence: failed and successful registrations with their bytes,
the peak of bytes registered at once (registrations matched to their
deregistrations by MR), and the time spent registering. With no failure,
`max_registrations_per_s` registrations per second of the trace (memory
registered per transfer instead of once, up front) gives a warn.
"""
from __future__ import annotations

from iotrace.abi import REG_MR_OPS, sql_list

from .base import Context, Finding, Rule
from .rates import human_bytes


def run(ctx: Context) -> list[Finding]:
    th = ctx.th(RULE.id)
    verbs = ctx.one(f"""
        select count(*) filter (where ret != 0), count(*) filter (where ret = 0),
               coalesce(sum(req_bytes) filter (where ret != 0), 0),
               coalesce(sum(req_bytes) filter (where ret = 0), 0),
               coalesce(max(req_bytes) filter (where ret = 0), 0),
               coalesce(sum(dur_ns), 0)
        from events where op in {sql_list(REG_MR_OPS)}""")
    kernel = dict(ctx.rows("""
        select op, count(*) from events
        where op in ('rpcrdma_nomrs', 'rpcrdma_frwr_maperr', 'rpcrdma_mr_alloc_err')
           or (op = 'rdma_mr_alloc' and ret < 0)
        group by op"""))
    ok, failed, ok_bytes, failed_bytes, largest_failed, reg_ns = verbs
    if not ok and not failed and not kernel:
        return []
    # bytes registered at once: +length at each successful registration,
    # -length at the deregistration of the same MR (arg = the MR pointer)
    peak = ctx.one(f"""
        with reg as (select pid, ret as mr, ts_ns, req_bytes from events
                     where op in {sql_list(REG_MR_OPS)} and ret != 0),
             d as (select ts_ns, req_bytes as delta from reg
                   union all
                   select e.ts_ns, -r.req_bytes from events e join reg r
                     on e.op = 'ibv_dereg_mr' and e.pid = r.pid and e.arg = r.mr
                        and e.ts_ns > r.ts_ns)
        select coalesce(max(level), 0) from
            (select sum(delta) over (order by ts_ns rows unbounded preceding) as level
             from d)""")[0]
    evidence = {"verbs_registered": ok, "verbs_registered_bytes": ok_bytes,
                "verbs_failed": failed, "verbs_failed_bytes": failed_bytes,
                "largest_failed_bytes": largest_failed, "peak_registered_bytes": peak,
                "registration_time_s": reg_ns / 1e9,
                "nfs_rdma_out_of_mrs": kernel.get("rpcrdma_nomrs", 0),
                "nfs_rdma_map_errors": kernel.get("rpcrdma_frwr_maperr", 0),
                "nfs_rdma_mr_pool_errors": kernel.get("rpcrdma_mr_alloc_err", 0),
                "kernel_mr_alloc_errors": kernel.get("rdma_mr_alloc", 0)}
    kernel_failures = sum(kernel.values())
    nomrs = kernel.get("rpcrdma_nomrs", 0)
    marshalled = ctx.one("select count(*) from events where op = 'rpcrdma_marshal'")[0]
    nomrs_share = nomrs / marshalled if marshalled else (1.0 if nomrs else 0.0)
    evidence["nfs_rdma_rpcs_marshalled"] = marshalled
    examples = [{"ts_ns": ts, "what": f"{op} of {human_bytes(n)} failed (pid {pid})"}
                for ts, op, n, pid in ctx.rows(f"""
                    select ts_ns, op, req_bytes, pid from events
                    where op in {sql_list(REG_MR_OPS)} and ret = 0
                    order by ts_ns limit 3""")]
    if failed or kernel_failures:
        parts = []
        if failed:
            parts.append(f"{failed} memory registration(s) failed "
                         f"({human_bytes(failed_bytes)} asked; {human_bytes(peak)} was "
                         "registered at the peak)")
        if nomrs:
            parts.append(f"NFS over RDMA ran out of MRs {nomrs} times "
                         f"({nomrs_share:.1%} of {marshalled} RPCs)")
        other = kernel_failures - nomrs
        if other:
            parts.append(f"{other} kernel MR allocation or mapping error(s)")
        severity = ("high" if failed or kernel_failures > nomrs
                    or nomrs_share > th["high_out_of_mrs_share"] else "warn")
        return [Finding(
            id=RULE.id, severity=severity, title="RDMA memory registration failed",
            summary="; ".join(parts) + ".",
            recommendation=("Raise the locked-memory limit of the job (`ulimit -l unlimited`, "
                            "LimitMEMLOCK=infinity in systemd, --ulimit memlock=-1 in "
                            "containers); register a few large buffers once and reuse them "
                            "instead of one MR per transfer; for NFS over RDMA, fewer but "
                            "larger I/Os need fewer MRs, and the adapter's MR limit "
                            "(ibv_devinfo -v: max_mr) bounds what can be in flight."),
            evidence=evidence, examples=examples)]
    rate = ok / ctx.duration_s
    if ok >= th["min_registrations"] and rate > th["max_registrations_per_s"]:
        return [Finding(
            id=RULE.id, severity="warn", title="RDMA memory registered per transfer",
            summary=(f"{ok} registrations ({rate:.0f}/s, {reg_ns / 1e9:.2f} s spent "
                     "registering): registration pins and maps pages each time."),
            recommendation=("Register buffers once at start-up (a pool) and reuse them; "
                            "ibv_reg_mr costs tens of microseconds per MiB."),
            evidence=evidence)]
    return [Finding(
        id=RULE.id, severity="info", title="RDMA memory registration",
        summary=(f"{ok} registrations of {human_bytes(ok_bytes)}, none failed; peak "
                 f"{human_bytes(peak)} registered at once."),
        recommendation="Nothing to do.", evidence=evidence)]


RULE = Rule(
    id="rdma-registration",
    title="RDMA memory registration",
    question="Did RDMA memory registration fail or run out of MRs?",
    thresholds={"min_registrations": 100, "max_registrations_per_s": 1000,
                "high_out_of_mrs_share": 0.05},
    run=run,
)
