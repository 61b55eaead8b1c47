"""Go's crypto/tls: real Go S3 clients over HTTPS (a local CA) against moto's
S3 server, through the proxy that answers 503 SlowDown to every N-th request.
rclone from Debian (Go 1.19, stripped) copies a bucket; a minio-go program
built here (this machine's Go) puts, lists, gets and range-gets. Requests and
their statuses must equal the proxy's count; bytes, what the clients got."""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from conftest import ROOT, iotrace_cmd, needs_root, rows, scalar, trace_run

objstore = pytest.importorskip("objstore")
pytest.importorskip("moto")
pytest.importorskip("boto3")

pytestmark = needs_root()

GO_S3 = ROOT / "build" / "go-s3-client"
GO_TLS_LOOP = ROOT / "build" / "go-tls-loop"
N_OBJECTS = 12


def go_env(ca: Path) -> dict:
    """Go's clients trust the local CA through SSL_CERT_FILE; AWS_CA_BUNDLE
    (set on some machines) would make rclone's AWS SDK refuse its transport."""
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    env["SSL_CERT_FILE"] = str(ca)
    return env


def status_counts(trace) -> dict:
    return dict(rows(trace, "select status, count(*) from requests group by 1"))


def check_against_proxy(trace, seen: dict) -> None:
    """Every request the proxy answered, with its status: throttled ones 503
    SlowDown, each retried; the others the server's answers."""
    assert scalar(trace, "select count(*) from requests") == seen["requests"]
    st = status_counts(trace)
    assert st.get(503, 0) == seen["throttled"] > 0, (st, seen)
    assert sum(n for s, n in st.items() if s != 503) == seen["forwarded"], (st, seen)
    assert rows(trace, "select distinct error_code from requests where status = 503") == [
        ("SlowDown",)]
    # each refused request tried again (the server's own 5xx too, if any: moto's 500s)
    upstream_5xx = sum(n for st, n in seen["upstream_status"].items() if int(st) >= 500)
    assert scalar(trace, "select count(*) from requests where retry") == \
        seen["throttled"] + upstream_5xx
    assert rows(trace, "select distinct tls, tls_library from requests") == [
        (True, "go-crypto/tls")]
    # over the wire only ciphertext: the HTTP came from the TLS plaintext
    assert scalar(trace, "select count(*) from events where http is not null "
                         "and op not like 'tls_%' and http not like 'TLS ClientHello%'") == 0
    assert scalar(trace, "select count(*) from requests where peer is null") == 0


@pytest.mark.skipif(not GO_TLS_LOOP.exists(), reason="build/go-tls-loop not built (make test "
                                                      "builds it with Go)")
def test_go_tls_calls_exact(tmp_path):
    """A Go program (the standard library only) exchanging 200-byte requests
    and replies over crypto/tls with a server in the same process: every
    Read and Write of both ends, and their plaintext bytes, exactly; each
    request's start captured. Cheap enough for the 6.1 VM, where the probes
    go in one at a time (no uprobe_multi links before 6.6)."""
    n = 500
    proc, trace = trace_run(tmp_path / "trace", str(GO_TLS_LOOP), "loop", str(n))
    assert proc.returncode == 0, proc.stderr[-2000:]
    # the handshake moves no plaintext through Read/Write: only the pairs
    got = rows(trace, """select op, count(*), sum(ret), count(http) filter (where http
                         like 'GET /bucket/key HTTP/1.1%'), count(http) filter (where http
                         like 'HTTP/1.1 200%') from events where op like 'tls_%'
                         and ret > 0 group by 1 order by 1""")
    assert got == [("tls_read", 2 * n, 400 * n, n, n), ("tls_write", 2 * n, 400 * n, n, n)], got
    assert scalar(trace, "select count(distinct flags) from events where op like 'tls_%'") == 1
    assert scalar(trace, "select count(*) from requests") == n
    assert rows(trace, "select distinct tls_library, status from requests") == [
        ("go-crypto/tls", 200)]
    attached = trace.meta["probes"]["attached"]
    assert f"TLS Go crypto/tls.(*Conn).Read ({GO_TLS_LOOP})" in attached, attached


@pytest.mark.skipif(not GO_TLS_LOOP.exists(), reason="build/go-tls-loop not built")
def test_go_program_the_job_starts_is_probed_and_late_said(tmp_path):
    """A Go program a job's shell starts is probed at its exec: the calls it
    made before are not in the trace, and the trace says how late the probes
    came; the program's next run is seen whole."""
    n1, n2 = 20000, 500
    proc, trace = trace_run(tmp_path / "trace", "sh", "-c",
                            f"{GO_TLS_LOOP} loop {n1}; {GO_TLS_LOOP} loop {n2}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    per_pid = rows(trace, """select pid, count(*) filter (where op = 'tls_read'),
                             count(*) filter (where op = 'tls_write') from events
                             where op like 'tls_%' and ret > 0 group by 1 order by min(ts_ns)""")
    assert len(per_pid) == 2, per_pid
    (first, r1, w1), (second, r2, w2) = per_pid
    assert (r2, w2) == (2 * n2, 2 * n2)
    assert 0 < r1 <= 2 * n1 and 0 < w1 <= 2 * n1
    (late,) = trace.meta["probes"]["tls_probed_after_start"]
    assert late["pid"] == first and late["path"] == str(GO_TLS_LOOP) and late["after_ms"] > 0
    assert trace.meta["probes"]["tls_libraries_mapped"] == [str(GO_TLS_LOOP)]
    text = iotrace_cmd("summary", str(trace.root)).stdout
    assert f"TLS seen late: {GO_TLS_LOOP} (pid {first})" in text


@pytest.mark.skipif(not GO_TLS_LOOP.exists(), reason="build/go-tls-loop not built")
def test_go_programs_over_the_probe_limit_are_listed(tmp_path):
    """A job that runs 40 different Go programs (copies of one: each its own
    file): the recorder probes 32 TLS libraries and programs at most; every
    program is either probed or listed as over the limit, none dropped
    without a word."""
    copies = []
    for i in range(40):
        c = tmp_path / f"go-tls-{i:02d}"
        shutil.copy(GO_TLS_LOOP, c)
        copies.append(c)
    proc, trace = trace_run(tmp_path / "trace", "sh", "-c",
                            "; ".join(f"{c} loop 1 && sleep 0.1" for c in copies))
    assert proc.returncode == 0, proc.stderr[-2000:]
    mapped = trace.meta["probes"]["tls_libraries_mapped"]
    over = [sk["probe"] for sk in trace.meta["probes"]["skipped"]
            if "iotrace probes 32 TLS libraries and programs at most" in sk["why"]]
    probed = [c for c in copies if str(c) in mapped]
    listed = [c for c in copies if f"TLS ({c})" in over]
    assert probed and listed, (mapped, over)
    assert sorted(probed + listed) == copies, (len(probed), len(listed))
    text = iotrace_cmd("summary", str(trace.root)).stdout
    assert "TLS libraries and programs at most" in text and str(listed[0]) in text


@pytest.mark.skipif(shutil.which("rclone") is None, reason="rclone missing (apt-get install rclone)")
def test_rclone_copy_over_https(s3, tmp_path):
    port, d = s3
    import boto3
    s3c = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    sizes = {f"rc/{i:03d}.bin": 50_000 + 37 * i for i in range(N_OBJECTS)}
    for k, n in sizes.items():
        s3c.put_object(Bucket="data", Key=k, Body=os.urandom(n))
    ca, cert, key = objstore.make_ca(tmp_path / "ca")
    dst = tmp_path / "dst"
    with objstore.proxy(port, d, throttle_every=3, tls=(cert, key)) as px:
        env = go_env(ca) | {
            "RCLONE_CONFIG_S3_TYPE": "s3", "RCLONE_CONFIG_S3_PROVIDER": "Other",
            "RCLONE_CONFIG_S3_ENDPOINT": f"https://localhost:{px.port}",
            "RCLONE_CONFIG_S3_ACCESS_KEY_ID": "testing",
            "RCLONE_CONFIG_S3_SECRET_ACCESS_KEY": "testing",
            "RCLONE_CONFIG_S3_REGION": "us-east-1", "RCLONE_CONFIG": "/dev/null"}
        proc, trace = trace_run(tmp_path / "trace", shutil.which("rclone"), "copy",
                                "s3:data/rc", str(dst), env=env)
        seen = px.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = {f"rc/{p.name}": p.stat().st_size for p in dst.iterdir()}
    assert got == sizes
    check_against_proxy(trace, seen)
    gets = rows(trace, """select key, bytes from requests where s3_op = 'GetObject'
                          and status = 200 order by key""")
    assert gets == sorted(sizes.items())
    assert scalar(trace, "select count(*) from requests where s3_op = 'ListObjects' "
                         "and status = 200") >= 1
    # rclone first asks whether data/rc is an object: HEAD, 404
    assert rows(trace, "select method, key, status from requests where status = 404") == [
        ("HEAD", "rc", 404)]
    # probed before it started (the command's own binary)
    probes = trace.meta["probes"]["attached"]
    assert f"TLS Go crypto/tls.(*Conn).Read ({shutil.which('rclone')})" in probes, probes


@pytest.mark.skipif(not GO_S3.exists(), reason="build/go-s3-client not built (make test builds "
                                                "it with Go)")
def test_minio_go_over_https(s3, tmp_path):
    """A Go program on minio-go (this machine's Go, not stripped): puts, a
    list, gets and range gets, each request with its status and bytes."""
    port, d = s3
    ca, cert, key = objstore.make_ca(tmp_path / "ca")
    did_path = tmp_path / "did.json"
    with objstore.proxy(port, d, throttle_every=4, tls=(cert, key)) as px:
        proc, trace = trace_run(tmp_path / "trace", str(GO_S3), "--endpoint",
                                f"https://localhost:{px.port}", "--objects", "10",
                                "--out", str(did_path), env=go_env(ca))
        seen = px.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    did = json.loads(did_path.read_text())
    check_against_proxy(trace, seen)
    for op, kind in (("PutObject", "puts"), ("GetObject", "gets")):
        assert rows(trace, f"""select key, bytes from requests where s3_op = '{op}'
                              and status = 200 order by key""") == \
            [tuple(x) for x in sorted(did[kind])], op
    assert rows(trace, """select key, range, bytes from requests where status = 206
                          order by ts_ns""") == [(k, "bytes=100-1099", n) for k, n in did["ranges"]]
    assert scalar(trace, "select count(*) from requests where s3_op = 'ListObjects'") == 1
    # the summary's endpoint, as for OpenSSL clients
    s = json.loads(iotrace_cmd("summary", str(trace.root), "--format", "json").stdout)
    (ep,) = s["endpoints"]
    assert ep["requests"] == seen["requests"] and ep["throttled"] == seen["throttled"], ep
    assert s["opaque_connections"] == []
    # the findings, as for OpenSSL clients: the throttling, request for request
    from test_object_storage import report_findings
    f = report_findings(trace)["throttled"]
    assert f["evidence"]["throttled"] == seen["throttled"]
    assert f["evidence"]["by_status_and_code"] == {"503 SlowDown": seen["throttled"]}


@pytest.mark.skipif(not GO_S3.exists(), reason="build/go-s3-client not built")
def test_no_go_tls_leaves_the_connections_opaque(s3, tmp_path):
    port, d = s3
    ca, cert, key = objstore.make_ca(tmp_path / "ca")
    with objstore.proxy(port, d, tls=(cert, key)) as px:
        proc, trace = trace_run(tmp_path / "trace", str(GO_S3), "--endpoint",
                                f"https://localhost:{px.port}", "--objects", "3",
                                "--ranges", "0", env=go_env(ca), extra=("--no-go-tls",))
        seen = px.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert scalar(trace, "select count(*) from requests") == 0
    skipped = {sk["probe"]: sk["why"] for sk in trace.meta["probes"]["skipped"]}
    assert skipped.get("TLS Go crypto/tls") == "turned off (--no-go-tls)", skipped
    assert not any("Go crypto/tls" in p for p in trace.meta["probes"]["attached"])
    s = json.loads(iotrace_cmd("summary", str(trace.root), "--format", "json").stdout)
    (op,) = s["opaque_connections"]
    assert (op["host"], op["port"]) == ("127.0.0.1", px.port)
    assert seen["requests"] == 3 + 1 + 3
    # still named: the server name of each connection's ClientHello
    assert op["server_name"] == "localhost" and op["tls_connections"] == op["connections"], op
    assert op["connections"] == scalar(trace, "select count(*) from connections "
                                              f"where peer_port = {px.port}")


HELLO_CLIENT = """
import http.client, ssl, sys
ctx = ssl.create_default_context(cafile=sys.argv[2])
ctx.set_alpn_protocols(["h2", "http/1.1"])
for _ in range(3):
    c = http.client.HTTPSConnection("localhost", int(sys.argv[1]), context=ctx, timeout=30)
    c.request("GET", "/data?list-type=2")
    c.getresponse().read()
    c.close()
"""


def test_opaque_tls_named_by_its_client_hello(s3, tmp_path):
    """TLS iotrace does not read (here: --no-tls) is still named per
    connection by its ClientHello: the server name, and the ALPN protocols
    offered, h2 first (an HTTP/2 client, as gRPC's are)."""
    port, d = s3
    ca, cert, key = objstore.make_ca(tmp_path / "ca")
    with objstore.proxy(port, d, tls=(cert, key)) as px:
        proc, trace = trace_run(tmp_path / "trace", sys.executable, "-c", HELLO_CLIENT,
                                str(px.port), str(ca), extra=("--no-tls",))
        seen = px.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert seen["requests"] == 3
    assert rows(trace, f"select server_name, alpn, tls from connections where peer_port = {px.port}") \
        == [("localhost", "h2,http/1.1", True)] * 3
    s = json.loads(iotrace_cmd("summary", str(trace.root), "--format", "json").stdout)
    (op,) = s["opaque_connections"]
    assert (op["server_name"], op["alpn"], op["http2_offered"], op["connections"]) == (
        "localhost", "h2,http/1.1", 3, 3), op
    text = iotrace_cmd("summary", str(trace.root)).stdout
    assert f"to 127.0.0.1:{px.port} (localhost, offers h2,http/1.1): 3" in text, text
