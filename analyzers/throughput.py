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
Rates in 1 s bins (100 ms or 10 ms for short traces); the first
`startup_share` of the reading span counts as start-up.
"""
from __future__ import annotations

from .base import Context, Finding, Rule
from .rates import human_rate


def bin_ns(ctx: Context) -> int:
    """1 s bins, or 100 ms / 10 ms for short traces (at least ~10 bins)."""
    for width in (10**9, 10**8, 10**7):
        if ctx.duration_s * 1e9 / width >= 10:
            return width
    return 10**7


def per_bin(ctx: Context, direction: str, width: int) -> list[tuple[int, float]]:
    """(bin index, bytes per second in that bin)."""
    return ctx.rows(f"""
        select (ts_ns - {ctx.t0_ns}) // {width} as b, sum(nbytes) * {1e9 / width}
        from all_io where dir = '{direction}' group by b order by b""")


def judged_read_rate(ctx: Context, span_rate: float) -> tuple[float, str]:
    """(the rate judged against the target, over what). With a training
    window, the verdict's own measure: the dataset's reads while the dataset
    was being read in the window. A job whose reads of code and libraries at
    start-up stretch the span of all its reads is then neither below the
    target the verdict says it meets nor quoted at another rate."""
    if ctx.window is None:
        return span_rate, "span"
    from .verdict import window_rates   # the verdict's own measure
    return window_rates(ctx, *ctx.window)["read_bytes_per_s"], "window"


def read_finding(ctx: Context, th: dict) -> list[Finding]:
    target = ctx.targets.read_bps
    first, last, total = ctx.one("""select min(ts_ns), max(ts_ns + dur_ns), sum(nbytes)
                                    from all_io where dir = 'read'""")
    if not target or not total:
        return []
    span_s = max((last - first) / 1e9, 1e-3)
    span_rate = total / span_s
    rate, measure = judged_read_rate(ctx, span_rate)
    ratio = rate / target
    if ratio >= 1:
        return []
    width = bin_ns(ctx)
    bins = dict(per_bin(ctx, "read", width))
    s0, s1 = (first - ctx.t0_ns) // width, (last - ctx.t0_ns) // width
    seconds = list(range(int(s0), int(s1) + 1))
    below = [s for s in seconds if bins.get(s, 0) < target]
    split = first + int((last - first) * th["startup_share"])
    startup, steady = ctx.one(f"""
        select sum(nbytes) filter (where ts_ns < {split}),
               sum(nbytes) filter (where ts_ns >= {split}) from all_io where dir = 'read'""")
    startup_rate = (startup or 0) / max((split - first) / 1e9, 1e-3)
    steady_rate = (steady or 0) / max((last - split) / 1e9, 1e-3)
    procs = ctx.rows(f"""
        select i.pid, any_value(p.cmdline), sum(nbytes), sum(nbytes) / {total}
        from all_io i left join processes_once p using (pid) where dir = 'read'
        group by i.pid order by 3 desc, 1 limit 5""")
    files = ctx.rows(f"""
        select path, sum(nbytes), sum(nbytes) / {total} from all_io where dir = 'read'
        group by path order by 2 desc, 1 limit 5""")
    worst = sorted(seconds, key=lambda s: bins.get(s, 0))[:3]
    sev = "high" if ratio < th["high_ratio"] else "warn"
    return [Finding(
        id="below-target", severity=sev, title="Reads below the target",
        summary=((f"Dataset reads in the training window averaged {human_rate(rate)}, "
                  if measure == "window" else
                  f"Reads averaged {human_rate(rate)} while the job was reading, ") +
                 f"{ratio:.0%} of the {human_rate(target)} target; "
                 f"{len(below) / max(len(seconds), 1):.0%} of the time it was below target" +
                 (f" (all reads, start-up included: {human_rate(span_rate)})."
                  if measure == "window" and abs(span_rate - rate) > 0.05 * rate else ".")),
        recommendation=("Find what limits the read path in the other findings (small or "
                        "random reads, metadata calls, lock waits, too few loader workers); "
                        "if none applies, the storage itself is too slow for this target: "
                        "cache the dataset on local NVMe or raise parallelism "
                        "(more DataLoader workers, larger prefetch)."),
        evidence={
            "read_bytes_per_s": rate, "measured_over": measure,
            "all_reads_bytes_per_s": span_rate, "target_read_bytes_per_s": target,
            "target_ratio": ratio, "reading_span_s": span_s,
            "time_below_target_share": len(below) / max(len(seconds), 1),
            "bin_s": width / 1e9,
            "peak_read_bytes_per_s": max(bins.values(), default=0),
            "startup_read_bytes_per_s": startup_rate, "steady_read_bytes_per_s": steady_rate,
        },
        files=[{"path": p, "bytes": int(b), "share": s} for p, b, s in files],
        processes=[{"pid": pid, "cmdline": cmd, "bytes": int(b), "share": s,
                    "read_bytes_per_s": b / span_s} for pid, cmd, b, s in procs],
        examples=[{"ts_ns": ctx.t0_ns + s * width,
                   "what": f"{human_rate(bins.get(s, 0))} read in this {width / 1e9:g} s"}
                  for s in worst])]


def write_finding(ctx: Context, th: dict) -> list[Finding]:
    target = ctx.targets.write_bps
    if not target:
        return []
    width = bin_ns(ctx)
    active = [(s, b) for s, b in per_bin(ctx, "write", width) if b > 0]
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
