"""The report as one self-contained HTML page: verdict first, then the findings
by severity, then plots (throughput over time against the read target, request
sizes, read latency, file offsets over time).

The page works offline: no external URL, no web font, no script. The plots are
matplotlib figures (Agg-based canvases, no pyplot, so no global backend switch)
saved as SVG and inlined; their text is drawn as paths, so they look the same
without any font installed. Everything is aggregated in DuckDB (time bins,
log buckets, a hash-sampled scatter), so a trace of 10 M events renders in a
few seconds and the page stays a few hundred KB.
"""
from __future__ import annotations

import html
import io
import math
import re
import shlex
from datetime import datetime, timezone

from iotrace.analyzers.base import severity_rank
from iotrace.analyzers.rates import human_bytes, human_rate
from iotrace.analyzers.views import (DATA_FILE_IDS_SQL, IPC_SHM_RE, READ_OPS, WRITE_OPS,
                                     sql_list)
from iotrace.viewers.flamegraph import flame_svg

from . import whatif_view
from .common import fmt_key, fmt_value, rel_time

MAX_POINTS_PER_FILE = 20_000      # offset scatter: sample down to about this many per file
MAX_TIME_BINS = 300               # throughput plot: at most this many bins
SCATTER_FILES = 3                 # offset scatter: the top files by bytes read ...
MIN_SCATTER_SHARE = 0.01          # ... that have at least 1% of the top file's bytes
MIN_SCATTER_CALLS = 16            # ... and were read in at least this many calls (a file
                                  # read whole in 2 calls has no access pattern to show)

WIDE_IN = 11.0                    # width of the full-width plots, inches

READ_COLOUR = "#1f6fb4"
WRITE_COLOUR = "#e8770e"
TARGET_COLOUR = "#c62828"

STATUS = {"io-bound": ("I/O-bound", "bad"), "not-io-bound": ("Not I/O-bound", "good"),
          "unknown": ("No training loop found", "neutral"), "no-io": ("No I/O", "neutral")}

CSS = """
:root { color-scheme: light; --high: #c62828; --warn: #b25e00; --info: #1565c0;
        --good: #2e7d32; --ink: #1d2329; --dim: #5f6b76; --line: #dde3e9; --bg: #f6f8fa; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink); line-height: 1.45;
       font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue",
             Arial, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 20px 24px 40px; }
code, .mono { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, "DejaVu Sans Mono",
                          monospace; font-size: 0.92em; }
h1 { font-size: 1.5em; margin: 0 0 2px; }
h2 { font-size: 1.2em; margin: 28px 0 10px; }
h3 { font-size: 1.05em; margin: 0; }
h4 { font-size: 0.8em; text-transform: uppercase; letter-spacing: .04em; color: var(--dim);
     margin: 14px 0 4px; }
.sub { color: var(--dim); font-size: 0.9em; word-break: break-all; }
nav { margin: 10px 0 0; font-size: 0.9em; }
nav a { color: var(--info); text-decoration: none; margin-right: 14px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px;
        padding: 14px 18px; margin: 12px 0; }
.verdict { border-left: 6px solid var(--dim); }
.verdict.bad { border-left-color: var(--high); }
.verdict.good { border-left-color: var(--good); }
.verdict .status { display: inline-block; font-weight: 700; font-size: 0.8em;
                   text-transform: uppercase; letter-spacing: .05em; color: #fff;
                   background: var(--dim); border-radius: 4px; padding: 2px 8px; }
.verdict.bad .status { background: var(--high); }
.verdict.good .status { background: var(--good); }
.verdict .summary { font-size: 1.12em; margin: 8px 0 12px; }
.kpis { display: grid; grid-template-columns: repeat(auto-fill, minmax(165px, 1fr));
        gap: 8px; margin: 0; }
.kpis div { background: var(--bg); border-radius: 6px; padding: 6px 10px; }
.budget { margin: 12px 0 4px; }
.budget-title { color: var(--dim); font-size: 0.78em; margin-bottom: 4px; }
.budget-bar { display: flex; height: 22px; border-radius: 4px; overflow: hidden;
              border: 1px solid var(--line); }
.budget-bar span { display: block; height: 100%; }
.budget-legend { display: flex; flex-wrap: wrap; gap: 4px 14px; font-size: 0.82em;
                 margin-top: 5px; }
.budget-legend i { display: inline-block; width: 10px; height: 10px; border-radius: 2px;
                   margin-right: 5px; vertical-align: -1px; }
.kpis dt { color: var(--dim); font-size: 0.78em; }
.kpis dd { margin: 0; font-weight: 600; font-size: 1.05em; }
.kpis .bad dd { color: var(--high); }
.kpis .good dd { color: var(--good); }
.notes { margin: 10px 0 0; padding-left: 18px; color: var(--warn); font-size: 0.9em; }
.tracemeta { margin-top: 10px; color: var(--dim); font-size: 0.85em; }
.tracemeta span { margin-right: 16px; }
.counts span { display: inline-block; border-radius: 10px; padding: 1px 9px; margin-right: 6px;
               font-size: 0.85em; font-weight: 600; color: #fff; }
ul.overview { list-style: none; margin: 0; padding: 0; }
ul.overview li { display: flex; gap: 12px; align-items: baseline; padding: 7px 0;
                 border-bottom: 1px solid var(--line); }
ul.overview li:last-child { border-bottom: none; }
ul.overview .sev { flex: none; min-width: 52px; text-align: center; }
ul.overview a { color: var(--ink); font-weight: 600; text-decoration: none; }
ul.overview a:hover { text-decoration: underline; }
.osum { color: var(--dim); font-size: 0.9em; }
.finding { border-left: 6px solid var(--info); }
.finding.high { border-left-color: var(--high); }
.finding.warn { border-left-color: var(--warn); }
.finding header { display: flex; align-items: baseline; gap: 10px; flex-wrap: wrap; }
.sev { font-size: 0.72em; font-weight: 700; letter-spacing: .05em; color: #fff;
       border-radius: 4px; padding: 2px 7px; background: var(--info); }
.sev.high, .counts .high { background: var(--high); }
.sev.warn, .counts .warn { background: var(--warn); }
.sev.info, .counts .info { background: var(--info); }
.fid { color: var(--dim); }
.finding .summary { margin: 8px 0 4px; }
table { border-collapse: collapse; width: 100%; font-size: 0.88em; }
th, td { text-align: left; padding: 3px 8px 3px 0; border-bottom: 1px solid var(--line);
         vertical-align: top; }
th { color: var(--dim); font-weight: 600; }
td.num { text-align: right; white-space: nowrap; }
th.num { text-align: right; }
td.path { word-break: break-all; }
td.num, td.cmd { font-variant-numeric: tabular-nums; }
td.cmd { max-width: 1px; width: 60%; overflow: hidden; text-overflow: ellipsis;
         white-space: nowrap; }
dl.evidence { display: grid; grid-template-columns: repeat(auto-fill, minmax(250px, 1fr));
               gap: 0 28px; margin: 0; font-size: 0.88em; }
dl.evidence div { display: flex; justify-content: space-between; gap: 10px;
                  border-bottom: 1px solid var(--line); padding: 3px 0; }
dl.evidence dt { color: var(--dim); }
dl.evidence dd { margin: 0; text-align: right; white-space: nowrap;
                 font-variant-numeric: tabular-nums; }
dl.evidence div.long { grid-column: 1 / -1; justify-content: flex-start; }
dl.evidence div.long dt { flex: none; }
dl.evidence div.long dd { text-align: left; white-space: normal; }
ul.examples { margin: 0; padding-left: 18px; font-size: 0.9em; }
ul.examples .t { font-weight: 600; font-variant-numeric: tabular-nums; }
ul.examples .who { color: var(--dim); }
.rec { margin-top: 12px; background: #f1f7ee; border-radius: 6px; padding: 8px 12px; }
.rec b { color: var(--good); }
.none { color: var(--good); font-weight: 600; }
.errors { border-left: 6px solid var(--high); color: var(--high); }
.plots { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 0 16px; }
figure { margin: 0; }
figure.wide { grid-column: 1 / -1; }
figure svg { display: block; width: 100%; height: auto; }
figure svg * { stroke-linejoin: round; stroke-linecap: butt; }
figcaption { color: var(--dim); font-size: 0.85em; margin-top: 4px; }
.flames figure { margin-top: 10px; }
svg.flame text { fill: #1d2329; pointer-events: none; }
svg.flame rect:hover { stroke: #1d2329; stroke-width: 1; }
figure .empty { padding: 40px 0; text-align: center; color: var(--dim); }
footer { margin-top: 30px; color: var(--dim); font-size: 0.8em; }
@media (max-width: 760px) { .plots { grid-template-columns: minmax(0, 1fr); } }
@media print { body { background: #fff; } .card { break-inside: avoid; } }
"""


def e(value) -> str:
    """Escaped text for element content and attribute values."""
    return html.escape("" if value is None else str(value), quote=True)


# ---------------------------------------------------------------------------- page

def render_html(report, trace) -> str:
    """The report as one self-contained HTML page. `trace` is the trace the report
    was built from, opened afresh (the plots query its `events` and `files`)."""
    con = trace.con
    v = report.verdict
    t0 = v.get("t0_ns")
    first, t1 = con.execute("select min(ts_ns), max(ts_ns + dur_ns) from events").fetchone()
    if t0 is None:
        t0 = first or 0
    t1 = max(t1 or t0, t0)
    meta = getattr(trace, "meta", {}) or {}
    label, cls = STATUS.get(v.get("status"), (v.get("status", "?"), "neutral"))
    findings = sorted(report.findings, key=lambda f: -severity_rank(f.severity))

    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>iotrace report: {e(_short(str(report.trace), 60))} ({e(label)})</title>",
           f"<style>{CSS}</style>", "</head>", "<body>", "<main>",
           "<header>", "<h1>iotrace report</h1>",
           f'<div class="sub mono">{e(report.trace)}</div>',
           '<nav><a href="#verdict">Verdict</a>'
           f'<a href="#findings">Findings ({len(findings)})</a>'
           + ('<a href="#whatif">What would help</a>' if getattr(report, "whatif", None) else "")
           + '<a href="#plots">Plots</a>'
           + ('<a href="#details">Details</a>' if findings else "") + "</nav>",
           "</header>"]
    # verdict, the findings at a glance, the plots, then each finding in full
    anchors = _anchors(findings)
    out += _verdict(v, label, cls, meta)
    out += _flames(v)
    out += _overview(findings, anchors)
    out += whatif_view.render_html(getattr(report, "whatif", None) or {})
    if report.errors:
        out.append('<section class="card errors"><h3>Rules that failed</h3><ul>')
        out += [f"<li><code>{e(x.get('rule'))}</code>: {e(x.get('error'))}</li>"
                for x in report.errors]
        out.append("</ul></section>")
    out += _plots(con, report, t0, t1)
    out += _details(findings, anchors, t0, meta)
    out.append(f"<footer>Rules run: {e(', '.join(report.rules_run) or 'none')}. "
               f"Generated by iotrace {e(_version())}; self-contained, works offline."
               "</footer>")
    out += ["</main>", "</body>", "</html>"]
    return "\n".join(out) + "\n"


def _verdict(v, label, cls, meta) -> list[str]:
    target = v.get("read_target_bytes_per_s")
    ratio = v.get("read_target_ratio")
    kpis = [("Read average", human_rate(v.get("read_bytes_per_s", 0)), ""),
            ("Read target", human_rate(target) if target else "none given", "")]
    if ratio is not None:
        kpis.append(("Share of target", f"{ratio:.0%}", "good" if ratio >= 1 else "bad"))
    if v.get("accelerator_utilization") is not None:
        kpis.append(("AU estimate", f"{v['accelerator_utilization']:.0%}",
                     "good" if v["accelerator_utilization"] >= 0.9 else "bad"))
        kpis.append(("Data wait", f"{v['data_wait_share']:.0%} of the window", ""))
    if v.get("write_target_bytes_per_s"):
        kpis.append(("Write target", human_rate(v["write_target_bytes_per_s"]), ""))
    kpis += [("Bytes read", human_bytes(v.get("bytes_read", 0)), ""),
             ("Bytes written", human_bytes(v.get("bytes_written", 0)), ""),
             ("Duration", f"{v.get('duration_s', 0):.2f} s", "")]
    out = [f'<section id="verdict" class="card verdict {cls}">',
           f'<span class="status">{e(label)}</span>',
           f'<p class="summary">{e(v.get("summary", ""))}</p>', '<dl class="kpis">']
    out += [f'<div class="{c}"><dt>{e(k)}</dt><dd>{e(val)}</dd></div>' for k, val, c in kpis]
    out.append("</dl>")
    out += _budget_bar(v)
    notes = []
    if meta.get("drops"):
        notes.append(f"{meta['drops']:,} records were lost (ring buffer full): counts and "
                     "bytes are lower bounds; trace again with a larger --ringbuf-mb.")
    if meta.get("state") not in (None, "complete"):
        notes.append(f"The trace is {meta.get('state')}"
                     + (f": {meta['error']}" if meta.get("error") else "")
                     + "; totals are lower bounds.")
    if notes:
        out.append('<ul class="notes">' + "".join(f"<li>{e(n)}</li>" for n in notes) + "</ul>")
    info = []
    cmd = meta.get("command")
    if cmd:
        info.append(("command", shlex.join(cmd) if isinstance(cmd, list) else str(cmd)))
    elif meta.get("mode") == "attach":
        info.append(("attached to pid", meta.get("root_pid")))
    if meta.get("host"):
        info.append(("host", f"{meta['host']} ({meta.get('kernel', '?')})"))
    if meta.get("start_realtime_ns"):
        start = datetime.fromtimestamp(meta["start_realtime_ns"] / 1e9, tz=timezone.utc)
        info.append(("started", start.strftime("%Y-%m-%d %H:%M:%S UTC")))
    if meta.get("events") is not None:
        info.append(("events", f"{meta['events']:,}"))
    if info:
        out.append('<div class="tracemeta">' + "".join(
            f'<span>{e(k)}: <span class="mono">{e(val)}</span></span>' for k, val in info)
            + "</div>")
    out.append("</section>")
    return out


def _flames(v) -> list[str]:
    """Flame graphs of what ran on CPU while the loop waited for data (from
    its Python stacks): the loop inside its loader's next(), and its
    producers; one card per loop that has either."""
    out = []
    for lp in (v.get("loops") or [])[:4]:
        figs = []
        for key, what in (("loop_cpu_stacks", "The loop on CPU inside its loader's next()"),
                          ("prep_stacks", "Its producers on CPU while it waited")):
            fold = lp.get(key) or {}
            svg = flame_svg(fold, what)
            if svg:
                figs.append(f'<figure class="wide">{svg}<figcaption>{e(what)}: '
                            f'{fold["samples"]:,} samples of Python stacks, the outermost '
                            "frame at the top, each frame as wide as its share; hover a "
                            "frame for its numbers.</figcaption></figure>")
        if figs:
            who = f"thread {lp.get('tid')} '{lp.get('thread', '')}' of pid {lp.get('pid')}"
            out += [f'<section class="card flames"><h3>Where the data wait went: {e(who)}</h3>',
                    *figs, "</section>"]
    return out


def _budget_bar(v) -> list[str]:
    """The loop's time budget over the training window as one stacked bar:
    compute, the data wait by what the producers were doing, checkpoint, other;
    each part's share in its label."""
    b = v.get("time_budget_s") or {}
    win = b.get("window") or 0.0
    if win <= 0:
        return []
    parts = [("compute", b.get("compute", 0.0), STATE_COLOURS["compute"])]
    wait = b.get("data_wait", 0.0)
    stall = v.get("stall") or {}
    tot = sum(stall.values())
    for k, x in sorted(stall.items(), key=lambda kv: -kv[1]):
        if x > 0 and tot > 0:
            parts.append((f"data wait: {k.replace('_', '-')}", wait * x / tot,
                          STATE_COLOURS.get(f"data wait: {k}", "#555")))
    if wait > 0 and tot <= 0:
        parts.append(("data wait", wait, STATE_COLOURS["data wait: fetch"]))
    parts += [("checkpoint", b.get("checkpoint", 0.0), STATE_COLOURS["checkpoint"]),
              ("other", b.get("other", 0.0), "#9e9e9e")]
    parts = [(k, x / win, c) for k, x, c in parts if x / win >= 0.001]
    bar = "".join(f'<span style="width:{x * 100:.2f}%;background:{c}" '
                  f'title="{e(k)} {x:.1%}"></span>' for k, x, c in parts)
    legend = "".join(f'<span><i style="background:{c}"></i>{e(k)} {x:.0%}</span>'
                     for k, x, c in parts)
    return [f'<div class="budget"><div class="budget-title">Time budget of the loop over '
            f'{win:.1f} s</div><div class="budget-bar">{bar}</div>'
            f'<div class="budget-legend">{legend}</div></div>']


def _anchors(findings) -> list[str]:
    """A unique element id per finding (one rule may report twice: reads and writes)."""
    seen: dict[str, int] = {}
    out = []
    for f in findings:
        seen[f.id] = seen.get(f.id, 0) + 1
        out.append(f"finding-{f.id}" + (f"-{seen[f.id]}" if seen[f.id] > 1 else ""))
    return out


def _overview(findings, anchors) -> list[str]:
    out = ['<section id="findings">', "<h2>Findings</h2>"]
    if not findings:
        out.append('<div class="card"><span class="none">No findings:</span> nothing in this '
                   "trace crosses a threshold.</div></section>")
        return out
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.severity] = counts.get(f.severity, 0) + 1
    out.append('<div class="counts">' + "".join(
        f'<span class="{e(s)}">{n} {e(s)}</span>' for s, n in counts.items()) + "</div>")
    out.append('<div class="card"><ul class="overview">')
    for f, anchor in zip(findings, anchors):
        out.append(f'<li><span class="sev {e(f.severity)}">{e(f.severity.upper())}</span>'
                   f'<div><a href="#{e(anchor)}">{e(f.title)}</a> <code class="fid">'
                   f"{e(f.id)}</code><div class=\"osum\">{e(f.summary)}</div></div></li>")
    out += ["</ul></div>", "</section>"]
    return out


def _details(findings, anchors, t0, meta) -> list[str]:
    if not findings:
        return []
    out = ['<section id="details">', "<h2>Findings in detail</h2>"]
    for f, anchor in zip(findings, anchors):
        out.append(f'<article class="card finding {e(f.severity)}" id="{e(anchor)}">')
        out.append(f'<header><span class="sev {e(f.severity)}">{e(f.severity.upper())}</span>'
                   f"<h3>{e(f.title)}</h3><code class=\"fid\">{e(f.id)}</code></header>")
        out.append(f'<p class="summary">{e(f.summary)}</p>')
        if f.evidence:
            out += ["<h4>Evidence</h4>", '<dl class="evidence">']
            for k, val in f.evidence.items():
                text = fmt_value(k, val)
                wide = ' class="long"' if len(text) > 28 else ""
                out.append(f"<div{wide}><dt>{e(fmt_key(k))}</dt><dd>{e(text)}</dd></div>")
            out.append("</dl>")
        if f.files:
            out += ["<h4>Top files</h4>"] + _table(f.files, "path")
        if f.processes:
            out += ["<h4>Top processes</h4>"] + _table(f.processes, "pid")
        if f.examples:
            out += ["<h4>Examples</h4>", '<ul class="examples">']
            for x in f.examples[:5]:
                ts = x.get("ts_ns")
                when = rel_time(ts, t0) if ts is not None else ""
                who = ", ".join(f"{k} {x[k]}" for k in ("pid", "tid") if x.get(k) is not None)
                out.append(f'<li><span class="t" title="{e(_wall(ts, meta))}">{e(when)}</span> '
                           f"{e(x.get('what', ''))}"
                           + (f' <span class="who">({e(who)})</span>' if who else "") + "</li>")
            out.append("</ul>")
        out.append(f'<div class="rec"><b>What to change:</b> {e(f.recommendation)}</div>')
        out.append("</article>")
    out.append("</section>")
    return out


def _table(rows: list[dict], first: str) -> list[str]:
    keys = [first] + [k for k in rows[0] if k not in (first, "cmdline")]
    if "cmdline" in rows[0]:
        keys.insert(1, "cmdline")
    head = "".join("<th>process</th>" if k == "cmdline" else "<th>path</th>" if k == "path"
                   else f'<th class="num">{e(fmt_key(k))}</th>' for k in keys)
    out = ["<table>", f"<tr>{head}</tr>"]
    for r in rows[:10]:
        cells = []
        for k in keys:
            val = r.get(k)
            if k == "path":
                cells.append(f'<td class="path mono">{e(val if val is not None else "?")}</td>')
            elif k == "cmdline":
                cells.append(f'<td class="cmd mono" title="{e(val)}">{e(val)}</td>')
            elif k == "pid":
                cells.append(f'<td class="num">{e(val)}</td>')
            else:
                cells.append(f'<td class="num">{e(fmt_value(k, val))}</td>')
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return out


def _wall(ts_ns, meta) -> str:
    """Wall-clock time of a monotonic timestamp, when the trace has both clocks."""
    mono, real = meta.get("start_monotonic_ns"), meta.get("start_realtime_ns")
    if ts_ns is None or mono is None or real is None:
        return ""
    t = datetime.fromtimestamp((real + ts_ns - mono) / 1e9, tz=timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _short(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n // 2 - 1] + "…" + s[-(n // 2 - 1):]


def _version() -> str:
    try:
        import iotrace
        return iotrace.__version__
    except Exception:  # noqa: BLE001
        return "?"


# --------------------------------------------------------------------------- plots

def _plots(con, report, t0: int, t1: int) -> list[str]:
    import matplotlib
    rc = {"font.size": 9, "axes.titlesize": 10, "axes.titleweight": "bold",
          "axes.labelsize": 9, "legend.fontsize": 8, "xtick.labelsize": 8,
          "ytick.labelsize": 8, "axes.spines.top": False, "axes.spines.right": False,
          "axes.grid": True, "grid.color": "#e3e7eb", "grid.linewidth": 0.7,
          "axes.axisbelow": True, "svg.fonttype": "path", "svg.hashsalt": "iotrace",
          "axes.edgecolor": "#8a949e", "axes.titlelocation": "left"}
    plots = [("loop", "wide", _plot_loop,
              "What each training loop thread did over the training window (only): compute (grey), "
              "waiting for data (coloured by what its producers were doing then: fetch = "
              "blocked in reads, prep = on CPU, cpu-starved = runnable without a CPU, "
              "transfer = handing the batch over), and writing checkpoints."),
             ("throughput", "wide", _plot_throughput,
              "Bytes moved per time bin by reads and writes of data files (not code or "
              "libraries; a call's bytes are spread over the time it took), the training "
              "window shaded, against the read target."),
             ("sizes", "", _plot_sizes,
              "Share of read (write) calls of data files per requested size, in power-of-2 "
              "buckets (4K = 4 KiB up to 8 KiB); the legend has the number of calls."),
             ("latency", "", _plot_latency,
              "How long read calls took (entry to exit), in log-spaced buckets: a mode at "
              "microseconds is usually the page cache, milliseconds storage or the network."),
             ("offsets", "wide", _plot_offsets,
              "File offset of each read over time for the (up to 3) data files with the most "
              "bytes read: rising lines are sequential reads, a cloud is random access.")]
    out = ['<section id="plots">', "<h2>Plots</h2>", '<div class="plots">']
    with matplotlib.rc_context(rc):
        for name, width, fn, caption in plots:
            try:
                body = fn(con, report, t0, t1)
            except Exception as ex:  # noqa: BLE001 - a broken plot must not lose the report
                body = f"plot failed: {type(ex).__name__}: {ex}"
            if isinstance(body, _SVG):
                body = _inline_svg(body, f"p-{name}", caption)
            else:
                body = f'<div class="empty">{e(body)}</div>'
            out.append(f'<figure class="plot {width}" id="plot-{name}">{body}'
                       f"<figcaption>{e(caption)}</figcaption></figure>")
    out += ["</div>", "</section>"]
    return out


def _figure(w: float, h: float, rows: int = 1, top_in: float = 0.0):
    """A figure on an Agg canvas (no pyplot). Wide figures (the two time plots) get
    fixed margins in inches, so their time axes line up on the page; the others
    use constrained layout."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    if w < WIDE_IN:
        fig = Figure(figsize=(w, h), layout="constrained")
    else:
        fig = Figure(figsize=(w, h))
        fig.subplots_adjust(left=0.75 / w, right=1 - 0.15 / w, bottom=0.55 / h,
                            top=1 - (0.32 + top_in) / h, hspace=0.42 / 1.55)
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]
    return fig, axes


class _SVG(str):
    """A rendered plot (a plot function returns this, or a note saying why not)."""


def _svg_text(fig) -> _SVG:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", dpi=110, metadata={"Date": None})
    return _SVG(buf.getvalue())


def _inline_svg(svg: str, prefix: str, label: str) -> str:
    """matplotlib's SVG made fit to inline in HTML: no XML prologue, metadata or
    comments (comments hold the plot's text; namespaces and metadata hold URLs),
    ids prefixed so several plots on one page don't collide, scaled by CSS."""
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    svg = re.sub(r"<!--.*?-->", "", svg, flags=re.S)
    svg = re.sub(r"<defs>\s*<style[^>]*>.*?</style>\s*</defs>", "", svg, count=1, flags=re.S)
    head_end = svg.index(">")
    head = svg[:head_end]
    head = re.sub(r'\s(xmlns(:\w+)?|width|height|version)="[^"]*"', "", head)
    svg = head + f' role="img" aria-label="{e(label)}"' + svg[head_end:]
    svg = re.sub(r'\bid="([^"]+)"', rf'id="{prefix}-\1"', svg)
    svg = re.sub(r'\bhref="#([^"]+)"', rf'href="#{prefix}-\1"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}-\1)", svg)
    return re.sub(r">\s+<", "><", svg)


def _calls(reads_only: bool = False) -> str:
    """The rows of the `data_io` view (analyzers/views.py: read/write-family
    calls on regular files that are data, not code, libraries or system
    files: not the .pyc files an `import torch` reads, nor a pipe's 1-byte
    reads) straight from `events`, with `is_read` instead of `dir` and a
    semi-join on `files` instead of the join that brings `path`: on 10 M events
    that makes each scan 3-4x cheaper. Paths are looked up for the few rows shown."""
    ops = READ_OPS if reads_only else READ_OPS + WRITE_OPS
    return f"""(select ts_ns, dur_ns, tid, "offset" as off, req_bytes,
                       greatest(ret, 0) as nbytes, file_id,
                       op in {sql_list(READ_OPS)} as is_read
                from events where op in {sql_list(ops)} and file_id >= 0
                  and fd_kind = 'file' and file_id in ({DATA_FILE_IDS_SQL})
                  and file_id not in (select file_id from files
                                      where regexp_matches(coalesce(path, ''), '{IPC_SHM_RE}')))"""


def _nice_bin_ns(span_ns: int) -> int:
    """A 1-2-5 bin width from 1 ms up, giving at most MAX_TIME_BINS bins."""
    width = 10**6
    steps = [1, 2, 5]
    k = 0
    while span_ns / width > MAX_TIME_BINS:
        k += 1
        width = steps[k % 3] * 10 ** (6 + k // 3)
    return width


def _scale(maxval: float, per_s: bool = False) -> tuple[float, str]:
    """A binary unit for an axis whose values reach maxval."""
    for i, unit in enumerate(("B", "KiB", "MiB", "GiB", "TiB")):
        if maxval < 1024 ** (i + 1) or unit == "TiB":
            return float(1024 ** i), unit + ("/s" if per_s else "")
    return 1.0, "B"


def _size_label(k: int) -> str:
    if k < 0:
        return "0"
    for shift, suffix in ((40, "T"), (30, "G"), (20, "M"), (10, "K")):
        if k >= shift:
            return f"{1 << (k - shift)}{suffix}"
    return str(1 << k)


def _dur_label(ns: float) -> str:
    for div, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if ns >= div:
            return f"{ns / div:g} {unit}"
    return f"{ns:g} ns"


STATE_COLOURS = {"compute": "#d5dbe1", "data wait: fetch": "#c62828",
                 "data wait: prep": "#e8770e", "data wait: cpu_starved": "#8e24aa",
                 "data wait: transfer": "#1f6fb4", "data wait: other": "#6d4c41",
                 "checkpoint": "#2e7d32"}
MAX_LOOP_ROWS = 8


def _plot_loop(con, report, t0: int, t1: int) -> str:
    from .loop_timeline import segments
    states = getattr(report, "loop_states", None) or []
    win = report.verdict.get("training_window") or {}
    if not states or win.get("start_ns") is None:
        return report.verdict.get("reason") or "No training loop was found in this trace."
    lo, hi = int(win["start_ns"]), int(win["end_ns"])
    rows = states[:MAX_LOOP_ROWS]
    fig, (ax,) = _figure(WIDE_IN, max(2.6, 1.1 + 0.42 * len(rows)))
    # states shorter than a pixel's worth of time are merged with their neighbour
    # of the same kind: an SVG of 10,000 steps stays small and looks the same
    px = max((hi - lo) / 1500, 1)
    seen = set()
    for row, st in enumerate(rows):
        bars: dict[str, list] = {}
        for seg in segments(st, lo, hi):
            if seg.state == "compute":
                continue
            b = bars.setdefault(seg.label, [])
            x, w = (seg.start_ns - t0) / 1e9, (seg.end_ns - seg.start_ns) / 1e9
            if b and x - (b[-1][0] + b[-1][1]) < px / 1e9:
                b[-1] = (b[-1][0], x + w - b[-1][0])
            else:
                b.append((x, w))
        ax.broken_barh([((lo - t0) / 1e9, (hi - lo) / 1e9)], (row - 0.35, 0.7),
                       color=STATE_COLOURS["compute"], lw=0,
                       label=None if "compute" in seen else "compute")
        seen.add("compute")
        for label, b in bars.items():
            ax.broken_barh(b, (row - 0.35, 0.7), color=STATE_COLOURS.get(label, "#555"), lw=0,
                           label=None if label in seen else label.replace("_", "-"))
            seen.add(label)
    ax.set_yticks(range(len(rows)), [f"tid {st.tid}" for st in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    pad = (hi - lo) * 0.01
    ax.set_xlim((lo - pad - t0) / 1e9, (hi + pad - t0) / 1e9)     # the training window
    ax.grid(axis="y", visible=False)
    ax.set_xlabel("time since start of trace (s)")
    more = f" (first {MAX_LOOP_ROWS} of {len(states)})" if len(states) > MAX_LOOP_ROWS else ""
    who = f" ({rows[0].name})" if len(rows) == 1 and rows[0].name else ""
    ax.set_title(f"Training loop{'s' if len(rows) > 1 else ''}{more}{who} over the training "
                 "window")
    ax.legend(loc="lower right", bbox_to_anchor=(1, 1), frameon=False, ncols=4,
              borderaxespad=0.2)
    return _svg_text(fig)


def _plot_throughput(con, report, t0: int, t1: int) -> str:
    import numpy as np
    span = max(t1 - t0, 1)
    w = _nice_bin_ns(span)
    nbins = max(1, math.ceil(span / w))
    rows = con.execute(f"""
        with c as (select is_read, ts_ns - {t0} as s, ts_ns + dur_ns - {t0} as e, nbytes
                   from {_calls()} where nbytes > 0),
        one as (select is_read, s // {w} as b, sum(nbytes)::double as nb from c
                where s // {w} = e // {w} group by all),
        multi as (select is_read, b,
                         sum(nbytes * (least(e, (b + 1) * {w}) - greatest(s, b * {w}))
                             ::double / (e - s)) as nb
                  from (select is_read, s, e, nbytes, unnest(range(s // {w}, e // {w} + 1)) as b
                        from c where s // {w} <> e // {w})
                  group by all)
        select is_read, b, sum(nb) from (select * from one union all select * from multi)
        group by all""").fetchall()
    if not rows:
        return "No file reads or writes in this trace."
    series = {"read": np.zeros(nbins), "write": np.zeros(nbins)}
    for is_read, b, nb in rows:
        series["read" if is_read else "write"][min(max(int(b), 0), nbins - 1)] += float(nb)
    rate = {d: s * (1e9 / w) for d, s in series.items()}
    edges = np.arange(nbins + 1) * (w / 1e9)
    target = report.targets.read_bps
    avg = report.verdict.get("read_bytes_per_s")
    win = report.verdict.get("training_window") or {}
    top = max(float(rate["read"].max()), float(rate["write"].max()), target or 0)
    div, unit = _scale(top, per_s=True)
    fig, (ax,) = _figure(WIDE_IN, 3.4)
    for d, colour in (("read", READ_COLOUR), ("write", WRITE_COLOUR)):
        if rate[d].any():
            ax.stairs(rate[d] / div, edges, fill=True, color=colour, alpha=0.18, lw=0)
            ax.stairs(rate[d] / div, edges, color=colour, lw=1.3, label=d)
    if win.get("start_ns") is not None and report.verdict.get("loops"):
        ax.axvspan((win["start_ns"] - t0) / 1e9, (win["end_ns"] - t0) / 1e9,
                   color="#8a949e", alpha=0.08, lw=0, label="training window")
    if avg and rate["read"].any():
        # the verdict's: the dataset's bytes while it was read in the training window
        ax.axhline(avg / div, color=READ_COLOUR, ls=":", lw=1.2,
                   label=f"read average in the window {human_rate(avg)}")
    if target:
        ax.axhline(target / div, color=TARGET_COLOUR, ls="--", lw=1.6,
                   label=f"read target {human_rate(target)}")
    ax.set_xlim(0, edges[-1])
    ax.set_ylim(0, top / div * 1.12 or 1)
    ax.set_xlabel("time since start of trace (s)")
    ax.set_ylabel(unit)
    ax.set_title(f"Throughput over time ({_dur_label(w)} bins)")
    ax.legend(loc="lower right", bbox_to_anchor=(1, 1), frameon=False, ncols=4,
              borderaxespad=0.2)
    return _svg_text(fig)


def _plot_sizes(con, report, t0: int, t1: int) -> str:
    import numpy as np
    # floor(log2(n)) is exact for every n below 2^40 (log2 of a power of 2 is exact)
    rows = con.execute(f"""
        select is_read, case when req_bytes <= 0 then -1
                             else floor(log2(req_bytes))::int end as k, count(*)
        from {_calls()} group by all""").fetchall()
    if not rows:
        return "No file reads or writes in this trace."
    ks = [int(k) for _, k, _ in rows]
    lo, hi = min(ks), max(ks)
    buckets = list(range(lo, hi + 1))
    counts = {"read": np.zeros(len(buckets)), "write": np.zeros(len(buckets))}
    for is_read, k, n in rows:
        counts["read" if is_read else "write"][int(k) - lo] += n
    x = np.arange(len(buckets))
    fig, (ax,) = _figure(5.6, 3.4)
    both = counts["read"].any() and counts["write"].any()
    bw = 0.4 if both else 0.75
    for i, (d, colour) in enumerate((("read", READ_COLOUR), ("write", WRITE_COLOUR))):
        if not counts[d].any():
            continue
        off = (i - 0.5) * bw if both else 0
        total = counts[d].sum()
        share = counts[d] / total * 100
        ax.bar(x + off, share, bw, color=colour, label=f"{d}s ({int(total):,} calls)")
        for xi, c in zip(x + off, share):
            if c >= 1:
                ax.annotate(f"{c:.0f}%", (xi, c), xytext=(0, 2),
                            textcoords="offset points", ha="center", va="bottom",
                            fontsize=7, color="#444")
    step = 1 if len(buckets) <= 16 else 2 if len(buckets) <= 32 else 4
    ax.set_xticks(x[::step], [_size_label(k) for k in buckets[::step]],
                  rotation=0 if len(buckets[::step]) <= 12 else 45)
    ax.set_xlim(-0.7, len(buckets) - 0.3)
    ax.set_ylim(0, 112)
    ax.grid(axis="x", visible=False)
    ax.set_xlabel("requested size (bytes)")
    ax.set_ylabel("% of calls")
    from matplotlib.ticker import MultipleLocator
    ax.yaxis.set_major_locator(MultipleLocator(20))
    ax.set_title("Request sizes")
    ax.legend(loc="upper left", frameon=False)
    return _svg_text(fig)


def _count_formatter():
    from matplotlib.ticker import FuncFormatter

    def fmt(v, _pos):
        for div, s in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
            if abs(v) >= div:
                return f"{v / div:g}{s}"
        return f"{v:g}"
    return FuncFormatter(fmt)


def _plot_latency(con, report, t0: int, t1: int) -> str:
    import numpy as np
    per_decade = 5
    hist, n, quantiles = con.execute(f"""
        select histogram(floor(log10(greatest(dur_ns, 1)) * {per_decade})::int), count(*),
               quantile_disc(dur_ns, [0.5, 0.99])
        from {_calls(reads_only=True)}""").fetchone()
    if not n:
        return "No read calls in this trace."
    p50, p99 = quantiles
    rows = sorted(hist.items())
    lo, hi = rows[0][0], rows[-1][0]
    counts = np.zeros(hi - lo + 1)
    for k, c in rows:
        counts[k - lo] = c
    edges = 10.0 ** (np.arange(lo, hi + 2) / per_decade)
    fig, (ax,) = _figure(5.6, 3.4)
    ax.stairs(counts, edges, fill=True, color=READ_COLOUR, alpha=0.35, lw=0)
    ax.stairs(counts, edges, color=READ_COLOUR, lw=1.2, label=f"reads ({n:,} calls)")
    for q, val, style in (("p50", p50, "--"), ("p99", p99, ":")):
        if val is not None:
            ax.axvline(max(float(val), 1), color="#333", ls=style, lw=1.1,
                       label=f"{q} {_dur_label(_round_sig(float(val)))}")
    ax.set_xscale("log")
    ax.set_xlim(edges[0], edges[-1])
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter
    ax.xaxis.set_major_locator(FixedLocator(_log_ticks(edges[0], edges[-1])))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: _dur_label(_round_sig(v))))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.grid(axis="x", which="minor", visible=False)
    ax.set_xlabel("read call duration")
    ax.set_ylabel("calls")
    ax.yaxis.set_major_formatter(_count_formatter())
    ax.set_title("Read latency")
    ax.legend(loc="upper right", frameon=True, facecolor="white", edgecolor="none",
              framealpha=0.95)
    return _svg_text(fig)


def _log_ticks(lo: float, hi: float) -> list[float]:
    """Ticks for a log axis: 1-2-5 steps when the range is narrow, decades when wide."""
    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    for mults in ((1, 2, 5), (1,)):
        ticks = [m * 10.0 ** d for d in decades for m in mults if lo <= m * 10.0 ** d <= hi]
        if len(ticks) <= 9:
            break
    return ticks


def _round_sig(x: float, sig: int = 3) -> float:
    if x <= 0:
        return x
    return round(x, sig - 1 - int(math.floor(math.log10(x))))


def offset_samples(con, t0: int) -> list[dict]:
    """The files with the most bytes read (up to SCATTER_FILES, each with at least
    MIN_SCATTER_SHARE of the top file's bytes and MIN_SCATTER_CALLS reads) and a sample of their reads: about
    MAX_POINTS_PER_FILE per file at most, taken in SQL by a hash of (time, thread)
    modulo the thinning factor, so the choice is spread evenly over the run.
    Each: {file_id, path, bytes, calls, size, every, t_s, off} (t_s and off: arrays)."""
    import numpy as np
    top = con.execute(f"""
        select t.*, f.path from (
            select file_id, sum(nbytes) as b, count(*) as n, max(off + nbytes) as size
            from {_calls(reads_only=True)} where off >= 0 and nbytes > 0
            group by file_id having count(*) >= {MIN_SCATTER_CALLS}
            order by b desc, file_id limit {SCATTER_FILES}) t
        join files f using (file_id) order by b desc, file_id""").fetchall()
    # a file with a sliver of the bytes (a config file read once) shows nothing useful
    top = [r for r in top if r[1] >= MIN_SCATTER_SHARE * top[0][1]] if top else top
    if not top:
        return []
    every = {int(fid): max(1, math.ceil(n / MAX_POINTS_PER_FILE)) for fid, _, n, _, _ in top}
    # (UBIGINT like hash(): a mixed-type modulo would go through HUGEINT, 3x slower)
    thin = " ".join(f"when {fid} then {k}::ubigint" for fid, k in every.items())
    pts = con.execute(f"""
        select file_id, ts_ns - {t0} as t, off from {_calls(reads_only=True)}
        where off >= 0 and nbytes > 0
          and file_id in ({", ".join(map(str, every))})
          and hash(ts_ns + tid) % (case file_id {thin} end) = 0""").fetchnumpy()
    fids = np.asarray(pts["file_id"])
    out = []
    for fid, nbytes, n, size, path in top:
        sel = fids == fid
        out.append({"file_id": int(fid), "path": path, "bytes": int(nbytes), "calls": int(n),
                    "size": int(size or 0), "every": every[int(fid)],
                    "t_s": np.asarray(pts["t"])[sel] / 1e9,
                    "off": np.asarray(pts["off"])[sel].astype(float)})
    return out


def _plot_offsets(con, report, t0: int, t1: int) -> str:
    files = offset_samples(con, t0)
    if not files:
        n, calls = con.execute(f"""select count(*), median(n) from (
            select count(*) as n from {_calls(reads_only=True)}
            where off >= 0 and nbytes > 0 group by file_id)""").fetchall()[0]
        if not n:
            return "No reads with a file offset in this trace."
        return (f"No data file was read in {MIN_SCATTER_CALLS} calls or more: the {n:,} "
                f"file(s) read took {calls:g} read call(s) each (median), each read whole "
                "or nearly: no access pattern to plot.")
    span = max(t1 - t0, 1)
    w = _nice_bin_ns(span)
    x_end = max(1, math.ceil(span / w)) * w / 1e9    # the throughput plot's time axis
    n = len(files)
    fig, axes = _figure(WIDE_IN, 0.55 + 0.32 + 0.22 + 1.55 * n + 0.42 * (n - 1), rows=n,
                        top_in=0.22)
    colours = [READ_COLOUR, "#2a9d8f", "#8e44ad"]
    for ax, f, colour in zip(axes, files, colours):
        size = max(f["size"], 1)
        div, unit = _scale(size)
        ax.scatter(f["t_s"], f["off"] / div, s=3, lw=0, color=colour, alpha=0.55,
                   rasterized=True)
        ax.set_xlim(0, x_end)
        ax.set_ylim(0, size / div * 1.04)
        ax.set_ylabel(f"offset ({unit})")
        sampled = f", 1 in {f['every']} shown" if f["every"] > 1 else ""
        name = _short(f["path"] or f"file {f['file_id']}", 90)
        ax.set_title(f"{name}  —  {human_bytes(f['bytes'])} read in {f['calls']:,} calls"
                     f"{sampled}", fontsize=9)
    axes[-1].set_xlabel("time since start of trace (s)")
    fig.suptitle("File offset of reads over time", x=0.1 / WIDE_IN,
                 y=1 - 0.1 / fig.get_figheight(), ha="left", va="top", fontweight="bold",
                 fontsize=10)
    return _svg_text(fig)
