"""Reading a trace directory: `iotrace.open_trace(DIR)` gives DuckDB relations.

    t = iotrace.open_trace("run1")
    t.events.filter("op = 'pread64'").aggregate("count(*), sum(ret)").show()
    t.sql("select path, count(*) from events join files using (file_id) group by 1")
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import duckdb

from .abi import COPY_OPS, READ_OPS, WRITE_OPS, sql_list
from .errors import EXIT_TRACE, IotraceError
from .tracedir import SCHEMA_VERSION, EVENTS_SCHEMA_NAMES

# Bytes the job moved: copies count as both read and written.
READ_OPS_SQL = sql_list(READ_OPS + COPY_OPS)
WRITE_OPS_SQL = sql_list(WRITE_OPS + COPY_OPS)


class Trace:
    def __init__(self, root: Path, meta: dict, con: duckdb.DuckDBPyConnection) -> None:
        self.root = root
        self.meta = meta
        self.con = con

    @property
    def events(self) -> duckdb.DuckDBPyRelation:
        return self.con.table("events")

    @property
    def files(self) -> duckdb.DuckDBPyRelation:
        return self.con.table("files")

    @property
    def processes(self) -> duckdb.DuckDBPyRelation:
        return self.con.table("processes")

    @property
    def threads(self) -> duckdb.DuckDBPyRelation:
        return self.con.table("threads")

    def sql(self, query: str, params: Optional[list] = None) -> duckdb.DuckDBPyRelation:
        return self.con.sql(query, params=params) if params else self.con.sql(query)


def _check_version(meta: dict, root: Path) -> None:
    version = str(meta.get("schema_version", ""))
    try:
        major = int(version.split(".")[0])
    except ValueError:
        raise IotraceError(f"{root}/meta.json has no valid schema_version: not an iotrace trace?",
                           EXIT_TRACE)
    ours = int(SCHEMA_VERSION.split(".")[0])
    if major > ours:
        raise IotraceError(f"{root} is trace format {version}, newer than this iotrace "
                           f"understands ({SCHEMA_VERSION}): upgrade iotrace", EXIT_TRACE)


def open_trace(path, con: Optional[duckdb.DuckDBPyConnection] = None) -> Trace:
    """Opens a trace directory; tables are views over its Parquet files."""
    root = Path(path)
    meta_path = root / "meta.json"
    if not root.is_dir():
        raise IotraceError(f"{root}: no such trace directory", EXIT_TRACE)
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError:
        raise IotraceError(f"{root} is not an iotrace trace (no meta.json)", EXIT_TRACE)
    except ValueError as e:
        raise IotraceError(f"{meta_path} is corrupt ({e}): the trace cannot be read", EXIT_TRACE)
    _check_version(meta, root)
    con = con or duckdb.connect()
    parts = sorted((root / "events").glob("part-*.parquet"))
    try:
        if parts:
            files = ", ".join("'" + str(p).replace("'", "''") + "'" for p in parts)
            con.execute(f"create or replace view events as select * from read_parquet([{files}])")
            have = {r[0] for r in con.execute("describe events").fetchall()}
            missing = [f"null::{t} as {n}" for n, t in EVENTS_SCHEMA_NAMES if n not in have]
            if missing:   # a trace of an older minor version: its new columns are null
                con.execute(f"create or replace view events as select *, {', '.join(missing)} "
                            f"from read_parquet([{files}])")
        else:
            cols = ", ".join(f"null::{t} as {n}" for n, t in EVENTS_SCHEMA_NAMES)
            con.execute(f"create or replace view events as select {cols} where false")
        for name in ("files", "processes", "threads"):
            p = root / f"{name}.parquet"
            if not p.exists():
                raise IotraceError(f"{root} lacks {name}.parquet: the trace is incomplete",
                                   EXIT_TRACE)
            con.execute(f"create or replace view {name} as select * from "
                        f"read_parquet('{str(p).replace(chr(39), chr(39) * 2)}')")
    except duckdb.Error as e:
        raise IotraceError(f"{root}: cannot read the trace tables ({e})", EXIT_TRACE)
    return Trace(root, meta, con)
