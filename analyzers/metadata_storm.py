"""metadata-storm: does the job spend its file-system time on metadata, not data?

Question: how many opens, stats, closes and directory reads did the job make,
per second and per MiB it read; how much of its time in file-system calls went
to them; and is the data set a directory of many small files?

Calls are counted by kind (see docs/findings.d/metadata-storm.md):
  opens     open/openat/openat2/creat of anything but a directory (failed opens too:
            each is a path lookup)
  listings  opens of a directory (os.listdir, os.scandir, glob)
  getdents  getdents64 calls (reading a directory's entries)
  stats     stat/lstat and newfstatat/statx of a path (os.stat, os.path.exists,
            os.path.isfile...)
  fstats    fstat, and newfstatat/statx with AT_EMPTY_PATH (a stat of an open fd:
            Python's open() makes two); cheap, reported but not in the rates
  closes    close of a regular file
  other     unlink, rename, mkdir, rmdir, close of a directory
Calls on pipes, sockets, devices and anonymous fds (opens, closes, fstats) are
not file metadata and are left out; so are closes of fds that were not open, and
calls on kernel pseudo file systems (/proc, /sys, cgroup...: they ask the kernel,
not storage; counted in evidence as pseudo_fs_calls).

Each call is charged to a directory: the directory listed for listings and
getdents; for a call on a regular file (open, fstat, close) the directory of the
file's path (files.path); else the directory holding the call's path.

metadata_time_share = time in metadata calls / (time in metadata calls + time in
  read/write-family calls on regular files): of the time spent in file-system
  calls, the share that moved no data.
metadata_wall_share = time in metadata calls / (trace duration x threads that made
  metadata or data calls): how much of the I/O threads' wall time metadata took.
A "data-set directory" is one from which at least `dataset_dir_files` distinct
regular files were opened (a package's __pycache__ holds fewer: imports are not
a data set). The file size of a file is the highest byte offset read or
written in it (its size, for files read to the end); median_file_bytes is the
median over the files opened in data-set directories.

Trigger: at least `min_metadata_calls` metadata calls, and one of:
  - a small-file data set: data-set directories hold >= `warn_files` files of
    median size <= `small_file_bytes`;
  - metadata_wall_share >= `warn_wall_share`;
  - metadata-bound I/O: metadata_time_share >= `max_time_share` and opens per MiB
    read >= `max_opens_per_mib` (or no data read at all).
The rates (per second, per MiB read) are evidence, not triggers on their own: a
start-up that imports torch makes ~17,000 stats in a few seconds, costs under 1% of
the wall time and is no data set.
Severity: high when data-set directories hold >= `high_files` files of median
size <= `small_file_bytes`, or metadata_wall_share >= `high_wall_share`; warn
for a small-file data set of >= `warn_files` files or metadata_wall_share >=
`warn_wall_share`; info when only the metadata-bound condition holds (cheap here,
but every open and stat is a server round trip on a network file system).
"""
from __future__ import annotations

from .base import Context, Finding, Rule, file_name
from .rates import human_bytes
from .views import META_OPS, drop_other_kind, derived_kind, pseudo_fs_sql, sql_list

MiB = 1 << 20
OPENS = ("open", "openat", "openat2", "creat")
PATH_STATS = ("stat", "lstat", "newfstatat", "statx")
AT_EMPTY_PATH = 0x1000
TOP = 5

# The kind of a metadata call; null for calls on pipes, sockets, devices and
# anonymous fds (fd_kind other than file, dir or none): not file metadata.
KIND = f"""case when fd_kind not in ('file', 'dir', 'none') then null
            when op in {sql_list(OPENS)}
                 then case when fd_kind = 'dir' then 'listing' else 'open' end
            when op = 'close'
                 then case fd_kind when 'file' then 'close' when 'dir' then 'other' end
            when op = 'fstat' or (op in ('newfstatat', 'statx') and empty_path) then 'fstat'
            when op in {sql_list(PATH_STATS)} then 'stat'
            when op = 'getdents64' then 'getdents'
            else 'other' end"""
EMPTY_PATH = f"(flags & {AT_EMPTY_PATH}) <> 0 as empty_path"

# dirname(path): up to the last '/' ('/' for a top-level path, '.' for a bare name)
DIRNAME = """case when strpos(path, '/') = 0 then '.'
                else coalesce(nullif(left(path, length(path) - strpos(reverse(path), '/')), ''),
                              '/') end"""

# Metadata calls by kind and path (n calls, ns inside them, the slowest one's
# start and duration), each charged to a directory. Rows are per (op, path,
# file): sum them. A call on a regular file (open, fstat, close) is charged to
# the directory of the file's path in `files`; a call without a file (stat,
# failed open, listing) to that of its own path. A getdents64 or a close of a
# directory has neither path nor file: its path is that of the latest open of
# a directory that returned its fd in the same process (an as-of join). Calls
# are aggregated first: the string work is per distinct path, not per call.
# Metadata calls on storage: not on a kernel pseudo file system.
EVENTS_SQL = f"""
create or replace temp {{kind}} metadata_storm_events as
select * from events where op in {sql_list(META_OPS)} and not {pseudo_fs_sql()}"""

CALLS_SQL = f"""
create or replace temp table metadata_storm_calls as
with by_call as (
    select op, fd_kind, {EMPTY_PATH}, case when file_id >= 0 then null else path end as path,
           file_id, count(*) as n, sum(dur_ns) as ns, max(dur_ns) as max_ns,
           arg_max(ts_ns, dur_ns) as max_ts
    from metadata_storm_events where path is not null or file_id >= 0
    group by all),
-- a directory fd's calls without a path take the path of the fd's latest
-- open before them (an as-of match, written as a window for every engine)
fd_calls as (
    select pid, fd, ts_ns, 0 as k, path as opath, null::varchar as op,
           null::varchar as fd_kind, null::bigint as file_id, null::bigint as dur_ns
    from events where op in {sql_list(OPENS)} and ret >= 0 and fd_kind = 'dir'
    union all
    select pid, fd, ts_ns, 1 as k, null::varchar, op, fd_kind, file_id, dur_ns
    from metadata_storm_events
    where op in ('getdents64', 'close') and fd_kind = 'dir' and path is null),
pathless as (
    select op, fd_kind, false as empty_path, last_open as path, file_id,
           count(*) as n, sum(dur_ns) as ns, max(dur_ns) as max_ns,
           arg_max(ts_ns, dur_ns) as max_ts
    from (select op, fd_kind, file_id, ts_ns, dur_ns, k,
                 last_value(opath ignore nulls) over (
                     partition by pid, fd order by ts_ns, k rows unbounded preceding)
                     as last_open
          from fd_calls)
    where k = 1
    group by all),
k as materialized (
    select *, kind in ('listing', 'getdents') or fd_kind = 'dir' as on_dir
    from (select {KIND} as kind, fd_kind, path, file_id, n, ns, max_ns, max_ts
          from (select * from by_call union all select * from pathless))
    where kind is not null),
file_dirs as materialized (
    select file_id, path, {DIRNAME} as dir from files
    where file_id in (select file_id from k where file_id >= 0)),
path_dirs as materialized (
    select path, on_dir, case when on_dir then path else {DIRNAME} end as dir
    from (select distinct path, on_dir from k where file_id < 0 and path is not null))
select k.kind, f.path, k.file_id, k.on_dir, n, ns, max_ns, max_ts, f.dir
from k join file_dirs f using (file_id)
union all
select k.kind, k.path, k.file_id, k.on_dir, n, ns, max_ns, max_ts, d.dir
from k left join path_dirs d using (path, on_dir) where k.file_id < 0"""

# The same calls by process and thread.
THREADS_SQL = f"""
create or replace temp table metadata_storm_threads as
select kind, pid, tid, sum(n) as n, sum(ns) as ns
from (select {KIND} as kind, * from
      (select pid, tid, op, fd_kind, {EMPTY_PATH}, count(*) as n, sum(dur_ns) as ns
       from metadata_storm_events group by all))
where kind is not null group by all"""

# Read and write calls on regular files (`io`) per file and thread: time, bytes
# read, and the highest byte offset reached (the file's size as seen).
DATA_SQL = """
create or replace temp table metadata_storm_data as
select file_id, tid, sum(dur_ns) as ns,
       coalesce(sum(ret) filter (where dir = 'read' and ret > 0), 0) as read_bytes,
       max(off + ret) filter (where ret > 0) as size_bytes
from io group by file_id, tid"""

# Regular files opened (successful opens), the directory they were opened from,
# their size as seen, and how many files were opened from that directory.
FILES_SQL = """
create or replace temp table metadata_storm_files as
with opened as (select distinct file_id, dir from metadata_storm_calls
                where kind = 'open' and file_id >= 0),
size as (select file_id, max(size_bytes) as size_bytes from metadata_storm_data
         group by file_id)
select o.file_id, o.dir, s.size_bytes, count(*) over (partition by o.dir) as dir_files
from opened o left join size s using (file_id)"""


def call_counts(ctx: Context) -> dict:
    """Calls of each kind, all calls and their time (one cheap pass)."""
    kind = derived_kind(ctx.memo.get("materialise", False))
    drop_other_kind(ctx.con, ["metadata_storm_events"], kind)
    ctx.con.execute(EVENTS_SQL.replace("{kind}", kind))
    ctx.con.execute(THREADS_SQL)
    names = ("open", "listing", "getdents", "stat", "fstat", "close", "other")
    counts = ctx.one(f"""select {', '.join(f"coalesce(sum(n) filter (where kind = '{k}'), 0)"
                                           for k in names)},
                                coalesce(sum(n), 0), coalesce(sum(ns), 0)
                         from metadata_storm_threads""")
    t = dict(zip(names, counts[:len(names)]))
    t["calls"], t["time_ns"] = counts[len(names):]
    t["pseudo"] = ctx.one(f"""select count(*) from events where op in {sql_list(META_OPS)}
                              and {pseudo_fs_sql()}""")[0]
    return t


def data_and_files(ctx: Context) -> dict:
    """Time and bytes of data calls, I/O threads, files opened and data sets."""
    for sql in (CALLS_SQL, DATA_SQL, FILES_SQL):
        ctx.con.execute(sql)
    t = {}
    t["data_ns"], t["read_bytes"] = ctx.one("""
        select coalesce(sum(ns), 0), coalesce(sum(read_bytes), 0) from metadata_storm_data""")
    t["threads"] = ctx.one("""
        select count(distinct tid) from (select tid from metadata_storm_threads
                                         union all select tid from metadata_storm_data)""")[0]
    t["distinct_files"] = ctx.one("select count(distinct file_id) from metadata_storm_files")[0]
    t["dataset_dirs"], t["dataset_files"], t["median_file_bytes"] = ctx.one(f"""
        select count(distinct dir), count(*), quantile_disc(size_bytes, 0.5)
        from metadata_storm_files where dir_files >= {ctx.th(RULE.id)['dataset_dir_files']}""")
    return t


def top_dirs(ctx: Context, total_ns: int) -> list[dict]:
    rows = ctx.rows(f"""
        with d as (
            select dir, coalesce(sum(n) filter (where kind = 'open'), 0) as opens,
                   coalesce(sum(n) filter (where kind = 'stat'), 0) as stats,
                   coalesce(sum(n) filter (where kind = 'close'), 0) as closes,
                   coalesce(sum(n) filter (where kind = 'getdents'), 0) as getdents,
                   sum(ns) as ns
            from metadata_storm_calls group by dir),
        f as (select dir, count(*) as files, quantile_disc(size_bytes, 0.5) as med
              from metadata_storm_files group by dir)
        select d.dir, opens, stats, closes, getdents, coalesce(files, 0), med, ns
        from d left join f using (dir)
        order by ns desc, d.dir limit {TOP}""")
    return [{"path": d, "opens": o, "stats": s, "closes": c, "getdents": g,
             "distinct_files": n, "median_file_bytes": med, "share": ns / max(total_ns, 1)}
            for d, o, s, c, g, n, med, ns in rows]


def top_processes(ctx: Context, total_ns: int) -> list[dict]:
    rows = ctx.rows(f"""
        with m as (select pid, coalesce(sum(n) filter (where kind = 'open'), 0) as opens,
                          coalesce(sum(n) filter (where kind = 'stat'), 0) as stats,
                          sum(n) as calls, sum(ns) as ns
                   from metadata_storm_threads group by pid)
        select m.pid, p.cmdline, opens, stats, calls, ns
        from m left join processes_once p using (pid) order by ns desc, m.pid limit {TOP}""")
    return [{"pid": pid, "cmdline": cmd, "opens": o, "stats": s, "metadata_calls": n,
             "metadata_time_s": ns / 1e9, "share": ns / max(total_ns, 1)}
            for pid, cmd, o, s, n, ns in rows]


def examples(ctx: Context) -> list[dict]:
    """The slowest opens and stats: where the Perfetto view should look."""
    return [{"ts_ns": ts, "what": f"{kind} of {file_name(path)} took {dur / 1e3:.0f} us"}
            for ts, kind, path, dur in ctx.rows("""
                select max_ts, kind, path, max_ns from metadata_storm_calls
                where kind in ('open', 'stat') order by max_ns desc, max_ts limit 3""")]


def small_file_dataset(ev: dict, th: dict, files_key: str) -> bool:
    """Data-set directories hold at least th[files_key] files of median size <= small."""
    return (ev["median_file_bytes"] is not None
            and ev["median_file_bytes"] <= th["small_file_bytes"]
            and ev["dataset_files"] >= th[files_key])


def severity(ev: dict, th: dict) -> str:
    wall = ev["metadata_wall_share"]
    if small_file_dataset(ev, th, "high_files") or wall >= th["high_wall_share"]:
        return "high"
    if small_file_dataset(ev, th, "warn_files") or wall >= th["warn_wall_share"]:
        return "warn"
    return "info"


def triggered(ev: dict, th: dict) -> bool:
    if ev["metadata_calls"] < th["min_metadata_calls"]:
        return False
    per_mib = ev["opens_per_mib_read"]
    metadata_bound = (ev["metadata_time_share"] >= th["max_time_share"]
                      and (per_mib is None or per_mib >= th["max_opens_per_mib"]))
    return (small_file_dataset(ev, th, "warn_files") or metadata_bound
            or ev["metadata_wall_share"] >= th["warn_wall_share"])


def recommendation(ev: dict) -> str:
    parts = ["Pack small files into shards of 100 MiB or more (tar shards read with "
             "WebDataset, TFRecord, HDF5, LMDB) and read each shard sequentially, so one "
             "open serves thousands of samples."]
    if ev["stats"] >= ev["opens"] / 2:
        parts.append("Avoid a stat per sample (os.path.exists/isfile/getsize before each "
                     "open): keep file sizes in the index and let the open fail instead.")
    if ev["listings"] + ev["getdents"] > 0:
        parts.append("List directories once and cache the file list (a manifest file) "
                     "instead of os.listdir/glob in every epoch or worker.")
    parts.append("On network file systems (Lustre, NFS, FUSE object stores) every open and "
                 "stat is a round trip to a metadata server: stage the data on local NVMe if "
                 "it must stay as small files.")
    return " ".join(parts)


def run(ctx: Context) -> list[Finding]:
    th = ctx.th(RULE.id)
    t = call_counts(ctx)
    if t["calls"] < th["min_metadata_calls"]:
        return []
    t.update(data_and_files(ctx))
    dur = ctx.duration_s
    mib = t["read_bytes"] / MiB
    busy_ns = t["time_ns"] + t["data_ns"]
    ev = {
        "opens": t["open"], "stats": t["stat"], "closes": t["close"], "getdents": t["getdents"],
        "listings": t["listing"], "fstats": t["fstat"], "other_metadata_calls": t["other"],
        "metadata_calls": t["calls"], "pseudo_fs_calls": t["pseudo"],
        "opens_per_second": t["open"] / dur, "stats_per_second": t["stat"] / dur,
        "closes_per_second": t["close"] / dur,
        "read_bytes": t["read_bytes"],
        "opens_per_mib_read": t["open"] / mib if mib else None,
        "stats_per_mib_read": t["stat"] / mib if mib else None,
        "closes_per_mib_read": t["close"] / mib if mib else None,
        "metadata_time_s": t["time_ns"] / 1e9, "data_time_s": t["data_ns"] / 1e9,
        "metadata_time_share": t["time_ns"] / busy_ns if busy_ns else 0.0,
        "metadata_wall_share": min(1.0, t["time_ns"] / (dur * 1e9 * max(t["threads"], 1))),
        "io_threads": t["threads"],
        "distinct_files": t["distinct_files"], "dataset_dirs": t["dataset_dirs"],
        "dataset_files": t["dataset_files"], "median_file_bytes": t["median_file_bytes"],
    }
    if not triggered(ev, th):
        return []
    dirs = top_dirs(ctx, t["time_ns"])
    per_mib = (f", {ev['opens_per_mib_read']:,.1f} opens per MiB read"
               if ev["opens_per_mib_read"] is not None else ", and read no file data")
    dataset = (f" {ev['dataset_files']:,} files (median {human_bytes(ev['median_file_bytes'])})"
               f" were opened from {ev['dataset_dirs']:,} data-set "
               f"director{'y' if ev['dataset_dirs'] == 1 else 'ies'}."
               if ev["dataset_files"] and ev["median_file_bytes"] is not None else "")
    return [Finding(
        id=RULE.id, severity=severity(ev, th), title="Metadata storm",
        summary=(f"The job made {ev['opens']:,} opens, {ev['stats']:,} stats and "
                 f"{ev['closes']:,} closes ({ev['opens_per_second'] + ev['stats_per_second']:,.0f}"
                 f" opens+stats per second{per_mib}); metadata calls took "
                 f"{ev['metadata_time_share']:.0%} of the time in file-system calls."
                 + dataset),
        recommendation=recommendation(ev),
        evidence=ev, files=dirs, processes=top_processes(ctx, t["time_ns"]),
        examples=examples(ctx))]


RULE = Rule(
    id="metadata-storm",
    title="Metadata storm and small-file data sets",
    question="Does the job spend its file-system time on opens, stats and directory "
             "listings rather than on data, and is its data set many small files?",
    thresholds={"min_metadata_calls": 1000, "max_opens_per_mib": 1.0, "max_time_share": 0.5,
                "dataset_dir_files": 100,
                "small_file_bytes": float(MiB), "warn_files": 1000, "high_files": 10000,
                "warn_wall_share": 0.05, "high_wall_share": 0.25},
    run=run,
)
