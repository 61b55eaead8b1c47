"""An HTTP/1.1 proxy in front of a local S3 server, for the object-storage tests.

    python s3_proxy.py --listen 9100 --upstream 127.0.0.1:9000 \
        [--tls-cert C --tls-key K] [--throttle-every N] [--stats FILE]

It forwards each request to the upstream server (one upstream connection per
client connection) and, with --throttle-every N, answers every N-th request
itself with S3's throttling error (503, <Code>SlowDown</Code>), as S3 does
under a request-rate limit. With a certificate it speaks TLS to the client.
On SIGTERM it writes what it did to --stats (JSON): requests seen, forwarded,
throttled, by method. Those counts are the ground truth the tests compare
iotrace's requests table with.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import signal
import ssl

SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
            b'<Message>Please reduce your request rate.</Message>'
            b'<RequestId>iotrace-test</RequestId></Error>')


class Stats:
    def __init__(self) -> None:
        self.requests = 0
        self.forwarded = 0
        self.throttled = 0
        self.by_method: dict[str, int] = {}
        self.throttled_by_method: dict[str, int] = {}
        # the upstream server's answers by status (moto answers 500 now and then)
        self.upstream_status: dict[str, int] = {}


async def read_head(r: asyncio.StreamReader) -> tuple[bytes, dict[str, str]] | None:
    try:
        head = await r.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    headers = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return head, headers


async def read_body(r: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        out = b""
        while True:
            size_line = await r.readuntil(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            chunk = await r.readexactly(size + 2)
            out += size_line + chunk
            if size == 0:
                return out
    return await r.readexactly(int(headers.get("content-length", "0")))


async def serve(args, stats: Stats, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
    host, port = args.upstream.split(":")
    ur = uw = None
    try:
        while True:
            got = await read_head(cr)
            if not got:
                return
            head, headers = got
            method = head.split(b" ", 1)[0].decode()
            if headers.get("expect", "").lower() == "100-continue":
                cw.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                await cw.drain()
            body = await read_body(cr, headers)
            stats.requests += 1
            stats.by_method[method] = stats.by_method.get(method, 0) + 1
            if args.throttle_every and stats.requests % args.throttle_every == 0:
                stats.throttled += 1
                stats.throttled_by_method[method] = stats.throttled_by_method.get(method, 0) + 1
                cw.write(b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(SLOWDOWN)
                         + (SLOWDOWN if method != "HEAD" else b""))
                await cw.drain()
                continue
            if uw is None:
                ur, uw = await asyncio.open_connection(host, int(port))
            fwd = head.replace(b"Expect: 100-continue\r\n", b"").replace(
                b"expect: 100-continue\r\n", b"")
            uw.write(fwd + body)
            await uw.drain()
            rgot = await read_head(ur)
            if not rgot:
                return
            rhead, rheaders = rgot
            status = int(rhead.split(b" ", 2)[1])
            rbody = b"" if method == "HEAD" or status in (204, 304) else await read_body(ur, rheaders)
            cw.write(rhead + rbody)
            await cw.drain()
            stats.forwarded += 1
            stats.upstream_status[str(status)] = stats.upstream_status.get(str(status), 0) + 1
            if rheaders.get("connection", "").lower() == "close":
                uw.close()
                uw = None
    except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
        return
    finally:
        cw.close()
        if uw:
            uw.close()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--listen", type=int, required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    ap.add_argument("--throttle-every", type=int, default=0)
    ap.add_argument("--stats")
    args = ap.parse_args()
    ctx = None
    if args.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
    stats = Stats()
    server = await asyncio.start_server(lambda r, w: serve(args, stats, r, w),
                                        "127.0.0.1", args.listen, ssl=ctx)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    print("ready", flush=True)
    async with server:
        await stop.wait()
    if args.stats:
        with open(args.stats, "w") as f:
            json.dump(vars(stats), f)


if __name__ == "__main__":
    asyncio.run(main())
