"""The terminal report: verdict first, then findings by severity, each with
its evidence, top files and processes, and what to change. Fits 100 columns."""
from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .common import fmt_key, fmt_value, rel_time

COLOURS = {"high": "bold red", "warn": "yellow", "info": "cyan"}
STATUS = {"io-bound": "bold red", "meets-target": "bold green", "no-target": "bold",
          "no-io": "dim"}


def render_text(report, console: Console) -> None:
    v = report.verdict
    t0 = report.verdict.get("t0_ns", 0)
    console.print(Panel(Text(v["summary"], style=STATUS.get(v["status"], "")),
                        title=f"iotrace report: {report.trace}", title_align="left"))
    if not report.findings:
        console.print("[green]No findings: nothing in this trace crosses a threshold.[/green]")
    for f in report.findings:
        head = Text.assemble((f"[{f.severity.upper()}] ", COLOURS[f.severity]),
                             (f"{f.title}", "bold"), (f"  ({f.id})", "dim"))
        parts = [Text(f.summary)]
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
    for e in report.errors:
        console.print(f"[red]rule {e['rule']} failed:[/red] {e['error']}")
