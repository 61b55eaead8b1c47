"""`iotrace export --perfetto` and `iotrace view`: the Perfetto timeline.

cli.py wires these in with `register(cli, say, fail)`; `iotrace run --perfetto`
calls `export_perfetto(trace_dir, out_path)`.

`view` follows the convention of Perfetto's own `tools/open_trace_in_ui`: the
file is served on 127.0.0.1 port 9001 (the only port the UI's Content Security
Policy lets it fetch from), with `Access-Control-Allow-Origin:
https://ui.perfetto.dev`, and the deep link
https://ui.perfetto.dev/#!/?url=http://127.0.0.1:9001/TOKEN/FILE opens it.

Exposure: the socket is bound to 127.0.0.1 only; the one file is served at a
path with a random token (other paths, directories and `..` get 404); a
GET/HEAD must come from the UI (Origin: https://ui.perfetto.dev, and a Host
of 127.0.0.1 or localhost: no DNS rebinding), else 403; the CORS headers
name that origin only and are sent only to it; the server stops once the UI
has fetched the file (plus a grace period), on --timeout, or on Ctrl-C.
"""
from __future__ import annotations

import http.server
import os
import secrets
import shutil
import socketserver
import sys
import tempfile
import threading
import time
import urllib.parse
import webbrowser
from pathlib import Path
from typing import Optional

import click

from .errors import EXIT_TRACE, EXIT_USAGE

UI_ORIGIN = "https://ui.perfetto.dev"
DEFAULT_PORT = 9001          # the UI's CSP allows http://127.0.0.1:9001 only
GRACE_S = 10.0               # keep serving this long after the first full fetch


def export_perfetto(trace_dir, out_path, report=None, findings: bool = True,
                    max_slices: Optional[int] = None) -> dict:
    """Exports TRACE_DIR as a Perfetto trace at out_path; returns the export's
    stats (events, slices, merged_calls, bytes, seconds, ...). The report's
    findings go on the findings track: `report` if given, else (findings=True)
    the report is built with default targets; a failing report only loses the
    findings track (stats["findings_error"] says why)."""
    from .trace import open_trace
    from .traceset import is_trace_set
    from .viewers.perfetto import MAX_SLICES, export
    if is_trace_set(trace_dir):
        return export_set_perfetto(trace_dir, out_path, findings, max_slices)
    trace = open_trace(trace_dir)
    err = None
    if report is None and findings:
        try:
            from .analyzers.base import Targets
            from .analyzers.report import build_report
            report = build_report(open_trace(trace_dir), Targets())
        except Exception as e:            # the timeline is still worth having
            err = f"{type(e).__name__}: {e}"
    stats = export(trace, out_path, report=report,
                   max_slices=MAX_SLICES if max_slices is None else max_slices)
    if err:
        stats["findings_error"] = err
    return stats


def export_set_perfetto(set_dir, out_path, findings: bool = True,
                        max_slices: Optional[int] = None) -> dict:
    """A trace set as one Perfetto timeline: each host's processes under their
    host's name, all on the set's common time axis (the hosts' clock pairs).
    Each host is exported as for one trace, with its own track ids, and the
    exports are concatenated (a Perfetto trace is a stream of packets)."""
    from .traceset import PID_STRIDE, open_trace_set, set_base_ns, shifted_member
    from .viewers.perfetto import FIRST_UUID, MAX_SLICES, export
    ts = open_trace_set(set_dir)
    base = set_base_ns(ts)
    out_path = Path(out_path)
    per_host = max_slices or MAX_SLICES
    total: dict = {"hosts": len(ts.members), "findings_error": None}
    tmp = out_path.with_name(out_path.name + ".part")
    with open(tmp, "wb") as out:
        for i, m in enumerate(ts.members):
            trace = shifted_member(ts, i, base)
            report = None
            if findings:
                try:
                    from .analyzers.base import Targets
                    from .analyzers.report import build_report
                    report = build_report(trace, Targets())
                    trace = shifted_member(ts, i, base)     # fresh views for the export
                except Exception as e:            # the timeline is still worth having
                    total["findings_error"] = f"{m.host}: {type(e).__name__}: {e}"
            one = out_path.with_name(f"{out_path.name}.{i}")
            stats = export(trace, one, report=report, max_slices=per_host // len(ts.members),
                           first_uuid=FIRST_UUID + i * PID_STRIDE)
            out.write(one.read_bytes())
            one.unlink()
            for k, v in stats.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "max_slices":
                    total[k] = total.get(k, 0) + v
    tmp.replace(out_path)
    total["bytes"] = out_path.stat().st_size
    if not total["findings_error"]:
        total.pop("findings_error")
    return total


def default_output(trace_dir) -> Path:
    """TRACE.pftrace next to the trace directory."""
    p = Path(trace_dir).resolve()
    return p.parent / (p.name + ".pftrace")


def deep_link(port: int, fname: str) -> str:
    return f"{UI_ORIGIN}/#!/?url=http://127.0.0.1:{port}/{urllib.parse.quote(fname)}"


class _Handler(http.server.BaseHTTPRequestHandler):
    server_version = "iotrace"
    sys_version = ""

    def log_message(self, fmt, *args):          # quiet: the CLI says what matters
        pass

    def _from_ui(self) -> bool:
        """The request comes from the UI's page (its Origin) through loopback
        (its Host: a rebound DNS name is refused)."""
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0].strip("[]").lower()
        return (self.headers.get("Origin") == self.server.allow_origin
                and host in ("127.0.0.1", "localhost", "::1"))

    def _cors(self):
        if not self._from_ui():
            self.send_header("Cache-Control", "no-cache")
            return
        self.send_header("Access-Control-Allow-Origin", self.server.allow_origin)
        self.send_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
        self.send_header("Access-Control-Allow-Headers", "*")
        # Chrome's Private Network Access: a public site fetching from 127.0.0.1
        self.send_header("Access-Control-Allow-Private-Network", "true")
        self.send_header("Cache-Control", "no-cache")

    def do_OPTIONS(self):
        self.send_response(204)
        self._cors()
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _head(self) -> bool:
        if self.path.split("?")[0] != self.server.url_path:
            self.send_response(404)
            self._cors()
            self.send_header("Content-Length", "0")
            self.end_headers()
            return False
        if not self._from_ui():
            self.send_response(403)
            self._cors()
            self.send_header("Content-Length", "0")
            self.end_headers()
            return False
        self.send_response(200)
        self._cors()
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(self.server.size))
        self.end_headers()
        return True

    def do_HEAD(self):
        self._head()

    def do_GET(self):
        if not self._head():
            return
        with open(self.server.path, "rb") as f:
            try:
                shutil.copyfileobj(f, self.wfile, 1 << 20)
            except (BrokenPipeError, ConnectionResetError):
                return
        self.server.fetched_at = time.monotonic()

    def do_POST(self):
        self.send_response(404)
        self._cors()
        self.send_header("Content-Length", "0")
        self.end_headers()


class TraceServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """Serves one file on 127.0.0.1 with the CORS headers ui.perfetto.dev needs."""
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, path, port: int = DEFAULT_PORT, allow_origin: str = UI_ORIGIN):
        self.path = str(path)
        self.fname = os.path.basename(self.path)
        # a random path: another local user cannot guess it
        self.token = secrets.token_urlsafe(16)
        self.url_path = f"/{self.token}/{urllib.parse.quote(self.fname)}"
        self.size = os.path.getsize(self.path)
        self.allow_origin = allow_origin
        self.fetched_at: Optional[float] = None
        super().__init__(("127.0.0.1", port), _Handler)

    @property
    def port(self) -> int:
        return self.server_address[1]

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.url_path}"

    def deep_link(self) -> str:
        return deep_link(self.port, f"{self.token}/{self.fname}")

    def serve_until_fetched(self, grace_s: float = GRACE_S,
                            timeout_s: Optional[float] = None) -> bool:
        """Serves until the file was fetched once and grace_s passed (the UI may
        fetch again), or timeout_s; True if it was fetched."""
        t = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.1},
                             daemon=True)
        t.start()
        start = time.monotonic()
        try:
            while True:
                now = time.monotonic()
                if self.fetched_at is not None and now - self.fetched_at >= grace_s:
                    return True
                if timeout_s is not None and now - start >= timeout_s:
                    return self.fetched_at is not None
                time.sleep(0.1)
        finally:
            self.shutdown()
            self.server_close()


def _can_open_browser() -> bool:
    if sys.platform == "darwin" or os.name == "nt":
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _open_browser(url: str) -> bool:
    if not _can_open_browser():
        return False
    try:
        return bool(webbrowser.open_new_tab(url))
    except Exception:
        return False


def _is_fresh(pftrace: Path, trace_dir: Path) -> bool:
    """The .pftrace is newer than every file of the trace."""
    if not pftrace.is_file():
        return False
    newest = max((p.stat().st_mtime for p in [trace_dir / "meta.json",
                                              *trace_dir.glob("*.parquet"),
                                              *(trace_dir / "events").glob("*.parquet")]
                  if p.exists()), default=0)
    return pftrace.stat().st_mtime >= newest


def _summary_line(stats: dict) -> str:
    s = (f"{stats['events']:,} events -> {stats['slices']:,} slices, "
         f"{stats['bytes'] / 1e6:,.1f} MB in {stats['seconds']:.1f} s")
    if stats.get("merged_calls"):
        s += (f"; over the {stats['max_slices']:,}-slice limit: {stats['merged_calls']:,} calls "
              f"shorter than {_ns(stats['merge_below_ns'])} merged into "
              f"{stats['merged_slices']:,} slices per {_ns(stats['merge_window_ns'])} window")
    return s


def _ns(v) -> str:
    if v is None:
        return "any"
    for unit, d in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if v >= d:
            return f"{v / d:g} {unit}"
    return f"{v} ns"


def register(cli, say, fail) -> None:
    """Adds `export` and `view` to the iotrace click group."""
    ctx_settings = dict(help_option_names=["-h", "--help"], max_content_width=100)

    @cli.command(context_settings=ctx_settings)
    @click.option("--perfetto", "perfetto", is_flag=True, required=True,
                  help="Write a Perfetto timeline (.pftrace, native protobuf).")
    @click.argument("trace", type=click.Path(file_okay=False))
    @click.option("-o", "--output", type=click.Path(dir_okay=False), metavar="FILE",
                  help="Where to write it (default: TRACE.pftrace next to TRACE).")
    @click.option("--max-slices", type=click.IntRange(min=1), default=None, metavar="N",
                  help="Size limit: above N slices, runs of short calls are merged "
                       "(default 2,000,000; docs/perfetto.md).")
    @click.option("--no-findings", is_flag=True,
                  help="Skip the report (no findings track; faster on big traces).")
    def export(perfetto, trace, output, max_slices, no_findings):
        """Export a trace, e.g. as a Perfetto timeline for ui.perfetto.dev.

        \b
        Examples:
          iotrace export --perfetto mytrace                 writes mytrace.pftrace
          iotrace export --perfetto mytrace -o run1.pftrace
        Open the file at https://ui.perfetto.dev, or use `iotrace view mytrace`.
        """
        out = Path(output) if output else default_output(trace)
        try:
            stats = export_perfetto(trace, out, findings=not no_findings,
                                    max_slices=max_slices)
        except OSError as e:
            fail(f"cannot write {out}: {e.strerror or e}", EXIT_TRACE)
        if stats.get("findings_error"):
            say(f"no findings track: the report failed ({stats['findings_error']})")
        say(f"wrote {out}: {_summary_line(stats)}")

    @cli.command(context_settings=ctx_settings)
    @click.argument("trace", type=click.Path(exists=False))
    @click.option("--port", default=DEFAULT_PORT, show_default=True,
                  type=click.IntRange(0, 65535),
                  help="Port on 127.0.0.1 (ui.perfetto.dev only fetches from 9001).")
    @click.option("--no-browser", is_flag=True, help="Print the link, don't open a browser.")
    @click.option("--html", "html", is_flag=True,
                  help="Open the HTML report instead of the Perfetto timeline.")
    @click.option("--timeout", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
                  help="Stop serving after this long even if the UI never fetched the file.")
    def view(trace, port, no_browser, html, timeout):
        """Open a trace's timeline in the Perfetto UI (ui.perfetto.dev).

        TRACE is a trace directory (exported to TRACE.pftrace first, unless
        that file is up to date) or a .pftrace file. The file is served on
        127.0.0.1 until the UI has fetched it (plus a few seconds) or Ctrl-C.
        On a remote machine, forward the port first: ssh -L 9001:127.0.0.1:9001.
        """
        tpath = Path(trace)
        if not tpath.exists():
            fail(f"{trace}: no such trace directory or file", EXIT_TRACE)
        if html:
            _view_html(tpath, no_browser, say, fail)
            return
        if tpath.is_dir():
            out = default_output(tpath)
            if _is_fresh(out, tpath):
                say(f"using {out} (up to date)")
            else:
                if not os.access(out.parent, os.W_OK):
                    out = Path(tempfile.mkdtemp(prefix="iotrace-view-")) / out.name
                stats = export_perfetto(tpath, out)
                say(f"wrote {out}: {_summary_line(stats)}")
        else:
            out = tpath
        try:
            server = TraceServer(out, port)
        except OSError as e:
            fail(f"cannot serve on 127.0.0.1:{port}: {e.strerror or e} "
                 f"(another `iotrace view` or trace_processor running? stop it, or use "
                 f"--port, though ui.perfetto.dev only fetches from port 9001)", EXIT_USAGE)
        link = server.deep_link()
        if server.port != DEFAULT_PORT:
            say(f"note: ui.perfetto.dev only fetches from port {DEFAULT_PORT}; with port "
                f"{server.port}, open {UI_ORIGIN} and load {out} by hand if the link fails")
        opened = False if no_browser else _open_browser(link)
        say(("opened " if opened else "open this link in a browser: ") + link)
        say(f"serving {out} on 127.0.0.1:{server.port} until the UI has loaded it "
            f"(Ctrl-C to stop)")
        try:
            fetched = server.serve_until_fetched(timeout_s=timeout)
        except KeyboardInterrupt:
            say("stopped")
            return
        say("the UI has loaded the trace; stopped serving" if fetched
            else "timed out before the UI fetched the trace")


def _view_html(tpath: Path, no_browser: bool, say, fail) -> None:
    try:
        from .viewers.html import render_html
    except ImportError:
        fail("the HTML report is not available in this iotrace", EXIT_USAGE)
    if not tpath.is_dir():
        fail(f"{tpath}: --html needs a trace directory", EXIT_USAGE)
    from .analyzers.base import Targets
    from .analyzers.report import build_report
    from .trace import open_trace
    report = build_report(open_trace(tpath), Targets())
    text = render_html(report, open_trace(tpath))
    p = tpath.resolve()
    out = p.parent / (p.name + ".report.html")
    if not os.access(out.parent, os.W_OK):
        out = Path(tempfile.mkdtemp(prefix="iotrace-view-")) / out.name
    out.write_text(text)
    url = out.as_uri()
    opened = False if no_browser else _open_browser(url)
    say(("opened " if opened else "wrote ") + str(out) + ("" if opened else
                                                          " (open it in a browser)"))
