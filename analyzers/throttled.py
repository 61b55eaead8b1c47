"""throttled: does the object store refuse the job's requests for their rate?

Question: does the store answer the job's requests with throttling errors
(HTTP 503 SlowDown, 429 Too Many Requests, a Throttling code in the body), which
the SDKs retry silently after a backoff?

Over the requests table (HTTP requests of the job, plain or TLS):
  throttled        requests answered 429/503 or with an S3 throttling code
  retries          requests that are SDK retries (amz-sdk-request attempt > 1, or
                   the same request again after a 429/5xx)
  time_lost_s      per throttled request, from its start to the start of its
                   retry (the backoff included), or its own duration when no
                   retry followed; summed
Trigger: throttled >= min_throttled (1) and throttled / requests >= min_share (0.5%).
Severity: high when the share is >= high_share (5%) or time_lost_s >= high_time_share
(10%) of the trace; else warn. Its cost to the training loop: the loop's data
waits while the job's threads were in network calls or in backoff sleeps of
threads that were throttled.
"""
from __future__ import annotations

from .base import Context, Finding, Rule
from .objstore import (SAME_REQUEST, THROTTLED, examples, request_count, top_endpoints,
                       top_processes)
from .rates import human_s


def run(ctx: Context) -> list[Finding]:
    th = ctx.th(RULE.id)
    total = request_count(ctx)
    if not total:
        return []
    n, retries, lost_ns = ctx.one(f"""
        with r as (
            select *, {THROTTLED} as thr,
                   lead(ts_ns) over (partition by pid, {SAME_REQUEST}
                                     order by ts_ns) as next_ts
            from requests)
        select count(*) filter (where thr),
               (select count(*) from requests where retry),
               coalesce(sum(coalesce(next_ts, ts_ns + dur_ns) - ts_ns) filter (where thr), 0)
        from r""")
    share = n / total
    if n < th["min_throttled"] or share < th["min_share"]:
        return []
    by = {f"{s if s is not None else '-'} {c or ''}".strip(): k for s, c, k in ctx.rows(f"""
        select status, error_code, count(*) from requests where {THROTTLED}
        group by all order by 3 desc""")}
    lost_s = lost_ns / 1e9
    ev = {"requests": total, "throttled": n, "throttled_share": share, "retries": retries,
          "by_status_and_code": by, "time_lost_s": lost_s,
          "time_lost_share": lost_s / ctx.duration_s}
    high = share >= th["high_share"] or ev["time_lost_share"] >= th["high_time_share"]
    return [Finding(
        id=RULE.id, severity="high" if high else "warn", title="Throttled by the object store",
        summary=(f"The object store refused {n:,} of the job's {total:,} requests ({share:.1%}) "
                 f"for their rate ({', '.join(f'{k} x{v}' for k, v in by.items())}); the SDK "
                 f"retried {retries:,} times and the throttled requests and their backoff "
                 f"took {human_s(lost_s)}."),
        recommendation=(
            "Lower the request rate per key prefix: S3 serves about 5,500 GET/HEAD and "
            "3,500 PUT/POST/DELETE per second per prefix, so spread the data set over more "
            "prefixes (hash-prefixed keys), read fewer, larger objects (shards of 64 MiB+ "
            "or ranged reads of them), cache what is read again, and use the SDK's adaptive "
            "retry mode (botocore retries={'mode': 'adaptive'}) so clients slow down "
            "together instead of retrying into the limit."),
        evidence=ev, files=top_endpoints(ctx, THROTTLED),
        processes=top_processes(ctx, THROTTLED),
        examples=examples(ctx, THROTTLED, order="ts_ns"))]


RULE = Rule(
    id="throttled",
    title="Throttled by the object store",
    question="Does the object store answer the job's requests with 503 SlowDown / 429, "
             "retried silently by the SDK?",
    thresholds={"min_throttled": 1, "min_share": 0.005, "high_share": 0.05,
                "high_time_share": 0.10},
    run=run,
)
