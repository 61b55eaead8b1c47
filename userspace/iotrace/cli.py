"""iotrace command line.

Exit codes: 0 ok; 2 bad usage; 3 cannot trace here (privileges, kernel,
missing pid); 4 trace could not be written or read; `run` passes on the
job's own exit code (127 command not found, 126 not executable, 128+N killed
by signal N).
"""
from __future__ import annotations

import json

import os
import re
import shutil
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import click
import duckdb
import pyarrow
from rich.console import Console

from . import __version__
from .lean import without_pandas
from .errors import EXIT_ENV, EXIT_NOT_FOUND, EXIT_TRACE, EXIT_USAGE, IotraceError
from .outpath import expand as expand_out
from .privileges import can_trace, chown_tree, invoking_user, job_env
from .session import Progress, Session
from .summary import print_summary, summary_json
from .engine import DUCKDB, ENGINES, Engine
from .trace import is_profile, open_trace, unreadable

def _console(stderr: bool) -> Console:
    # Not a terminal (a pipe, a CI log): don't wrap at 80 columns.
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, highlight=False, width=None if stream.isatty() else 120)


err_console = _console(stderr=True)
out_console = _console(stderr=False)


def say(message: str) -> None:
    """One plain line on stderr (never wrapped: scripts grep these; a line
    break inside, from a file name or a damaged file, is written as \\n)."""
    message = message.replace("\r", "\\r").replace("\n", "\\n")
    sys.stderr.write(f"iotrace: {message}\n")
    sys.stderr.flush()

CONTEXT = dict(help_option_names=["-h", "--help"], max_content_width=100)


def fail(message: str, code: int = EXIT_USAGE) -> None:
    raise IotraceError(message, code)


# ---- shared checks -------------------------------------------------------------

# Where the kernel's BTF lives; IOTRACE_SYSFS_BTF overrides it (tests use it
# to play a kernel without BTF).
def sysfs_btf() -> str:
    return os.environ.get("IOTRACE_SYSFS_BTF", "/sys/kernel/btf/vmlinux")


def check_can_trace() -> None:
    if not can_trace():
        if os.geteuid() == 0:
            fail("iotrace runs as root but without CAP_BPF and CAP_PERFMON (or "
                 "CAP_SYS_ADMIN), which loading BPF programs needs: a container that "
                 "dropped them must grant them (docker run --cap-add BPF --cap-add PERFMON)",
                 EXIT_ENV)
        fail("iotrace needs root to load BPF programs: run it with sudo "
             "(or grant CAP_BPF and CAP_PERFMON)", EXIT_ENV)
    if not os.path.exists(sysfs_btf()):
        fail("this kernel has no BTF (/sys/kernel/btf/vmlinux): iotrace needs a kernel "
             "built with CONFIG_DEBUG_INFO_BTF=y (most distribution kernels >= 5.11 are)",
             EXIT_ENV)


def prepare_outdir(out: Optional[str], default_stem: str, force: bool) -> Path:
    path = Path(expand_out(out)) if out else Path(f"iotrace-{time.strftime('%Y%m%d-%H%M%S')}-{default_stem}")
    try:
        str(path.resolve()).encode("utf-8")
    except UnicodeEncodeError:
        from .model import path_text
        fail(f"{path_text(str(path))}: a trace directory's path must be UTF-8 (Parquet and "
             "DuckDB take no other): choose another -o DIR")
    if path.exists():
        if not force:
            fail(f"{path} already exists: choose another -o DIR, or add --force to replace it")
        if not (path / "meta.json").exists() and any(path.iterdir()):
            fail(f"{path} exists and is not an iotrace trace: refusing to replace it")
        shutil.rmtree(path)
    try:
        path.mkdir(parents=True)
    except OSError as e:
        fail(f"cannot create {path}: {e.strerror}", EXIT_TRACE)
    return path


# Closed spool segments (a second of events each) waiting for conversion from
# which the live line says that conversion is behind (one or two is the normal
# rhythm of a busy trace)
BEHIND_SHOWN = 3


class StatusLine:
    """Live one-line status on stderr, when stderr is a terminal."""

    def __init__(self, quiet: bool) -> None:
        self.on = not quiet and sys.stderr.isatty()
        self.shown = False

    def __call__(self, p: Progress) -> None:
        if not self.on:
            return
        drops = f"\x1b[31mdrops {p.drops:,}\x1b[0m" if p.drops else "drops 0"
        if p.calls:    # profile mode: calls summed in kernel, few events
            line = (f"iotrace {p.elapsed_s:7.1f} s  profile  read {p.rate_read / 1e6:8.1f} MB/s  "
                    f"write {p.rate_write / 1e6:8.1f} MB/s  calls {p.calls:,}  {drops}")
        else:
            line = (f"iotrace {p.elapsed_s:7.1f} s  {p.rate_events:10,.0f} ev/s  "
                    f"read {p.rate_read / 1e6:8.1f} MB/s  write {p.rate_write / 1e6:8.1f} MB/s  "
                    f"events {p.events:,}  {drops}")
        if p.pending >= BEHIND_SHOWN:
            # the job makes events faster than they are converted: the spool
            # holds them (nothing is lost), and iotrace ends once it is through
            line += f"  Parquet {p.pending:,} s behind"
        sys.stderr.write("\r\x1b[K" + line)
        sys.stderr.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def finish_session(session: Session, status: StatusLine, quiet: bool, user,
                   node_report: bool = True, redact: tuple = ()) -> dict:
    session.loop()
    status.clear()
    with step_status("converting the rest of the spool to Parquet",
                     show=not quiet and session.pending_segments() >= BEHIND_SHOWN) as step:
        meta = session.finish(step)
    # a profile has no per-call events for the node report: a set's report
    # says so for it
    if node_report and not session.profile and not session.stop_error() \
            and not session.final_write_error:
        from .nodesummary import write_node_summary
        with step_status("writing the node summary (summary/)", show=not quiet) as step:
            err = write_node_summary(session.out, step)
        if err:
            say(f"no node summary in {session.out}/summary ({err}): `iotrace report` "
                "reads the raw events instead")
    if redact and (session.out / "meta.json").exists():
        from .redact import redact_trace
        r = redact_trace(session.out, session.out, redact)
        meta = json.loads((session.out / "meta.json").read_text())
        if not quiet:
            say(f"redacted {r['names']:,} names ({r['cells']:,} values) in {session.out}")
    chown_tree(str(session.out), user)
    why = session.stop_error()
    if why:
        say(f"stopped tracing after {session.writer.events:,} events: cannot write "
            f"{session.out}: {why}; the job ran on (free space, or trace to another "
            f"disk with -o)")
    elif session.final_write_error:
        say(f"cannot finish the trace in {session.out}: {session.final_write_error}")
    if not quiet:
        try:
            print_summary(open_trace(session.out), err_console)
        except IotraceError as e:
            say(f"{e.message}")
        err_console.print(f"trace: {session.out}  (open with iotrace.open_trace, "
                          f"or `iotrace summary {session.out}`)", markup=False)
    return meta


def start_or_clean_up(session: Session) -> None:
    """Starts tracing; if it cannot start, leaves no half-made directory."""
    try:
        session.start()
    except IotraceError:
        shutil.rmtree(session.out, ignore_errors=True)
        raise


def tls_args(tls_libs: tuple, no_tls: bool, no_go_tls: bool = False) -> list[str]:
    if no_tls:
        if tls_libs:
            fail("--no-tls and --tls-lib contradict each other: give one", EXIT_USAGE)
        return ["--tls-lib", "none"]
    args = ["--no-go-tls"] if no_go_tls else []
    for lib in tls_libs[:8]:
        if not os.access(lib, os.R_OK):
            fail(f"--tls-lib {lib}: no such readable file", EXIT_USAGE)
        args += ["--tls-lib", os.path.realpath(lib)]
    if len(tls_libs) > 8:
        fail("at most 8 --tls-lib", EXIT_USAGE)
    return args


def py_stacks_rate(hz: Optional[int], profile: bool) -> int:
    """Python stack samples a second: --py-stacks, else 100 (none for a profile,
    whose jobs run for days)."""
    from .pystacks import DEFAULT_RATE_HZ
    if hz is None:
        return 0 if profile else DEFAULT_RATE_HZ
    return hz


def recorder_tuning(ringbuf_mb: int, verbs_lib: Optional[str], no_verbs: bool) -> list[str]:
    args = ["--ringbuf-mb", str(ringbuf_mb)]
    if no_verbs:
        if verbs_lib:
            fail("--no-verbs and --verbs-lib contradict each other: give one", EXIT_USAGE)
        return args + ["--verbs-lib", "none"]
    if verbs_lib:
        if not os.access(verbs_lib, os.R_OK):
            fail(f"--verbs-lib {verbs_lib}: no such readable file", EXIT_USAGE)
        args += ["--verbs-lib", os.path.realpath(verbs_lib)]
    return args


def mapped_verbs_library(pid: int) -> Optional[str]:
    """The libibverbs a running process has mapped (a conda env's, say), if any."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)   # anonymous maps have no 6th field
        if len(fields) == 6 and "/libibverbs.so" in fields[5]:
            return fields[5].strip()
    return None


# ---- commands ------------------------------------------------------------------

@click.group(context_settings=CONTEXT)
@click.version_option(__version__, "-V", "--version")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Trace the file I/O of a training job and all its workers with eBPF.

    \b
    Quick start:
      sudo iotrace run -- python train.py        trace a job from its first call
      sudo iotrace attach --pid 1234             trace a job that already runs
      iotrace summary iotrace-<date>-python      what the trace holds
      iotrace doctor                             what this kernel lets iotrace see

    A trace is a directory of Parquet tables (events, files, processes,
    threads) and meta.json; read it with iotrace.open_trace(DIR) in Python
    or any Parquet tool. See docs/trace-format.md.
    """
    if ctx.invoked_subcommand != "report":     # report: once its engine is known
        without_pandas()


def targets_from(target_read, target_write, gpus, per_gpu):
    from .analyzers.base import Targets
    from .analyzers.rates import parse_rate

    def rate(opt, text):
        if text is None:
            return None
        try:
            return parse_rate(text)
        except ValueError as e:
            fail(f"{opt}: {e}")

    t = Targets(read_bps=rate("--target-read", target_read),
                write_bps=rate("--target-write", target_write),
                gpus=gpus, per_gpu_bps=rate("--per-gpu", per_gpu))
    if (gpus is None) != (per_gpu is None):
        fail("--gpus and --per-gpu go together: e.g. --gpus 8 --per-gpu 1GiB/s")
    if gpus is not None:
        if target_read:
            fail("give either --target-read or --gpus/--per-gpu, not both")
        t.read_bps = gpus * t.per_gpu_bps
    return t


FORMATS = ("text", "json", "md", "html")
FAIL_ON = ("info", "warn", "high")


def target_options(f):
    for opt in reversed([
        click.option("--target-read", metavar="RATE",
                     help="Read throughput the job needs, e.g. 8GiB/s or 800MB/s."),
        click.option("--target-write", metavar="RATE",
                     help="Write throughput the job needs (checkpoints), e.g. 2GiB/s."),
        click.option("--gpus", type=click.IntRange(min=1), metavar="N",
                     help="GPUs of the job; with --per-gpu sets the read target."),
        click.option("--per-gpu", metavar="RATE",
                     help="Read rate each GPU needs, e.g. 1GiB/s (MLPerf Storage: UNet3D "
                          "2.66GB/s, ResNet-50 0.17GB/s per H100)."),
        click.option("--config", "config", type=click.Path(dir_okay=False), metavar="TOML",
                     help="Thresholds overriding the defaults (docs/findings.md)."),
    ]):
        f = opt(f)
    return f


def parse_window(text: Optional[str]) -> Optional[tuple[float, float]]:
    """START:END in seconds from the trace's first event (either may be empty)."""
    if not text:
        return None
    try:
        a, b = text.split(":")
        lo = float(a) if a.strip() else 0.0
        hi = float(b) if b.strip() else float("inf")
    except ValueError:
        fail(f"--window {text!r}: give START:END in seconds from the trace start, e.g. 12.5:60")
    if hi <= lo or lo < 0:
        fail(f"--window {text!r}: END must be after START, both >= 0")
    return lo, min(hi, 1e7)


def _report_console(output, width: int) -> Console:
    """The text report's console: the terminal, or the file --output names."""
    if output:
        return Console(file=open(output, "w"), width=width, force_terminal=False)
    return Console(highlight=False, width=min(out_console.width, width))


def _deliver(text: str, output) -> None:
    if output:
        Path(output).write_text(text)
    else:
        sys.stdout.write(text)


def _fail_on_status(worst, fail_on) -> int:
    """1 when a finding of --fail-on's severity or worse exists, else 0."""
    from .analyzers.base import severity_rank
    return 1 if fail_on and worst and severity_rank(worst) >= severity_rank(fail_on) else 0


@contextmanager
def step_status(label: str, show: bool = True):
    """On a terminal, a status line while long work runs (a report: minutes
    on 100 M events): yields a function that takes what it does now, shown
    with the seconds since it began. Gone once the work ends; None where
    stderr is not a terminal or show is false."""
    if not show or not err_console.is_terminal:
        yield None
        return
    t0 = time.monotonic()
    with err_console.status(f"[dim]{label}[/dim]") as st:
        yield lambda what: st.update(f"[dim]{label}: {what} "
                                     f"({time.monotonic() - t0:.0f} s)[/dim]")


def emit_report(trace_dir, targets, config, fmt, output, fail_on, window=None,
                verbose=False, engine: Engine = DUCKDB, from_events=False,
                loader_frame: Optional[str] = None, kernel_only: bool = False) -> int:
    """Builds and writes the report; returns the --fail-on exit status."""
    from .analyzers.report import build_report
    from .traceset import is_trace_set
    if is_trace_set(trace_dir):
        return emit_set_report(trace_dir, targets, config, fmt, output, fail_on, window,
                               engine, from_events)
    if from_events:
        fail("--from-events is for a trace set (a directory of host=NAME traces)")
    trace = engine.open_trace(trace_dir)
    if is_profile(trace.meta):
        from .analyzers.profile_report import build_profile_report
        if fmt in ("md", "html") or window:
            fail(f"{trace_dir} is a profile (--profile): its report is text or json, over the "
                 "whole run; md, html and --window need a full trace")
        report = build_profile_report(trace, targets, config)
    else:
        with step_status(f"iotrace report {trace_dir}") as step:
            report = build_report(trace, targets, config, window_s=parse_window(window),
                                  progress=step, loader_frame=loader_frame,
                                  kernel_only=kernel_only)
    if fmt == "text":
        from .viewers.text import render_text
        render_text(report, _report_console(output, 100), verbose=verbose)
    elif fmt == "json":
        from .viewers.jsonout import render_json
        _deliver(render_json(report), output)
    elif fmt == "md":
        from .viewers.markdown import render_markdown
        _deliver(render_markdown(report), output)
    else:
        from .viewers.html import render_html
        _deliver(render_html(report, open_trace(trace_dir)), output)
    if output:
        say(f"report written to {output}")
    return _fail_on_status(report.worst(), fail_on)


def emit_set_report(set_dir, targets, config, fmt, output, fail_on, window,
                    engine: Engine = DUCKDB, from_events=False) -> int:
    """The report of a trace set (one trace per node): per node, stragglers, the job."""
    from .analyzers.base import Targets
    from .analyzers.cluster import build_set_report
    from .traceset import open_trace_set
    if window:
        fail("--window is for one trace: give one node's trace (SET/host=NAME) with it")
    if fmt == "md":
        fail("--format md is for one trace; a trace set's report is text, json or html")
    ts = open_trace_set(set_dir)
    why = ("--from-events" if from_events else
           "targets or thresholds given" if targets != Targets() or config
           else "no node summary")
    where = "" if engine.name != "spark" else (
        " (every rule's SQL on Spark)" if engine.sql else " (a node a task, DuckDB on the executors)")
    rep = build_set_report(ts, targets, config, progress=None if not sys.stderr.isatty() else (
        lambda todo, n: err_console.print(
            f"[dim]analysing the raw events of {todo} of {n} nodes ({why}) on "
            f"{engine.name}{where}[/dim]")), engine=engine, from_events=from_events)
    if fmt == "text":
        from .viewers.set_text import render_set_text
        render_set_text(rep, _report_console(output, 110))
    elif fmt == "html":
        from .viewers.set_html import render_set_html
        _deliver(render_set_html(rep), output)
    else:
        from .viewers.jsonout import render_json
        _deliver(render_json(rep), output)
    if output:
        say(f"report written to {output}")
    return _fail_on_status(rep.worst(), fail_on)


def _power_of_two(ctx, param, value: int) -> int:
    if value & (value - 1):
        raise click.BadParameter(f"{value} is not a power of two (try 32, 64, 128...)")
    return value


def check_redact(patterns: tuple) -> tuple:
    """The --redact patterns, checked before anything is made."""
    from .redact import compile_patterns
    try:
        compile_patterns(patterns)
    except ValueError as e:
        fail(str(e), EXIT_USAGE)
    return patterns


redact_option = click.option(
    "--redact", "redact", metavar="PATTERN", multiple=True,
    help="Replace every path component and command-line word this regular expression "
         "matches (searched within it) by <redacted:HASH>, in every table and meta.json, "
         "for a trace that leaves the machine (repeatable; `iotrace redact` does it to an "
         "existing trace; docs/privacy-and-privileges.md).")

node_summary_option = click.option(
    "--no-node-summary", "no_node_summary", is_flag=True,
    help="Skip the node summary written into DIR/summary at the end (the node's report "
         "and per-second rates, what `iotrace report SET` reads for a job on several "
         "nodes; about a second per million events).")

ringbuf_option = click.option(
    "--ringbuf-mb", default=64, show_default=True, type=click.IntRange(1, 4096),
    callback=_power_of_two,
    help="Ring buffer memory (a power of two), split over a ring per CPU (at most 8: "
         "`iotrace doctor` shows them). Larger buffers absorb longer bursts before "
         "events are dropped. With --profile the sums have a ring of their own, of "
         "this size up to 16 MiB.")

profile_option = click.option(
    "--profile", is_flag=True,
    help="Always-on profile for production jobs: the kernel sums every call per process, "
         "file, op, request-size and latency bucket, and per second, instead of recording "
         "each call (fixed memory however long the job runs, a fraction of the cost). "
         "The trace keeps these sums (DIR/profile/) and the opens that name files; "
         "`iotrace report` then says what it can (sizes, rates, metadata, page cache) and "
         "what needs a full trace (the waits verdict, access patterns, locks). "
         "See docs/profile.md.")


py_stacks_option = click.option(
    "--py-stacks", "py_stacks", default=None, type=click.IntRange(0, 1000), metavar="HZ",
    help="Sample the Python call stacks of every thread of the job's Python processes this "
         "many times a second, on the trace's clock (pystacks.parquet; 0: none). The "
         "verdict then counts a data wait as the time the training loop spends inside "
         "its loader's next(), on CPU or blocked, and names the functions that prepare "
         "the data. Read from outside (py-spy), with no code change and no pause of the "
         "job. Default: 100, none with --profile.")


def verbs_lib_option(f):
    f = click.option(
        "--no-verbs", is_flag=True,
        help="No libibverbs uprobes. On kernels before 6.6 (no uprobe_multi links) "
             "iotrace then ends about 3 s sooner: the kernel removes each of the 30 "
             "uprobes after a grace period.")(f)
    return click.option(
        "--verbs-lib", metavar="PATH", type=click.Path(dir_okay=False),
        help="libibverbs whose RDMA verbs to trace, when the job loads its own copy "
             "(a conda environment's, say), or to trace verbs on a machine without an "
             "RDMA device. Default: the system's when there is an RDMA device; attach "
             "uses the one the process has mapped.")(f)


def tls_option(f):
    f = click.option(
        "--no-go-tls", is_flag=True,
        help="No uprobes on Go's crypto/tls (rclone, s5cmd, minio-go clients). By "
             "default each Go program the job runs has its TLS reads and writes probed, "
             "which costs every process running that same binary a trap per TLS call "
             "(docs/object-storage.md).")(f)
    f = click.option(
        "--no-tls", is_flag=True,
        help="No TLS uprobes: HTTPS requests are then seen as connections and bytes "
             "only. The uprobes cost every process on the machine that uses the probed "
             "libraries a trap per TLS call (docs/object-storage.md).")(f)
    return click.option(
        "--tls-lib", metavar="PATH", multiple=True, type=click.Path(dir_okay=False),
        help="Also probe this OpenSSL (libssl) or GnuTLS library for HTTPS requests "
             "(repeatable). The system's are probed, and those the job maps are found "
             "when it maps them.")(f)


@cli.command(context_settings=dict(CONTEXT, allow_interspersed_args=False))
@click.option("-o", "--output", "out", metavar="DIR",
              help="Trace directory to create (default: iotrace-DATE-TIME-CMD). %h, %j "
                   "and %r become the host name, the job id (SLURM_JOB_ID, IOTRACE_JOB_ID) "
                   "and the rank (SLURM_PROCID, RANK): one directory per node of a job, "
                   "e.g. -o SET/host=%h.")
@click.option("--force", is_flag=True, help="Replace DIR if it holds an earlier trace.")
@click.option("-q", "--quiet", is_flag=True, help="No live status line and no summary.")
@ringbuf_option
@profile_option
@py_stacks_option
@verbs_lib_option
@tls_option
@click.option("--also-pid", "also_pids", metavar="PID", type=int, multiple=True,
              help="Also trace this running process and its descendants (repeatable): a "
                   "FUSE daemon or cache process that serves the job from outside its "
                   "process tree. The trace still ends with COMMAND.")
@click.option("--fuse-daemons", is_flag=True,
              help="Also trace every FUSE daemon running at start (processes holding "
                   "/dev/fuse open: s3fs, Mountpoint, gcsfuse...), so that the job's reads "
                   "on a FUSE mount are tied to the daemon's work and its HTTP requests.")
@node_summary_option
@redact_option
@click.option("--report", "want_report", is_flag=True,
              help="Print the bottleneck report (iotrace report) at the end.")
@click.option("--perfetto", "want_perfetto", is_flag=True,
              help="Also write a Perfetto timeline (DIR.pftrace) at the end.")
@target_options
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(out, force, quiet, ringbuf_mb, profile, py_stacks, verbs_lib, no_verbs, tls_lib, no_tls,
        no_go_tls, also_pids,
        fuse_daemons, no_node_summary, redact, want_report, want_perfetto, target_read,
        target_write, gpus, per_gpu, config, command) -> None:
    """Run COMMAND and trace it and every process it starts.

    \b
    Tracing starts before COMMAND's first system call and ends when the last
    of its descendants exits (threads, fork, spawn and forkserver workers
    included). iotrace exits with COMMAND's exit code. Under sudo, COMMAND runs
    as the invoking user, and the trace belongs to that user.

    \b
    Examples:
      sudo iotrace run -- python train.py --epochs 1
      sudo iotrace run -o ckpt-trace -- torchrun --nproc-per-node 2 train.py

    Ctrl-C goes to the job as usual; press it again to stop the job
    (SIGTERM), a third time to stop tracing and leave the job running.
    """
    command = list(command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        fail("no command given: iotrace run [OPTIONS] -- COMMAND [ARGS...]")
    targets = targets_from(target_read, target_write, gpus, per_gpu)
    check_redact(redact)
    check_can_trace()
    user = invoking_user()
    env = job_env(user)
    missing = (not os.path.exists(command[0]) if "/" in command[0]
               else shutil.which(command[0], path=env.get("PATH")) is None)
    if missing:
        say(f"{command[0]}: " + ("no such file" if "/" in command[0] else "command not found"))
        sys.exit(EXIT_NOT_FOUND)
    # options are checked before the trace directory exists: a mistake leaves nothing
    args = recorder_tuning(ringbuf_mb, verbs_lib, no_verbs) + tls_args(tls_lib, no_tls, no_go_tls)
    extra = list(dict.fromkeys(also_pids))
    for p in extra:
        if p <= 0 or not os.path.exists(f"/proc/{p}"):
            fail(f"--also-pid {p}: no such process (`ps -e` lists them)", EXIT_ENV)
    if fuse_daemons:
        from .procfs import fuse_daemons as find_fuse_daemons
        extra += [p for p in find_fuse_daemons() if p not in extra]
    if len(extra) > 64:
        fail(f"{len(extra)} processes to trace besides the job; at most 64", EXIT_USAGE)
    args += [a for p in extra for a in ("--pid", str(p))]
    if user:
        args += ["--uid", str(user.uid), "--gid", str(user.gid),
                 "--groups", ",".join(str(g) for g in user.groups)]
    args += ["--", *command]
    outdir = prepare_outdir(out, Path(command[0]).name, force)
    if user:
        os.chown(outdir, user.uid, user.gid)
    from .tracedir import base_meta
    meta = base_meta(command, "run", {"ringbuf_mb": ringbuf_mb, "profile": profile,
                                      "user": user.name if user else None})
    meta["capture"] = "profile" if profile else "full"
    status = StatusLine(quiet)
    meta["options"]["also_pids"] = extra
    meta["options"]["redact"] = len(redact)
    session = Session(out=outdir, recorder_args=args, meta=meta, on_progress=status,
                      run_mode=True, attach_pids=extra, env=env,
                      owner=(user.uid, user.gid) if user else None, profile=profile,
                      py_rate=py_stacks_rate(py_stacks, profile))

    presses = {"n": 0}

    def on_sigint(signum, frame):
        presses["n"] += 1
        if presses["n"] == 2:
            session.signal_recorder(signal.SIGTERM)   # the recorder passes it to the job
        elif presses["n"] >= 3:
            session.signal_recorder(signal.SIGUSR1)   # stop tracing, the job runs on

    def on_sigterm(signum, frame):
        session.signal_recorder(signal.SIGTERM)

    signal.signal(signal.SIGINT, on_sigint)
    signal.signal(signal.SIGTERM, on_sigterm)
    start_or_clean_up(session)
    finish_session(session, status, quiet, user, node_report=not no_node_summary,
                   redact=redact)
    if session.recorder_died():
        say(f"the recorder died: tracing stopped and the trace in {outdir} is incomplete; "
            "waiting for the job to end")
        session.wait_orphaned_job()
    code = session.job_exit_code()
    if want_report:
        emit_report(outdir, targets, config, "text", None, None)
    if want_perfetto:
        from .cli_perfetto import default_output, export_perfetto
        pf = default_output(outdir)
        export_perfetto(outdir, pf)
        if user:
            os.chown(pf, user.uid, user.gid)
        say(f"Perfetto timeline: {pf}  (open it with `iotrace view {outdir}`)")
    if session.exec_errno:
        say(f"{command[0]}: {os.strerror(session.exec_errno)}")
    sys.exit(code)


@cli.command(context_settings=CONTEXT)
@click.option("-p", "--pid", "pids", multiple=True, type=int, metavar="PID",
              help="Process to trace, with all its threads and descendants (repeat for "
                   "several).")
@click.option("--cgroup", metavar="PATH",
              help="Trace every process in this cgroup and the cgroups below it (a "
                   "Kubernetes pod's, a Slurm job's), with their descendants: a path under "
                   "/sys/fs/cgroup, absolute or relative to it.")
@click.option("--follow", is_flag=True,
              help="With --cgroup: also trace the processes that join the cgroup later (a "
                   "Slurm job's steps, a pod's restarted containers), found within 200 ms; "
                   "the cgroup may be empty or not exist yet (a Slurm prolog). Tracing then "
                   "ends only at Ctrl-C / SIGTERM or --duration.")
@click.option("-d", "--duration", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Stop after this long (default: until Ctrl-C or the process tree exits).")
@click.option("-o", "--output", "out", metavar="DIR",
              help="Trace directory to create (default: iotrace-DATE-TIME-COMM). %h, %j "
                   "and %r as for run.")
@click.option("--force", is_flag=True, help="Replace DIR if it holds an earlier trace.")
@click.option("-q", "--quiet", is_flag=True, help="No live status line and no summary.")
@ringbuf_option
@profile_option
@py_stacks_option
@verbs_lib_option
@tls_option
@node_summary_option
@redact_option
def attach(pids, cgroup, follow, duration, out, force, quiet, ringbuf_mb, profile, py_stacks,
           verbs_lib,
           no_verbs,
           tls_lib, no_tls, no_go_tls, no_node_summary, redact) -> None:
    """Trace a running process and its present and future descendants.

    \b
    Tracing ends at Ctrl-C / SIGTERM, after --duration, or when the whole
    process tree has exited. Files the process opened before iotrace
    attached get their paths from /proc.

    \b
    Examples:
      sudo iotrace attach --pid $(pgrep -f train.py | head -1) --duration 60
      sudo iotrace attach --cgroup kubepods.slice/kubepods-pod1234.slice -o SET/host=%h
      sudo iotrace attach --follow --cgroup system.slice/slurmstepd.scope/job_42 \\
          -o /shared/traces/42/host=%h     # from a Slurm prolog (docs/multinode.md)
    """
    check_redact(redact)
    check_can_trace()
    if not pids and not cgroup:
        fail("nothing to attach to: give --pid PID or --cgroup PATH")
    if follow and not cgroup:
        fail("--follow is for --cgroup: the processes that join the cgroup")
    for p in pids:
        if p <= 0 or not os.path.exists(f"/proc/{p}"):
            fail(f"no process with pid {p}: check the pid (`ps -e`) and try again", EXIT_ENV)
    roots = list(dict.fromkeys(pids))
    if cgroup:
        from .procfs import cgroup_dir, cgroup_roots
        in_cgroup = cgroup_roots(cgroup, follow)      # checks the path either way
        if not follow:          # followed, the cgroup's processes are the recorder's to find
            roots += [p for p in in_cgroup if p not in roots]
    if len(roots) > 64:
        fail(f"{len(roots)} separate process trees to attach to; at most 64: give the "
             "cgroup of one job, or add --follow", EXIT_USAGE)
    pid = roots[0] if roots else 0
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip() if pid else \
            Path(cgroup.rstrip("/")).name
    except OSError:
        comm = str(pid)
    user = invoking_user()
    # options are checked before the trace directory exists: a mistake leaves nothing
    args = recorder_tuning(ringbuf_mb, verbs_lib or (None if no_verbs else
                                                     mapped_verbs_library(pid) if pid else None),
                           no_verbs) + tls_args(tls_lib, no_tls, no_go_tls) + \
        [a for p in roots for a in ("--pid", str(p))]
    if follow:
        args += ["--follow-cgroup", cgroup_dir(cgroup)]
    if duration:
        args += ["--duration", str(duration)]
    outdir = prepare_outdir(out, comm, force)
    if user:
        os.chown(outdir, user.uid, user.gid)
    from .tracedir import base_meta
    meta = base_meta(None, "attach", {"pid": pid, "pids": roots, "cgroup": cgroup,
                                      "follow": follow,
                                      "duration_s": duration, "ringbuf_mb": ringbuf_mb,
                                      "profile": profile, "redact": len(redact)})
    meta["capture"] = "profile" if profile else "full"
    status = StatusLine(quiet)
    session = Session(out=outdir, recorder_args=args, meta=meta, on_progress=status,
                      run_mode=False, attach_pids=roots,
                      owner=(user.uid, user.gid) if user else None, profile=profile,
                      py_rate=py_stacks_rate(py_stacks, profile))

    def on_stop(signum, frame):
        session.signal_recorder(signal.SIGINT)

    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGTERM, on_stop)
    start_or_clean_up(session)
    meta = finish_session(session, status, quiet, user, node_report=not no_node_summary,
                          redact=redact)
    sys.exit(EXIT_TRACE if meta.get("state") != "complete" else 0)


@cli.command(context_settings=CONTEXT)
@click.argument("trace", type=click.Path(file_okay=False))
@target_options
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
              help="text for the terminal, json for scripts, md for issue trackers, html "
                   "for a self-contained page with plots.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), metavar="FILE",
              help="Write the report here instead of standard output.")
@click.option("--fail-on", type=click.Choice(FAIL_ON), metavar="LEVEL",
              help="Exit 1 when a finding of this severity or worse exists "
                   "(info|warn|high): gate CI on storage regressions.")
@click.option("--window", metavar="START:END",
              help="Judge only this part of the trace (seconds from its first event, "
                   "e.g. 30:330 or 30:), instead of the detected training window.")
@click.option("--loader-frame", metavar="MODULE:FUNCTION",
              help="The Python function that is the training loop's loader next(), e.g. "
                   "mypkg.data:Batches.__next__ (module as imported, function or qualified "
                   "name). Default: a known loader's (PyTorch DataLoader, tf.data, DALI, "
                   "Hugging Face), else the frame the loop is in while the kernel sees it "
                   "wait. Needs a trace with Python stacks (run --py-stacks).")
@click.option("--kernel-only", is_flag=True,
              help="Judge from the kernel's view alone, as if the trace had no Python stacks "
                   "(the loop's time on its own CPU inside its loader then counts as compute): "
                   "to compare with a trace taken without them.")
@click.option("-v", "--verbose", is_flag=True,
              help="Text format: show every finding's evidence, files and processes.")
@click.option("--engine", type=click.Choice(ENGINES), default="duckdb", show_default=True,
              help="Query engine of the analysis: duckdb (in this process, out of core) or "
                   "spark (Apache Spark through PySpark: pip install 'iotrace[spark]' and a "
                   "Java 17+ runtime), for trace sets bigger than one machine: each node's "
                   "analysis a task on the executors (see --spark-sql). Both run the same "
                   "rules and give the same report (docs/multinode.md).")
@click.option("--spark-master", metavar="URL", default="local[*]", show_default=True,
              help="--engine spark: the Spark master, e.g. spark://head:7077 or yarn.")
@click.option("--spark-sql", is_flag=True,
              help="--engine spark, a trace set: run every rule's SQL on Spark, node by node "
                   "(about a hundred Spark queries a node: slow), instead of each node's "
                   "analysis as a Spark task (DuckDB on the executor, over that node's files; "
                   "the executors' Python needs iotrace). For executors without iotrace, or "
                   "to check the rules on Spark.")
@click.option("--from-events", is_flag=True,
              help="A trace set: analyse every node's raw events, not the node summaries "
                   "written at the end of each trace.")
def report(trace, target_read, target_write, gpus, per_gpu, config, fmt, output, fail_on,
           window, loader_frame, kernel_only, verbose, engine, spark_master, spark_sql,
           from_events):
    """Say whether the training loop waits for data, why, and what to change.

    \b
    The verdict comes first: the training loop thread(s) found in the trace,
    the share of the training window they waited for data (AU = 1 - that
    share, MLPerf Storage's accelerator utilisation), the time budget
    (compute / data wait / checkpoint) and why the loop waited: its loader
    was blocked in storage reads (fetch), busy on CPU (prep), without a CPU
    (cpu-starved) or handing batches over (transfer). Then the findings,
    ranked by the time they cost the loop: small-chunk reads, random access,
    metadata storms, checkpoint bursts, throughput below target, lock
    contention, worker imbalance, redundant I/O (docs/findings.md documents
    every rule and its thresholds; docs/report-json.md the JSON).

    \b
    Examples:
      iotrace report mytrace --gpus 8 --per-gpu 1GiB/s
      iotrace report mytrace --format html -o report.html
      iotrace report mytrace --format json --fail-on high   # for CI
      iotrace report SET                     # a trace set: one trace per node
      iotrace report SET --engine spark --spark-master spark://head:7077
    """
    targets = targets_from(target_read, target_write, gpus, per_gpu)
    if spark_master != "local[*]" and engine != "spark":
        fail("--spark-master is for --engine spark")
    if spark_sql and engine != "spark":
        fail("--spark-sql is for --engine spark")
    if engine != "spark":
        without_pandas()
    if loader_frame and not re.fullmatch(r"[\w.]+:[\w.<>]+", loader_frame):
        fail(f"--loader-frame {loader_frame!r}: give MODULE:FUNCTION, e.g. "
             "torch.utils.data.dataloader:_BaseDataLoaderIter.__next__")
    sys.exit(emit_report(trace, targets, config, fmt, output, fail_on, window, verbose,
                         Engine(engine, spark_master, spark_sql), from_events, loader_frame,
                         kernel_only))


@cli.command(context_settings=CONTEXT)
@click.argument("trace", type=click.Path(file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True,
              help="json: totals, and per file and per block device what went through "
                   "system calls and mmap, what the page cache served and what the "
                   "devices moved (docs/report-json.md).")
def summary(trace, fmt) -> None:
    """Print what a trace holds: events, bytes, files, processes, drops, and
    where the bytes came from (page cache or storage, which device).

    \b
    Examples:
      iotrace summary mytrace
      iotrace summary mytrace --format json | jq '.files[0]'
    """
    if fmt == "json":
        click.echo(json.dumps(summary_json(open_trace(trace)), indent=1))
    else:
        print_summary(open_trace(trace), out_console)


@cli.command(context_settings=CONTEXT)
@click.argument("trace", type=click.Path(file_okay=False))
@click.option("-o", "--output", "out", metavar="DIR", required=True,
              help="Where to write the redacted copy (a new directory).")
@click.option("-p", "--pattern", "patterns", metavar="PATTERN", multiple=True, required=True,
              help="Regular expression: every path component and command-line word it "
                   "matches (searched within it) is replaced (repeatable).")
@click.option("--force", is_flag=True, help="Replace DIR if it holds an earlier trace.")
def redact(trace, out, patterns, force) -> None:
    """Write a copy of a trace with names replaced, for a trace that leaves
    the machine.

    \b
    Each path component and command-line word that a PATTERN matches becomes
    <redacted:HASH> in every table and in meta.json (equal names get the same
    HASH, so the report still groups them; IOTRACE_REDACT_KEY=KEY gives the
    same HASH across traces). Works on a trace set too.

    \b
    Examples:
      iotrace redact mytrace -o shared -p 'customer_[0-9]+' -p '^secret'
      iotrace report shared
    """
    check_redact(patterns)
    src = Path(trace)
    if not src.is_dir():
        fail(f"{trace}: no such trace directory", EXIT_TRACE)
    if not (src / "meta.json").exists() and not any(src.glob("*/meta.json")):
        fail(f"{trace}: not an iotrace trace (no meta.json)", EXIT_TRACE)
    dst = Path(out)
    if dst.exists() and dst.resolve() == src.resolve():
        fail("-o must be a new directory, not TRACE itself", EXIT_USAGE)
    dst = prepare_outdir(out, "redacted", force)
    from .redact import redact_trace
    try:
        r = redact_trace(src, dst, patterns)
    except (OSError, ValueError) as e:
        shutil.rmtree(dst, ignore_errors=True)
        fail(f"cannot redact {trace}: {e}", EXIT_TRACE)
    dropped = f"; {r['dropped_files']} files of other kinds left out" \
        if r["dropped_files"] else ""
    say(f"wrote {dst}: {r['names']:,} names redacted ({r['cells']:,} values){dropped}")


@cli.command(context_settings=CONTEXT)
def doctor() -> None:
    """Check whether this machine can trace, and which probes attach.

    Checks privileges, kernel version, BTF and tracefs, then loads and attaches
    every probe family once (and detaches it) to say what works and why not.
    Exit 0 when tracing works (even with optional probes missing), 3 when not.
    """
    from .doctor import run_doctor
    sys.exit(run_doctor(out_console))


from .cli_perfetto import register as register_perfetto  # noqa: E402  (export, view)

register_perfetto(cli, say, fail)

from .cli_whatif import register as register_whatif  # noqa: E402

register_whatif(cli, CONTEXT, fail)

from .cli_exporter import register as register_exporter  # noqa: E402
from .cli_exporter import register_top  # noqa: E402

register_exporter(cli, CONTEXT, fail, check_can_trace)
register_top(cli, CONTEXT, fail, check_can_trace)


def main(argv: Optional[list[str]] = None) -> None:
    try:
        cli.main(args=argv, prog_name="iotrace", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as e:
        click.echo(e.ctx.get_help())
        sys.exit(EXIT_USAGE)
    except click.UsageError as e:
        cmd = e.ctx.command_path if e.ctx else "iotrace"
        say(f"{e.format_message()} (see `{cmd} --help`)")
        sys.exit(EXIT_USAGE)
    except click.Abort:
        say("aborted")
        sys.exit(130)
    except IotraceError as e:
        say(f"{e.message}")
        sys.exit(e.code)
    except (duckdb.Error, pyarrow.ArrowException, UnicodeDecodeError) as e:
        # a damaged Parquet file of the trace, found when a reader's query
        # reaches it (a view is only checked where it is created)
        from .trace import OPENED
        say(unreadable(e, roots=tuple(dict.fromkeys(reversed(OPENED)))).message)
        sys.exit(EXIT_TRACE)
    except BrokenPipeError:
        sys.exit(0)
    except SystemExit:
        raise
    sys.exit(0)
