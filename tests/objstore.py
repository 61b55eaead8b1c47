"""A local S3-compatible server for the object-storage tests and benches:
moto's server mode (a real HTTP server process) behind tests/workloads/
s3_proxy.py (plain or TLS with a local CA, optionally answering 503 SlowDown
to every N-th request)."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

WORKLOADS = Path(__file__).resolve().parent / "workloads"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def make_ca(d: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for localhost/127.0.0.1: (ca, cert, key)."""
    d.mkdir(parents=True, exist_ok=True)
    run = lambda *a: subprocess.run(a, check=True, capture_output=True, cwd=d)  # noqa: E731
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
        "-out", "ca.pem", "-days", "2", "-subj", "/CN=iotrace test CA")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out",
        "srv.csr", "-subj", "/CN=localhost")
    (d / "ext.cnf").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    run("openssl", "x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "srv.pem", "-days", "2", "-extfile", "ext.cnf")
    return d / "ca.pem", d / "srv.pem", d / "srv.key"


@contextlib.contextmanager
def moto_server(log: Path):
    """Yields the port of a moto S3 server process."""
    port = free_port()
    env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    with open(log, "w") as out:
        p = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                              "-p", str(port)], stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_port(port)
        yield port
    finally:
        p.terminate()
        p.wait(timeout=30)


class Proxy:
    def __init__(self, port: int, proc: subprocess.Popen, stats: Path) -> None:
        self.port, self.proc, self.stats_path = port, proc, stats

    def stop(self) -> dict:
        """Stops the proxy; what it did (s3_proxy.py's stats)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)
        return json.loads(self.stats_path.read_text())


@contextlib.contextmanager
def proxy(upstream: int, d: Path, throttle_every: int = 0, tls: tuple | None = None):
    """Yields a Proxy in front of 127.0.0.1:upstream (tls: (cert, key))."""
    port = free_port()
    stats = d / f"proxy-{port}.json"
    cmd = [sys.executable, str(WORKLOADS / "s3_proxy.py"), "--listen", str(port),
           "--upstream", f"127.0.0.1:{upstream}", "--stats", str(stats)]
    if throttle_every:
        cmd += ["--throttle-every", str(throttle_every)]
    if tls:
        cmd += ["--tls-cert", str(tls[0]), "--tls-key", str(tls[1])]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(d / f"proxy-{port}.log", "w"))
    try:
        wait_port(port)
        yield Proxy(port, p, stats)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def create_bucket(port: int, bucket: str) -> None:
    import boto3
    s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}",
                      aws_access_key_id="testing", aws_secret_access_key="testing",
                      region_name="us-east-1")
    s3.create_bucket(Bucket=bucket)
