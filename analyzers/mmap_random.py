"""mmap-random-faults: does the job read a memory-mapped file in small random steps?

Question: a memory-mapped dataset (`np.load(mmap_mode='r')`, safetensors,
Arrow, `torch.load(mmap=True)`) indexed at random - shuffled samples - reads
storage one page fault at a time: each major fault stalls the thread for a
device round trip, one fault in flight per thread, with no way to batch or
overlap them. A loader that reads the same samples with explicit reads can
keep many requests in flight (threads, io_uring) and size them to the sample.

Per data file, over the job's major page faults (that brought pages into the
page cache; minor faults find them cached) on its mappings, in time order per
thread:
  random    a major fault before the previous one, or more than the previous
            fault's bytes (at least a page) past it
  stall_s   the threads' time blocked in those faults
Trigger, for a file:
  major faults >= min_major_faults (512), random share >= min_random_share
  (0.5), stall_s >= min_stall_s (0.5 s).
Severity: warn; with a training loop, from the loop's data waits in those
faults (impact.py).
"""
from __future__ import annotations

from .base import Context, Finding, Rule
from .rates import human_bytes, human_s

PER_FILE = """
    with f as (select file_id, path, pid, off, brought, dur_ns,
                      lag(off) over w as prev_off, lag(brought) over w as prev_brought
               from data_faults where major
               window w as (partition by tid, file_id order by ts_ns))
    select file_id, any_value(path), count(*) as n, count(prev_off) as n_after,
           count(*) filter (where off < prev_off
                              or off > prev_off + greatest(prev_brought, 4096)) as n_random,
           sum(brought) as brought, sum(dur_ns) as stall_ns, median(dur_ns) as p50_ns,
           count(distinct pid) as procs
    from f group by file_id order by stall_ns desc, file_id"""


def run(ctx: Context) -> list[Finding]:
    th = ctx.th("mmap-random-faults")
    hits = [r for r in ctx.rows(PER_FILE)
            if r[2] >= th["min_major_faults"] and r[3]
            and r[4] / r[3] >= th["min_random_share"] and r[6] / 1e9 >= th["min_stall_s"]]
    if not hits:
        return []
    n = sum(h[2] for h in hits)
    stall_s = sum(h[6] for h in hits) / 1e9
    brought = sum(h[5] for h in hits)
    return [Finding(
        id="mmap-random-faults", severity="warn",
        title=f"Random page faults on memory-mapped data: {n} major faults, {human_s(stall_s)} "
              "stalled",
        summary=(f"The job read {len(hits)} memory-mapped file(s) at random: {n} major page "
                 f"faults, {human_bytes(brought / n)} brought in each, stalled its threads "
                 f"for {human_s(stall_s)} ({1e3 * stall_s / n:.2f} ms a fault), one device round "
                 "trip at a time."),
        recommendation=(
            "Read shuffled samples with explicit reads (pread of each sample, several "
            "DataLoader workers or an io_uring loader to keep requests in flight) instead "
            "of touching a mapping; or, if the file fits in memory, load it whole first "
            "(a sequential read, MAP_POPULATE, madvise(MADV_WILLNEED)); or store the "
            "samples pre-shuffled in shards read in order. If the mapping stays, "
            "madvise(MADV_RANDOM) stops read-around from bringing pages no sample uses."),
        evidence={"major_faults": int(n), "stall_s": round(stall_s, 3),
                  "brought_bytes": int(brought), "bytes_per_fault": int(brought / n)},
        files=[{"path": p, "major_faults": int(k), "random_share": round(nr / na, 3),
                "stall_s": round(st / 1e9, 3), "fault_ms_p50": round(p50 / 1e6, 3),
                "processes": int(procs), "share": round(k / n, 4)}
               for _, p, k, na, nr, _, st, p50, procs in hits[:10]],
    )]


RULE = Rule(
    id="mmap-random-faults",
    title="Random page faults on memory-mapped data",
    question="Does the job read a memory-mapped file in small random steps?",
    thresholds={"min_major_faults": 512, "min_random_share": 0.5, "min_stall_s": 0.5},
    run=run,
)

# The calls the finding is about (for its impact): the major faults.
CALLS = "(e.op = 'page_fault' and e.ret > 0)"
