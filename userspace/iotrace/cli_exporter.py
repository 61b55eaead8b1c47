"""`iotrace exporter`: Prometheus metrics of every training job on a node
(exporter.py; docs/exporter.md). cli.py wires it in with `register(...)`."""
from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable

import click


def _listen(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise click.BadParameter(f"{value!r}: give HOST:PORT, e.g. 127.0.0.1:9464")
    return value


TOP_FILES = 8   # files shown by `iotrace top` (the most read and written of the last 10 s)


def _scratch_dir(prefix: str) -> Path:
    """A new directory in /run (memory) where this user may write there, else
    in the temporary directory (a user granted capabilities, not root)."""
    run = Path("/run")
    return Path(tempfile.mkdtemp(prefix=prefix, dir=run if os.access(run, os.W_OK) else None))


def register(cli, context: dict, fail: Callable[..., None], check_can_trace) -> None:
    @cli.command(context_settings=context)
    @click.option("--listen", default="127.0.0.1:9464", show_default=True, metavar="HOST:PORT",
                  help="Where /metrics is served. Localhost unless you say otherwise: the "
                       "metrics name your jobs' cgroups.")
    @click.option("--cgroup-root", required=True, metavar="PATH",
                  help="The cgroup whose sub-cgroups are the jobs (below /sys/fs/cgroup, "
                       "absolute or relative to it), e.g. kubepods.slice or "
                       "system.slice/slurmstepd.scope. Every process below it is traced, "
                       "those that start later too.")
    @click.option("--match", metavar="REGEX",
                  help="A job is the outermost cgroup below the root whose path relative to "
                       "it matches REGEX (whole). Default: every cgroup just below the root.")
    @click.option("--forget-after", type=click.FloatRange(min=0), default=15.0,
                  show_default=True, metavar="SECONDS",
                  help="How long a job's series stay after its cgroup is removed (its "
                       "processes' last sums arrive as they exit).")
    @click.option("--spool-dir", metavar="DIR", type=click.Path(file_okay=False),
                  help="Where the recorder's output waits to be read (a few seconds' worth; "
                       "deleted as read). Default: a new directory under /run or /tmp.")
    @click.option("--no-loop-waits", is_flag=True,
                  help="Do not measure the training loops' data waits (no scheduler hooks: "
                       "a little less cost on every context switch of the node; "
                       "bench/exporter_cost.py measures it).")
    @click.option("--no-http", is_flag=True,
                  help="Do not count the jobs' HTTP requests (object storage): no capture of "
                       "message starts on sockets and no probes on OpenSSL/GnuTLS, whose "
                       "probes every process that uses those libraries pays.")
    @click.option("--top-files", type=click.IntRange(0, 100), default=0, show_default=True,
                  metavar="N",
                  help="Also export each job's N most read and written files of the last "
                       "10 s, by path (iotrace_top_file_read_bytes{cgroup,file}). Off by "
                       "default: it puts your jobs' file names in the metrics.")
    def exporter(listen, cgroup_root, match, forget_after, spool_dir, no_loop_waits, no_http,
                 top_files):
        """Serve Prometheus metrics of the I/O of every job on this node.

        \b
        Follows every process below --cgroup-root (a profile: calls summed in
        the kernel, no record per call) and serves, per job (label `cgroup`,
        the job's cgroup relative to the root):
          iotrace_read_bytes_total, iotrace_write_bytes_total,
          iotrace_storage_read_bytes_total   (what the page cache had to read)
          iotrace_calls_total{op}, iotrace_call_seconds_total{op}
          iotrace_device_bytes_total{device,op}
          iotrace_loop_data_wait_seconds_total{rank}   (the training loop
            blocked until its loader's worker processes handed it data:
            rate() is the data-wait share, 1 - AU; iotrace_loops says
            whether a loop fed by worker processes was found)
          iotrace_mount_{read,write,storage_read}_bytes_total{mount},
          iotrace_mount_io_seconds_total{mount,op}   (files, per mount:
            checkpoints' bytes and write and sync time)
          iotrace_http_requests_total{endpoint,method,status},
          iotrace_http_throttled_total{endpoint}, iotrace_http_retries_total
            (object storage, over HTTP or through OpenSSL/GnuTLS)
        and per device iotrace_device_request_seconds (a histogram), with
        iotrace_records_dropped_total and iotrace_jobs. A job whose cgroup
        is removed leaves /metrics 15 s later (--forget-after). No file
        names are exported unless --top-files asks for them.

        \b
        Examples:
          sudo iotrace exporter --cgroup-root kubepods.slice --match '.*/kubepods-pod[^/]*\\.slice'
          sudo iotrace exporter --cgroup-root system.slice/slurmstepd.scope --match 'job_[0-9]+'
          sudo iotrace exporter --cgroup-root iotrace-jobs --listen 0.0.0.0:9464

        Stop it with Ctrl-C or SIGTERM: the probes are removed as it exits.
        """
        try:
            import prometheus_client  # noqa: F401
        except ImportError:
            fail("the exporter needs the prometheus_client package: pip install "
                 "prometheus-client (make installs it)")
        if match:
            try:
                re.compile(match)
            except re.error as e:
                fail(f"--match {match!r} is not a regular expression: {e}")
        _listen(listen)
        from .live_jobs import cgroup_root_dir
        root = cgroup_root_dir(cgroup_root)
        if not root.is_dir():
            fail(f"--cgroup-root {cgroup_root}: {root} is not a cgroup directory (the "
                 "cgroup v2 tree is under /sys/fs/cgroup)")
        check_can_trace()
        from .exporter import serve
        base = Path(spool_dir) if spool_dir else _scratch_dir("iotrace-exporter-")
        spool = base / "spool"
        stop = threading.Event()

        def on_signal(signum, frame):
            stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

        def ready(rec):
            click.echo(f"iotrace exporter: serving http://{listen}/metrics for the jobs below "
                       f"{root} (Ctrl-C to stop)", err=True)

        try:
            serve(listen, cgroup_root, match, spool, stop, ready=ready,
                  forget_after_s=forget_after, loop_waits=not no_loop_waits,
                  http=not no_http, top_files=top_files)
        except OSError as e:
            fail(f"cannot serve on {listen}: {e.strerror or e}", 3)
        finally:
            shutil.rmtree(spool, ignore_errors=True)
            if not spool_dir:
                shutil.rmtree(base, ignore_errors=True)
        sys.exit(0)


def register_top(cli, context: dict, fail: Callable[..., None], check_can_trace) -> None:
    @cli.command(context_settings=context)
    @click.option("--cgroup-root", metavar="PATH",
                  help="Show every job below this cgroup (as `iotrace exporter` counts them).")
    @click.option("--match", metavar="REGEX",
                  help="With --cgroup-root: which cgroups below it are jobs (as the exporter).")
    @click.option("--pid", "pids", type=int, multiple=True, metavar="PID",
                  help="Show this process and the ones it starts (repeatable).")
    def top(cgroup_root, match, pids):
        """Watch the I/O of running jobs, live, in the terminal.

        \b
        Refreshed every second: per job its read and write rates (MiB/s),
        read and write calls a second, what the page cache had to read from
        storage and its hit share, its threads' time in reads and writes
        (threads in I/O on average); per block device its rates, requests a
        second and mean latency. Rates are over the last 5 s. Keys: s
        changes the sort (read, write, read IOPS, from storage), q quits
        (Ctrl-C too). A profile: the calls are summed in the kernel.

        \b
        Examples:
          sudo iotrace top --pid 4242
          sudo iotrace top --cgroup-root kubepods.slice --match '.*/kubepods-pod[^/]*\\.slice'
        """
        if bool(cgroup_root) == bool(pids):
            fail("give --cgroup-root PATH or --pid PID (one of them)")
        if match and not cgroup_root:
            fail("--match is for --cgroup-root")
        if not sys.stdout.isatty():
            fail("iotrace top draws on a terminal; for numbers a program reads, run "
                 "`iotrace exporter` and scrape /metrics")
        from .exporter import Sums
        from .live_feed import LiveRecorder
        from .live_jobs import Jobs, PidJobs, cgroup_root_dir
        from .top import run
        if cgroup_root:
            root = cgroup_root_dir(cgroup_root)
            if not root.is_dir():
                fail(f"--cgroup-root {cgroup_root}: {root} is not a cgroup directory")
            if match:
                try:
                    re.compile(match)
                except re.error as e:
                    fail(f"--match {match!r} is not a regular expression: {e}")
            jobs = Jobs(str(root), match)
            title = f"iotrace top: the jobs below {root}"
        else:
            missing = [p for p in pids if not Path(f"/proc/{p}").exists()]
            if missing:
                fail(f"no process {missing[0]} (is it running?)", 3)
            jobs = PidJobs(list(pids))
            title = "iotrace top: " + ", ".join(sorted(jobs.live))
        check_can_trace()
        base = _scratch_dir("iotrace-top-")
        rec = LiveRecorder(base / "spool", cgroup_root=str(jobs.root) if cgroup_root else None,
                           pids=pids, file_sums=True)
        stop = threading.Event()
        signal.signal(signal.SIGINT, lambda *a: stop.set())
        signal.signal(signal.SIGTERM, lambda *a: stop.set())
        why = "quit"
        try:
            rec.start()
            why = run(rec, Sums(jobs, top_files=TOP_FILES), title, stop)
        finally:
            rec.stop()
            shutil.rmtree(base, ignore_errors=True)
        if why not in ("quit",):
            click.echo(f"iotrace top: {why}", err=True)
