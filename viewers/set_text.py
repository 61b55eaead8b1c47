"""The terminal report of a trace set: the job's verdict, a table of nodes,
the stragglers, then each node's findings that are not info, in one line each
(`iotrace report SET/host=NAME` gives a node's whole report)."""
from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from iotrace.analyzers.cluster import straggler_cost
from iotrace.analyzers.rates import human_bytes, human_rate

from .common import pct as _pct
from .text import COLOURS, STATUS


def render_set_text(rep, console: Console) -> None:
    v = rep.verdict
    head = [Text(v["summary"], style=STATUS.get(v["status"], ""))]
    bound = rep.clock.get("error_bound_ns")
    head.append(Text("hosts' clocks: " + (f"aligned within ±{bound / 1e6:.1f} ms"
                                          if bound is not None else
                                          "not all synchronised (NTP/PTP): cross-node times "
                                          "are as good as the hosts' clocks"), style="dim"))
    console.print(Panel(Group(*head), title=f"iotrace report: {rep.root} ({len(rep.nodes)} nodes)",
                        title_align="left"))
    t = Table(header_style="bold", box=None, pad_edge=False)
    for col, just in (("node", "left"), ("status", "left"), ("AU", "right"),
                      ("data wait", "right"), ("read", "right"), ("write", "right"),
                      ("stalled on", "left"), ("top finding", "left")):
        t.add_column(col, justify=just, overflow="fold")
    strag = {s["host"] for s in rep.stragglers}
    for n in rep.nodes:
        f = n["top_finding"]
        t.add_row(Text(n["host"] + (" *" if n["host"] in strag else ""),
                       style="bold red" if n["host"] in strag else ""),
                  Text(n["status"] or "-", style=STATUS.get(n["status"], "")),
                  _pct(n["accelerator_utilization"]), _pct(n["data_wait_share"]),
                  human_rate(n["read_bytes_per_s"]), human_rate(n["write_bytes_per_s"]),
                  n["stall_top"] or "-",
                  Text(f"{f['id']}", style=COLOURS.get(f["severity"], "")) if f else "-")
    console.print(t)
    for s in rep.stragglers:
        console.print(Panel(Text(f"{s['reason']}. {straggler_cost(s)}."),
                            title=Text(f"[STRAGGLER] {s['host']}", style="bold red"),
                            title_align="left", border_style="red"))
    per_gpu = rep.targets.per_gpu_bps
    if per_gpu:
        rk = Table(title=f"ranks against the {human_rate(per_gpu)} per-GPU target (one GPU a "
                         "rank), data read in the node's training window",
                   title_justify="left", header_style="bold", box=None, pad_edge=False)
        for col in ("node", "rank", "read", "of target", "data wait"):
            rk.add_column(col, justify="left" if col == "node" else "right")
        for n in rep.nodes:
            for r in n["ranks"]:
                if r["read_bytes_per_s"] is None:
                    continue
                ratio = r["per_gpu_target_ratio"]
                rk.add_row(n["host"], str(r["rank"]), human_rate(r["read_bytes_per_s"]),
                           Text(_pct(ratio), style="red" if ratio < 1 else "green"),
                           _pct(r["data_wait_share"]))
        console.print(rk)
    if rep.checkpoints:
        c = Table(title="checkpoints across nodes (the slowest node's part is the job's time)",
                  title_justify="left", header_style="bold", box=None, pad_edge=False)
        for col in ("at", "nodes", "bytes", "job time", "slowest node", "its time", "median"):
            c.add_column(col, justify="left" if col == "slowest node" else "right")
        for k in rep.checkpoints:
            s = k["slowest"]
            who = s["host"] + (f" (rank {s['rank']})" if s["rank"] is not None else "")
            c.add_row(f"{k['t_s']:.1f} s", str(k["nodes"]), human_bytes(k["bytes"]),
                      f"{k['job_duration_s']:.2f} s", who, f"{s['duration_s']:.2f} s",
                      f"{k['median_duration_s']:.2f} s")
        console.print(c)
    for host, r in rep.reports.items():
        shown = [f for f in r["findings"] if f["severity"] != "info"]
        if not shown:
            continue
        console.print(Text(host, style="bold"))
        for f in shown:
            console.print(Text.assemble(("  ", ""), (f"[{f['severity'].upper()}] ",
                                                     COLOURS[f["severity"]]), f["title"],
                                        (f"  ({f['id']})", "dim")))
    console.print(Text("One node's whole report: iotrace report SET/host=NAME", style="dim"))
