"""few-in-flight: does the job keep enough object reads in flight for its target?

Question: with the rate one request delivers, how many requests must be in
flight to reach the read target, and how many did the job keep?

Over the GETs of the requests table that returned data (2xx), per endpoint:
  per_request_bytes_per_s   bytes / summed request duration
  mean_in_flight            summed request duration / the span from the first
                            GET's start to the last one's end
  achieved_bytes_per_s      bytes / that span
  needed_in_flight          target / per_request_bytes_per_s (rounded up)
Trigger: a read target is given (--target-read, or --gpus with --per-gpu), the
endpoint moved at least min_bytes (1 MiB) in at least min_gets (20) GETs,
achieved < target, and mean_in_flight * min_gap (1.5) < needed_in_flight.
Severity: high when achieved < high_ratio (50%) of the target; else warn.
"""
from __future__ import annotations

import math

from .base import Context, Finding, Rule
from .objstore import DATA_GETS, examples, in_flight_sql, request_count, top_processes
from .rates import human_bytes


def run(ctx: Context) -> list[Finding]:
    th = ctx.th(RULE.id)
    target = ctx.targets.read_bps
    if not target or not request_count(ctx):
        return []
    out = []
    for host, port, gets, nbytes, busy, first, last, mx in ctx.rows(f"""
            with c as ({in_flight_sql(DATA_GETS)})
            select host, port, count(*), sum(bytes), sum(dur_ns), min(ts_ns),
                   max(ts_ns + dur_ns), any_value(c.max_in_flight)
            from requests join c using (host, port) where {DATA_GETS}
            group by all order by 4 desc"""):
        if gets < th["min_gets"] or nbytes < th["min_bytes"] or not busy:
            continue
        span_s = max((last - first) / 1e9, 1e-9)
        per_req = nbytes / (busy / 1e9)
        achieved = nbytes / span_s
        mean_in_flight = busy / 1e9 / span_s
        needed = math.ceil(target / per_req)
        if achieved >= target or mean_in_flight * th["min_gap"] >= needed:
            continue
        ev = {"endpoint": f"{host}:{port}", "gets": gets, "bytes": nbytes,
              "target_bytes_per_s": target, "achieved_bytes_per_s": achieved,
              "per_request_bytes_per_s": per_req, "mean_in_flight": mean_in_flight,
              "max_in_flight": mx, "needed_in_flight": needed}
        where = f"{DATA_GETS} and host = '{host.replace(chr(39), chr(39) * 2)}' and port = {port}"
        out.append(Finding(
            id=RULE.id, severity="high" if achieved < th["high_ratio"] * target else "warn",
            title="Too few object reads in flight",
            summary=(f"Reads from {host}:{port} reached {human_bytes(achieved)}/s against a "
                     f"target of {human_bytes(target)}/s with {mean_in_flight:.1f} GETs in "
                     f"flight on average (at most {mx}); at {human_bytes(per_req)}/s per "
                     f"request the target needs about {needed} in flight."),
            recommendation=(
                f"Keep about {needed} GETs in flight: more DataLoader workers or threads per "
                f"worker, a larger connection pool (botocore max_pool_connections, which is "
                f"10 by default), an async client (s3fs/aiobotocore, the PyTorch S3 "
                f"connector), or ranged GETs of large objects in parallel; larger objects "
                f"raise the rate each request delivers."),
            evidence=ev, files=[{"endpoint": ev["endpoint"], "share": 1.0}],
            processes=top_processes(ctx, where), examples=examples(ctx, where)))
    return out


RULE = Rule(
    id="few-in-flight",
    title="Too few object reads in flight",
    question="How many GETs must be in flight to reach the read target at the measured "
             "per-request rate, and how many did the job keep?",
    thresholds={"min_gets": 20, "min_bytes": float(1 << 20), "min_gap": 1.5, "high_ratio": 0.5},
    run=run,
)
