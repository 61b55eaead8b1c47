"""The what-if predictions (analyzers/whatif.py) in words: one phrasing for
`iotrace whatif`'s text, the HTML report's section and the Markdown report."""
from __future__ import annotations

from html import escape


def baseline_sentences(w: dict) -> list[str]:
    """What was measured and how well the model explains it; [] without a
    model (then `w["cannot"]` says why)."""
    b = w.get("baseline")
    if not b:
        return []
    au, inp = b["measured_au"], b["inputs"]
    out = [f"Measured (after the first step): AU {au:.0%}, a step every "
           f"{inp['step_s'] * 1e3:.0f} ms, limited by {b['limited_by']}; "
           f"{inp['producers']} producer(s), "
           + (f"{inp['cpus']:g} CPUs." if inp["cpus"] else "CPUs not recorded."),
           f"Per step: compute {inp['compute_s'] * 1e3:.1f} ms, the loop's own work in next() "
           f"{inp['loop_serial_s'] * 1e3:.1f} ms; per batch: fetch {inp['fetch_s'] * 1e3:.1f} ms"
           + (f" ({inp['backoff_s'] * 1e3:.1f} ms of it backing off after refused requests)"
              if inp.get("backoff_s") else "")
           + f", prep {inp['prep_cpu_s'] * 1e3:.1f} ms of CPU, hand-over "
           f"{inp['transfer_s'] * 1e3:.1f} ms"
           + (f"; the job's other threads {inp['other_cpu_s'] * 1e3:.1f} ms of CPU a batch"
              if inp.get("other_cpu_s", 0) >= 5e-4 else "") + "."]
    if (inp.get("imbalance") or 1.0) >= 1.05:
        out.append(f"The busiest producer was busy {inp['imbalance']:.2f} times their mean: the "
                   f"loader takes its batches from its workers in turn, so a worker backing off "
                   f"holds the loop while the others wait with their batches ready.")
    if b.get("restarts"):
        n = b["restarts"]
        times = "once" if n == 1 else f"{n} times"
        cost = b["restarts_cost_s"]
        out.append(f"The loader's workers started anew {times} in the window (each epoch), the "
                   f"loop waiting for their first batches: "
                   + (f"{cost * 1e3:.0f} ms over the steady pace in all (less the head start "
                      f"of the batches made during the loop's first wait)" if cost >= 5e-4 else
                      "at this pace no more than the head start of the batches made during "
                      "the loop's first wait")
                   + "; the predictions count it.")
    model = b["model_au"]
    if model is not None and abs(model - au) >= 0.005:
        out.append(f"The model puts this configuration at AU {model:.0%} (it leaves out the "
                   f"tracer's own CPU and what the trace does not show); the changes below are "
                   f"against that.")
    if b["rough"]:
        out.append(f"The model explains the measured step only roughly (measured over model: "
                   f"{b['calibration']}): take the predictions as directions, not figures.")
    return out


def reference_au(w: dict) -> float:
    b = w["baseline"]
    return b["model_au"] if b["model_au"] is not None else b["measured_au"]


def scenario_notes(e: dict) -> list[str]:
    out = []
    if e.get("fits_in_memory") is False:
        out.append("the dataset does not fit in the memory available")
    if e.get("note"):
        out.append(e["note"])
    return out


def scenario_line(e: dict, ref: float, width: int) -> str:
    if e.get("predicted_au") is None:
        return f"  {e['scenario']:<{width}}  cannot predict: {e.get('cannot')}"
    delta = e["predicted_au"] - ref
    notes = scenario_notes(e)
    return (f"  {e['scenario']:<{width}}  AU {ref:.0%} -> {e['predicted_au']:.0%} "
            f"({delta * 100:+.0f} points), then limited by {e['limited_by']}"
            + "".join(f" ({x})" for x in notes))


def render_text(w: dict, echo) -> None:
    if not w.get("baseline"):
        echo(f"No prediction: {w.get('cannot')}.")
        return
    for s in baseline_sentences(w):
        echo(s)
    echo("")
    ref = reference_au(w)
    width = max(len(e["scenario"]) for e in w["whatif"])
    for e in w["whatif"]:
        echo(scenario_line(e, ref, width))


def render_html(w: dict) -> list[str]:
    """The report's section: the measured pipeline, then a table of every
    scenario."""
    if not w:
        return []
    out = ['<section id="whatif">', "<h2>What would help (predicted)</h2>", '<div class="card">']
    if not w.get("baseline"):
        out += [f"<p>No prediction: {escape(str(w.get('cannot')))}.</p>", "</div>", "</section>"]
        return out
    out += [f"<p>{escape(s)}</p>" for s in baseline_sentences(w)]
    ref = reference_au(w)
    out += ["<table>", "<tr><th>change</th><th class=\"num\">predicted AU</th>"
            "<th class=\"num\">points</th><th>then limited by</th><th>note</th></tr>"]
    for e in w["whatif"]:
        if e.get("predicted_au") is None:
            out.append(f"<tr><td>{escape(e['scenario'])}</td><td class=\"num\">?</td>"
                       f"<td class=\"num\"></td><td></td><td>cannot predict: "
                       f"{escape(str(e.get('cannot')))}</td></tr>")
            continue
        out.append(f"<tr><td>{escape(e['scenario'])}</td>"
                   f"<td class=\"num\">{e['predicted_au']:.0%}</td>"
                   f"<td class=\"num\">{(e['predicted_au'] - ref) * 100:+.0f}</td>"
                   f"<td>{escape(str(e['limited_by']))}</td>"
                   f"<td>{escape('; '.join(scenario_notes(e)))}</td></tr>")
    out += ["</table>", "<p class=\"sub\">A model of the input pipeline fitted to this trace; "
            "<code>iotrace whatif TRACE --set workers=8,cores=16</code> predicts your own "
            "change.</p>", "</div>", "</section>"]
    return out


def render_markdown(w: dict) -> list[str]:
    if not w or not w.get("baseline"):
        return []
    ref = reference_au(w)
    out = ["### What would help (predicted)", ""] + [" ".join(baseline_sentences(w)), "",
                                                      "| change | predicted AU | then limited by |",
                                                      "|---|---|---|"]
    for e in w["whatif"]:
        if e.get("predicted_au") is None:
            why = str(e.get("cannot")).replace("|", "\\|")
            out.append(f"| {e['scenario']} | cannot predict | {why} |")
        else:
            notes = scenario_notes(e)
            out.append(f"| {e['scenario']} | {e['predicted_au']:.0%} "
                       f"({(e['predicted_au'] - ref) * 100:+.0f} points) | {e['limited_by']}"
                       + "".join(f" ({x})" for x in notes) + " |")
    return out + [""]
