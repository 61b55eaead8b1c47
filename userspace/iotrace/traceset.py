"""A trace set: one trace per node of a job, in one directory.

    SET/host=node01/   meta.json events/ files.parquet ...   (iotrace run -o SET/host=%h)
    SET/host=node02/   ...

Any subdirectory holding a meta.json is a member; its host is the `host=`
part of its name, else the host its meta.json names. `open_trace_set(SET)`
gives the members' tables as one set of relations with a `host` column
(file_id, pid and tid are per host: join on host too) and, on events,
`wall_ns`: the event's time on the set's common axis (realtime, through the
host's clock pairs: clocks.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import duckdb

from . import clocks
from .errors import EXIT_TRACE, IotraceError
from .trace import create_views, read_meta


@dataclass
class Member:
    host: str
    path: Path
    meta: dict


def is_trace_set(path) -> bool:
    root = Path(path)
    return (root.is_dir() and not (root / "meta.json").exists()
            and any((d / "meta.json").exists() for d in root.iterdir() if d.is_dir()))


def members(path) -> list[Member]:
    root = Path(path)
    if not root.is_dir():
        raise IotraceError(f"{root}: no such trace set directory", EXIT_TRACE)
    out: list[Member] = []
    for d in sorted(x for x in root.iterdir() if x.is_dir() and (x / "meta.json").exists()):
        meta = read_meta(d)
        host = d.name.split("=", 1)[1] if d.name.startswith("host=") else meta.get("host") or d.name
        out.append(Member(host, d, meta))
    if not out:
        raise IotraceError(f"{root} holds no traces (no subdirectory with a meta.json)",
                           EXIT_TRACE)
    seen: dict[str, int] = {}
    for m in out:                       # two traces of one host: tell them apart
        seen[m.host] = seen.get(m.host, 0) + 1
    for m in out:
        if seen[m.host] > 1:
            m.host = f"{m.host}/{m.path.name}"
    return out


def clock_info(m: Member) -> dict:
    """The member's offset to the common axis and its stated error bound."""
    clock = m.meta.get("clock") or {}
    if clock.get("samples"):
        return {"offset_ns": clocks.offset_ns(clock), "error_bound_ns": clocks.error_bound_ns(clock),
                "pair_error_ns": clocks.pair_error_ns(clock),
                "synchronized": (clock.get("sync") or {}).get("synchronized"),
                "pairs": len(clock["samples"])}
    # traces before clock pairs: the start pair only, no bound
    return {"offset_ns": m.meta.get("start_realtime_ns", 0) - m.meta.get("start_monotonic_ns", 0),
            "error_bound_ns": None, "pair_error_ns": None, "synchronized": None, "pairs": 1}


class TraceSet:
    def __init__(self, root: Path, members: list[Member], con: duckdb.DuckDBPyConnection):
        self.root = root
        self.members = members
        self.con = con
        self.clock = {m.host: clock_info(m) for m in members}

    def sql(self, query: str, params: Optional[list] = None) -> duckdb.DuckDBPyRelation:
        return self.con.sql(query, params=params) if params else self.con.sql(query)


def open_trace_set(path, con: Optional[duckdb.DuckDBPyConnection] = None) -> TraceSet:
    root = Path(path)
    ms = members(root)
    con = con or duckdb.connect()
    ts = TraceSet(root, ms, con)
    for i, m in enumerate(ms):
        create_views(con, m.path, prefix=f"m{i}_")
    for name in ("events", "files", "processes", "threads"):
        parts = []
        for i, m in enumerate(ms):
            host = m.host.replace("'", "''")
            extra = (f", ts_ns + {int(ts.clock[m.host]['offset_ns'])}::bigint as wall_ns"
                     if name == "events" else "")
            parts.append(f"select '{host}' as host, *{extra} from m{i}_{name}")
        con.execute(f"create or replace view {name} as " + " union all by name ".join(parts))
    return ts
