"""The terminal report: the verdict and the loop's time budget first, then
the findings ranked by what they cost the loop, each in a few lines (what,
the evidence in words, what to change, what it would save). `verbose` adds
every finding's evidence, files and processes. Fits 100 columns."""
from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .common import fmt_key, fmt_value, rel_time
from iotrace.analyzers.rates import human_s

COLOURS = {"high": "bold red", "warn": "yellow", "info": "cyan"}
STATUS = {"io-bound": "bold red", "not-io-bound": "bold green", "unknown": "bold",
          "no-io": "dim"}


def render_text(report, console: Console, verbose: bool = False) -> None:
    v = report.verdict
    t0 = report.verdict.get("t0_ns", 0)
    head = [Text(v["summary"], style=STATUS.get(v["status"], ""))]
    if v.get("budget_line"):
        head.append(Text(v["budget_line"]))
    for what in v.get("needs_full_trace", []):     # a profile: what it cannot answer
        head.append(Text(f"needs a full trace: {what}", style="dim"))
    w = v.get("training_window") or {}
    if w.get("source") in ("detected", "option"):
        head.append(Text(f"window {w['start_s']:.1f}-{w['end_s']:.1f} s of the trace"
                         + (" (detected; --window START:END overrides)"
                            if w["source"] == "detected" else " (--window)"), style="dim"))
    console.print(Panel(Group(*head), title=f"iotrace report: {report.trace}",
                        title_align="left"))
    _whatif(report, console)
    if not report.findings:
        console.print("[green]No findings: nothing in this trace crosses a threshold.[/green]")
    shown = report.findings if verbose else [f for f in report.findings if f.severity != "info"]
    for f in shown:
        head = Text.assemble((f"[{f.severity.upper()}] ", COLOURS[f.severity]),
                             (f"{f.title}", "bold"), (f"  ({f.id})", "dim"))
        parts = [Text(f.summary)]
        if not verbose:
            parts.append(Text.assemble(("what to change: ", "bold"), f.recommendation))
            if f.saving_s and f.saving_basis == "model":
                parts.append(Text(f"would save about {human_s(f.saving_s)} of the loop's time "
                                  f"(what-if model: {f.saving_change})", style="dim"))
            elif f.saving_s:
                parts.append(Text(f"would save up to {human_s(f.saving_s)} of the loop's time",
                                  style="dim"))
            console.print(Panel(Group(*parts), title=head, title_align="left",
                                border_style=COLOURS[f.severity]))
            continue
        ev = Table.grid(padding=(0, 2))
        ev.add_column(style="dim")
        ev.add_column()
        for k, val in f.evidence.items():
            ev.add_row(fmt_key(k), fmt_value(k, val))
        parts.append(ev)
        if f.files:
            ft = Table(box=None, pad_edge=False, header_style="bold")
            ft.add_column("file", overflow="fold", max_width=64)
            extra = [k for k in f.files[0] if k not in ("path",)]
            for k in extra:
                ft.add_column(fmt_key(k), justify="right")
            for row in f.files[:5]:
                ft.add_row(row.get("path") or "?", *[fmt_value(k, row.get(k)) for k in extra])
            parts.append(ft)
        if f.processes:
            pt = Table(box=None, pad_edge=False, header_style="bold")
            pt.add_column("pid", justify="right")
            pt.add_column("process", overflow="ellipsis", max_width=40, no_wrap=True)
            extra = [k for k in f.processes[0] if k not in ("pid", "cmdline")]
            for k in extra:
                pt.add_column(fmt_key(k), justify="right")
            for row in f.processes[:5]:
                pt.add_row(str(row["pid"]), row.get("cmdline") or "",
                           *[fmt_value(k, row.get(k)) for k in extra])
            parts.append(pt)
        if f.examples:
            parts.append(Text("examples: " + "; ".join(
                f"{rel_time(e['ts_ns'], t0)} {e.get('what', '')}" for e in f.examples[:3]),
                style="dim"))
        parts.append(Text.assemble(("what to change: ", "bold"), f.recommendation))
        console.print(Panel(Group(*parts), title=head, title_align="left",
                            border_style=COLOURS[f.severity]))
    hidden = len(report.findings) - len(shown)
    if hidden:
        console.print(f"[dim]{hidden} finding(s) that cost the loop under 2% not shown; "
                      "--verbose shows them and every finding's evidence.[/dim]")
    for e in report.errors:
        console.print(f"[red]rule {e['rule']} failed:[/red] {e['error']}")


def _whatif(report, console: Console, top: int = 3) -> None:
    """The changes the model predicts to help most (at least 2 AU points),
    against the model's own AU for the configuration traced."""
    w = getattr(report, "whatif", None) or {}
    b = w.get("baseline")
    if not b or b.get("model_au") is None:
        return
    ref = b["model_au"]
    gains = sorted((e for e in w["whatif"] if e.get("predicted_au") is not None
                    and e["predicted_au"] - ref >= 0.02 and e["settings"].get("compute") is None),
                   key=lambda e: -e["predicted_au"])[:top]
    if not gains:
        return
    lines = [Text(f"{e['scenario']}: AU {ref:.0%} -> {e['predicted_au']:.0%}, then limited by "
                  f"{e['limited_by']}") for e in gains]
    lines.append(Text(f"(the model of this pipeline puts it at {ref:.0%}"
                      + (", roughly" if b["rough"] else "")
                      + "; `iotrace whatif` for every scenario and --set for yours)", style="dim"))
    console.print(Panel(Group(*lines), title="what would help (predicted)", title_align="left"))
