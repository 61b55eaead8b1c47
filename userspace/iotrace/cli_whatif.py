"""`iotrace whatif`: the AU predicted for changes to the input pipeline
(analyzers/whatif.py; docs/whatif.md). cli.py wires it in with
`register(cli, ...)`."""
from __future__ import annotations

import json
import sys
from typing import Callable

import click


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
            from .viewers.whatif_view import render_text
            render_text(w, click.echo)
        sys.exit(0)
