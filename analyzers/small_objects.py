"""small-objects: are the job's object reads bound by per-request latency?

Question: does the job read many small objects (one GET per sample), so that
each request's time is mostly waiting for its first byte, not moving data?

Over the GETs of the requests table that returned data (2xx):
  gets, median_object_bytes   how many, and the median bytes per GET
  ttfb_share       time to first byte summed over those GETs / their summed
                   duration: the latency-bound part of the request time
  per_request_bytes_per_s     bytes / summed duration: what one request in
                   flight delivers (the rate one-at-a-time reading reaches)
Trigger: gets >= min_gets (20), median_object_bytes <= max_median_bytes (1 MiB)
and ttfb_share >= min_ttfb_share (0.5).
Severity: high when ttfb_share >= high_ttfb_share (0.8); else warn. Its cost to
the training loop: the loop's data waits while the job's threads were in
network calls.
"""
from __future__ import annotations

from .base import Context, Finding, Rule
from .objstore import DATA_GETS, examples, request_count, top_endpoints, top_processes
from .rates import human_bytes

MiB = 1 << 20


def run(ctx: Context) -> list[Finding]:
    th = ctx.th(RULE.id)
    if not request_count(ctx):
        return []
    gets, med, nbytes, dur, ttfb, ttfb_p50 = ctx.one(f"""
        select count(*), median(bytes), sum(bytes), sum(dur_ns), sum(ttfb_ns),
               median(ttfb_ns)
        from requests where {DATA_GETS}""")
    if not gets or gets < th["min_gets"] or not dur:
        return []
    share = (ttfb or 0) / dur
    if med > th["max_median_bytes"] or share < th["min_ttfb_share"]:
        return []
    per_req = nbytes / (dur / 1e9)
    shard = int(th["suggested_object_bytes"])
    ev = {"gets": gets, "median_object_bytes": med, "bytes": nbytes,
          "ttfb_share": share, "ttfb_ms_p50": (ttfb_p50 or 0) / 1e6,
          "request_time_s": dur / 1e9, "first_byte_wait_s": (ttfb or 0) / 1e9,
          "per_request_bytes_per_s": per_req,
          "gets_if_sharded": max(1, -(-nbytes // shard)), "suggested_object_bytes": shard}
    return [Finding(
        id=RULE.id, severity="high" if share >= th["high_ttfb_share"] else "warn",
        title="Small objects: latency-bound GETs",
        summary=(f"The job made {gets:,} GETs of median {human_bytes(med)}; {share:.0%} of "
                 f"their time was waiting for the first byte (p50 {ev['ttfb_ms_p50']:.1f} ms), "
                 f"so one request in flight delivers only {human_bytes(per_req)}/s."),
        recommendation=(
            f"Pack samples into larger objects (WebDataset tar shards, TFRecord, Parquet "
            f"row groups of {human_bytes(shard)} or more: {ev['gets_if_sharded']:,} GETs "
            f"instead of {gets:,}) and read them sequentially, or keep many more requests in "
            f"flight (more loader workers, an async client such as s3fs/aiobotocore with a "
            f"larger connection pool, or ranged GETs in parallel)."),
        evidence=ev, files=top_endpoints(ctx, DATA_GETS), processes=top_processes(ctx, DATA_GETS),
        examples=examples(ctx, DATA_GETS, order="ttfb_ns desc"))]


RULE = Rule(
    id="small-objects",
    title="Small objects: latency-bound GETs",
    question="Does the job read many small objects whose GETs are mostly time to first byte?",
    thresholds={"min_gets": 20, "max_median_bytes": float(MiB), "min_ttfb_share": 0.5,
                "high_ttfb_share": 0.8, "suggested_object_bytes": float(64 * MiB)},
    run=run,
)
