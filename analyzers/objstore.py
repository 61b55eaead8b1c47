"""What the object-storage rules share: the requests table (userspace/iotrace/
requests.py: one row per HTTP request of the job, plain or TLS) and the
calls their cost is measured on."""
from __future__ import annotations

from .base import Context

# The job's calls on the network side of a request: its inet socket calls and
# its TLS library calls (a condition on events e, for the wait attribution).
NET_CALLS = "(e.op in ('tls_read', 'tls_write') or (e.fd_kind = 'socket' and e.mode in (2, 10)))"

# A request the store refused for its rate: HTTP 429/503 or a throttling code
THROTTLED = ("(status in (429, 503) or error_code in ('SlowDown', 'Throttling', "
             "'ThrottlingException', 'RequestLimitExceeded', 'TooManyRequestsException', "
             "'RequestThrottled', 'SlowDownRead', 'SlowDownWrite'))")

# The same request again (a retry): the same method, endpoint, target and
# range, after the one before it (partition a window by who sent it and these)
SAME_REQUEST = "method, host, path, coalesce(query, ''), coalesce(range, '')"

# Object reads that returned data
DATA_GETS = "(method = 'GET' and status between 200 and 299 and key is not null)"


def in_flight_sql(where: str = "true") -> str:
    """A query of (host, port, max_in_flight): per endpoint, the most requests
    matching `where` in flight at once (a running sum over starts and ends)."""
    return f"""
        select host, port, max(n) as max_in_flight from (
            select host, port, sum(d) over (partition by host, port order by t, d
                                            rows between unbounded preceding and current row)
                   as n
            from (select host, port, ts_ns as t, 1 as d from requests where {where}
                  union all
                  select host, port, ts_ns + dur_ns as t, -1 as d from requests where {where})
                 as edges) as running
        group by all"""


def request_count(ctx: Context) -> int:
    """Requests in the trace (0 where the engine has no requests table)."""
    try:
        return int(ctx.one("select count(*) from requests")[0])
    except Exception:   # a trace set's node summary or an engine without the table
        return 0


def top_endpoints(ctx: Context, where: str, limit: int = 3) -> list[dict]:
    return [{"endpoint": f"{h}:{p}", "requests": n, "share": s}
            for h, p, n, s in ctx.rows(f"""
                select host, port, count(*), count(*) / sum(count(*)) over ()
                from requests where {where} group by all order by 3 desc, 1, 2 limit {limit}""")]


def top_processes(ctx: Context, where: str, limit: int = 3) -> list[dict]:
    return [{"pid": pid, "cmdline": cmd, "requests": n, "share": s}
            for pid, cmd, n, s in ctx.rows(f"""
                select r.pid, any_value(p.cmdline), count(*), count(*) / sum(count(*)) over ()
                from requests r left join processes_once p using (pid)
                where {where} group by r.pid order by 3 desc, 1 limit {limit}""")]


def examples(ctx: Context, where: str, order: str = "dur_ns desc", limit: int = 3) -> list[dict]:
    return [{"ts_ns": ts, "pid": pid, "tid": tid,
             "what": f"{m} {h}/{(b or '') + ('/' + k if k else '')} -> {st} "
                     f"in {dur / 1e6:.1f} ms"}
            for ts, pid, tid, m, h, b, k, st, dur in ctx.rows(f"""
                select ts_ns, pid, tid, method, host, bucket, key, status, dur_ns
                from requests where {where} order by {order}, ts_ns limit {limit}""")]
