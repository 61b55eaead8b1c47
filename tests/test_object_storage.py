"""Object storage: real S3 clients (boto3, s3fs) against a real S3 server process
(moto's server mode) on loopback, plain HTTP and TLS (a local CA), through a
proxy that answers 503 SlowDown to every N-th request. The requests table must
equal what the clients did (their own record of keys, sizes and retries) and
what the proxy saw (its count of requests and throttled answers)."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections import Counter

import pytest

from conftest import WORKLOADS, iotrace_cmd, needs_root, rows, scalar, trace_run, wait_for
from iotrace.summary import summary_json

objstore = pytest.importorskip("objstore")
pytest.importorskip("moto")
pytest.importorskip("boto3")

pytestmark = needs_root()

N_OBJECTS, SIZE, RANGES = 20, 10_000, 5


def run_client(tmp_path, endpoint: str, ca=None, extra=(), iotrace_extra=()):
    out = tmp_path / "client.json"
    cmd = [sys.executable, str(WORKLOADS / "s3_client.py"), "--endpoint", endpoint,
           "--bucket", "data", "--out", str(out), "--objects", str(N_OBJECTS),
           "--size", str(SIZE), "--ranges", str(RANGES), *extra]
    if ca:
        cmd += ["--ca", str(ca)]
    proc, trace = trace_run(tmp_path / "trace", *cmd, extra=tuple(iotrace_extra))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return trace, json.loads(out.read_text())


HTTP_CLIENT = """
import http.client, json, sys
port, names = int(sys.argv[1]), sys.argv[2:]
got = []
for n in names:
    c = http.client.HTTPConnection("127.0.0.1", port)
    c.request("GET", "/" + n)
    r = c.getresponse()
    got.append([n, r.status, len(r.read())])
    c.close()
c = http.client.HTTPConnection("127.0.0.1", port)
c.request("HEAD", "/" + names[0])
r = c.getresponse(); r.read(); got.append([names[0], r.status, 0]); c.close()
c = http.client.HTTPConnection("127.0.0.1", port)
c.request("GET", "/missing.bin")
r = c.getresponse(); body = r.read(); got.append(["missing.bin", r.status, len(body)]); c.close()
print(json.dumps(got))
"""


def test_plain_http_requests_and_connections(tmp_path):
    """Python's http.client against Python's http.server (no S3 API): every
    GET, HEAD and 404 with its status and body bytes, one connection each,
    peer and Host port right. Cheap enough for the 6.1 VM."""
    d = tmp_path / "www"
    d.mkdir()
    sizes = {f"shard-{i}.bin": 30_000 + 4_321 * i for i in range(6)}
    for n, size in sizes.items():
        (d / n).write_bytes(b"z" * size)
    port = objstore.free_port()
    srv = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                            "--directory", str(d), str(port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        objstore.wait_port(port)
        proc, trace = trace_run(tmp_path / "trace", sys.executable, "-c", HTTP_CLIENT,
                                str(port), *sizes)
    finally:
        srv.terminate()
        srv.wait()
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [g[2] for g in got[:len(sizes)]] == list(sizes.values())
    reqs = rows(trace, """select method, path, status, bytes, s3_op, host, port, peer
                          from requests order by ts_ns""")
    assert reqs == [("GET", "/" + n, st, b, None, "127.0.0.1", port, f"127.0.0.1:{port}")
                    for n, st, b in got[:len(sizes)]] + [
        ("HEAD", "/" + got[-2][0], 200, 0, None, "127.0.0.1", port, f"127.0.0.1:{port}"),
        ("GET", "/missing.bin", 404, got[-1][2], None, "127.0.0.1", port,
         f"127.0.0.1:{port}")]
    conns = rows(trace, "select peer, requests, bytes_received > 0 from connections")
    assert conns == [(f"127.0.0.1:{port}", 1, True)] * (len(sizes) + 2)
    # what the connections received is what the socket calls received
    assert scalar(trace, "select sum(bytes_received) from connections") == scalar(
        trace, "select sum(ret) from events where fd_kind = 'socket' and mode = 2 "
               "and op in ('recvfrom', 'read', 'recvmsg', 'readv') and ret > 0")


def check_against_client(trace, did: dict) -> None:
    """Successful requests: keys, sizes and kinds equal the client's record."""
    puts = rows(trace, """select key, bytes from requests where s3_op = 'PutObject'
                          and status = 200 order by key""")
    assert puts == [tuple(p) for p in sorted(did["puts"])]
    gets = rows(trace, """select key, bytes from requests where s3_op = 'GetObject'
                          and status = 200 order by key""")
    assert gets == [tuple(g) for g in sorted(did["gets"])]
    ranged = rows(trace, """select key, range, bytes from requests
                            where s3_op = 'GetObject' and status = 206 order by ts_ns""")
    first = did["puts"][0][0]
    assert ranged == [(first, f"bytes={k * 1024}-{k * 1024 + 1023}", 1024)
                      for k in range(RANGES)]
    assert rows(trace, """select bucket, query like '%list-type=2%' from requests
                          where s3_op = 'ListObjects' and status = 200""") == [("data", True)]
    # every request is tied to its connection, and its time to first byte
    # lies inside its duration
    assert scalar(trace, "select count(*) from requests where peer is null") == 0
    assert scalar(trace, """select count(*) from requests
                            where not (ttfb_ns > 0 and ttfb_ns <= dur_ns)""") == 0


def test_boto3_plain_http_throttled(s3, tmp_path):
    port, d = s3
    with objstore.proxy(port, d, throttle_every=4) as px:
        trace, did = run_client(tmp_path, f"http://127.0.0.1:{px.port}")
        seen = px.stop()
    assert seen["throttled"] > 0
    check_against_client(trace, did)
    # what the proxy answered, request for request
    assert scalar(trace, "select count(*) from requests") == seen["requests"]
    by_status = dict(rows(trace, "select status, count(*) from requests group by 1"))
    assert by_status.get(503, 0) == seen["throttled"]
    assert by_status.get(200, 0) + by_status.get(206, 0) == seen["forwarded"]
    assert dict(rows(trace, """select method, count(*) from requests where status = 503
                               group by 1""")) == seen["throttled_by_method"]
    assert scalar(trace, """select count(*) from requests where status = 503
                            and error_code = 'SlowDown'""") == seen["throttled"]
    # the SDK's retries: botocore's own count (RetryAttempts of each response)
    assert scalar(trace, "select count(*) from requests where retry") == did["retries"]
    assert did["retries"] == seen["throttled"]   # each throttled call retried once
    # the JSON summary's endpoint
    s = json.loads(iotrace_cmd("summary", str(trace.root), "--format", "json").stdout)
    (ep,) = s["endpoints"]
    assert (ep["host"], ep["port"], ep["tls"]) == ("127.0.0.1", px.port, False)
    assert ep["requests"] == s["requests_total"] == seen["requests"]
    assert ep["status_counts"].get("503") == seen["throttled"]
    assert ep["throttled"] == seen["throttled"] and ep["retries"] == did["retries"]
    sent = scalar(trace, "select sum(ret) from events where op in ('sendto', 'sendmsg', "
                         "'write', 'writev') and fd_kind = 'socket' and mode = 2 and ret > 0")
    assert ep["bytes_sent"] == sent
    assert ep["object_bytes_read"] == sum(n for _, n in did["gets"]) + 1024 * RANGES + \
        scalar(trace, "select sum(bytes) from requests where s3_op = 'ListObjects' "
                      "and status = 200")
    # no credentials in the trace: the signature and the key id are not kept
    assert scalar(trace, "select count(*) from events where http ilike '%authorization%' "
                         "or http ilike '%signature%' or http like '%testing%'") == 0


def test_boto3_tls(s3, tmp_path):
    port, d = s3
    ca, cert, key = objstore.make_ca(d / "ca")
    with objstore.proxy(port, d, tls=(cert, key)) as px:
        trace, did = run_client(tmp_path, f"https://localhost:{px.port}", ca=ca)
        seen = px.stop()
    check_against_client(trace, did)
    assert scalar(trace, "select count(*) from requests") == seen["requests"]
    assert rows(trace, "select distinct tls, tls_library, host, port from requests") == [
        (True, "openssl", "localhost", px.port)]
    # what went over the wire is not HTTP: only the TLS plaintext was parsed
    assert scalar(trace, "select count(*) from events where http is not null "
                         "and op not like 'tls_%' and http not like 'TLS ClientHello%'") == 0
    conns = rows(trace, "select tls, sum(requests) from connections group by 1")
    assert conns == [(True, seen["requests"])]
    probes = trace.meta["probes"]["attached"]
    assert any(p.startswith("TLS SSL_read_ex") for p in probes), probes
    # the timeline: one slice per request on the endpoint's lanes
    from test_perfetto import check, decode
    from iotrace.cli_perfetto import export_perfetto
    export_perfetto(trace.root, tmp_path / "t.pftrace", findings=False)
    tl = check(decode(tmp_path / "t.pftrace"))
    ep = tl["by_name"][f"endpoint localhost:{px.port}"]
    lanes = {u for u, dsc in tl["desc"].items() if dsc.parent_uuid == ep}
    on = [(n, a) for (u, n, ts, end, a) in tl["slices"] if u in lanes]
    assert len(on) == seen["requests"]
    assert sorted(n for n, a in on if a["status"] == 200 and n.startswith("GetObject")) == \
        sorted(f"GetObject {k}" for k, _ in did["gets"])


def test_aws_crt_over_s2n(s3, tmp_path):
    """The AWS Common Runtime's HTTP client (awscrt, as boto3's CRT transfer
    uses it): TLS by s2n inside _awscrt.abi3.so, whose s2n_recv starts with
    an instruction uprobes refuse (probed past it, at its RETs). Every GET
    with its status and body bytes; each connection named by its SNI."""
    pytest.importorskip("awscrt")
    import boto3
    port, d = s3
    s3c = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    keys = [f"crt/{i}.bin" for i in range(8)]
    for i, k in enumerate(keys):
        s3c.put_object(Bucket="data", Key=k, Body=os.urandom(30_000 + 7 * i))
    ca, cert, key = objstore.make_ca(tmp_path / "ca")
    with objstore.proxy(port, d, throttle_every=3, tls=(cert, key)) as px:
        proc, trace = trace_run(tmp_path / "trace", sys.executable, str(WORKLOADS / "crt_client.py"),
                                str(px.port), str(ca), *keys)
        seen = px.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["requests"] == len(got) == len(keys)
    # _awscrt.abi3.so is probed 30-50 ms after its import maps it (more on a
    # loaded machine), and the client's first GET can come sooner: the
    # connections of the client opened before its probes were in, without a
    # request, are its missed GETs, and the summary counts them
    (late,) = summary_json(trace)["tls_seen_late"]
    missed = scalar(trace, "select count(*) from connections where pid = ? and ts_ns < ? "
                           "and requests = 0", late["pid"], late["probed_ns"])
    assert late["connections_before"] >= missed and missed <= 2, late
    reqs = rows(trace, "select key, status, bytes from requests order by ts_ns")
    assert [(k, st) for k, st, _ in reqs] == [(k, st) for k, st, _ in got[missed:]]
    assert [n for k, st, n in reqs if st == 200] == [n for k, st, n in got[missed:] if st == 200]
    assert sum(st == 503 for _, st, _ in got) == seen["throttled"] > 0
    assert rows(trace, "select distinct tls_library from requests") == [("s2n",)]
    assert scalar(trace, "select count(*) from requests where peer is null") == 0
    assert rows(trace, f"select distinct server_name from connections "
                       f"where peer_port = {px.port}") == [("localhost",)]
    probes = trace.meta["probes"]
    assert any(p.endswith("_awscrt.abi3.so") for p in probes["tls_libraries_mapped"]), probes


def test_tls_without_probes_is_opaque(s3, tmp_path):
    """--no-tls: the HTTPS requests cannot be read; their connections and bytes
    are still there, and the summary says which endpoint was opaque."""
    port, d = s3
    ca, cert, key = objstore.make_ca(d / "ca2")
    with objstore.proxy(port, d, tls=(cert, key)) as px:
        trace, did = run_client(tmp_path, f"https://localhost:{px.port}", ca=ca,
                                iotrace_extra=("--no-tls",))
        px.stop()
    assert scalar(trace, "select count(*) from requests") == 0
    skipped = {sk["probe"]: sk["why"] for sk in trace.meta["probes"]["skipped"]}
    assert skipped.get("TLS (OpenSSL, GnuTLS, Go crypto/tls)") == "turned off (--no-tls)"
    s = json.loads(iotrace_cmd("summary", str(trace.root), "--format", "json").stdout)
    assert s["endpoints"] == [] and s["requests_total"] == 0
    (op,) = s["opaque_connections"]
    assert (op["host"], op["port"]) == ("127.0.0.1", px.port)
    conns = scalar(trace, "select count(*) from events where op = 'connect' and path = ?",
                   f"127.0.0.1:{px.port}")
    assert op["connections"] == conns >= 1
    # the encrypted bytes carry at least the objects the client moved
    assert op["bytes_received"] > sum(n for _, n in did["gets"])
    assert op["bytes_sent"] > sum(n for _, n in did["puts"])
    text = iotrace_cmd("summary", str(trace.root)).stdout
    assert f"connections not read as HTTP to 127.0.0.1:{px.port}" in text


def test_s3fs_reads(s3, tmp_path):
    pytest.importorskip("s3fs")
    import boto3
    port, d = s3
    c = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}",
                     aws_access_key_id="testing", aws_secret_access_key="testing",
                     region_name="us-east-1")
    sizes = {f"shards/s-{i:03d}": 50_000 + 7 * i for i in range(12)}
    for k, n in sizes.items():
        c.put_object(Bucket="data", Key=k, Body=b"x" * n)
    out = tmp_path / "s3fs.json"
    proc, trace = trace_run(tmp_path / "trace", sys.executable, str(WORKLOADS / "s3fs_reads.py"),
                            "--endpoint", f"http://127.0.0.1:{port}", "--prefix", "data/shards",
                            "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    did = json.loads(out.read_text())
    assert [n for _, n in did["reads"]] == list(sizes.values())
    gets = rows(trace, """select key, bytes from requests where s3_op = 'GetObject'
                          and status = 200 order by key""")
    assert gets == sorted(sizes.items())
    assert rows(trace, "select range, bytes from requests where status = 206") == [
        ("bytes=0-4095", did["ranged"])]
    assert scalar(trace, """select count(*) from requests where s3_op = 'ListObjects'
                            and query like '%prefix=shards%'""") == 1
    ops = Counter(r[0] for r in rows(trace, "select s3_op from requests"))
    assert set(ops) <= {"GetObject", "ListObjects", "HeadObject"}, ops


def report_findings(trace, *extra) -> dict:
    r = iotrace_cmd("report", str(trace.root), "--format", "json", *extra)
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout)
    assert not d["rule_errors"], d["rule_errors"]
    return {f["id"]: f for f in d["findings"]}


def test_findings_throttled_and_clean(s3, tmp_path):
    """The throttled finding counts what the proxy refused; a clean run through
    a proxy that refuses nothing has no throttling, listing or refetch finding."""
    port, d = s3
    with objstore.proxy(port, d, throttle_every=5) as px:
        trace, did = run_client(tmp_path / "thr", f"http://127.0.0.1:{px.port}")
        seen = px.stop()
    f = report_findings(trace)["throttled"]
    assert f["evidence"]["throttled"] == seen["throttled"] > 0
    assert f["evidence"]["requests"] == seen["requests"]
    assert f["evidence"]["retries"] == did["retries"]
    assert f["evidence"]["by_status_and_code"] == {"503 SlowDown": seen["throttled"]}
    # the backoffs: botocore sleeps before each retry, so the time lost is
    # more than the throttled requests' own time
    own = scalar(trace, "select sum(dur_ns) from requests where status = 503") / 1e9
    assert f["evidence"]["time_lost_s"] > own
    with objstore.proxy(port, d) as px:
        trace, _ = run_client(tmp_path / "clean", f"http://127.0.0.1:{px.port}")
        assert px.stop()["throttled"] == 0
    found = report_findings(trace)
    assert not {"throttled", "list-storm", "refetched-objects"} & set(found), list(found)


def test_findings_refetch_list_storm_in_flight(s3, tmp_path):
    """Two epochs over 20 objects of ~100 KB, 60 listings, one GET at a time
    against a 1 GB/s target: every object fetched twice, the listings are
    half the requests, and ~50 GETs would have to be in flight."""
    port, _ = s3
    trace, did = run_client(tmp_path, f"http://127.0.0.1:{port}",
                            extra=("--size", "100000", "--epochs", "2", "--lists", "60"))
    found = report_findings(trace, "--target-read", "1GB/s")
    ref = found["refetched-objects"]["evidence"]
    first = sum(n for _, n in did["gets"][:N_OBJECTS])
    assert ref["objects_refetched"] == N_OBJECTS and ref["refetches"] == N_OBJECTS
    assert ref["refetched_bytes"] == first
    assert ref["refetched_share"] == pytest.approx(first / (2 * first + 1024 * RANGES))
    ls = found["list-storm"]["evidence"]
    assert ls["lists"] == 60 and ls["heads"] == 0
    assert ls["requests"] == N_OBJECTS * 3 + RANGES + 60
    fl = found["few-in-flight"]["evidence"]
    assert fl["max_in_flight"] == 1 and fl["mean_in_flight"] <= 1.0
    assert fl["needed_in_flight"] >= 2 * fl["mean_in_flight"]
    gets = scalar(trace, "select count(*) from requests where method = 'GET' "
                         "and status between 200 and 299 and key is not null")
    assert fl["gets"] == gets == 2 * N_OBJECTS + RANGES


READER = """
import json, os, sys
d = sys.argv[1]
sizes = {}
for name in sorted(os.listdir(d)):
    n = 0
    with open(os.path.join(d, name), 'rb') as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            n += len(b)
    sizes[name] = n
print(json.dumps(sizes))
"""


@pytest.mark.skipif(shutil.which("s3fs") is None or not os.path.exists("/dev/fuse"),
                    reason="s3fs-fuse not installed (apt-get install s3fs) or no /dev/fuse")
@pytest.mark.parametrize("scheme", ["http", "https"])
def test_s3fs_fuse_mount_reads_tied_to_daemon_gets(s3, tmp_path, scheme):
    """A job reads the files of a bucket mounted with s3fs-fuse (the daemon is
    not in its process tree; --fuse-daemons traces it): every FUSE READ the
    job's reads caused is tied to the job's read call and to the daemon's GETs
    of that object made while serving it. Over https the daemon's requests are
    read from GnuTLS's plaintext (Debian's s3fs uses libcurl-gnutls)."""
    import boto3
    port, d = s3
    c = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}",
                     aws_access_key_id="testing", aws_secret_access_key="testing",
                     region_name="us-east-1")
    bucket = f"fuse-{scheme}"
    c.create_bucket(Bucket=bucket)
    sizes = {f"part-{i}": (2 << 20) + 1000 * i for i in range(3)}
    for k, n in sizes.items():
        c.put_object(Bucket=bucket, Key=k, Body=bytes([65 + len(k)]) * n)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with contextlib.ExitStack() as stack:
        url = f"http://127.0.0.1:{port}"
        if scheme == "https":
            ca, cert, key = objstore.make_ca(tmp_path / "ca")
            px = stack.enter_context(objstore.proxy(port, d, tls=(cert, key)))
            url = f"https://127.0.0.1:{px.port},no_check_certificate,ssl_verify_hostname=0"
        proc, trace, daemon = fuse_run(tmp_path, bucket, url, mnt, sizes)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == sizes
    assert daemon.pid in trace.meta["options"]["also_pids"]
    job = trace.meta["root_pid"]
    # the job read every file whole, through its own read calls
    got = dict(rows(trace, """select regexp_extract(f.path, '[^/]+$'), sum(e.ret)
                             from events e join files f using (file_id)
                             where e.pid = ? and e.op = 'read' and e.ret > 0
                             and f.fs_type like 'fuse%' group by 1""", job))
    assert got == sizes
    reads = rows(trace, """select regexp_extract(f.path, '[^/]+$'), r.job_op, r.replied,
                                  r.error, r.http_keys
                           from fuse_requests r join files f using (file_id)
                           where r.opcode = 'READ' and r.req_pid = ?""", job)
    # every file's data came through FUSE READs the job's read calls caused
    assert {name for name, *_ in reads} == set(sizes)
    assert all(op == "read" and ok and err == 0 for _, op, ok, err, _ in reads)
    # ... and for each file, the daemon's GETs of that object served some of them
    for name in sizes:
        served = [keys for n, *_, keys in reads if n == name and keys]
        assert any(name in keys for keys in served), (name, served)
    daemon_gets = dict(rows(trace, """select key, sum(bytes) from requests
                                     where pid = ? and s3_op = 'GetObject'
                                     and status between 200 and 299 group by 1""", daemon.pid))
    for name, n in sizes.items():
        assert daemon_gets.get(name, 0) >= n, (name, daemon_gets)
    assert scalar(trace, "select count(*) from requests where pid = ?", job) == 0
    libs = rows(trace, "select distinct tls, tls_library from requests where pid = ?", daemon.pid)
    assert libs == ([(True, "gnutls")] if scheme == "https" else [(False, None)])


def fuse_run(tmp_path, bucket, url, mnt, sizes):
    """Mounts the bucket with s3fs-fuse, runs READER on it under iotrace with
    --fuse-daemons, unmounts; (iotrace's process, the trace, the daemon)."""
    pw = tmp_path / "passwd"
    pw.write_text("testing:testing\n")
    pw.chmod(0o600)
    daemon = subprocess.Popen(
        ["s3fs", bucket, str(mnt), "-f", "-o",
         f"url={url},use_path_request_style,passwd_file={pw}"],
        stdout=open(tmp_path / "s3fs.log", "w"), stderr=subprocess.STDOUT)
    try:
        assert wait_for(lambda: sorted(os.listdir(mnt)) == sorted(sizes), 60), \
            (tmp_path / "s3fs.log").read_text()[-2000:]
        proc, trace = trace_run(tmp_path / "trace", sys.executable, "-c", READER, str(mnt),
                                extra=("--fuse-daemons",))
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
        daemon.wait(timeout=30)
    return proc, trace, daemon
