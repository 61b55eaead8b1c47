"""What the socket and TLS probes cost: traced ÷ untraced, medians of
interleaved repetitions, printed as a table.

    sudo .venv/bin/python bench/objstore_overhead.py [--reps 5] [--calls 20000]

Workloads (each a client process against a server process on loopback that
is never traced):
  plain   request/response pairs of 200 bytes over TCP: an HTTP-like request
          (its start is captured), a 200-byte reply
  tls     the same over TLS (Python's ssl: SSL_write_ex / SSL_read_ex)
  boto3   GetObject of 10 KB objects from a local S3 server (moto), one at a time
Configurations:
  untraced                   the client alone
  iotrace                    iotrace run -- client (socket capture + TLS uprobes)
  iotrace --no-tls           without the TLS uprobes
  bystander                  an untraced client while iotrace traces another
                             process (`sleep`): what the machine-wide uprobes cost
                             processes iotrace does not trace
The table gives per-call (per-request) time and its ratio to untraced.
"""
from __future__ import annotations

import argparse
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
REQ = b"GET /bucket/key HTTP/1.1\r\nHost: bench\r\n\r\n".ljust(200, b" ")
REPLY = b"HTTP/1.1 200 OK\r\nContent-Length: 150\r\n\r\n".ljust(200, b"x")


def serve(port_box: list, tls_ctx, stop: threading.Event) -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    port_box.append(srv.getsockname()[1])

    def one(c):
        if tls_ctx:
            c = tls_ctx.wrap_socket(c, server_side=True)
        with c:
            while True:
                data = c.recv(4096)
                if not data:
                    return
                c.sendall(REPLY)
    while not stop.is_set():
        c, _ = srv.accept()
        threading.Thread(target=one, args=(c,), daemon=True).start()


def client(args) -> None:
    """The traced side: N request/reply pairs; prints seconds per pair."""
    s = socket.create_connection(("127.0.0.1", args.port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if args.ca:
        ctx = ssl.create_default_context(cafile=args.ca)
        s = ctx.wrap_socket(s, server_hostname="localhost")
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(args.calls):
        s.sendall(REQ)
        got = 0
        while got < len(REPLY):
            got += len(s.recv(4096))
    print((time.perf_counter() - t0) / args.calls, (time.process_time() - c0) / args.calls)


def boto3_client(args) -> None:
    import boto3
    s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{args.port}",
                      aws_access_key_id="testing", aws_secret_access_key="testing",
                      region_name="us-east-1")
    s3.get_object(Bucket="bench", Key="k0")["Body"].read()   # connection and imports warm
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(args.calls):
        s3.get_object(Bucket="bench", Key=f"k{i % 50}")["Body"].read()
    print((time.perf_counter() - t0) / args.calls, (time.process_time() - c0) / args.calls)


def timed(cmd: list[str], traced: list[str] | None, out: Path) -> tuple[float, float]:
    if traced is None:
        r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    else:
        r = subprocess.run([sys.executable, "-m", "iotrace", "run", "-q", "--no-node-summary",
                            "--force", "-o", str(out), *traced, "--", *cmd],
                           capture_output=True, text=True, check=True)
    for line in reversed(r.stdout.strip().splitlines()):   # the client's line
        try:
            wall, cpu = map(float, line.split())
            return wall, cpu
        except ValueError:
            continue
    raise RuntimeError(f"no timing in the output of {cmd}: {r.stdout[-500:]}")


def bystander(cmd: list[str], out: Path) -> tuple[float, float]:
    """The client untraced while iotrace traces a sleep."""
    bg = subprocess.Popen([sys.executable, "-m", "iotrace", "run", "-q", "--no-node-summary",
                           "--force", "-o", str(out), "--", "sleep", "600"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)     # attached
        return timed(cmd, None, out)
    finally:
        bg.terminate()
        bg.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    c = sub.add_parser("client")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--calls", type=int, default=20000)
    c.add_argument("--ca")
    b = sub.add_parser("boto3")
    b.add_argument("--port", type=int, required=True)
    b.add_argument("--calls", type=int, default=300)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--boto3-calls", type=int, default=300)
    args = ap.parse_args()
    if args.cmd == "client":
        return client(args)
    if args.cmd == "boto3":
        return boto3_client(args)

    import objstore
    work = Path(tempfile.mkdtemp(prefix="iotrace-bench-objstore-"))
    ca, cert, key = objstore.make_ca(work / "ca")
    tls_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls_ctx.load_cert_chain(cert, key)
    stop = threading.Event()
    ports = {}
    for name, ctx in (("plain", None), ("tls", tls_ctx)):
        box: list = []
        threading.Thread(target=serve, args=(box, ctx, stop), daemon=True).start()
        while not box:
            time.sleep(0.01)
        ports[name] = box[0]
    me = [sys.executable, __file__]
    workloads = {
        "plain": me + ["client", "--port", str(ports["plain"]), "--calls", str(args.calls)],
        "tls": me + ["client", "--port", str(ports["tls"]), "--calls", str(args.calls),
                     "--ca", str(ca)],
    }
    moto = None
    try:
        import boto3  # noqa: F401
        import moto as _moto  # noqa: F401
        moto = objstore.moto_server(work / "moto.log")
        mport = moto.__enter__()
        objstore.create_bucket(mport, "bench")
        import boto3 as b3
        s3 = b3.client("s3", endpoint_url=f"http://127.0.0.1:{mport}",
                       aws_access_key_id="testing", aws_secret_access_key="testing",
                       region_name="us-east-1")
        for i in range(50):
            s3.put_object(Bucket="bench", Key=f"k{i}", Body=b"x" * 10_000)
        workloads["boto3"] = me + ["boto3", "--port", str(mport), "--calls",
                                   str(args.boto3_calls)]
    except ImportError:
        print("boto3/moto not installed: the boto3 row is left out")
    configs = [("untraced", None), ("iotrace", []), ("iotrace --no-tls", ["--no-tls"]),
               ("bystander", "bystander")]
    res = {(w, c): [] for w in workloads for c, _ in configs}
    out = work / "trace"
    try:
        for rep in range(args.reps):
            for w, cmd in workloads.items():
                for cname, how in configs:   # interleaved: each rep runs every config
                    if how == "bystander":
                        v = bystander(cmd, out)
                    else:
                        v = timed(cmd, how, out)
                    res[(w, cname)].append(v)
            print(f"rep {rep + 1}/{args.reps} done", file=sys.stderr)
    finally:
        stop.set()
        if moto:
            moto.__exit__(None, None, None)
    print(f"\nobject-storage probes: per request/reply time, median of {args.reps} "
          f"interleaved reps (min-max); {os.cpu_count()} CPUs, kernel {os.uname().release}")
    print("wall: elapsed per call; cpu: the client's own CPU time per call (user+system,"
          " probes included),\nthe steadier measure on loopback ping-pong, where wake-up"
          " latency moves the wall time")
    print(f"{'workload':<8} {'config':<18} {'wall us':>9} {'min-max':>17} {'x':>6}"
          f" {'cpu us':>8} {'min-max':>17} {'x':>6}")
    for w in workloads:
        bw = statistics.median(x[0] for x in res[(w, "untraced")])
        bc = statistics.median(x[1] for x in res[(w, "untraced")])
        for cname, _ in configs:
            v = [x[0] for x in res[(w, cname)]]
            c = [x[1] for x in res[(w, cname)]]
            mw, mc = statistics.median(v), statistics.median(c)
            print(f"{w:<8} {cname:<18} {mw * 1e6:>9.1f} {min(v) * 1e6:>8.1f}-"
                  f"{max(v) * 1e6:<8.1f} {mw / bw:>5.2f}x {mc * 1e6:>8.1f} "
                  f"{min(c) * 1e6:>8.1f}-{max(c) * 1e6:<8.1f} {mc / bc:>5.2f}x")


if __name__ == "__main__":
    main()
