"""refetched-objects: does the job download the same object bytes again?

Question: does the job GET the same objects (or the same ranges of them) more
than once, where a local cache would serve the repeats?

Over the GETs of the requests table that returned data (2xx), per
(bucket, key, range): fetches beyond the first are refetches, their bytes
refetched bytes.
Trigger: refetched bytes >= min_bytes (1 MiB) and >= min_share (0.1) of the
bytes the GETs moved.
Severity: high when refetched bytes are >= high_share (0.5) of them; else warn.
Its cost to the training loop: the loop's data waits while the job's threads
were in network calls.
"""
from __future__ import annotations

from .base import Context, Finding, Rule
from .objstore import DATA_GETS, request_count, top_processes
from .rates import human_bytes


def run(ctx: Context) -> list[Finding]:
    th = ctx.th(RULE.id)
    if not request_count(ctx):
        return []
    per = f"""per as (
        select bucket, key, coalesce(range, '') as rng, count(*) as n, sum(bytes) as b,
               sum(bytes) - max(bytes) as again
        from requests where {DATA_GETS} group by all)"""
    total, refetched, refetches, most, objects = ctx.one(f"""
        with {per}
        select sum(b), sum(again), sum(n - 1), max(n),
               (select count(*) from (select distinct bucket, key from per where n > 1) o)
        from per""")
    if not total or refetched < th["min_bytes"] or refetched / total < th["min_share"]:
        return []
    share = refetched / total
    ev = {"get_bytes": total, "refetched_bytes": refetched, "refetched_share": share,
          "objects_refetched": objects, "refetches": refetches, "max_fetches_of_one": most}
    top = ctx.rows(f"""with {per}
        select bucket, key, rng, n, again from per where n > 1
        order by again desc, bucket, key, rng limit 5""")
    return [Finding(
        id=RULE.id, severity="high" if share >= th["high_share"] else "warn",
        title="Objects fetched again",
        summary=(f"{human_bytes(refetched)} of the {human_bytes(total)} the job downloaded "
                 f"({share:.0%}) were objects it had fetched before: {objects:,} objects, "
                 f"up to {ev['max_fetches_of_one']} times each."),
        recommendation=(
            "Cache what is read again on local storage: fsspec's filecache/simplecache, a "
            "node-local NVMe cache in front of the bucket (Mountpoint --cache, s3fs-fuse "
            "use_cache, Alluxio), or the data set copied to local disk before training when "
            "it fits; a cache that holds one epoch saves every later epoch's downloads."),
        evidence=ev,
        files=[{"path": f"s3://{b}/{k}" + (f" [{rng}]" if rng else ""), "fetches": n,
                "refetched_bytes": rb, "share": rb / refetched} for b, k, rng, n, rb in top],
        processes=top_processes(ctx, DATA_GETS))]


RULE = Rule(
    id="refetched-objects",
    title="Objects fetched again",
    question="Does the job GET the same object bytes more than once, where a cache would "
             "serve them?",
    thresholds={"min_bytes": float(1 << 20), "min_share": 0.1, "high_share": 0.5},
    run=run,
)
