"""`iotrace view` exposes one file, on loopback, to the Perfetto UI only, for a
while: the server binds 127.0.0.1, serves the one file at its random path
(nothing else: no listing, no `..`), answers the UI's origin only (CORS header
to it alone, 403 to other origins and to a rebound Host), and stops after the
fetch or on its timeout."""
from __future__ import annotations

import http.client
import subprocess
import threading
import time
import urllib.parse

from conftest import IOTRACE

from iotrace.cli_perfetto import UI_ORIGIN, TraceServer

UI = {"Origin": UI_ORIGIN}


def _get(srv, path, headers=None, method="GET"):
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    try:
        c.request(method, path, headers=headers or {})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def test_view_serves_one_file_to_the_ui_on_loopback(tmp_path):
    f = tmp_path / "x.pftrace"
    f.write_bytes(b"\x0a\x00" * 100)
    (tmp_path / "secret.txt").write_text("not to be served")
    srv = TraceServer(f, port=0)
    done = {}
    th = threading.Thread(target=lambda: done.setdefault(
        "fetched", srv.serve_until_fetched(grace_s=0.2, timeout_s=20)))
    th.start()
    try:
        assert srv.server_address[0] == "127.0.0.1"
        path = urllib.parse.urlsplit(srv.url()).path
        assert len(srv.token) >= 16 and path == f"/{srv.token}/x.pftrace"
        # only the one path: no directory, no other file, no traversal, no guess
        for other in ["/", f"/{srv.token}/", f"/{srv.token}", "/x.pftrace", "/secret.txt",
                      f"/{srv.token}/secret.txt", f"/{srv.token}/../secret.txt",
                      f"/{srv.token}/%2e%2e/secret.txt", "/../secret.txt",
                      f"/{srv.token}/x.pftrace/../secret.txt"]:
            status, hdrs, body = _get(srv, other, UI)
            assert status == 404 and body == b"", other
        # another origin, or none (curl, a same-origin page after DNS rebinding)
        for headers in [{}, {"Origin": "https://evil.example"},
                        {"Origin": "http://ui.perfetto.dev"},
                        {**UI, "Host": "evil.example:9001"}]:
            status, hdrs, body = _get(srv, path, headers)
            assert status == 403 and body == b"", headers
            assert "Access-Control-Allow-Origin" not in hdrs, headers
        status, hdrs, _ = _get(srv, path, {"Origin": "https://evil.example",
                                           "Access-Control-Request-Method": "GET"}, "OPTIONS")
        assert "Access-Control-Allow-Origin" not in hdrs
        assert done == {}           # refused requests are no fetch
        status, hdrs, body = _get(srv, path, UI)
        assert status == 200 and body == f.read_bytes()
        assert hdrs["Access-Control-Allow-Origin"] == UI_ORIGIN
    finally:
        th.join(30)
    assert done["fetched"] is True          # it stopped serving after the fetch
    try:
        _get(srv, path, UI)
        raise AssertionError("still serving")
    except OSError:
        pass


def test_view_stops_on_its_timeout(tmp_path):
    f = tmp_path / "y.pftrace"
    f.write_bytes(b"\x0a\x00")
    start = time.monotonic()
    res = subprocess.run([*IOTRACE, "view", str(f), "--no-browser", "--port", "0",
                          "--timeout", "0.5"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - start < 30
    assert "timed out" in res.stderr and "127.0.0.1" in res.stderr
