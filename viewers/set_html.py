"""A trace set's report as one self-contained HTML page: the job's verdict,
a heat map of every node's read rate over time on the set's common axis
(a straggler shows as the row that reads slowly for longer), the job's
throughput, the nodes, the stragglers, the checkpoints aligned across nodes,
and each node's findings. Offline like the single-trace page (viewers/html.py,
whose styles and plotting helpers it shares)."""
from __future__ import annotations

import numpy as np

from iotrace.analyzers.cluster import straggler_cost
from iotrace.analyzers.rates import human_bytes, human_rate

from .common import pct as _pct
from .html import (CSS, READ_COLOUR, STATUS, WIDE_IN, WRITE_COLOUR, _figure, _inline_svg,
                   _scale, _svg_text, _version, e)

MAX_BINS = 300          # time columns of the heat map, at most
EXTRA_CSS = """
tr.straggler td:first-child { color: var(--high); font-weight: 700; }
"""


def render_set_html(rep) -> str:
    v = rep.verdict
    label, cls = STATUS.get(v.get("status"), (v.get("status", "?"), "neutral"))
    strag = {s["host"] for s in rep.stragglers}
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>iotrace report: {e(rep.root)} ({len(rep.nodes)} nodes, {e(label)})</title>",
           f"<style>{CSS}{EXTRA_CSS}</style>", "</head>", "<body>", "<main>",
           "<header>", f"<h1>iotrace report: {len(rep.nodes)} nodes</h1>",
           f'<div class="sub mono">{e(rep.root)}</div>', "</header>",
           f'<section class="card verdict {cls}" id="verdict">',
           f'<span class="status">{e(label)}</span>',
           f'<p class="summary">{e(v.get("summary"))}</p>', '<dl class="kpis">']
    kpis = [("Nodes", str(v.get("nodes"))),
            ("AU, mean", _pct(v.get("accelerator_utilization"))),
            ("AU, lowest node", _pct(v.get("accelerator_utilization_min"))),
            ("Job read rate", human_rate(v.get("read_bytes_per_s") or 0)),
            ("Job write rate", human_rate(v.get("write_bytes_per_s") or 0))]
    if v.get("read_target_ratio") is not None:
        kpis.append(("Share of target", _pct(v["read_target_ratio"])))
    if v.get("checkpoint_time_s") is not None:
        kpis.append(("Checkpoint time", f"{v['checkpoint_time_s']:.2f} s"))
    bound = rep.clock.get("error_bound_ns")
    kpis.append(("Clocks aligned", f"±{bound / 1e6:.1f} ms" if bound is not None
                 else "not all synchronised"))
    out += [f"<div><dt>{e(k)}</dt><dd>{e(x)}</dd></div>" for k, x in kpis]
    out += ["</dl>", "</section>"]

    out += ['<section class="card" id="plots"><h2>Read rate per node over time</h2>',
            '<div class="plots">',
            f'<figure class="wide">{_heat_map(rep, strag)}<figcaption>Each row a node '
            "(stragglers in red), each column a time bin on the set's common axis; colour: "
            "bytes read per second.</figcaption></figure>",
            f'<figure class="wide">{_job_rates(rep)}<figcaption>The whole job: read and '
            "write bytes per second, all nodes together.</figcaption></figure>",
            "</div></section>"]

    out += ['<section class="card" id="nodes"><h2>Nodes</h2><table><tr>'
            + "".join(f"<th{' class=num' if n else ''}>{e(h)}</th>" for h, n in (
                ("node", 0), ("status", 0), ("AU", 1), ("data wait", 1), ("read", 1),
                ("write", 1), ("stalled on", 0), ("top finding", 0))) + "</tr>"]
    for n in rep.nodes:
        f = n["top_finding"]
        out.append(f'<tr class="{"straggler" if n["host"] in strag else ""}">'
                   f'<td class="mono">{e(n["host"])}</td><td>{e(n["status"])}</td>'
                   f'<td class="num">{_pct(n["accelerator_utilization"])}</td>'
                   f'<td class="num">{_pct(n["data_wait_share"])}</td>'
                   f'<td class="num">{e(human_rate(n["read_bytes_per_s"]))}</td>'
                   f'<td class="num">{e(human_rate(n["write_bytes_per_s"]))}</td>'
                   f'<td>{e(n["stall_top"] or "-")}</td>'
                   f'<td>{e(f["id"] + ": " + f["title"]) if f else "-"}</td></tr>')
    out.append("</table></section>")

    for s in rep.stragglers:
        out.append(f'<section class="card finding high"><header><span class="sev high">'
                   f'STRAGGLER</span><h3 class="mono">{e(s["host"])}</h3></header>'
                   f'<p class="summary">{e(s["reason"])}. {e(straggler_cost(s))}.</p>'
                   '</section>')

    if rep.checkpoints:
        out.append('<section class="card" id="checkpoints"><h2>Checkpoints across nodes</h2>'
                   "<p class=osum>The slowest node's part is the job's checkpoint time: the "
                   "other ranks wait for it at the next collective.</p><table><tr>"
                   + "".join(f"<th class=num>{h}</th>" for h in ("at", "nodes", "bytes",
                                                                  "job time")) +
                   "<th>slowest node</th><th class=num>its time</th>"
                   "<th class=num>median node</th></tr>")
        for c in rep.checkpoints:
            s = c["slowest"]
            who = s["host"] + (f" (rank {s['rank']})" if s["rank"] is not None else "")
            out.append(f'<tr><td class="num">{c["t_s"]:.1f} s</td><td class="num">{c["nodes"]}'
                       f'</td><td class="num">{e(human_bytes(c["bytes"]))}</td>'
                       f'<td class="num">{c["job_duration_s"]:.2f} s</td><td>{e(who)}</td>'
                       f'<td class="num">{s["duration_s"]:.2f} s</td>'
                       f'<td class="num">{c["median_duration_s"]:.2f} s</td></tr>')
        out.append("</table></section>")

    out.append('<section class="card" id="findings"><h2>Findings per node</h2>')
    shown = 0
    for host, r in rep.reports.items():
        fs = [f for f in r["findings"] if f["severity"] != "info"]
        if not fs:
            continue
        shown += 1
        out.append(f'<h3 class="mono">{e(host)}</h3><ul class="overview">')
        out += [f'<li><span class="sev {f["severity"]}">{e(f["severity"].upper())}</span>'
                f'<span><b>{e(f["title"])}</b> <span class="fid">({e(f["id"])})</span>'
                f'<br><span class="osum">{e(f["summary"])}</span></span></li>' for f in fs]
        out.append("</ul>")
    if not shown:
        out.append('<p class="none">No node has a finding above info.</p>')
    out.append("<p class=osum>One node's whole report: <code>iotrace report SET/host=NAME "
               "--format html</code>.</p></section>")
    out.append(f"<footer>Engine: {e(rep.engine)}. Generated by iotrace {e(_version())}; "
               "self-contained, works offline.</footer>")
    out += ["</main>", "</body>", "</html>"]
    return "\n".join(out) + "\n"


def _bins(rep) -> tuple[int, int]:
    """(seconds per column, columns) for the set's timeline."""
    span = (rep.timeline[-1]["t_s"] + 1) if rep.timeline else 1
    per = max(1, -(-span // MAX_BINS))
    return per, -(-span // per)


def _heat_map(rep, strag: set) -> str:
    hosts = [n["host"] for n in rep.nodes]
    if not rep.timeline or not hosts:
        return '<div class="empty">No reads or writes in the set.</div>'
    per, cols = _bins(rep)
    row = {h: i for i, h in enumerate(hosts)}
    m = np.zeros((len(hosts), cols))
    for t in rep.timeline:
        for h, b in t["read_by_host"].items():
            if h in row:
                m[row[h], t["t_s"] // per] += b / per
    k, unit = _scale(m.max() or 1, per_s=True)
    h_in = min(0.9 + 0.28 * len(hosts), 12.0)
    fig, (ax,) = _figure(WIDE_IN, h_in)
    im = ax.imshow(m / k, aspect="auto", interpolation="nearest", cmap="viridis",
                   extent=(0, cols * per, len(hosts) - 0.5, -0.5))
    if len(hosts) <= 64:
        ax.set_yticks(range(len(hosts)), labels=hosts, fontsize=7)
        for lab in ax.get_yticklabels():
            if lab.get_text() in strag:
                lab.set_color("#c62828")
                lab.set_fontweight("bold")
    ax.set_xlabel("seconds on the set's axis")
    fig.colorbar(im, ax=ax, pad=0.01, fraction=0.04).set_label(f"read {unit}")
    label = "heat map of read rate per node over time: " + ", ".join(
        f"{h}{' (straggler)' if h in strag else ''}" for h in hosts[:64])
    return _inline_svg(_svg_text(fig), "heat", label)


def _job_rates(rep) -> str:
    if not rep.timeline:
        return '<div class="empty">No reads or writes in the set.</div>'
    # one value per second, held to the second's end
    t = np.array([x["t_s"] for x in rep.timeline] + [rep.timeline[-1]["t_s"] + 1])
    r = np.array([x["read_bytes_per_s"] for x in rep.timeline], dtype=float)
    w = np.array([x["write_bytes_per_s"] for x in rep.timeline], dtype=float)
    r, w = np.append(r, r[-1]), np.append(w, w[-1])
    k, unit = _scale(max(r.max(), w.max()) or 1, per_s=True)
    fig, (ax,) = _figure(WIDE_IN, 2.6)
    ax.step(t, r / k, where="post", color=READ_COLOUR, label="read")
    ax.step(t, w / k, where="post", color=WRITE_COLOUR, label="write")
    target = rep.verdict.get("read_target_bytes_per_s")
    if target:
        ax.axhline(target / k, color="#c62828", linestyle="--", label="read target (job)")
    ax.set_ylabel(unit)
    ax.set_xlabel("seconds on the set's axis")
    ax.legend(loc="upper right", fontsize=8, frameon=False)
    return _inline_svg(_svg_text(fig), "job", "the job's read and write rate over time")
