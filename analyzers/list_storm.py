"""list-storm: does the job spend its requests on listings and metadata?

Question: does the job list the bucket or HEAD objects so often that metadata
requests rival the data requests (a loader that lists the prefix every epoch
or every step, an fsspec cache turned off, a HEAD before every GET)?

Over the requests table: metadata requests are LIST (ListObjects,
ListBuckets) and HEAD (HeadObject, HeadBucket) requests.
Trigger: metadata requests >= min_requests (50) and their share of all
requests >= min_share (0.2), or of the summed request time >= min_share.
Severity: high when they are >= high_share (0.5) of the requests or of the
request time; else warn.
"""
from __future__ import annotations

from .base import Context, Finding, Rule
from .objstore import examples, request_count, top_processes

META = "s3_op in ('ListObjects', 'ListBuckets', 'HeadObject', 'HeadBucket')"


def run(ctx: Context) -> list[Finding]:
    th = ctx.th(RULE.id)
    total = request_count(ctx)
    if not total:
        return []
    n, lists, heads, t_meta, t_all, peak = ctx.one(f"""
        select count(*) filter (where {META}),
               count(*) filter (where s3_op like 'List%'),
               count(*) filter (where s3_op like 'Head%'),
               coalesce(sum(dur_ns) filter (where {META}), 0), sum(dur_ns),
               (select max(c) from (select count(*) as c from requests where {META}
                                    group by ts_ns // 1000000000))
        from requests""")
    share = n / total
    time_share = t_meta / t_all if t_all else 0.0
    if n < th["min_requests"] or max(share, time_share) < th["min_share"]:
        return []
    ev = {"metadata_requests": n, "lists": lists, "heads": heads, "requests": total,
          "share_of_requests": share, "share_of_request_time": time_share,
          "metadata_time_s": t_meta / 1e9, "peak_per_second": peak}
    high = max(share, time_share) >= th["high_share"]
    return [Finding(
        id=RULE.id, severity="high" if high else "warn", title="LIST/HEAD storm",
        summary=(f"{n:,} of the job's {total:,} object-store requests ({share:.0%}, "
                 f"{time_share:.0%} of the request time) were listings ({lists:,}) and "
                 f"HEADs ({heads:,}), up to {peak:,} a second."),
        recommendation=(
            "List once and reuse the listing: write a manifest of the keys with the data "
            "set and read it at start, keep fsspec's listings cache on (use_listings_cache), "
            "and read objects without a HEAD first (a GET returns the size and fails "
            "cleanly when the key is missing)."),
        evidence=ev, processes=top_processes(ctx, META),
        examples=examples(ctx, META, order="ts_ns"))]


RULE = Rule(
    id="list-storm",
    title="LIST/HEAD storm",
    question="Do listings and HEADs rival the data requests in count or time?",
    thresholds={"min_requests": 50, "min_share": 0.2, "high_share": 0.5},
    run=run,
)
