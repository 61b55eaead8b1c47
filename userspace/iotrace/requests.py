"""The `requests` and `connections` tables of a trace, built from its events
when the trace is finished (and on demand for a trace made before them).

- connections.parquet: one row per TCP connection the job opened (a
  `connect` on an IPv4/IPv6 socket), with its peer, the bytes and time the
  job's calls moved on it, and the HTTP requests made on it.
- requests.parquet: one row per HTTP request the job made, over plain TCP
  (its socket calls) or TLS (the plaintext of its OpenSSL, GnuTLS or Go
  crypto/tls calls), from
  the message starts the recorder captured (events.http, see http_head.py):
  method, host, bucket and key (S3 path and virtual-host styles), range,
  status, S3 error code, time to first byte, duration, body bytes, and
  whether it is an SDK retry.

Pairing happens in SQL: on each stream (a socket fd, or a TLS session) of a
process, every request start opens a request; what the stream moves until
the next request start belongs to it (HTTP/1.1 clients send one request at
a time per connection). A TLS session is tied to its socket by the read or
write system call made inside a TLS call on the same thread (or the last
such call of the session: buffered reads make none; or, for its first calls,
the session's next one: a Go goroutine can resume on another thread).
"""
from __future__ import annotations

from pathlib import Path

import duckdb

from .abi import sql_list

SOCK_RECV = ("read", "readv", "recvfrom", "recvmsg")
SOCK_SEND = ("write", "writev", "sendto", "sendmsg")
AF_INET, AF_INET6 = 2, 10
REQUEST_START = "regexp_matches(http, '^[A-Z]+ \\S+ HTTP/')"


def _hdr(col: str, name: str) -> str:
    return f"nullif(regexp_extract({col}, '\\n{name}: ([^\\n]*)', 1), '')"


BUILD_SQL = f"""
create or replace temp table _net as
with sock as (
    select ts_ns, dur_ns, pid, tid, fd, ret, http, false as tls, null::bigint as session,
           op in {sql_list(SOCK_SEND)} as sending, 0 as tls_lib
    from events
    where fd_kind = 'socket' and mode in ({AF_INET}, {AF_INET6}) and ret > 0
      and op in {sql_list(SOCK_RECV + SOCK_SEND)}
),
tls as (
    select ts_ns, dur_ns, pid, tid, fd, ret, http, true as tls, arg as session,
           op = 'tls_write' as sending, flags::integer as tls_lib
    from events where op in ('tls_read', 'tls_write') and ret > 0
),
-- a TLS call's socket: the socket call it made on its thread
inner_call as (
    select t.pid, t.tid, t.ts_ns, min(s.fd) as fd
    from tls t join sock s
      on s.pid = t.pid and s.tid = t.tid and s.ts_ns >= t.ts_ns
     and s.ts_ns <= t.ts_ns + t.dur_ns
    group by all
),
-- else the session's last such call before, else its first after (its first
-- calls can make theirs on another thread: a Go goroutine parked on a full
-- socket resumes on another thread; a session keeps its socket)
tls_fd as (
    select t.* exclude (fd),
           coalesce(i.fd, last_value(i.fd ignore nulls) over (
               partition by t.pid, t.session order by t.ts_ns
               rows between unbounded preceding and current row),
               first_value(i.fd ignore nulls) over (
               partition by t.pid, t.session order by t.ts_ns
               rows between current row and unbounded following)) as fd
    from tls t left join inner_call i using (pid, tid, ts_ns)
)
select * from sock union all by name select * from tls_fd;

create or replace temp table _connects as
select pid, fd, tid, ts_ns, path as peer, ret,
       lead(ts_ns) over (partition by pid, fd order by ts_ns) as next_ns
from events where op = 'connect' and path is not null;

create or replace temp table _closes as
select pid, fd, ts_ns from events where op = 'close' and fd >= 0;

-- each stream row's connection: the last connect of its fd before it
create or replace temp table _net_conn as
select n.*, c.ts_ns as conn_ts
from _net n left join _connects c
  on c.pid = n.pid and c.fd = n.fd and c.ts_ns <= n.ts_ns
 and (c.next_ns is null or n.ts_ns < c.next_ns);

-- A row's place on its stream: a send where it starts, a receive where it
-- ends (its bytes are there then). Go's HTTP client reads each connection
-- in a goroutine of its own, whose TLS read starts before the request it
-- answers is written and blocks until the answer comes.
create or replace temp table _numbered as
select *,
       case when tls then 'tls:' || session else 'fd:' || fd end as stream,
       sum(case when sending and {REQUEST_START} then 1 else 0 end) over (
           partition by pid, tls, case when tls then session else fd end
           order by pos_ns, tid rows between unbounded preceding and current row) as req_no
from (select *, case when sending then ts_ns else ts_ns + dur_ns end as pos_ns from _net_conn);

create or replace temp table _req as
with g as (
    select pid, stream, req_no,
           min(pos_ns) as ts_ns,
           max(ts_ns + dur_ns) as end_ns,
           arg_min(tid, ts_ns) as tid,
           arg_min(fd, ts_ns) as fd,
           arg_min(conn_ts, ts_ns) as conn_ts,
           bool_or(tls) as tls,
           max(tls_lib) as tls_lib,
           arg_min(http, ts_ns) filter (where sending and {REQUEST_START}) as req_head,
           -- the final response's head (not a 100 Continue)
           arg_max(http, ts_ns) filter (where not sending and http like 'HTTP/%'
                                        and not regexp_matches(http, '^HTTP/\\S+ 1\\d\\d')) as resp_head,
           min(ts_ns + dur_ns) filter (where not sending and http like 'HTTP/%'
                                       and not regexp_matches(http, '^HTTP/\\S+ 1\\d\\d')) as first_byte_ns,
           sum(coalesce(try_cast(regexp_extract(http, '\\nx-iotrace-head-bytes: (\\d+)', 1)
                                 as bigint), 0))
               filter (where not sending and http like 'HTTP/%') as resp_head_bytes,
           bool_and(http is null or regexp_extract(http, '\\nx-iotrace-head-bytes: (\\d+)', 1) <> '')
               filter (where not sending and http like 'HTTP/%') as resp_head_known,
           sum(ret) filter (where sending) as sent,
           sum(ret) filter (where not sending) as received,
           count(*) filter (where sending) as send_calls,
           count(*) filter (where not sending) as recv_calls,
           max(regexp_extract(http, '\\nx-iotrace-code: ([^\\n]*)', 1))
               filter (where not sending) as xml_code,
           max(regexp_extract(http, '\\nx-iotrace-xml: ([^\\n]*)', 1))
               filter (where not sending) as xml_root
    from _numbered where req_no > 0
    group by all
)
select *,
       regexp_extract(req_head, '^(\\S+) ', 1) as method,
       regexp_extract(req_head, '^\\S+ (\\S+) ', 1) as target,
       {_hdr('req_head', 'host')} as host_header,
       req_head like '%\nx-iotrace-aws: 1%' as aws,
       {_hdr('req_head', 'range')} as range,
       -- an aws-chunked body (a checksum trailer) says the object's size apart
       coalesce({_hdr('req_head', 'x-amz-decoded-content-length')},
                {_hdr('req_head', 'content-length')})::bigint as req_content_length,
       regexp_extract(req_head, '\\nx-iotrace-head-bytes: (\\d+)', 1) as req_head_bytes,
       {_hdr('req_head', 'amz-sdk-invocation-id')} as invocation_id,
       nullif(regexp_extract(req_head, '\\namz-sdk-request: [^\\n]*attempt=(\\d+)', 1), '')::integer
           as attempt,
       nullif(regexp_extract(resp_head, '^HTTP/\\S+ (\\d+)', 1), '')::integer as status,
       {_hdr('resp_head', 'content-length')}::bigint as resp_content_length,
       coalesce(nullif(regexp_extract(resp_head, '\\nx-iotrace-code: ([^\\n]*)', 1), ''),
                nullif(xml_code, '')) as error_code
from g where req_head is not null;
"""

REQUESTS_SQL = """
with r as (
    select *,
           split_part(target, '?', 1) as path_part,
           nullif(split_part(target, '?', 2), '') as query,
           regexp_replace(host_header, ':\\d+$', '') as host_name,
           nullif(regexp_extract(host_header, ':(\\d+)$', 1), '')::integer as host_port
    from _req
),
s as (
    select *,
           -- S3 virtual-hosted style: BUCKET.s3[.-]REGION.amazonaws.com, BUCKET.s3.amazonaws.com
           nullif(regexp_extract(host_name, '^(.+)\\.s3[.-]', 1), '') as vhost_bucket
    from r
),
k as (
    select *,
           coalesce(vhost_bucket, nullif(url_decode(split_part(ltrim(path_part, '/'), '/', 1)), ''))
               as bucket,
           nullif(url_decode(case when vhost_bucket is not null then ltrim(path_part, '/')
                  else substr(ltrim(path_part, '/'),
                              length(split_part(ltrim(path_part, '/'), '/', 1)) + 2) end), '')
               as key
    from s
)
select k.ts_ns,
       coalesce(k.end_ns - k.ts_ns, 0) as dur_ns,
       k.first_byte_ns - k.ts_ns as ttfb_ns,
       k.pid, k.tid, k.fd, k.stream, k.tls,
       case k.tls_lib when 1 then 'openssl' when 2 then 'gnutls' when 3 then 'go-crypto/tls'
                     when 4 then 's2n' end
           as tls_library,
       k.method,
       case
         when not (k.aws or k.host_name like '%amazonaws.com') then null
         when k.bucket is null then case when k.method = 'GET' then 'ListBuckets' end
         when k.key is null and k.method = 'GET' then 'ListObjects'
         when k.key is null and k.method = 'HEAD' then 'HeadBucket'
         when k.key is null and k.method = 'PUT' then 'CreateBucket'
         when k.key is null and k.method = 'DELETE' then 'DeleteBucket'
         when k.key is null and k.method = 'POST' and k.query like '%delete%' then 'DeleteObjects'
         when k.method = 'GET' then 'GetObject'
         when k.method = 'HEAD' then 'HeadObject'
         when k.method = 'PUT' and k.query like '%partNumber=%' then 'UploadPart'
         when k.method = 'PUT' then 'PutObject'
         when k.method = 'DELETE' then 'DeleteObject'
         when k.method = 'POST' and k.query like '%uploads%' and k.query not like '%uploadId=%'
           then 'CreateMultipartUpload'
         when k.method = 'POST' and k.query like '%uploadId=%' then 'CompleteMultipartUpload'
       end as s3_op,
       coalesce(k.host_name, split_part(c.peer, ':', 1)) as host,
       coalesce(k.host_port, try_cast(regexp_extract(c.peer, ':(\\d+)$', 1) as integer),
                case when k.tls then 443 else 80 end) as port,
       c.peer,
       k.bucket, k.key, k.path_part as path, k.query, k.range,
       k.status, k.error_code,
       (case when k.method in ('PUT', 'POST')
            then coalesce(k.req_content_length, k.sent - coalesce(try_cast(k.req_head_bytes as bigint), 0))
            when k.method = 'HEAD' then 0
            when k.resp_head_known then k.received - k.resp_head_bytes
            else coalesce(k.resp_content_length, k.received) end)::bigint as bytes,
       coalesce(k.sent, 0)::bigint as bytes_sent, coalesce(k.received, 0)::bigint as bytes_received,
       k.send_calls, k.recv_calls,
       k.invocation_id, k.attempt,
       coalesce(k.attempt > 1,
                lag(k.status) over (partition by k.pid, k.method, k.host_header, k.target,
                                    k.range order by k.ts_ns) >= 500
                or lag(k.status) over (partition by k.pid, k.method, k.host_header, k.target,
                                       k.range order by k.ts_ns) = 429,
                false) as retry,
       k.xml_root
from k left join _connects c
  on c.pid = k.pid and c.fd = k.fd and c.ts_ns = k.conn_ts
order by k.ts_ns
"""

CONNECTIONS_SQL = """
with act as (
    select pid, fd, conn_ts,
           sum(ret) filter (where sending and not tls) as bytes_sent,
           sum(ret) filter (where not sending and not tls) as bytes_received,
           count(*) filter (where sending and not tls) as send_calls,
           count(*) filter (where not sending and not tls) as recv_calls,
           sum(dur_ns) filter (where not tls) as call_ns,
           max(ts_ns + dur_ns) as last_ns,
           bool_or(tls) as tls,
           arg_min(http, ts_ns) filter (where sending and not tls
                                        and http like 'TLS ClientHello%') as hello
    from _numbered where conn_ts is not null group by all
),
req as (
    select pid, fd, conn_ts, count(*) as requests,
           mode(host_header) as host_header
    from _req where conn_ts is not null group by all
),
cl as (
    select c.pid, c.fd, c.ts_ns, min(x.ts_ns) as close_ns
    from _connects c join _closes x
      on x.pid = c.pid and x.fd = c.fd and x.ts_ns > c.ts_ns
     and (c.next_ns is null or x.ts_ns < c.next_ns)
    group by all
)
select c.ts_ns, c.pid, c.tid, c.fd, c.peer,
       regexp_replace(c.peer, '^\\[?(.*?)\\]?:\\d+$', '\\1') as peer_ip,
       try_cast(regexp_extract(c.peer, ':(\\d+)$', 1) as integer) as peer_port,
       c.ret as connect_ret,
       cl.close_ns,
       coalesce(cl.close_ns, a.last_ns, c.ts_ns) - c.ts_ns as dur_ns,
       coalesce(a.bytes_sent, 0)::bigint as bytes_sent,
       coalesce(a.bytes_received, 0)::bigint as bytes_received,
       coalesce(a.send_calls, 0) as send_calls, coalesce(a.recv_calls, 0) as recv_calls,
       coalesce(a.call_ns, 0)::bigint as call_ns,
       coalesce(a.tls, false) or a.hello is not null as tls,
       coalesce(r.requests, 0) as requests,
       regexp_replace(r.host_header, ':\\d+$', '') as host,
       nullif(regexp_extract(a.hello, '\nsni: ([^\n]*)', 1), '') as server_name,
       nullif(regexp_extract(a.hello, '\nalpn: ([^\n]*)', 1), '') as alpn
from _connects c
left join act a on a.pid = c.pid and a.fd = c.fd and a.conn_ts = c.ts_ns
left join req r on r.pid = c.pid and r.fd = c.fd and r.conn_ts = c.ts_ns
left join cl on cl.pid = c.pid and cl.fd = c.fd and cl.ts_ns = c.ts_ns
order by c.ts_ns
"""


def _q(p: Path) -> str:
    return str(p).replace("'", "''")


def build(con: duckdb.DuckDBPyConnection, root: Path) -> dict:
    """Writes requests.parquet, connections.parquet and fuse_requests.parquet
    from the events view of con (a trace's); returns their row counts."""
    from .fuse_requests import FUSE_SQL
    con.execute(BUILD_SQL)
    out = {}
    for name, sql in (("requests", REQUESTS_SQL), ("connections", CONNECTIONS_SQL),
                      ("fuse_requests", FUSE_SQL)):
        if name == "fuse_requests":
            con.execute("create or replace temp view _requests_for_fuse as select * from "
                        f"read_parquet('{_q(root / 'requests.parquet')}')")
        tmp, final = root / f".{name}.parquet.tmp", root / f"{name}.parquet"
        con.execute(f"copy ({sql}) to '{_q(tmp)}' (format parquet)")
        tmp.replace(final)
        out[name] = con.execute(f"select count(*) from '{_q(final)}'").fetchone()[0]
    con.execute("drop view if exists _requests_for_fuse")
    for t in ("_net", "_connects", "_closes", "_net_conn", "_numbered", "_req"):
        con.execute(f"drop table if exists {t}")
    return out
