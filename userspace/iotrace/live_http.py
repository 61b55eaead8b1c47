"""Object-storage requests, live (`iotrace exporter`): the HTTP message starts
the recorder still sends in a live profile (--live-http: inet sockets'
calls, and the plaintext of OpenSSL/GnuTLS calls) paired into requests and
their answers, counted per job and endpoint.

Pairing, as the requests table of a full trace does it (requests.py): on
each stream of a process (a socket fd, or a TLS session), a request start
opens a request and the next answer start on the same stream closes it
(HTTP/1.1 clients send one request at a time per connection). Only the
start line and a few headers are read (http_head.summarize): no bodies,
no credentials.

Per request: the endpoint (its Host header, else "unknown"), the method,
the answer's status class, whether it was throttled (429, 503, or an S3
throttling code in the answer's XML) and whether it is a retry (the SDK's
amz-sdk-request attempt > 1, or the same request again on the stream's
process after a 429 or 5xx answer).
"""
from __future__ import annotations

import time
from collections import defaultdict
from typing import Optional

import numpy as np

from .abi import EF_NET_DATA, OP_NAMES
from .http_head import summarize

THROTTLE_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded",
                  "TooManyRequestsException", "RequestThrottled", "SlowDownRead",
                  "SlowDownWrite"}
TLS_OPS = {OP_NAMES.index("tls_read"), OP_NAMES.index("tls_write")}
STALE_S = 300.0        # a stream's request with no answer for this long is dropped
MAX_STREAMS = 65536    # open requests kept (a client that never reads its answers)


def _header(text: str, name: str) -> Optional[str]:
    for line in text.split("\n")[1:]:
        k, _, v = line.partition(": ")
        if k == name:
            return v
    return None


class Requests:
    """Pairs message starts into requests; counts them per (job, endpoint)."""

    def __init__(self):
        # (pid, stream kind, stream id) -> (endpoint, method, signature, started)
        self.open: dict[tuple, tuple] = {}
        # (pid, signature) of requests answered 429/5xx: the next same one is a retry
        self.refused: dict[tuple, float] = {}
        self.dropped = 0                  # requests dropped unanswered (stale, or too many)

    def add(self, recs: np.ndarray, payloads: dict[int, bytes], job_of) -> dict:
        """Records of one segment (and their payloads by index); returns
        {(job, endpoint, method, status class): [requests, throttled, retries]}
        for the requests answered in them."""
        out: dict[tuple, list] = defaultdict(lambda: [0, 0, 0])
        now = time.monotonic()
        for i in np.flatnonzero(recs["eflags"] & EF_NET_DATA):
            data = payloads.get(int(i))
            if not data:
                continue
            text = summarize(data)
            if text is None:
                continue
            r = recs[i]
            pid, op = int(r["pid"]), int(r["op"])
            key = (pid, "tls", int(r["arg"])) if op in TLS_OPS else (pid, "fd", int(r["fd"]))
            first = text.split("\n", 1)[0]
            if first.startswith("HTTP/"):
                # an S3 error's code, where its XML body came in the same capture
                self._answer(key, int(first.split(" ")[1]), _header(text, "x-iotrace-code"),
                             job_of, out)
            elif first in ("XML", "TLS ClientHello"):
                continue                    # a body read apart from its head (answered
                                            # already), or a TLS handshake's start
            else:
                method, target = first.split(" ")[:2]
                endpoint = _header(text, "host") or "unknown"
                attempt = _header(text, "amz-sdk-request") or ""
                retry = "attempt=" in attempt and not attempt.split("attempt=")[1].startswith("1")
                sig = (pid, method, endpoint, target, _header(text, "range") or "")
                if len(self.open) >= MAX_STREAMS and key not in self.open:
                    self.dropped += 1
                    continue
                if key in self.open:
                    self.dropped += 1     # the stream's last request had no answer seen
                self.open[key] = (endpoint, method, sig, now,
                                  retry or self.refused.pop(sig, None) is not None)
        for k in [k for k, v in self.open.items() if now - v[3] > STALE_S]:
            del self.open[k]
            self.dropped += 1
        for k in [k for k, t in self.refused.items() if now - t > STALE_S]:
            del self.refused[k]
        return dict(out)

    def _answer(self, key, status: int, code: Optional[str], job_of, out) -> None:
        req = self.open.pop(key, None)
        if req is None:
            return                          # an answer whose request came before the exporter
        endpoint, method, sig, _, retry = req
        job = job_of(key[0])
        if job is None:
            return
        throttled = status in (429, 503) or code in THROTTLE_CODES
        if status == 429 or status >= 500:
            self.refused[sig] = time.monotonic()
        row = out[(job, endpoint, method, f"{status // 100}xx")]
        row[0] += 1
        row[1] += throttled
        row[2] += retry
