"""The first bytes of an HTTP message, as the recorder captured them, reduced
to what the requests table needs, and a connect's peer address.

A trace must not carry credentials: only the start line (with signing
parameters removed from its query string) and a short list of headers are
kept; Authorization, cookies, security tokens and bodies are dropped. What
is kept is one text per message, `events.http`:

    GET /bucket/key?partNumber=2 HTTP/1.1
    host: s3.example.com
    range: bytes=0-1048575
    amz-sdk-invocation-id: 8c1f...
    amz-sdk-request: attempt=2; max=5
    x-iotrace-head-bytes: 412

`x-iotrace-head-bytes` is the size of the head (start line to the blank line)
when it lies within the captured bytes, so that the body bytes of the call
are known; `x-iotrace-xml` is the root element of an XML body and
`x-iotrace-code` its `<Code>` (an S3 error's: SlowDown, NoSuchKey...);
`x-iotrace-aws: 1` marks a request signed for AWS's API (an S3 request, or
one of a store that speaks it). A TLS ClientHello sent on a socket is kept as
its server name (SNI) and ALPN protocols, which name a connection whose
plaintext is not seen:

    TLS ClientHello
    sni: bucket.s3.us-east-1.amazonaws.com
    alpn: h2,http/1.1
"""
from __future__ import annotations

import ipaddress
import re
import socket
import struct
from typing import Optional
from urllib.parse import parse_qsl, urlencode

KEPT_HEADERS = ("host", "range", "content-length", "content-range", "transfer-encoding",
                "retry-after", "x-amz-decoded-content-length", "amz-sdk-invocation-id", "amz-sdk-request", "x-amz-request-id",
                "x-amz-copy-source")
# query parameters of presigned URLs: credentials, never kept
SECRET_QUERY = re.compile(r"^(x-amz-(signature|security-token|credential)|signature|"
                          r"awsaccesskeyid|x-goog-(signature|credential)|sig|token)$", re.I)
XML_ROOT = re.compile(rb"<([A-Za-z][\w.-]*)[\s>/]")
XML_CODE = re.compile(rb"<Code>([^<]{1,64})</Code>")


def _clean_target(target: str) -> str:
    path, sep, query = target.partition("?")
    if not sep:
        return target
    pairs = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True)
             if not SECRET_QUERY.match(k)]
    return path + ("?" + urlencode(pairs) if pairs else "")


def _xml_facts(body: bytes) -> list[str]:
    out = []
    if body.startswith(b"<?xml"):
        end = body.find(b"?>")
        body = body[end + 2:] if end >= 0 else b""
    root = XML_ROOT.search(body[:256])
    if root:
        out.append("x-iotrace-xml: " + root.group(1).decode("latin-1"))
    code = XML_CODE.search(body)
    if code:
        out.append("x-iotrace-code: " + code.group(1).decode("latin-1").strip())
    return out


def client_hello(data: bytes) -> Optional[str]:
    """A TLS ClientHello's server name and ALPN protocols, as
    "TLS ClientHello\nsni: NAME\nalpn: h2,http/1.1" (either line absent when
    the hello has no such extension, or it lies past the captured bytes);
    None if data is not a ClientHello."""
    if len(data) < 44 or data[0] != 0x16 or data[1] != 3 or data[5] != 1:
        return None
    out = ["TLS ClientHello"]
    try:
        p = 5 + 4 + 2 + 32                       # record, handshake headers, version, random
        p += 1 + data[p]                          # session id
        p += 2 + int.from_bytes(data[p:p + 2], "big")   # cipher suites
        p += 1 + data[p]                          # compression methods
        end = min(len(data), p + 2 + int.from_bytes(data[p:p + 2], "big"))
        p += 2
        while p + 4 <= end:
            kind, n = int.from_bytes(data[p:p + 2], "big"), int.from_bytes(data[p + 2:p + 4], "big")
            body = data[p + 4:p + 4 + n]
            if len(body) < n:
                break                             # cut at the capture's end
            if kind == 0 and n >= 5 and body[2] == 0:      # server_name: host_name
                ln = int.from_bytes(body[3:5], "big")
                name = body[5:5 + ln].decode("ascii", "replace")
                if re.fullmatch(r"[A-Za-z0-9._-]{1,253}", name):
                    out.append(f"sni: {name}")
            elif kind == 16 and n >= 2:                    # ALPN
                protos, q = [], 2
                while q < n:
                    ln = body[q]
                    protos.append(body[q + 1:q + 1 + ln].decode("ascii", "replace"))
                    q += 1 + ln
                out.append("alpn: " + ",".join(protos[:8]))
            p += 4 + n
    except IndexError:
        pass
    return "\n".join(out)


def summarize(data: bytes) -> Optional[str]:
    """The kept part of a captured message start, or None if it is not HTTP
    (a TLS ClientHello: its server name and ALPN, client_hello)."""
    if data[:2] == b"\x16\x03":
        return client_hello(data)
    if data.startswith((b"<?xml", b"<Error")):
        facts = _xml_facts(data)
        return "\n".join(["XML"] + facts) if facts else None
    end = data.find(b"\r\n\r\n")
    head = data[:end] if end >= 0 else data
    lines = head.decode("latin-1").split("\r\n")
    first = lines[0]
    parts = first.split(" ")
    if first.startswith("HTTP/"):
        if len(parts) < 2 or not parts[1].isdigit():
            return None
        out = [" ".join(parts[:2])]
    else:
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return None
        out = [f"{parts[0]} {_clean_target(parts[1])} {parts[2]}"]
    complete = lines if end >= 0 else lines[:-1]   # a cut last line is not kept
    signed = False
    for line in complete[1:]:
        name, sep, value = line.partition(":")
        name = name.strip().lower()
        if sep and name in KEPT_HEADERS:
            out.append(f"{name}: {value.strip()[:200]}")
        # an AWS-signed request (S3 API): SigV4/SigV2 or x-amz-* headers
        signed = signed or name.startswith("x-amz-") or (
            name == "authorization" and value.strip().startswith("AWS"))
    if signed and not first.startswith("HTTP/"):
        out.append("x-iotrace-aws: 1")
    if end >= 0:
        out.append(f"x-iotrace-head-bytes: {end + 4}")
        body = data[end + 4:]
        if body.startswith((b"<?xml", b"<Error", b"<List")):
            out += _xml_facts(body)
    return "\n".join(out)


def peer_address(sockaddr: bytes) -> Optional[str]:
    """"ip:port" ("[ip6]:port") of a connect's sockaddr, None for other families."""
    if len(sockaddr) < 8:
        return None
    family, port = struct.unpack_from("<H", sockaddr)[0], struct.unpack_from(">H", sockaddr, 2)[0]
    if family == socket.AF_INET:
        return f"{socket.inet_ntop(socket.AF_INET, sockaddr[4:8])}:{port}"
    if family == socket.AF_INET6 and len(sockaddr) >= 24:
        ip = ipaddress.IPv6Address(sockaddr[8:24])
        return f"{ip.ipv4_mapped or ip}:{port}" if ip.ipv4_mapped else f"[{ip}]:{port}"
    return None
