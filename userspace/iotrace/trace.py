"""Reading a trace directory: `iotrace.open_trace(DIR)` gives DuckDB relations.

    t = iotrace.open_trace("run1")
    t.events.filter("op = 'pread64'").aggregate("count(*), sum(ret)").show()
    t.sql("select path, count(*) from events join files using (file_id) group by 1")
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

import duckdb

from .abi import (ASYNC_READ_OPS, ASYNC_WRITE_OPS, COPY_OPS, EF_DIRECT, OPEN_OPS, READ_OPS,
                  WRITE_OPS, o_direct, sql_list)
from .errors import EXIT_TRACE, IotraceError
from .schema import SCHEMA_VERSION, EVENTS_SCHEMA_NAMES
from . import requests

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

    @property
    def requests(self) -> duckdb.DuckDBPyRelation:
        """HTTP requests of the job (plain and TLS): requests.py."""
        return self.con.table("requests")

    @property
    def fuse_requests(self) -> duckdb.DuckDBPyRelation:
        """Requests a traced FUSE daemon served: fuse_requests.py."""
        return self.con.table("fuse_requests")

    @property
    def connections(self) -> duckdb.DuckDBPyRelation:
        """TCP connections the job opened."""
        return self.con.table("connections")

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


# Traces opened by this process: the command line names the one a reader's
# failed query was about (unreadable()).
OPENED: list[Path] = []


def read_meta(root: Path) -> dict:
    meta_path = root / "meta.json"
    if not root.is_dir():
        raise IotraceError(f"{root}: no such trace directory", EXIT_TRACE)
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError:
        hint = (f": it is a trace set (one trace per host), which `iotrace report` reads; "
                f"give one host's trace for this ({root}/host=NAME)"
                if any((d / "meta.json").exists() for d in root.iterdir() if d.is_dir()) else "")
        raise IotraceError(f"{root} is not an iotrace trace (no meta.json){hint}", EXIT_TRACE)
    except ValueError as e:
        raise IotraceError(f"{meta_path} is corrupt ({e}): the trace cannot be read", EXIT_TRACE)
    if not isinstance(meta, dict):
        raise IotraceError(f"{meta_path} is corrupt (a JSON {type(meta).__name__}, not an "
                           "object): the trace cannot be read", EXIT_TRACE)
    _check_version(meta, root)
    _check_meta_types(meta, meta_path)
    OPENED.append(root)
    return meta


# Types of the meta.json keys the readers use (null is allowed for numbers
# and strings: a trace cut short lacks some of them; objects and lists are
# read as such when present).
_META_TYPES: dict[str, tuple[type, ...]] = {
    **{k: (dict,) for k in ("options", "probes", "counters", "block_devices", "clock",
                            "exit_status", "drops_by_op", "machine")},
    **{k: (int,) for k in ("events", "drops", "start_monotonic_ns", "start_realtime_ns",
                           "end_monotonic_ns", "duration_ns", "root_pid", "event_parts",
                           "events_parquet_bytes", "files", "processes", "threads")},
    **{k: (str,) for k in ("state", "mode", "capture", "host", "arch", "kernel", "tool",
                           "stop_reason", "error")},
    "command": (list,),
    "drop_intervals": (list,),
}
_NOT_NULL = (dict, list)


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _check_meta_types(meta: dict, meta_path: Path) -> None:
    """A key of the wrong type is a corrupt meta.json, said in one line (not
    a reader's traceback later)."""
    def bad(key: str, value, want: str) -> IotraceError:
        return IotraceError(f"{meta_path} is corrupt (`{key}` is {json.dumps(value)[:40]}, "
                            f"not {want}): the trace cannot be read", EXIT_TRACE)
    for key, types in _META_TYPES.items():
        v = meta.get(key)
        if v is None and key in meta and types[0] in _NOT_NULL and key != "command":
            raise bad(key, v, "an object" if types[0] is dict else "a list")
        if v is not None and (not isinstance(v, types) or isinstance(v, bool) or
                              isinstance(v, int) and not _INT64[0] <= v <= _INT64[1]):
            raise bad(key, v, {dict: "an object", int: "a 64-bit integer", str: "a string",
                               list: "a list"}[types[0]])
    for key, v in (meta.get("counters") or {}).items():
        if not isinstance(v, int) or isinstance(v, bool) or not _INT64[0] <= v <= _INT64[1]:
            raise bad(f"counters.{key}", v, "a 64-bit integer")
    probes, clock = meta.get("probes") or {}, meta.get("clock") or {}
    for key, items, ok in (
            ("probes.attached", probes.get("attached"), lambda x: isinstance(x, str)),
            ("probes.verbs_libraries_not_probed", probes.get("verbs_libraries_not_probed"),
             lambda x: isinstance(x, str)),
            ("probes.skipped", probes.get("skipped"), lambda x: isinstance(x, dict) and all(
                isinstance(x.get(k), str) for k in ("probe", "why"))),
            ("clock.samples", clock.get("samples"), lambda x: isinstance(x, dict) and all(
                type(x.get(k)) is int and _INT64[0] <= x[k] <= _INT64[1]
                for k in ("monotonic_ns", "realtime_ns")))):
        if items is not None and not (isinstance(items, list) and all(map(ok, items))):
            raise bad(key, items, "a list of what iotrace writes there")
    for v in meta.get("drop_intervals") or ():
        if not (isinstance(v, list) and len(v) == 3 and all(
                isinstance(x, int) and not isinstance(x, bool) for x in v)):
            raise bad("drop_intervals", v, "a list of [start, end, drops]")


# A Parquet file named in a DuckDB or Arrow error message
_PARQUET_NAMED = re.compile(r"""["']([^"'\n]+?\.parquet)["']""")


def unreadable(e: Exception, root: Optional[Path] = None,
               path: Optional[Path] = None, roots: tuple = ()) -> IotraceError:
    """One line, exit 4, for a Parquet file of a trace that DuckDB or Arrow
    could not read (truncated, overwritten, not a file): which file (`path`,
    or found in `root` or `roots` when the error does not name it), what,
    and what to do."""
    text = str(e).strip()
    first = text.splitlines()[0].strip() if text else type(e).__name__
    if isinstance(e, UnicodeDecodeError):
        first = f"a text column holds bytes that are not UTF-8 ({e.reason}): damaged"
    m = _PARQUET_NAMED.search(text)
    for r in ([root] if root and not m and path is None else []) + \
            ([] if m or path is not None else list(roots)):
        path = _first_damaged(_parquet_files(r))
        if path is not None:
            break
        root = r
    if not m and path is None:
        where = f" {root}" if root else ""
        return IotraceError(f"cannot read the trace{where} ({first[:300]})", EXIT_TRACE)
    path = m.group(1) if m else str(path)
    why = re.sub(r"""\s*["'][^"'\n]+?\.parquet["']""", "", first)
    why = re.sub(r"^(Invalid Input|IO|Invalid) Error: ", "", why).strip()[:200]
    name = Path(path).name
    if Path(path).parent.name == "events":
        what = (f"move it out of {Path(path).parent} to read the rest of the trace "
                f"(its events are lost)")
        return IotraceError(f"events part {path} is damaged ({why}): {what}", EXIT_TRACE)
    if name in ("requests.parquet", "connections.parquet", "fuse_requests.parquet"):
        what = "delete it: iotrace derives it from the events again"
    else:
        what = "the trace cannot be read without it (trace the job again)"
    return IotraceError(f"{path} is damaged ({why}): {what}", EXIT_TRACE)


def _parquet_files(root: Path) -> list[Path]:
    return sorted((root / "events").glob("part-*.parquet")) + [
        p for p in (root / f"{n}.parquet" for n in ("files", "processes", "threads"))
        if p.exists()]


def _first_damaged(parts: list[Path], read_limit: int = 1 << 30) -> Optional[Path]:
    """The first file whose Parquet footer does not read, else whose pages
    do not (the first read_limit bytes of files): a DuckDB error about
    several parts, or about a page, may not name the file."""
    import pyarrow.parquet as pq
    for p in parts:
        try:
            pq.read_metadata(p)
        except Exception:     # any failure to read it is the damage to report
            return p
    for p in parts:
        try:
            read_limit -= p.stat().st_size
            if read_limit < 0:
                break
            pq.read_table(p)
        except Exception:
            return p
    return None


def create_views(con: duckdb.DuckDBPyConnection, root: Path, prefix: str = "",
                 derived: bool = True) -> None:
    """Views {prefix}events, files, processes, threads, requests and
    connections over a trace's Parquet files (derived: also requests and
    connections, computed from the events for a trace that lacks them)."""
    try:
        str(root).encode("utf-8")
    except UnicodeEncodeError:
        from .model import path_text
        raise IotraceError(f"{path_text(str(root))}: the trace's path is not UTF-8, which "
                           "DuckDB cannot open: rename the directory, or give a symlink to it "
                           "with a UTF-8 name (ln -s)", EXIT_TRACE)
    parts = sorted((root / "events").glob("part-*.parquet"))
    ev = f"{prefix}events"
    try:
        if parts:
            files = ", ".join("'" + str(p).replace("'", "''") + "'" for p in parts)
            # not hive-partitioned: a set's SET/host=NAME/ would add a column
            src = f"read_parquet([{files}], hive_partitioning = false)"
            try:
                con.execute(f"create or replace view {ev} as select * from {src}")
                have = {r[0] for r in con.execute(f"describe {ev}").fetchall()}
            except duckdb.Error as e:
                raise unreadable(e, root, _first_damaged(parts))
            missing = [f"null::{t} as {n}" for n, t in EVENTS_SCHEMA_NAMES if n not in have]
            legacy = _legacy_direct(con, root, src)
            if missing or legacy:   # a trace of an older minor version
                con.execute(f"create or replace view {ev} as select * {legacy} "
                            f"{''.join(', ' + m for m in missing)} from {src}")
        else:
            cols = ", ".join(f"null::{t} as {n}" for n, t in EVENTS_SCHEMA_NAMES)
            con.execute(f"create or replace view {ev} as select {cols} where false")
        for name in ("files", "processes", "threads"):
            p = root / f"{name}.parquet"
            if not p.exists():
                raise IotraceError(f"{root} lacks {name}.parquet: the trace is incomplete",
                                   EXIT_TRACE)
            q = str(p).replace("'", "''")
            src = f"read_parquet('{q}', hive_partitioning = false)"
            try:
                con.execute(f"create or replace view {prefix}{name} as select * from {src}")
            except duckdb.Error as e:
                raise unreadable(e, root, p)
            if name == "processes" and "rank" not in {
                    r[0] for r in con.execute(f"describe {prefix}{name}").fetchall()}:
                # before schema 1.4: no ranks
                con.execute(f"create or replace view {prefix}{name} as select *, "
                            f"null::integer as rank, null::integer as local_rank from {src}")
        if derived:
            _request_views(con, root, prefix)
        _profile_views(con, root, prefix)
        _pystack_views(con, root, prefix)
    except duckdb.Error as e:
        raise unreadable(e, root)


def _legacy_direct(con: duckdb.DuckDBPyConnection, root: Path, src: str) -> str:
    """Before schema 1.7 no record said its file was open with O_DIRECT
    (eflags DIRECT): for such a trace, a `replace` clause that gives it to the
    reads and writes of files every recorded open of which asked for O_DIRECT
    (fds opened before the trace, dup'd, or set with fcntl are not seen).
    Empty for a trace that has the flag, or has no such file (the file ids
    are looked up once here: a join in the view cost a 10 M-event report 3 s)."""
    try:
        meta = json.loads((root / "meta.json").read_text())
        major, minor = (int(x) for x in str(meta.get("schema_version")).split(".")[:2])
    except (OSError, ValueError, AttributeError):
        return ""
    if (major, minor) >= (1, 7):
        return ""
    flag = o_direct(meta.get("arch"))
    ids = [r[0] for r in con.execute(f"""
        select file_id from {src} where op in {sql_list(OPEN_OPS)} and ret >= 0
        and file_id >= 0 group by file_id having bool_and(flags & {flag} != 0)
        order by file_id""").fetchall()]
    if not ids:
        return ""
    ops = sql_list(READ_OPS + WRITE_OPS + ASYNC_READ_OPS + ASYNC_WRITE_OPS)
    return (f"replace (case when op in {ops} and file_id in ({', '.join(map(str, ids))}) "
            f"then (eflags | {EF_DIRECT})::smallint else eflags end as eflags)")


def _profile_views(con: duckdb.DuckDBPyConnection, root: Path, prefix: str) -> None:
    """profile_calls and profile_rates of a profile (iotrace run --profile)."""
    for name in ("calls", "rates"):
        p = root / "profile" / f"{name}.parquet"
        if p.exists():
            q = str(p).replace("'", "''")
            con.execute(f"create or replace view {prefix}profile_{name} as select * from "
                        f"read_parquet('{q}', hive_partitioning = false)")


def _pystack_views(con: duckdb.DuckDBPyConnection, root: Path, prefix: str) -> None:
    """pystacks and pyframes: the job's Python stacks (pystacks.py); empty
    views where the trace has none."""
    from .pystacks import TABLES, empty_select
    for name, schema in TABLES:
        p = root / f"{name}.parquet"
        if p.exists():
            q = str(p).replace("'", "''")
            src = f"select * from read_parquet('{q}', hive_partitioning = false)"
        else:
            src = empty_select(schema)
        con.execute(f"create or replace view {prefix}{name} as {src}")


def drop_time(meta: dict, lo_ns: int, hi_ns: int) -> tuple[float, int]:
    """(seconds of [lo_ns, hi_ns) in which records were dropped, drops
    there), from meta.json's drop_intervals (to 0.5 s; traces made before
    they were recorded: (0.0, 0))."""
    secs, n = 0.0, 0
    for a, b, k in meta.get("drop_intervals") or ():
        over = min(b, hi_ns) - max(a, lo_ns)
        if over > 0 or (a >= lo_ns and b <= hi_ns):
            secs += max(over, 0) / 1e9
            n += k
    return secs, n


def is_profile(meta: dict) -> bool:
    """A profile (calls summed in kernel), not a full trace."""
    return meta.get("capture") == "profile"


def derive_requests(root: Path):
    """(requests, connections, fuse_requests) as Arrow tables, for a trace
    made before these tables were written: requests.py's SQL over the
    trace's events."""
    from .fuse_requests import FUSE_SQL
    con = duckdb.connect()
    try:
        create_views(con, root, derived=False)
        con.execute(requests.BUILD_SQL)
        con.execute(f"create temp table _requests_for_fuse as {requests.REQUESTS_SQL}")
        return (con.sql("select * from _requests_for_fuse").to_arrow_table(),
                con.sql(requests.CONNECTIONS_SQL).to_arrow_table(),
                con.sql(FUSE_SQL).to_arrow_table())
    finally:
        con.close()


def _request_views(con: duckdb.DuckDBPyConnection, root: Path, prefix: str) -> None:
    names = ("requests", "connections", "fuse_requests")
    if all((root / f"{n}.parquet").exists() for n in names):
        for n in names:
            q = str(root / f"{n}.parquet").replace("'", "''")
            con.execute(f"create or replace view {prefix}{n} as select * from "
                        f"read_parquet('{q}', hive_partitioning = false)")
        return
    for n, table in zip(names, derive_requests(root)):
        con.register(f"_{prefix}{n}_arrow", table)
        con.execute(f"create or replace view {prefix}{n} as select * from _{prefix}{n}_arrow")


def open_trace(path, con: Optional[duckdb.DuckDBPyConnection] = None) -> Trace:
    """Opens a trace directory; tables are views over its Parquet files."""
    root = Path(path)
    meta = read_meta(root)
    con = con or duckdb.connect()
    create_views(con, root)
    return Trace(root, meta, con)
