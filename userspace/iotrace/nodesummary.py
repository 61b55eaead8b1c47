"""The node summary written at the end of each trace: what the report of a
trace set reads instead of every node's raw events.

    TRACE/summary/node_report.json   the node's report (default targets and
                                     thresholds), with its processes' ranks
    TRACE/summary/rates.parquet      bytes and calls read and written per
                                     second (of the trace's monotonic clock)
                                     per process

Each node computes its own at the end of its run, where its data is, so a
64-node set's report reads 64 small files. `iotrace report SET` falls back
to the raw events for a node without one, or when targets or thresholds
are given (they change the findings).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from . import __version__
from .trace import READ_OPS_SQL, WRITE_OPS_SQL, open_trace

SUMMARY_DIR = "summary"
NODE_REPORT = "node_report.json"
RATES = "rates.parquet"


def rates_sql(events: str = "events") -> str:
    """Per second (of the trace's monotonic clock) and process: bytes and
    calls read and written. What rates.parquet holds, and what the report of
    a set computes from the raw events of a node without a summary."""
    return f"""
        select (ts_ns // 1000000000)::bigint as second, pid,
               coalesce(sum(greatest(ret, 0)) filter (where op in {READ_OPS_SQL}), 0)
                   as read_bytes,
               coalesce(sum(greatest(ret, 0)) filter (where op in {WRITE_OPS_SQL}), 0)
                   as write_bytes,
               count(*) filter (where op in {READ_OPS_SQL}) as reads,
               count(*) filter (where op in {WRITE_OPS_SQL}) as writes
        from {events} where op in {READ_OPS_SQL} or op in {WRITE_OPS_SQL}
        group by all order by 1, 2"""


def rank_io(con, verdict: dict) -> dict:
    """Per rank (processes.rank, which forked loader workers inherit): the data
    bytes its processes read and wrote in the node's training window, and the
    window's seconds: what a rank's rate against a per-GPU target needs."""
    tw = verdict.get("training_window") or {}
    lo, hi = tw.get("start_ns"), tw.get("end_ns")
    if lo is None or hi is None or hi <= lo:
        return {}
    rows = con.execute("""
        with r as (select pid, any_value(rank) as rank from processes
                   where rank is not null group by pid)
        select r.rank, coalesce(sum(d.nbytes) filter (where d.dir = 'read'), 0),
               coalesce(sum(d.nbytes) filter (where d.dir = 'write'), 0)
        from all_data_io d join r using (pid)
        where d.ts_ns >= ? and d.ts_ns < ?
        group by r.rank order by 1""", [lo, hi]).fetchall()
    return {str(rank): {"read_bytes": int(rd), "write_bytes": int(wr),
                        "window_s": (hi - lo) / 1e9} for rank, rd, wr in rows}


def add_ranks(trace, d: dict) -> dict:
    """A node's report dict with its processes' ranks (pid: rank) and each
    rank's data I/O in the training window: what a set's report reads."""
    d["ranks"] = {str(pid): rank for pid, rank in trace.con.execute(
        "select pid, rank from processes where rank is not null").fetchall()}
    d["rank_io"] = rank_io(trace.con, d["verdict"])
    return d


def node_report_dict(trace, progress=None) -> dict:
    """The node's report with default targets, and its processes' ranks."""
    from .analyzers.base import Targets
    from .analyzers.report import build_report
    d = add_ranks(trace, build_report(trace, Targets(), progress=progress).to_dict())
    d["iotrace_version"] = __version__
    d["trace_schema_version"] = trace.meta.get("schema_version")
    return d


def write_node_summary(out: Path, progress=None) -> Optional[str]:
    """Writes TRACE/summary/; returns why it could not, or None. progress:
    as build_report's (what the report does next)."""
    try:
        trace = open_trace(out)
        d = out / SUMMARY_DIR
        d.mkdir(exist_ok=True)
        q = str(d / RATES).replace("'", "''")
        trace.con.execute(f"copy ({rates_sql()}) to '{q}' (format parquet)")
        rep = node_report_dict(trace, progress)
        (d / NODE_REPORT).write_text(json.dumps(rep))
        return None
    except Exception as e:  # noqa: BLE001 - the trace itself is written; say what is missing
        return f"{type(e).__name__}: {e}"


def read_node_report(trace_dir: Path, meta: dict) -> Optional[dict]:
    """The node's summary report, if it is there and of this iotrace's report schema."""
    from .analyzers.report import REPORT_SCHEMA
    p = Path(trace_dir) / SUMMARY_DIR / NODE_REPORT
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    if d.get("schema") != REPORT_SCHEMA or \
            d.get("trace_schema_version") != meta.get("schema_version"):
        return None
    return d
