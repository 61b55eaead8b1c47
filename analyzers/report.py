"""Runs every rule over a trace and makes the report: a verdict (is the job
I/O-bound, against which target, by how much) and the findings."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from typing import Optional

from .base import Context, Finding, Targets, severity_rank
from .rates import human_bytes, human_rate
from .registry import all_rules
from .thresholds import load_thresholds
from .views import READ_OPS, WRITE_OPS, create_views, sql_list

REPORT_SCHEMA = "iotrace-report/1"


@dataclass
class Report:
    trace: str
    targets: Targets
    verdict: dict
    findings: list[Finding]
    rules_run: list[str]
    errors: list[dict] = field(default_factory=list)   # rules that failed, and why

    def to_dict(self) -> dict:
        return {
            "schema": REPORT_SCHEMA,
            "trace": self.trace,
            "targets": {"read_bytes_per_s": self.targets.read_bps,
                        "write_bytes_per_s": self.targets.write_bps,
                        "gpus": self.targets.gpus,
                        "per_gpu_bytes_per_s": self.targets.per_gpu_bps},
            "verdict": self.verdict,
            "findings": [f.to_dict() for f in self.findings],
            "rules_run": self.rules_run,
            "rule_errors": self.errors,
        }

    def worst(self) -> Optional[str]:
        return max((f.severity for f in self.findings), key=severity_rank, default=None)


def union_ns(con, where: str) -> int:
    """Nanoseconds during which at least one event matching `where` was in
    progress: the union of [ts, ts + dur) intervals. Sorted in DuckDB, the
    sweep (a running maximum of ends) in numpy."""
    cols = con.execute(f"select ts_ns as s, ts_ns + dur_ns as e from events where {where} "
                       "order by s").fetchnumpy()
    s = np.asarray(cols["s"], dtype=np.int64)
    if len(s) == 0:
        return 0
    e = np.maximum.accumulate(np.asarray(cols["e"], dtype=np.int64))
    # an island starts where an interval begins after every earlier one ended
    starts = np.concatenate(([True], s[1:] > e[:-1]))
    first = np.flatnonzero(starts)
    last = np.append(first[1:] - 1, len(s) - 1)
    return int((e[last] - s[first]).sum())


def make_verdict(ctx: Context) -> dict:
    rd, wr, reads = ctx.one("""select coalesce(sum(nbytes) filter (where dir = 'read'), 0),
                                      coalesce(sum(nbytes) filter (where dir = 'write'), 0),
                                      count(*) filter (where dir = 'read') from io""")
    dur = ctx.duration_s
    busy_ns = union_ns(ctx.con, f"op in {sql_list(READ_OPS + WRITE_OPS + ('fsync', 'fdatasync'))}"
                                " and file_id >= 0")
    v = {
        "duration_s": round(dur, 3),
        "bytes_read": int(rd),
        "bytes_written": int(wr),
        "read_bytes_per_s": rd / dur,
        "write_bytes_per_s": wr / dur,
        "io_busy_share": min(1.0, busy_ns / (dur * 1e9)),
        "read_target_bytes_per_s": ctx.targets.read_bps,
        "write_target_bytes_per_s": ctx.targets.write_bps,
    }
    t = ctx.targets
    if reads == 0 and wr == 0:
        v["status"] = "no-io"
        v["summary"] = f"No file reads or writes in {dur:.1f} s: nothing to judge."
        return v
    if t.read_bps:
        ratio = v["read_bytes_per_s"] / t.read_bps
        v["read_target_ratio"] = ratio
        target = human_rate(t.read_bps) + (f" ({t.gpus} GPUs x {human_rate(t.per_gpu_bps)})"
                                          if t.gpus and t.per_gpu_bps else "")
        if ratio < 1:
            v["status"] = "io-bound"
            v["summary"] = (f"I/O-bound: over the {dur:.1f} s run reads averaged "
                            f"{human_rate(v['read_bytes_per_s'])}, "
                            f"{ratio:.0%} of the {target} target "
                            f"({1 / max(ratio, 1e-9):.1f}x short); file I/O was in progress "
                            f"{v['io_busy_share']:.0%} of the time.")
        else:
            v["status"] = "meets-target"
            v["summary"] = (f"Meets the read target: over the {dur:.1f} s run reads averaged "
                            f"{human_rate(v['read_bytes_per_s'])}, {ratio:.1f}x the "
                            f"{target} target.")
        return v
    v["status"] = "no-target"
    v["summary"] = (f"No read target given (use --target-read or --gpus/--per-gpu): reads "
                    f"averaged {human_rate(v['read_bytes_per_s'])} "
                    f"({human_bytes(rd)} in {dur:.1f} s), writes "
                    f"{human_rate(v['write_bytes_per_s'])}; file I/O was in progress "
                    f"{v['io_busy_share']:.0%} of the time.")
    return v


def build_report(trace, targets: Targets, thresholds_path: Optional[str] = None,
                 only: Optional[list[str]] = None) -> Report:
    rules = all_rules()
    thresholds = load_thresholds(rules, thresholds_path)
    con = trace.con
    create_views(con)
    t0, t1 = con.execute("select min(ts_ns), max(ts_ns + dur_ns) from events").fetchone()
    ctx = Context(con=con, meta=trace.meta, targets=targets, thresholds=thresholds,
                  t0_ns=t0 or 0, t1_ns=t1 or 0)
    findings: list[Finding] = []
    errors: list[dict] = []
    ran = []
    for rule in rules:
        if only and rule.id not in only:
            continue
        try:
            findings.extend(rule.run(ctx))
            ran.append(rule.id)
        except Exception as e:  # noqa: BLE001 - one broken rule must not hide the others
            errors.append({"rule": rule.id, "error": f"{type(e).__name__}: {e}"})
    findings.sort(key=lambda f: -severity_rank(f.severity))
    verdict = make_verdict(ctx)
    verdict["t0_ns"] = ctx.t0_ns
    return Report(trace=str(trace.root), targets=targets, verdict=verdict,
                  findings=findings, rules_run=ran, errors=errors)
