"""DuckDB views the rules share, created once per report."""
from __future__ import annotations

import os
import tempfile
from typing import Optional

from iotrace.abi import (ASYNC_READ_OPS, ASYNC_WRITE_OPS, EF_DIRECT, READ_OPS, WRITE_OPS,  # noqa: F401
                         sql_list)

META_OPS = ("open", "openat", "openat2", "creat", "close", "stat", "lstat", "fstat",
            "newfstatat", "statx", "getdents64", "unlink", "unlinkat", "rename", "renameat",
            "renameat2", "mkdir", "mkdirat", "rmdir")

# Kernel pseudo file systems: a stat or open there asks the kernel, not storage
# (fio reads /sys/block/*/queue, Python reads /proc/self/...). /dev is left out by
# path because /dev/shm is a tmpfs data sets are staged on; device nodes are
# already told apart by their fd kind.
PSEUDO_FS = ("proc", "sysfs", "devpts", "devtmpfs", "cgroup", "cgroup2", "debugfs", "tracefs",
             "securityfs", "bpf", "configfs", "pstore", "mqueue", "nsfs", "binfmt_misc",
             "efivarfs", "fusectl")
PSEUDO_PATH_RE = r"^/(proc|sys)(/|$)"

# File systems on a local block device or in memory: their reads come from the
# page cache or a device the trace sees (not a network file system's server)
LOCAL_FS = ("ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "vfat", "exfat", "ntfs", "ntfs3",
            "zfs", "bcachefs", "jfs", "reiserfs", "overlay", "squashfs", "erofs", "iso9660",
            "tmpfs", "ramfs")


def pseudo_fs_sql() -> str:
    """SQL predicate on an events row: the call is on a kernel pseudo file system."""
    return (f"""((file_id >= 0 and file_id in (select file_id from files
                                               where fs_type in {sql_list(PSEUDO_FS)}))
                or (file_id < 0 and regexp_matches(coalesce(path, ''), '{PSEUDO_PATH_RE}')))""")


# Bytes of a file a read fault makes readable: a minor fault maps the cached
# pages around it (the kernel's fault_around_bytes, 64 KiB by default), a
# major one the page it waited for (its neighbours, read ahead, fault again).
FAULT_MAPS_MINOR, FAULT_MAPS_MAJOR = 65536, 4096
# Paths that are not the job's data: code, libraries, kernel and system files.
NOT_DATA_RE = (r"\.(py|pyc|pyi|pth|so)$|\.so\.[0-9.]+$|^/(proc|sys|etc|run)/"
               r"|^/(usr/)?(lib|lib32|lib64)/|^/usr/share/|/lib/python[0-9.]*/")
# In /dev/shm, the loaders' own shared memory: PyTorch's tensors handed from
# workers (torch_*), POSIX semaphores (sem.*), multiprocessing.shared_memory
# (psm_*), OpenMP's registration (__KMP_*). Left out of the HTML report's
# plots of data files; the analysis still counts a worker's writes there as
# its work on the batch (classed as fetch today: the what-if model's CPU
# stage, which would then carry them, amortises such time over few batches
# in a slow run and came out CPU-bound where the fixed run was not).
IPC_SHM_RE = r"^/dev/shm/(torch_|sem\.|psm_|__KMP_)"


# The files that are data (not code, libraries or system files)
DATA_FILE_IDS_SQL = ("select file_id from files "
                     f"where not regexp_matches(coalesce(path, ''), '{NOT_DATA_RE}')")


# Bytes a cached event takes in DuckDB's memory (uncompressed columns; 137
# measured on a synthetic training trace), and the share of the memory
# available the cache may take.
EVENT_CACHE_BYTES = 160
EVENT_CACHE_SHARE = 0.25
# DuckDB may use this share of the memory available (the rest is Python's:
# the wait analysis keeps the loop threads' timelines in numpy) and spills
# what does not fit to a temporary directory.
DUCKDB_MEMORY_SHARE = 0.5
CACHE = "report_events"


def register_columns(con, name: str, cols: dict) -> None:
    """numpy columns as a view: as they are on DuckDB (it reads numpy arrays
    directly; through pyarrow the first conversion imports pandas, a quarter
    of a second), as an Arrow table on Spark."""
    if hasattr(con, "spark"):
        import pyarrow as pa
        cols = pa.table(cols)
    con.register(name, cols)


def mem_available() -> int:
    """Bytes of memory available (MemAvailable), or the physical memory."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def tune(con) -> None:
    """DuckDB only (a Spark connection has its own settings): a memory limit
    that leaves Python room, and a temporary directory to spill to (the
    default is `.tmp` under the current directory)."""
    if hasattr(con, "spark"):
        return
    limit_mib = int(mem_available() * DUCKDB_MEMORY_SHARE) >> 20
    tmp = os.path.join(tempfile.gettempdir(), f"iotrace-duckdb-{os.getpid()}")
    con.execute(f"set memory_limit = '{limit_mib}MiB'")
    con.execute(f"set temp_directory = '{tmp}'")


def _enum(con, col: str) -> str:
    """An ENUM type of a column's values, in sorted order (so that it sorts as
    the strings do)."""
    vals = [r[0] for r in con.execute(f"select distinct {col} from events "
                                      f"where {col} is not null order by 1").fetchall()]
    if not vals:
        return "varchar"
    return "enum(" + ", ".join("'" + str(v).replace("'", "''") + "'" for v in vals) + ")"


def cache_events(con) -> Optional[str]:
    """Reads the events from Parquet once into a DuckDB temporary table that
    the `events` view then reads, when it fits in memory: the rules scan the
    events some fifty times, and decoding the Parquet columns was most of each
    scan. `op` and `fd_kind` become ENUMs there (of the trace's values, sorted
    like the strings): the rules' many `op in (...)` filters compare small
    integers. A trace too large for memory is read from its Parquet files.
    DuckDB only. Returns the view's own definition, for uncache_events."""
    if hasattr(con, "spark"):
        return None
    row = con.execute("select sql from duckdb_views() where view_name = 'events' "
                      "and schema_name = 'main' and not temporary").fetchone()
    if row is None or CACHE in row[0]:
        return None
    n = con.execute("select count(*) from events").fetchone()[0]
    if n == 0 or n * EVENT_CACHE_BYTES > EVENT_CACHE_SHARE * mem_available():
        return None
    con.execute(f"""create or replace temp table {CACHE} as
                    select * replace (op::{_enum(con, 'op')} as op,
                                      fd_kind::{_enum(con, 'fd_kind')} as fd_kind)
                    from events""")
    con.execute(f"create or replace view events as select * from {CACHE}")
    return row[0]


def uncache_events(con, view_sql: Optional[str]) -> None:
    """`events` reads its Parquet files again, and the cache's memory is freed."""
    if view_sql is None:
        return
    con.execute(view_sql.replace("CREATE VIEW", "CREATE OR REPLACE VIEW", 1))
    con.execute(f"drop table if exists {CACHE}")


def create_views(con) -> Optional[str]:
    """The events are cached in memory when they fit (cache_events; what it
    returns is returned, for uncache_events). `io` is materialised once: every
    rule scans it, and re-joining files for each query doubled the cost on
    large traces. With the events cached, so are the views derived from them
    (derived_kind)."""
    tune(con)
    cached = cache_events(con)
    try:
        _shared_views(con, materialise=cached is not None)
    except BaseException:
        uncache_events(con, cached)
        raise
    return cached


def _dir_sql(con, read_ops) -> str:
    """SQL: 'read' or 'write' by the op; an ENUM on DuckDB, where the rules'
    many `dir = 'read'` filters then compare integers."""
    case = f"case when e.op in {sql_list(read_ops)} then 'read' else 'write' end"
    return case if hasattr(con, "spark") else f"({case})::enum('read', 'write')"


# A GET of an object: every attempt (throttled ones too), named
# s3://bucket/key (S3 API requests) or http://host/path, with a file_id of its
# own past the files' (the object is a file of the data set for the analysis).
NET_GETS_SQL = """
create or replace temp table net_gets as
with g as (
    select ts_ns, dur_ns, pid, tid, coalesce(bytes, 0) as nbytes,
           coalesce(status between 200 and 299, false) as ok,
           case when bucket is not null then 's3://' || bucket || '/' || coalesce(key, '')
                else 'http://' || coalesce(host, peer, '') || coalesce(path, '') end as path
    from requests where method = 'GET')
select ts_ns, dur_ns, pid, tid, nbytes, ok, path,
       (select coalesce(max(file_id), 0) from files) + dense_rank() over (order by path) as file_id
from g"""
NET_GETS_EMPTY = """
create or replace temp table net_gets as
select 0::bigint as ts_ns, 0::bigint as dur_ns, 0 as pid, 0 as tid, 0::bigint as nbytes,
       false as ok, '' as path, 0::bigint as file_id where false"""


def _net_gets(con) -> None:
    """net_gets (NET_GETS_SQL); empty where the engine has no requests table
    (a trace set's node summaries)."""
    try:
        con.execute(NET_GETS_SQL)
    except Exception:   # noqa: BLE001 - no requests table: no object reads
        con.execute(NET_GETS_EMPTY)


def derived_kind(materialise: bool) -> str:
    """"table" or "view": what a set of rows derived from the events that
    several queries read is made as. A table where the events are cached (they
    fit in memory): each query over a view plans the view's joins and unions
    again (data_reads took 6 ms to plan, a dozen queries read it; a 100,000
    event trace's report 8% faster so); else a view."""
    return "table" if materialise else "view"


DERIVED = ("data_io", "all_data_io", "data_faults", "data_reads", "meta_ops")


def drop_other_kind(con, names, kind: str) -> None:
    """Drops those of names made as the other kind by an earlier report on
    this connection (DuckDB does not replace a view by a table)."""
    if hasattr(con, "spark"):
        return
    other = "view" if kind == "table" else "table"
    listed = "duckdb_views()" if other == "view" else "duckdb_tables()"
    for (name,) in con.execute(f"select {other}_name from {listed} where temporary "
                               f"and {other}_name in {sql_list(names)}").fetchall():
        con.execute(f"drop {other} {name}")


def _shared_views(con, materialise: bool = False) -> None:
    kind = derived_kind(materialise)
    drop_other_kind(con, DERIVED, kind)
    # one row per pid, for naming a pid's process: a pid the kernel gave out
    # again during the trace has a row per lifetime in processes
    con.execute("""
        create or replace temp view processes_once as
        select pid, any_value(cmdline) as cmdline from processes group by pid""")
    con.execute(f"""
        create or replace temp table io as
        select e.ts_ns, e.dur_ns, e.pid, e.tid, e.op, e.fd, e."offset" as off,
               e.req_bytes, e.ret, greatest(e.ret, 0) as nbytes, e.file_id,
               e.arg as cache_added,
               f.path, f.fs_type,
               {_dir_sql(con, READ_OPS)} as dir,
               e.eflags & {EF_DIRECT} <> 0 as direct
        from events e join files f using (file_id)
        where e.op in {sql_list(READ_OPS + WRITE_OPS)} and e.file_id >= 0""")
    con.execute(f"""
        create or replace temp {kind} data_io as
        select * from io where ret >= 0 and file_id not in
            (select file_id from files where regexp_matches(coalesce(path, ''), '{NOT_DATA_RE}'))""")
    con.execute(f"""
        create or replace temp view data_file_ids as {DATA_FILE_IDS_SQL}""")
    # io_uring and libaio requests: submission to completion, many in flight
    # at once, so their durations are latencies, not time a thread spent in a
    # call. The rules on call patterns and call time read `io`; the rates
    # read `all_io`/`all_data_io`, which add these.
    con.execute(f"""
        create or replace temp table async_io as
        select e.ts_ns, e.dur_ns, e.pid, e.tid, e.op, e.fd, e."offset" as off,
               e.req_bytes, e.ret, greatest(e.ret, 0) as nbytes, e.file_id,
               0::bigint as cache_added, f.path, f.fs_type,
               {_dir_sql(con, ASYNC_READ_OPS)} as dir,
               e.eflags & {EF_DIRECT} <> 0 as direct,
               case when e.op like 'io_uring_%' then 'io_uring' else 'libaio' end as iface
        from events e join files f using (file_id)
        where e.op in {sql_list(ASYNC_READ_OPS + ASYNC_WRITE_OPS)} and e.file_id >= 0""")
    con.execute("""
        create or replace temp view all_io as
        select *, 'syscall' as iface from io union all by name select * from async_io""")
    con.execute(f"""
        create or replace temp {kind} all_data_io as
        select * from all_io where ret >= 0 and file_id not in
            (select file_id from files where regexp_matches(coalesce(path, ''), '{NOT_DATA_RE}'))""")
    # User page faults on mappings of the job's data files (reads of memory,
    # not writes, nor instruction fetches from a mapped program: error code
    # bits 1 and 4): `brought` = bytes the fault added to the page cache for
    # the file (0: minor, the page was cached), `dur_ns` = the thread's stall.
    con.execute(f"""
        create or replace temp {kind} data_faults as
        select e.ts_ns, e.dur_ns, e.pid, e.tid, e."offset" as off, e.ret as brought,
               e.ret > 0 as major, e.file_id, f.path
        from events e join files f using (file_id)
        where e.op = 'page_fault' and e.flags & 18 = 0 and e.file_id >= 0
          and not regexp_matches(coalesce(f.path, ''), '{NOT_DATA_RE}')""")
    _net_gets(con)
    # What the job read of its data files, through calls or through memory
    # maps (a loader over memory-mapped Arrow or numpy files reads by
    # faulting): a fault counts the bytes it made readable (an estimate);
    # and the objects it GETs over HTTP (S3 and the like): their bodies
    con.execute(f"""
        create or replace temp {kind} data_reads as
        select ts_ns, pid, tid, file_id, path, nbytes from all_data_io where dir = 'read'
        union all
        select ts_ns, pid, tid, file_id, path,
               case when major then greatest(brought, {FAULT_MAPS_MAJOR}) else {FAULT_MAPS_MINOR} end
                   as nbytes
        from data_faults
        union all
        select ts_ns, pid, tid, file_id, path, nbytes from net_gets where ok and nbytes > 0""")
    con.execute(f"""
        create or replace temp {kind} meta_ops as
        select e.ts_ns, e.dur_ns, e.pid, e.tid, e.op, e.fd, e.fd_kind, e.flags, e.file_id,
               e.ret, coalesce(e.path, f.path) as path
        from events e left join files f using (file_id)
        where e.op in {sql_list(META_OPS)}""")


# Every read that did not fail, with its place in its stream (the reads of one
# process on one fd and file, in time order): where the previous read ended
# (prev_end), and where the previous read that moved bytes ended
# (prev_moved_end). One window pass that random-access and readahead-missing share.
READ_STREAMS_SQL = """
create or replace temp table read_streams as
select file_id, pid, off, nbytes, req_bytes, dur_ns, cache_added,
       lag(off + nbytes) over (partition by {stream} order by ts_ns) as prev_end,
       last_value(case when nbytes > 0 then off + nbytes end ignore nulls) over (
           partition by {stream} order by ts_ns
           rows between unbounded preceding and 1 preceding) as prev_moved_end
from io where dir = 'read' and ret >= 0"""

# A stream is (pid, fd, file_id). Packed into one BIGINT when the values fit
# (pid < 2^22, the kernel's limit; fd < 2^20; file_id < 2^21), DuckDB's window
# partitions on one key, and carries neither pid nor file_id (they are taken
# back from the key): 10 M events, 40% less time than on three keys.
STREAM_KEYS = "pid, fd, file_id"
STREAM_PACKED = "(pid::bigint << 41) | (fd::bigint << 21) | file_id::bigint"
READ_STREAMS_PACKED_SQL = f"""
create or replace temp table read_streams as
select k & {(1 << 21) - 1} as file_id, (k >> 41)::integer as pid, off, nbytes, req_bytes,
       dur_ns, cache_added,
       lag(off + nbytes) over w as prev_end,
       last_value(case when nbytes > 0 then off + nbytes end ignore nulls) over (
           w rows between unbounded preceding and 1 preceding) as prev_moved_end
from (select {STREAM_PACKED} as k, ts_ns, off, nbytes, req_bytes, dur_ns, cache_added
      from io where dir = 'read' and ret >= 0)
window w as (partition by k order by ts_ns)"""


def streams_pack(con) -> bool:
    """Whether the streams' keys fit in one BIGINT (DuckDB only: Spark gets
    the three keys, as it writes shifts its own way)."""
    if hasattr(con, "spark"):
        return False
    lo_fd, hi_fd, lo_id, hi_id, lo_pid, hi_pid = con.execute(
        "select min(fd), max(fd), min(file_id), max(file_id), min(pid), max(pid) from io "
        "where dir = 'read' and ret >= 0").fetchone()
    if hi_fd is None:
        return False
    return (0 <= lo_fd and hi_fd < 1 << 20 and 0 <= lo_id and hi_id < 1 << 21
            and 0 <= lo_pid and hi_pid < 1 << 22)


def shared_table(ctx, name: str, sql: str) -> str:
    """Creates a temporary table several rules read, once per report."""
    if name not in ctx.made:
        ctx.con.execute(sql)
        ctx.made.add(name)
    return name


def read_streams(ctx) -> str:
    """The `read_streams` table (READ_STREAMS_PACKED_SQL where the stream keys
    fit in one BIGINT, else READ_STREAMS_SQL on three keys); its name."""
    if "read_streams" not in ctx.made:
        ctx.con.execute(READ_STREAMS_PACKED_SQL if streams_pack(ctx.con)
                        else READ_STREAMS_SQL.format(stream=STREAM_KEYS))
        ctx.made.add("read_streams")
    return "read_streams"
