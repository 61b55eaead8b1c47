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
from .trace import Trace, create_views, read_meta

# Per member, its pids and tids are moved up by this times its index in a
# shifted view, so that several hosts' processes never share an id.
PID_STRIDE = 10_000_000


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


def shifted_member(ts: TraceSet, i: int, base_ns: int) -> Trace:
    """Member i as a Trace of its own whose times are on the set's axis
    (ts_ns = wall_ns - base_ns), whose pids and tids are unique in the set
    (+ i * PID_STRIDE) and whose command lines start with its host: what a
    timeline of the whole set is drawn from, one host after another."""
    m = ts.members[i]
    con = duckdb.connect()
    create_views(con, m.path, prefix="raw_")
    shift = int(ts.clock[m.host]["offset_ns"]) - base_ns
    p = i * PID_STRIDE
    host = m.host.replace("'", "''")

    def up(col: str) -> str:     # a pid/tid column; 0 and negatives keep their meaning
        return f"case when {col} > 0 then {col} + {p} else {col} end"
    con.execute(f"""create view events as select * replace (
        ts_ns + {shift} as ts_ns, {up('pid')} as pid, {up('tid')} as tid,
        case when op = 'offcpu' then {up('ret')} else ret end as ret,
        case when op = 'offcpu' then {up('arg')} else arg end as arg) from raw_events""")
    con.execute(f"""create view processes as select * replace (
        {up('pid')} as pid, {up('ppid')} as ppid, '{host}: ' || cmdline as cmdline,
        start_ns + {shift} as start_ns, exit_ns + {shift} as exit_ns) from raw_processes""")
    con.execute(f"""create view threads as select * replace (
        {up('tid')} as tid, {up('pid')} as pid,
        start_ns + {shift} as start_ns, exit_ns + {shift} as exit_ns) from raw_threads""")
    con.execute("create view files as select * from raw_files")
    con.execute(f"""create view pystacks as select * replace (
        ts_ns + {shift} as ts_ns, {up('pid')} as pid, {up('tid')} as tid) from raw_pystacks""")
    con.execute("create view pyframes as select * from raw_pyframes")
    meta = dict(m.meta)
    for k in ("start_monotonic_ns", "end_monotonic_ns"):
        if meta.get(k) is not None:
            meta[k] = int(meta[k]) + shift
    meta["host"] = m.host
    return Trace(m.path, meta, con)


def set_base_ns(ts: TraceSet) -> int:
    """The set's time origin on its wall axis: a second before its first event."""
    first = ts.con.execute("select min(wall_ns) from events").fetchone()[0]
    if first is None:
        first = min(int(c["offset_ns"]) + int(m.meta.get("start_monotonic_ns") or 0)
                    for m, c in zip(ts.members, ts.clock.values()))
    return int(first) - 1_000_000_000
