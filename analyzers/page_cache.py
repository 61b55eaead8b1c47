"""page-cache-hides-storage: did the run measure the storage, or memory?

Question: of the bytes the job read from its data files, how many came from
the page cache rather than from storage? A dataset that fits in RAM and was
read before (an earlier run, an earlier epoch, the file just written) is
served from memory: the run then measures memory bandwidth, not the storage it
is meant to size - the classic benchmarking error MLPerf Storage guards
against by sizing its dataset at several times the host's memory.

Over reads of the job's data files (the `data_io` view: no code, libraries or
system files) and user page faults on their mappings:
  read_bytes          bytes the reads moved, plus the bytes the faults touched
  from_storage_bytes  page-cache bytes those reads and faults added for their
                      file (demand misses and readahead: docs/trace-format.md),
                      and the bytes of O_DIRECT reads (no page cache)
  hit_share           1 - from_storage_bytes / read_bytes (at least 0)
Trigger:
  read_bytes >= min_read_bytes (64 MiB)  and  hit_share >= min_hit_share (0.8)
Only where the recorder saw page-cache additions (the probe attached; traces
before schema 1.2 have no such numbers). Severity: warn - a verdict about what
the run measured, not time it lost; no impact fields.
"""
from __future__ import annotations

from iotrace.abi import READ_OPS, sql_list

from .base import Context, Finding, Rule
from .rates import human_bytes

PROBE = "page cache additions"

PER_FILE = f"""
    with r as (
        -- an O_DIRECT read's bytes all came from storage
        select file_id, path, sum(nbytes) as rd,
               sum(case when direct then nbytes else cache_added end) as miss
        from data_io where op in {sql_list(READ_OPS)} group by file_id, path),
    m as (
        select file_id, sum(greatest(brought, 4096)) as rd, sum(brought) as miss
        from data_faults group by file_id)
    select coalesce(r.file_id, m.file_id) as file_id,
           coalesce(r.path, (select path from files f where f.file_id = m.file_id)) as path,
           coalesce(r.rd, 0) + coalesce(m.rd, 0) as rd,
           coalesce(r.miss, 0) + coalesce(m.miss, 0) as miss
    from r full join m using (file_id)
    order by rd desc, path, file_id"""


def run(ctx: Context) -> list[Finding]:
    th = ctx.th("page-cache-hides-storage")
    attached = ctx.meta.get("probes", {}).get("attached", [])
    if not any(str(p).startswith(PROBE) for p in attached):
        return []
    files = ctx.rows(PER_FILE)
    rd = sum(f[2] for f in files)
    miss = min(sum(f[3] for f in files), rd)
    if rd < th["min_read_bytes"]:
        return []
    hit = 1 - miss / rd
    if hit < th["min_hit_share"]:
        return []
    return [Finding(
        id="page-cache-hides-storage", severity="warn",
        title="The page cache served the data: the run measured memory, not storage",
        summary=(f"{100 * hit:.0f}% of the {human_bytes(rd)} read from the data files came "
                 f"from the page cache; only {human_bytes(miss)} came from storage."),
        recommendation=(
            "To measure the storage, read data that is not cached: drop the page cache "
            "before the run (`sync; echo 3 > /proc/sys/vm/drop_caches`), make the dataset "
            "larger than the host's memory (MLPerf Storage uses several times RAM), or read "
            "with O_DIRECT. If the production dataset fits in memory too, storage matters only "
            "for the first epoch."),
        evidence={"read_bytes": rd, "from_storage_bytes": miss, "from_memory_bytes": rd - miss,
                  "hit_share": round(hit, 4)},
        files=[{"path": p, "read_bytes": r, "from_storage_bytes": min(m, r),
                "share": round(r / rd, 4)} for _, p, r, m in files[:10]],
    )]


RULE = Rule(
    id="page-cache-hides-storage",
    title="Page cache hides the storage",
    question="Did the run read its data from storage, or from memory?",
    thresholds={"min_read_bytes": 64 << 20, "min_hit_share": 0.8},
    run=run,
)
