"""The report as Markdown, for pasting into an issue tracker."""
from __future__ import annotations

from . import whatif_view
from .common import fmt_key, fmt_value, rel_time

ICONS = {"high": "🔴", "warn": "🟡", "info": "🔵"}


def _table(rows: list[dict], first: str) -> list[str]:
    keys = [first] + [k for k in rows[0] if k not in (first, "cmdline")]
    if "cmdline" in rows[0]:
        keys.insert(1, "cmdline")
    out = ["| " + " | ".join(fmt_key(k) for k in keys) + " |",
           "|" + "---|" * len(keys)]
    for r in rows[:5]:
        cells = [str(r.get(k) if k in (first, "cmdline") else fmt_value(k, r.get(k)))
                 .replace("|", "\\|") for k in keys]
        out.append("| " + " | ".join(cells) + " |")
    return out


def render_markdown(report) -> str:
    v = report.verdict
    t0 = v.get("t0_ns", 0)
    lines = [f"## iotrace report: `{report.trace}`", "", f"**Verdict:** {v['summary']}", ""]
    if not report.findings:
        lines.append("No findings: nothing in this trace crosses a threshold.")
    for f in report.findings:
        lines += [f"### {ICONS[f.severity]} {f.severity.upper()}: {f.title} (`{f.id}`)", "",
                  f.summary, "", "| evidence | value |", "|---|---|"]
        lines += [f"| {fmt_key(k)} | {fmt_value(k, val)} |" for k, val in f.evidence.items()]
        lines.append("")
        if f.files:
            lines += _table(f.files, "path") + [""]
        if f.processes:
            lines += _table(f.processes, "pid") + [""]
        if f.examples:
            lines.append("Examples: " + "; ".join(
                f"`{rel_time(e['ts_ns'], t0)}` {e.get('what', '')}" for e in f.examples[:3]))
            lines.append("")
        lines += [f"**What to change:** {f.recommendation}", ""]
    lines += whatif_view.render_markdown(getattr(report, "whatif", None) or {})
    for e in report.errors:
        lines.append(f"> rule `{e['rule']}` failed: {e['error']}")
    return "\n".join(lines) + "\n"
