"""`iotrace whatif`: the AU predicted for changes to the input pipeline
(analyzers/whatif.py; docs/whatif.md). cli.py wires it in with
`register(cli, ...)`."""
from __future__ import annotations

import json
import sys
from typing import Callable, Optional

import click


def render_text(w: dict, echo: Callable[[str], None]) -> None:
    b = w.get("baseline")
    if not b:
        echo(f"No prediction: {w.get('cannot')}.")
        return
    au = b["measured_au"]
    inp = b["inputs"]
    echo(f"Measured (after the first step): AU {au:.0%}, a step every "
         f"{inp['step_s'] * 1e3:.0f} ms, limited by {b['limited_by']}; "
         f"{inp['producers']} producer(s), {inp['cpus'] or '?':g} CPUs.")
    echo(f"Per step: compute {inp['compute_s'] * 1e3:.1f} ms, the loop's own work in next() "
         f"{inp['loop_serial_s'] * 1e3:.1f} ms; per batch: fetch {inp['fetch_s'] * 1e3:.1f} ms, "
         f"prep {inp['prep_cpu_s'] * 1e3:.1f} ms of CPU, hand-over "
         f"{inp['transfer_s'] * 1e3:.1f} ms.")
    model = b["model_au"]
    if model is not None and abs(model - au) >= 0.005:
        echo(f"The model puts this configuration at AU {model:.0%} (it leaves out the "
             f"tracer's own CPU and what the trace does not show); the changes below are "
             f"against that.")
    if b["rough"]:
        echo(f"The model explains the measured step only roughly (measured over model: "
             f"{b['calibration']}): take the predictions as directions, not figures.")
    echo("")
    ref = model if model is not None else au
    width = max(len(e["scenario"]) for e in w["whatif"])
    for e in w["whatif"]:
        if e.get("predicted_au") is None:
            echo(f"  {e['scenario']:<{width}}  cannot predict: {e.get('cannot')}")
            continue
        delta = e["predicted_au"] - ref
        fits = "" if e.get("fits_in_memory") is not False else " (the dataset does not fit " \
            "in the memory available)"
        if e.get("note"):
            fits += f" ({e['note']})"
        echo(f"  {e['scenario']:<{width}}  AU {ref:.0%} -> {e['predicted_au']:.0%} "
             f"({delta * 100:+.0f} points), then limited by {e['limited_by']}{fits}")


def register(cli, context: dict, fail: Callable[[str], None]) -> None:
    @cli.command(context_settings=context)
    @click.argument("trace", type=click.Path(file_okay=False))
    @click.option("--set", "settings", metavar="KEY=VALUE,...",
                  help="One scenario instead of the standard ones: workers=N, read_bw=RATE "
                       "or Nx, cached=yes, compute=Nx or SECONDS, cores=N or Nx; e.g. "
                       "--set workers=8,read_bw=2GiB/s.")
    @click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
                  show_default=True, help="json: {baseline, whatif: [...]} (docs/whatif.md).")
    @click.option("--window", metavar="START:END",
                  help="Fit the model to this part of the trace (seconds from its first "
                       "event), instead of the detected training window.")
    @click.option("--loader-frame", metavar="MODULE:FUNCTION",
                  help="The loop's loader next(), as for `iotrace report`.")
    def whatif(trace, settings, fmt, window, loader_frame):
        """Predict the AU of a change: more loader workers, faster storage, the
        dataset cached, a faster accelerator, more CPUs.

        \b
        A model of the input pipeline is fitted to the trace: per batch, what
        the loader's workers spent fetching, preparing on CPU and handing it
        over, the loop's compute and its own work in next(), the CPUs the job
        could use and, where the storage was the limit, its rate. Batches come
        at the pace of the slowest stage; each scenario changes one input and
        says which stage limits then. Predictions are of the AU after the
        first step (the steady state, as DLIO and MLPerf Storage count it).

        \b
        Examples:
          iotrace whatif mytrace
          iotrace whatif mytrace --set workers=8
          iotrace whatif mytrace --set read_bw=2GiB/s,cores=16 --format json
        """
        from .analyzers import whatif as model
        from .analyzers.base import Targets
        from .analyzers.report import build_report
        from .cli import parse_window, step_status
        from .lean import without_pandas
        from .trace import is_profile, open_trace
        from .traceset import is_trace_set
        without_pandas()
        if is_trace_set(trace):
            fail(f"{trace} is a trace set: give one node's trace (TRACE/host=NAME)")
        chosen = model.parse_set(settings) if settings else None
        t = open_trace(trace)
        if is_profile(t.meta):
            fail(f"{trace} is a profile (--profile): the model needs a full trace")
        with step_status(f"iotrace whatif {trace}") as step:
            report = build_report(t, Targets(), window_s=parse_window(window), progress=step,
                                  loader_frame=loader_frame, rules=False)
        w = report.whatif if not chosen else model.analyse(report.verdict, t.meta, chosen)
        if fmt == "json":
            click.echo(json.dumps(w, indent=1))
        else:
            render_text(w, click.echo)
        sys.exit(0)
