"""below-target: does the job read (and write) as fast as its target?

Question: against the user's target (--target-read, --gpus x --per-gpu,
--target-write), what rate did the job achieve, how much of the time was it
below the target, and was start-up different from the steady state?

Trigger: a read target is given and the read rate is below it: the verdict's
rate (the dataset's reads in the training window) where the report found a
training window, else the average over the time the job was reading (first
to last read); or a write target is given and the rate during write bursts
(seconds with writes) is below it.
Severity: high when the rate is under `high_ratio` of the target, else warn.
Every figure of a read finding describes the reads it judges, over the span
its rate divides by (with a window: the dataset's reads there): the rates in
1 s bins (100 ms or 10 ms for short spans) behind "N% of the time below
target", the peak, the slowest bins, the start-up (the first `startup_share`
of the span) and steady rates, and the files and processes listed.
"""
from __future__ import annotations

from dataclasses import dataclass

from .base import Context, Finding, Rule
from .rates import human_rate


def bin_ns(duration_s: float) -> int:
    """1 s bins, or 100 ms / 10 ms for short spans (at least ~10 bins)."""
    for width in (10**9, 10**8, 10**7):
        if duration_s * 1e9 / width >= 10:
            return width
    return 10**7


def per_bin(ctx: Context, source: str, origin_ns: int, width: int) -> list[tuple[int, float]]:
    """(bin index from origin_ns, bytes per second in that bin) of the rows
    `source` (a FROM ... WHERE clause over all_io or all_data_io)."""
    return ctx.rows(f"""
        select (ts_ns - {origin_ns}) // {width} as b, sum(nbytes) * {1e9 / width}
        from {source} group by b order by b""")


@dataclass(frozen=True)
class Reads:
    """The reads a read finding judges, and every figure in it: one source
    and one span, so its rate, its bins, its start-up and its files and
    processes all describe the same reads."""
    source: str       # FROM ... WHERE over all_io / all_data_io
    first_ns: int     # the span the rate divides by
    last_ns: int
    total: int        # bytes
    measure: str      # "window" (the verdict's measure) or "span" (all reads)

    @property
    def span_s(self) -> float:
        return max((self.last_ns - self.first_ns) / 1e9, 1e-3)

    @property
    def rate(self) -> float:
        return self.total / self.span_s


def judged_reads(ctx: Context, all_reads: Reads) -> Reads:
    """The reads judged against the target. With a training window, the
    verdict's own measure: the dataset's reads in the window, over the time
    the dataset was being read there. A job whose reads of code and libraries
    at start-up stretch the span of all its reads is then neither below the
    target the verdict says it meets nor quoted at another rate."""
    if ctx.window is None:
        return all_reads
    from .verdict import window_rates, window_read_span   # the verdict's own measure
    lo, hi = ctx.window
    first, last = window_read_span(ctx, lo, hi)
    return Reads(f"all_data_io where dir = 'read' and ts_ns >= {lo} and ts_ns < {hi}",
                 first, last, window_rates(ctx, lo, hi)["bytes_read"], "window")


def read_finding(ctx: Context, th: dict) -> list[Finding]:
    target = ctx.targets.read_bps
    first, last, total = ctx.one("""select min(ts_ns), max(ts_ns + dur_ns), sum(nbytes)
                                    from all_io where dir = 'read'""")
    if not target or not total:
        return []
    everything = Reads("all_io where dir = 'read'", first, last, int(total), "span")
    r = judged_reads(ctx, everything)
    rate, span_rate = r.rate, everything.rate
    ratio = rate / target
    if ratio >= 1:
        return []
    width = bin_ns(r.span_s)
    bins = dict(per_bin(ctx, r.source, r.first_ns, width))
    seconds = list(range(int((r.last_ns - r.first_ns) // width) + 1))
    below = [s for s in seconds if bins.get(s, 0) < target]
    split = r.first_ns + int((r.last_ns - r.first_ns) * th["startup_share"])
    startup, steady = ctx.one(f"""
        select sum(nbytes) filter (where ts_ns < {split}),
               sum(nbytes) filter (where ts_ns >= {split}) from {r.source}""")
    startup_rate = (startup or 0) / max((split - r.first_ns) / 1e9, 1e-3)
    steady_rate = (steady or 0) / max((r.last_ns - split) / 1e9, 1e-3)
    whole = max(r.total, 1)
    procs = ctx.rows(f"""
        with c as (select pid, sum(nbytes) as b from {r.source} group by pid)
        select c.pid, p.cmdline, c.b, c.b / {whole} from c left join processes_once p using (pid)
        order by 3 desc, 1 limit 5""")
    files = ctx.rows(f"""
        select path, sum(nbytes), sum(nbytes) / {whole} from {r.source}
        group by path order by 2 desc, 1 limit 5""")
    worst = sorted(seconds, key=lambda s: bins.get(s, 0))[:3]
    sev = "high" if ratio < th["high_ratio"] else "warn"
    below_share = len(below) / max(len(seconds), 1)
    return [Finding(
        id="below-target", severity=sev, title="Reads below the target",
        summary=((f"Dataset reads in the training window averaged {human_rate(rate)}, "
                  if r.measure == "window" else
                  f"Reads averaged {human_rate(rate)} while the job was reading, ") +
                 f"{ratio:.0%} of the {human_rate(target)} target; "
                 f"{below_share:.0%} of " + ("that" if r.measure == "window" else "the") +
                 " time it was below target" +
                 (f" (all reads, start-up included: {human_rate(span_rate)})."
                  if r.measure == "window" and abs(span_rate - rate) > 0.05 * rate else ".")),
        recommendation=("Find what limits the read path in the other findings (small or "
                        "random reads, metadata calls, lock waits, too few loader workers); "
                        "if none applies, the storage itself is too slow for this target: "
                        "cache the dataset on local NVMe or raise parallelism "
                        "(more DataLoader workers, larger prefetch)."),
        evidence={
            "read_bytes_per_s": rate, "measured_over": r.measure,
            "all_reads_bytes_per_s": span_rate, "target_read_bytes_per_s": target,
            "target_ratio": ratio, "reading_span_s": r.span_s,
            "time_below_target_share": below_share,
            "bin_s": width / 1e9,
            "peak_read_bytes_per_s": max(bins.values(), default=0),
            "startup_read_bytes_per_s": startup_rate, "steady_read_bytes_per_s": steady_rate,
        },
        files=[{"path": p, "bytes": int(b), "share": s} for p, b, s in files],
        processes=[{"pid": pid, "cmdline": cmd, "bytes": int(b), "share": s,
                    "read_bytes_per_s": b / r.span_s} for pid, cmd, b, s in procs],
        examples=[{"ts_ns": r.first_ns + s * width,
                   "what": f"{human_rate(bins.get(s, 0))} read in this {width / 1e9:g} s"}
                  for s in worst])]


def write_finding(ctx: Context, th: dict) -> list[Finding]:
    target = ctx.targets.write_bps
    if not target:
        return []
    width = bin_ns(ctx.duration_s)
    active = [(s, b) for s, b in per_bin(ctx, "all_io where dir = 'write'", ctx.t0_ns, width)
              if b > 0]
    if not active:
        return []
    rate = sum(b for _, b in active) / len(active)
    ratio = rate / target
    if ratio >= 1:
        return []
    sev = "high" if ratio < th["high_ratio"] else "warn"
    return [Finding(
        id="below-target", severity=sev, title="Writes below the target",
        summary=(f"While writing ({len(active)} x {width / 1e9:g} s) the job wrote "
                 f"{human_rate(rate)}, {ratio:.0%} of the {human_rate(target)} write target."),
        recommendation=("Write checkpoints in large sequential writes, asynchronously "
                        "(a background thread or process), and fsync once at the end; "
                        "see the checkpoint-burst finding."),
        evidence={"write_bytes_per_s": rate, "target_write_bytes_per_s": target,
                  "target_ratio": ratio, "time_writing_s": len(active) * width / 1e9},
        examples=[{"ts_ns": ctx.t0_ns + s * width, "what": f"{human_rate(b)} written"}
                  for s, b in sorted(active, key=lambda x: x[1])[:3]])]


def run(ctx: Context) -> list[Finding]:
    th = ctx.th(RULE.id)
    return read_finding(ctx, th) + write_finding(ctx, th)


RULE = Rule(
    id="below-target",
    title="Throughput against the target",
    question="Does the job read and write as fast as its target, and when not?",
    thresholds={"high_ratio": 0.5, "startup_share": 0.1},
    run=run,
)
