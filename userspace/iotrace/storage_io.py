"""Per-file and per-device storage totals: page cache against storage, block
devices, and the interface the bytes went through (system calls, mmap).

The numbers come from these record kinds (docs/trace-format.md):
- read/write calls carry in `arg` the page-cache bytes they added for their
  file (what had to come from storage: demand misses and readahead);
- io_uring and libaio requests (`io_uring_read`, `aio_read`...): one per
  request, with its result; their page-cache additions come as `cache_fill`
  records (additions outside a call of that file);
- `page_fault` records are user faults on file mappings: `ret` is the bytes
  the fault brought into the page cache (0: minor, the page was cached);
- `block_rq` records are the job's block-device requests, with the file of
  their first page where there is one.
"""
from __future__ import annotations

from pathlib import Path

from .abi import ASYNC_READ_OPS, EF_DIRECT, EF_NO_COMPLETION, READ_OPS, WRITE_OPS, sql_list

PAGE = 4096
REQ_OP_READ, REQ_OP_WRITE = 0, 1
INTERFACES = ("syscall", "io_uring", "libaio", "mmap")

_R, _W = sql_list(READ_OPS), sql_list(WRITE_OPS)
_STORAGE_OPS = ("page_fault", "block_rq", "cache_fill", "io_uring_read", "io_uring_write",
                "aio_read", "aio_write")

FILES_SQL = f"""
with io as (
    select file_id,
           count(*) filter (where op in {_R}) as sys_reads,
           coalesce(sum(ret) filter (where op in {_R} and ret > 0), 0) as sys_read_bytes,
           count(*) filter (where op in {_W}) as sys_writes,
           coalesce(sum(ret) filter (where op in {_W} and ret > 0), 0) as sys_write_bytes,
           coalesce(sum(arg) filter (where op in {_R}), 0) as sys_miss,
           count(*) filter (where op = 'io_uring_read') as ur_reads,
           coalesce(sum(ret) filter (where op = 'io_uring_read' and ret > 0), 0)
               as ur_read_bytes,
           count(*) filter (where op = 'io_uring_write') as ur_writes,
           coalesce(sum(ret) filter (where op = 'io_uring_write' and ret > 0), 0)
               as ur_write_bytes,
           count(*) filter (where op = 'aio_read') as aio_reads,
           coalesce(sum(ret) filter (where op = 'aio_read' and ret > 0), 0) as aio_read_bytes,
           count(*) filter (where op = 'aio_write') as aio_writes,
           coalesce(sum(ret) filter (where op = 'aio_write' and ret > 0), 0)
               as aio_write_bytes,
           coalesce(sum(ret) filter (where op = 'cache_fill'), 0) as fill_miss,
           count(*) filter (where op = 'page_fault' and flags & 2 = 0) as mm_reads,
           -- a fault touched at least its page; a major one brought in `ret`
           coalesce(sum(greatest(ret, {PAGE})) filter (where op = 'page_fault'
                                                        and flags & 2 = 0), 0) as mm_read_bytes,
           count(*) filter (where op = 'page_fault' and flags & 2 != 0) as mm_writes,
           {PAGE} * count(*) filter (where op = 'page_fault' and flags & 2 != 0)
               as mm_write_bytes,
           coalesce(sum(ret) filter (where op = 'page_fault'), 0) as mm_miss,
           coalesce(sum(req_bytes) filter (where op = 'block_rq'
                                           and flags & 255 = {REQ_OP_READ}), 0) as dev_read,
           coalesce(sum(req_bytes) filter (where op = 'block_rq'
                                           and flags & 255 = {REQ_OP_WRITE}), 0) as dev_write,
           -- O_DIRECT reads bypass the cache: neither hits nor misses
           coalesce(sum(ret) filter (where op in {sql_list(READ_OPS + ASYNC_READ_OPS)}
                                     and ret > 0 and eflags & {EF_DIRECT} != 0), 0)
               as direct_read_bytes
    from events
    where file_id >= 0 and (op in {_R} or op in {_W} or op in {sql_list(_STORAGE_OPS)})
    group by file_id),
tot as (
    select *, sys_read_bytes + ur_read_bytes + aio_read_bytes + mm_read_bytes as read_bytes,
           sys_write_bytes + ur_write_bytes + aio_write_bytes + mm_write_bytes as write_bytes,
           sys_miss + mm_miss + fill_miss as miss
    from io)
select f.path, tot.*, greatest(read_bytes - direct_read_bytes - miss, 0) as hit
from tot join files f using (file_id)
order by read_bytes + write_bytes + dev_read + dev_write desc, f.path
"""

# Requests in flight per device: +1 at issue, -1 at completion, running sum.
DEVICES_SQL = f"""
with rq as (
    select mode as dev, ts_ns, ts_ns + dur_ns as end_ns, dur_ns, arg as queue_ns,
           req_bytes, flags & 255 as kind, eflags & {EF_NO_COMPLETION} = 0 as timed
    from events where op = 'block_rq'),
edges as (
    select dev, ts_ns as t, 1 as d from rq
    union all select dev, end_ns, -1 from rq),
depth as (
    select dev, sum(d) over (partition by dev order by t, d rows unbounded preceding) as n
    from edges)
select r.dev,
       count(*) as requests,
       count(*) filter (where kind = 0) as reads,
       coalesce(sum(req_bytes) filter (where kind = 0), 0) as read_bytes,
       count(*) filter (where kind = 1) as writes,
       coalesce(sum(req_bytes) filter (where kind = 1), 0) as write_bytes,
       median(dur_ns) filter (where timed) / 1e6 as service_ms_p50,
       quantile_cont(dur_ns, 0.99) filter (where timed) / 1e6 as service_ms_p99,
       median(queue_ns) / 1e6 as queue_ms_p50,
       (select max(n) from depth d where d.dev = r.dev) as max_in_flight,
       (max(end_ns) - min(ts_ns)) / 1e9 as span_s
from rq r group by r.dev order by read_bytes + write_bytes desc
"""


def device_names() -> dict[str, str]:
    """'major:minor' -> kernel name of every block device of this machine
    (saved in the trace's meta.json at the end of a run)."""
    names = {}
    for d in Path("/sys/dev/block").glob("*:*"):
        try:
            for line in (d / "uevent").read_text().splitlines():
                if line.startswith("DEVNAME="):
                    names[d.name] = line.split("=", 1)[1]
        except OSError:
            continue
    return names


def _kernel_dev(dev: int) -> tuple[int, int]:
    """The kernel's dev_t (major << 20 | minor) as (major, minor)."""
    return dev >> 20, dev & ((1 << 20) - 1)


def device_name(meta: dict, dev: int) -> str:
    """A block_rq row's device (`mode`, a kernel dev_t) by its kernel name
    from the trace's meta.json, else as "major:minor"."""
    key = "%d:%d" % _kernel_dev(int(dev))
    return meta.get("block_devices", {}).get(key, key)


def _iface(reads, read_bytes, writes, write_bytes) -> dict:
    return {"reads": int(reads), "read_bytes": int(read_bytes),
            "writes": int(writes), "write_bytes": int(write_bytes)}


def files_and_devices(t) -> dict:
    """The `files` and `devices` of `iotrace summary --format json`."""
    files = []
    cur = t.con.execute(FILES_SQL)
    cols = [c[0] for c in cur.description]
    for row in cur.fetchall():
        r = dict(zip(cols, row))
        by = {"syscall": _iface(r["sys_reads"], r["sys_read_bytes"], r["sys_writes"],
                                r["sys_write_bytes"]),
              "io_uring": _iface(r["ur_reads"], r["ur_read_bytes"], r["ur_writes"],
                                 r["ur_write_bytes"]),
              "libaio": _iface(r["aio_reads"], r["aio_read_bytes"], r["aio_writes"],
                               r["aio_write_bytes"]),
              "mmap": _iface(r["mm_reads"], r["mm_read_bytes"], r["mm_writes"],
                             r["mm_write_bytes"])}
        files.append({
            "path": r["path"],
            "read_bytes": sum(b["read_bytes"] for b in by.values()),
            "write_bytes": sum(b["write_bytes"] for b in by.values()),
            "reads": sum(b["reads"] for b in by.values()),
            "writes": sum(b["writes"] for b in by.values()),
            "by_interface": by,
            "cache_hit_bytes": int(r["hit"]),
            "cache_miss_bytes": int(r["miss"]),
            "direct_read_bytes": int(r["direct_read_bytes"]),
            "device_read_bytes": int(r["dev_read"]),
            "device_write_bytes": int(r["dev_write"]),
        })
    devices = []
    cur = t.con.execute(DEVICES_SQL)
    cols = [c[0] for c in cur.description]
    for row in cur.fetchall():
        r = dict(zip(cols, row))
        dev = int(r.pop("dev"))
        major, minor = _kernel_dev(dev)
        span = r.pop("span_s") or 0
        devices.append({
            "name": device_name(t.meta, dev),
            "major": major, "minor": minor,
            **{k: (round(v, 3) if isinstance(v, float) else int(v or 0)) for k, v in r.items()},
            "read_bytes_per_s": round(r["read_bytes"] / span) if span > 0 else None,
        })
    return {"files": files, "devices": devices,
            "interfaces_traced": list(INTERFACES),
            "cache_other_bytes": int(t.meta.get("counters", {}).get("cache_other_bytes", 0))}
