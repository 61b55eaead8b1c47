"""DuckDB views the rules share, created once per report."""
from __future__ import annotations

from iotrace.abi import (ASYNC_READ_OPS, ASYNC_WRITE_OPS, READ_OPS, WRITE_OPS,  # noqa: F401
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


def pseudo_fs_sql() -> str:
    """SQL predicate on an events row: the call is on a kernel pseudo file system."""
    return (f"""((file_id >= 0 and file_id in (select file_id from files
                                               where fs_type in {sql_list(PSEUDO_FS)}))
                or (file_id < 0 and regexp_matches(coalesce(path, ''), '{PSEUDO_PATH_RE}')))""")


# Paths that are not the job's data: code, libraries, kernel and system files.
NOT_DATA_RE = (r"\.(py|pyc|pyi|pth|so)$|\.so\.[0-9.]+$|^/(proc|sys|etc|run)/"
               r"|^/(usr/)?(lib|lib32|lib64)/|^/usr/share/|/lib/python[0-9.]*/")


def create_views(con) -> None:
    """`io` is materialised once: every rule scans it, and re-joining files
    for each query doubled the cost on large traces."""
    con.execute(f"""
        create or replace temp table io as
        select e.ts_ns, e.dur_ns, e.pid, e.tid, e.op, e.fd, e."offset" as off,
               e.req_bytes, e.ret, greatest(e.ret, 0) as nbytes, e.file_id,
               e.arg as cache_added,
               f.path, f.fs_type,
               case when e.op in {sql_list(READ_OPS)} then 'read' else 'write' end as dir
        from events e join files f using (file_id)
        where e.op in {sql_list(READ_OPS + WRITE_OPS)} and e.file_id >= 0""")
    con.execute(f"""
        create or replace temp view data_io as
        select * from io where ret >= 0 and file_id not in
            (select file_id from files where regexp_matches(coalesce(path, ''), '{NOT_DATA_RE}'))""")
    # io_uring and libaio requests: submission to completion, many in flight
    # at once, so their durations are latencies, not time a thread spent in a
    # call. The rules on call patterns and call time read `io`; the rates
    # read `all_io`/`all_data_io`, which add these.
    con.execute(f"""
        create or replace temp table async_io as
        select e.ts_ns, e.dur_ns, e.pid, e.tid, e.op, e.fd, e."offset" as off,
               e.req_bytes, e.ret, greatest(e.ret, 0) as nbytes, e.file_id,
               0::bigint as cache_added, f.path, f.fs_type,
               case when e.op in {sql_list(ASYNC_READ_OPS)} then 'read' else 'write' end as dir,
               case when e.op like 'io_uring_%' then 'io_uring' else 'libaio' end as iface
        from events e join files f using (file_id)
        where e.op in {sql_list(ASYNC_READ_OPS + ASYNC_WRITE_OPS)} and e.file_id >= 0""")
    con.execute("""
        create or replace temp view all_io as
        select *, 'syscall' as iface from io union all by name select * from async_io""")
    con.execute(f"""
        create or replace temp view all_data_io as
        select * from all_io where ret >= 0 and file_id not in
            (select file_id from files where regexp_matches(coalesce(path, ''), '{NOT_DATA_RE}'))""")
    # User page faults on mappings of the job's data files (reads of memory,
    # not writes): `brought` = bytes the fault added to the page cache for
    # the file (0: minor, the page was cached), `dur_ns` = the thread's stall.
    con.execute(f"""
        create or replace temp view data_faults as
        select e.ts_ns, e.dur_ns, e.pid, e.tid, e."offset" as off, e.ret as brought,
               e.ret > 0 as major, e.file_id, f.path
        from events e join files f using (file_id)
        where e.op = 'page_fault' and e.flags & 2 = 0 and e.file_id >= 0
          and not regexp_matches(coalesce(f.path, ''), '{NOT_DATA_RE}')""")
    con.execute(f"""
        create or replace temp view meta_ops as
        select e.ts_ns, e.dur_ns, e.pid, e.tid, e.op, e.fd, e.fd_kind, e.flags, e.file_id,
               e.ret, coalesce(e.path, f.path) as path
        from events e left join files f using (file_id)
        where e.op in {sql_list(META_OPS)}""")
