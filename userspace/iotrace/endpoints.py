"""Per endpoint (host and port the job sent HTTP requests to, or a peer it
exchanged bytes with that iotrace could not read as HTTP): requests, bytes,
statuses, latency and concurrency. `iotrace summary` prints them; the JSON
summary's `endpoints` and the object-storage findings use them.
"""
from __future__ import annotations

from .analyzers.objstore import THROTTLED, in_flight_sql
from .trace import Trace

ENDPOINTS_SQL = f"""
with r as (select * from requests),
conc as ({in_flight_sql()}),
agg as (
    select host, port,
           count(*) as requests,
           sum(bytes_received) as bytes_received,
           sum(bytes_sent) as bytes_sent,
           sum(bytes) filter (where method = 'GET' and status between 200 and 299) as bytes_got,
           sum(bytes) filter (where method in ('PUT', 'POST') and status between 200 and 299)
               as bytes_put,
           count(*) filter (where {THROTTLED}) as throttled,
           count(*) filter (where retry) as retries,
           count(*) filter (where status is null) as no_response,
           bool_or(tls) as tls,
           min(ts_ns) as first_ns, max(ts_ns + dur_ns) as last_ns,
           sum(dur_ns) as busy_ns,
           quantile_cont(ttfb_ns, 0.5) / 1e6 as ttfb_ms_p50,
           quantile_cont(dur_ns, 0.5) / 1e6 as dur_ms_p50,
           quantile_cont(dur_ns, 0.99) / 1e6 as dur_ms_p99,
           count(distinct pid) as processes
    from r group by all
),
st as (
    select host, port, list(struct_pack(k := coalesce(status::varchar, 'none'), n := n)) as s
    from (select host, port, status, count(*) as n from r group by all) group by all
)
select a.*, c.max_in_flight, st.s as statuses
from agg a join conc c using (host, port) join st using (host, port)
order by a.bytes_received + a.bytes_sent desc, a.requests desc
"""

# Connections on which no HTTP message was read: TLS the probes did not see
# (a client whose TLS is neither OpenSSL, GnuTLS nor Go's: AWS CRT's s2n,
# rustls), HTTP/2, or not HTTP at all. A TLS one is named by the server name
# and ALPN protocols of its ClientHello.
OPAQUE_SQL = """
select peer_ip as host, peer_port as port,
       string_agg(distinct server_name, ',' order by server_name) as server_name,
       string_agg(distinct alpn, ' | ' order by alpn) as alpn,
       count(*) filter (where tls) as tls_connections,
       count(*) filter (where alpn like 'h2%') as http2_offered,
       count(*) as connections,
       sum(bytes_received) as bytes_received, sum(bytes_sent) as bytes_sent,
       sum(call_ns) / 1e9 as call_s, count(distinct pid) as processes
from connections
where requests = 0 and bytes_received + bytes_sent > 0
group by all order by sum(bytes_received) + sum(bytes_sent) desc
"""


def endpoints(t: Trace) -> dict:
    """{"endpoints": [...], "requests_total": n, "opaque_connections": [...]}."""
    out = []
    for row in t.con.execute(ENDPOINTS_SQL).fetchall():
        d = dict(zip([c[0] for c in t.con.description], row))
        span_s = max((d.pop("last_ns") - d.pop("first_ns")) / 1e9, 1e-9)
        statuses = {s["k"]: s["n"] for s in d.pop("statuses")}
        busy = d.pop("busy_ns")
        out.append({
            "host": d["host"], "port": d["port"], "tls": bool(d["tls"]),
            "requests": d["requests"],
            "bytes_received": int(d["bytes_received"] or 0),
            "bytes_sent": int(d["bytes_sent"] or 0),
            "object_bytes_read": int(d["bytes_got"] or 0),
            "object_bytes_written": int(d["bytes_put"] or 0),
            "status_counts": dict(sorted(statuses.items())),
            "throttled": d["throttled"], "retries": d["retries"],
            "no_response": d["no_response"],
            "active_s": span_s,
            "read_bytes_per_s": (d["bytes_got"] or 0) / span_s,
            "requests_per_s": d["requests"] / span_s,
            "mean_in_flight": busy / 1e9 / span_s,
            "max_in_flight": d["max_in_flight"],
            "ttfb_ms_p50": d["ttfb_ms_p50"], "duration_ms_p50": d["dur_ms_p50"],
            "duration_ms_p99": d["dur_ms_p99"], "processes": d["processes"],
        })
    cols = {r[0] for r in t.con.execute("describe connections").fetchall()}
    sql = OPAQUE_SQL if "server_name" in cols else OPAQUE_SQL.replace(
        "from connections", "from (select *, null::varchar as server_name, "
                            "null::varchar as alpn from connections)")  # a trace made before
    opaque = [dict(zip([c[0] for c in t.con.description], row))
              for row in t.con.execute(sql).fetchall()]
    for o in opaque:
        o["bytes_received"], o["bytes_sent"] = int(o["bytes_received"]), int(o["bytes_sent"])
    return {"endpoints": out, "requests_total": sum(e["requests"] for e in out),
            "opaque_connections": opaque, "fuse_daemons": fuse_daemons(t)}


def fuse_daemons(t: Trace) -> list[dict]:
    """Per traced FUSE daemon, the requests it served for the job's threads."""
    try:
        rows = t.con.execute("""
            with r as (select * from fuse_requests
                       where req_pid is distinct from daemon_pid),
            ops as (select daemon_pid, list(struct_pack(k := opcode, n := n)
                                            order by n desc, opcode) as by_opcode
                    from (select daemon_pid, opcode, count(*) as n from r group by all)
                    group by daemon_pid)
            select r.daemon_pid, any_value(p.cmdline), count(*),
                   count(*) filter (where r.job_ts_ns is not null),
                   sum(r.http_requests), sum(r.http_bytes), any_value(ops.by_opcode)
            from r left join (select pid, any_value(cmdline) as cmdline from processes
                              group by pid) p on p.pid = r.daemon_pid
            join ops using (daemon_pid)
            group by r.daemon_pid order by 3 desc""").fetchall()
    except Exception:   # noqa: BLE001 - an engine or trace without the table
        return []
    return [{"daemon_pid": pid, "cmdline": cmd or "", "requests": n,
             "tied_to_job_calls": tied, "http_requests": int(http or 0),
             "http_bytes": int(hbytes or 0), "by_opcode": {o["k"]: o["n"] for o in ops}}
            for pid, cmd, n, tied, http, hbytes, ops in rows]
