"""The `fuse_requests` table: what a FUSE daemon did for the job.

A FUSE file system's daemon (s3fs-fuse, Mountpoint, gcsfuse...) runs outside
the job's process tree; traced with it (`iotrace run --fuse-daemons` or
`--also-pid`), its reads of /dev/fuse carry each request's header and its
writes the reply's (events with eflags FUSE: offset = the request's unique
id, flags = opcode or error, arg = the requesting thread, req_bytes = the
node id). One row per request: when the daemon took it and replied, who
asked, the job's call it served (the requesting thread's call on a FUSE file
in progress when the daemon took the request), and the HTTP requests the
daemon's process made meanwhile (what it fetched to answer).
"""
from __future__ import annotations

FUSE_OPS = {1: "LOOKUP", 2: "FORGET", 3: "GETATTR", 4: "SETATTR", 5: "READLINK",
            6: "SYMLINK", 8: "MKNOD", 9: "MKDIR", 10: "UNLINK", 11: "RMDIR", 12: "RENAME",
            13: "LINK", 14: "OPEN", 15: "READ", 16: "WRITE", 17: "STATFS", 18: "RELEASE",
            20: "FSYNC", 21: "SETXATTR", 22: "GETXATTR", 23: "LISTXATTR", 24: "REMOVEXATTR",
            25: "FLUSH", 26: "INIT", 27: "OPENDIR", 28: "READDIR", 29: "RELEASEDIR",
            30: "FSYNCDIR", 31: "GETLK", 32: "SETLK", 33: "SETLKW", 34: "ACCESS",
            35: "CREATE", 36: "INTERRUPT", 37: "BMAP", 38: "DESTROY", 39: "IOCTL", 40: "POLL",
            41: "NOTIFY_REPLY", 42: "BATCH_FORGET", 43: "FALLOCATE", 44: "READDIRPLUS",
            45: "RENAME2", 46: "LSEEK", 47: "COPY_FILE_RANGE"}
EF_FUSE = 128

_OPNAME = "case r.opcode " + " ".join(f"when {k} then '{v}'" for k, v in FUSE_OPS.items()) + \
    " else 'OP' || r.opcode end"

# needs the requests table (requests.py) as _requests_for_fuse
FUSE_SQL = f"""
with took as (
    select ts_ns + dur_ns as t_in, pid as daemon_pid, tid as daemon_tid,
           "offset" as uniq, flags as opcode, arg as req_tid, req_bytes as nodeid
    from events where eflags & {EF_FUSE} != 0 and op in ('read', 'readv')
),
replied as (
    select ts_ns as t_out, pid as daemon_pid, "offset" as uniq, flags as error
    from events where eflags & {EF_FUSE} != 0 and op in ('write', 'writev')
),
r as (
    select t.*, min(p.t_out) as t_out, arg_min(p.error, p.t_out) as error
    from took t left join replied p
      on p.daemon_pid = t.daemon_pid and p.uniq = t.uniq and p.t_out >= t.t_in
    group by all
),
job_call as (
    select r.daemon_pid, r.uniq, r.t_in,
           arg_min(e.ts_ns, e.ts_ns) as job_ts_ns, arg_min(e.op, e.ts_ns) as job_op,
           arg_min(e.file_id, e.ts_ns) as file_id, arg_min(e.pid, e.ts_ns) as job_pid
    from r join events e
      on e.tid = r.req_tid and e.ts_ns <= r.t_in and e.ts_ns + e.dur_ns >= r.t_in
     and e.pid != r.daemon_pid
    join files f on f.file_id = e.file_id and f.fs_type like 'fuse%'
    group by all
),
http as (
    select r.daemon_pid, r.uniq, r.t_in, count(q.ts_ns) as http_requests,
           coalesce(sum(q.bytes), 0) as http_bytes,
           list(distinct q.key) filter (where q.key is not null) as http_keys
    from r join _requests_for_fuse q
      on q.pid = r.daemon_pid and q.ts_ns < coalesce(r.t_out, r.t_in)
     and q.ts_ns + q.dur_ns > r.t_in
    group by all
)
select r.t_in as ts_ns, coalesce(r.t_out - r.t_in, 0) as dur_ns, r.t_out is not null as replied,
       r.daemon_pid, r.daemon_tid, r.uniq as "unique", {_OPNAME} as opcode, r.nodeid,
       r.req_tid::integer as req_tid, th.pid as req_pid, r.error::integer as error,
       j.job_ts_ns, j.job_op, j.file_id,
       coalesce(h.http_requests, 0) as http_requests, coalesce(h.http_bytes, 0) as http_bytes,
       h.http_keys
from r
left join threads th on th.tid = r.req_tid
left join job_call j using (daemon_pid, uniq, t_in)
left join http h using (daemon_pid, uniq, t_in)
order by r.t_in
"""
