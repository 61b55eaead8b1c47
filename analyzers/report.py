"""Runs every rule over a trace and makes the report: a verdict (is the job
I/O-bound, against which target, by how much) and the findings."""
from __future__ import annotations

from dataclasses import dataclass, field

from typing import Callable, Optional

from iotrace.errors import EXIT_USAGE, IotraceError

from .base import Context, Finding, Rule, Targets, severity_rank
from .impact import apply_impact
from .finding_savings import apply_savings
from .registry import all_rules
from .thresholds import load_thresholds
from . import whatif
from .verdict import make_verdict
from .views import create_views, uncache_events
from .loader_frame import THRESHOLDS as LOADER_THRESHOLDS
from .waits import THRESHOLDS as WAIT_THRESHOLDS, analyse

# The verdict's thresholds, overridable like a rule's ([verdict] in the TOML file).
VERDICT = Rule(id="verdict", title="Verdict", question="Does the training loop wait for data?",
               thresholds={**WAIT_THRESHOLDS, **LOADER_THRESHOLDS}, run=lambda ctx: [])

REPORT_SCHEMA = "iotrace-report/1"


@dataclass
class Report:
    trace: str
    targets: Targets
    verdict: dict
    findings: list[Finding]
    rules_run: list[str]
    errors: list[dict] = field(default_factory=list)   # rules that failed, and why
    # the training loops' waits and checkpoints in the window (waits.LoopStates),
    # for the timeline viewers; not part of the JSON report
    loop_states: list = field(default_factory=list)
    # every write burst (checkpoint) found, also where too few for the finding
    checkpoints: list = field(default_factory=list)
    # the AU predicted for changes to the input pipeline (whatif.py)
    whatif: dict = field(default_factory=dict)

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
            "checkpoints": self.checkpoints,
            "rules_run": self.rules_run,
            "rule_errors": self.errors,
            "whatif": self.whatif,
        }

    def worst(self) -> Optional[str]:
        return max((f.severity for f in self.findings), key=severity_rank, default=None)


def build_report(trace, targets: Targets, thresholds_path: Optional[str] = None,
                 only: Optional[list[str]] = None,
                 window_s: Optional[tuple[float, float]] = None,
                 progress: Optional[Callable[[str], None]] = None,
                 loader_frame: Optional[str] = None, kernel_only: bool = False,
                 rules: bool = True) -> Report:
    """window_s: (start, end) seconds from the trace's first event, to
    override the detected training window. progress: called with what the
    report does next (the events, the loop's waits, each rule, the verdict),
    for a status line on long reports (a 100 M-event trace takes minutes).
    rules=False: the verdict and what-if only, no findings."""
    run_rules, rules = rules, all_rules()
    thresholds = load_thresholds(rules + [VERDICT], thresholds_path)
    say = progress or (lambda what: None)
    con = trace.con
    say("reading the events")
    cached = create_views(con)
    try:
        return _build(trace, targets, rules if run_rules else [], thresholds, only, window_s,
                      say, loader_frame, kernel_only, materialise=cached is not None)
    finally:
        uncache_events(con, cached)


def _build(trace, targets: Targets, rules: list[Rule], thresholds: dict,
           only: Optional[list[str]], window_s: Optional[tuple[float, float]],
           say: Callable[[str], None], loader_frame: Optional[str] = None,
           kernel_only: bool = False, materialise: bool = False) -> Report:
    con = trace.con
    t0, t1 = con.execute("select min(ts_ns), max(ts_ns + dur_ns) from events "
                         "where op != 'offcpu'").fetchone()
    ctx = Context(con=con, meta=trace.meta, targets=targets, thresholds=thresholds,
                  t0_ns=t0 or 0, t1_ns=t1 or 0)
    window = None
    if window_s is not None:
        if window_s[0] >= ctx.duration_s:
            raise IotraceError(f"--window {window_s[0]:g}:... starts after the trace ends "
                               f"({ctx.duration_s:.1f} s): give a START below that",
                               EXIT_USAGE)
        window = (ctx.t0_ns + int(window_s[0] * 1e9),
                  min(ctx.t0_ns + int(window_s[1] * 1e9), ctx.t1_ns))
    say("the training loop's waits")
    waits = analyse(con, thresholds["verdict"], ctx.t0_ns, ctx.t1_ns, window, loader_frame,
                    use_stacks=not kernel_only)
    ctx.memo["kernel_only"] = kernel_only
    ctx.memo["materialise"] = materialise       # views.derived_kind
    ctx.memo["stacks"] = waits.stacks       # what the analysis used: asked once
    ctx.window = waits.window
    ctx.loop_tids = tuple(lp.tid for lp in waits.loops)
    findings: list[Finding] = []
    errors: list[dict] = []
    ran = []
    todo = [r for r in rules if not only or r.id in only]
    for i, rule in enumerate(todo, 1):
        say(f"rule {i} of {len(todo)}: {rule.id}")
        try:
            findings.extend(rule.run(ctx))
            ran.append(rule.id)
        except Exception as e:  # noqa: BLE001 - one broken rule must not hide the others
            errors.append({"rule": rule.id, "error": f"{type(e).__name__}: {e}"})
    say("the verdict")
    verdict = make_verdict(ctx, waits)
    verdict["t0_ns"] = ctx.t0_ns
    apply_impact(ctx, waits, findings)
    from .checkpoint_burst import report_entry
    say("what would help")
    apply_savings(ctx, findings, verdict)
    # (after the savings: where the model fits, a finding's severity is its saving's)
    findings.sort(key=lambda f: (-severity_rank(f.severity), -(f.impact_s or 0)))
    return Report(trace=str(trace.root), targets=targets, verdict=verdict,
                  findings=findings, rules_run=ran, errors=errors, loop_states=waits.states,
                  checkpoints=[report_entry(b, bool(ctx.loop_tids)) for b in ctx.checkpoints],
                  whatif=whatif.analyse(verdict, trace.meta))
