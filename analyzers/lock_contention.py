"""lock-contention: do the threads that read and write files wait on locks?

Question: the threads on the job's I/O path, do they spend their time waiting
for locks instead of reading, which lock is it, and does it serialise their
reads? (h5py under a threaded loader is the classic case: every call into
HDF5 takes one global lock, so N reader threads read one at a time.)

I/O-path threads: threads whose reads and writes of data files moved at least
`min_thread_io_ratio` of the bytes of the job's busiest thread. Code, shared
libraries and system files (.py, .pyc, .so, /proc, /sys, /etc, /run, /lib,
/usr/lib, /usr/share, Python's lib) are not data, so a main thread that only
imported modules is not on the I/O path. A process's I/O window runs from
the first data read or write of its I/O-path threads to the end of the last.

Waits: `futex` rows (a contended pthread mutex, a condition variable, a
semaphore, Python's locks and GIL) and `lock_contention` rows (kernel locks,
usually inside a read or write), cut to the I/O window: start-up barriers
and final joins outside it do not count. Futex words in one 64-byte line
count as one lock (a condition variable and its mutex, such as the GIL's,
sit side by side); a kernel lock is its address. A thread's wait share is
its wait time over its time in the window (its lifetime from `threads`,
cut to the window); the process's is the sum of waits over the sum of times.

Serialised readers: the I/O-path threads that read at least
`min_thread_io_ratio` of the busiest reader's bytes (readers); the most of
their reads ever in progress at once (max_concurrent_reads) comes from a
sweep over the read calls' start (+1) and end (-1) times.

Trigger, per process: its I/O-path threads waited at least `warn_wait_share`
of their time in the window, and at least `min_wait_s` seconds in all.
Severity: high when the wait share is at least `high_wait_share` and the lock
waited on most is shared by two or more of those threads (or is a kernel
lock), or when two or more readers never read concurrently over at least
`min_serial_reads` reads (a lock serialises them); else warn. At most three
processes, those that waited most, get a finding.

With Python stacks, waits for an event are not lock waits: a pool's thread
waiting for work or a producer held back by a full queue, as their samples
during the wait show (lock_evidence.py); they are counted apart (idle_wait_s).

Likely lock, from evidence: a kernel lock, named by its contention flags,
when the top lock is one; HDF5 (h5py's global lock) when the waiting
threads' samples during the waits are inside h5py (most of them), or when
the readers read .h5/.hdf5/.nc files (h5py's reads run in compiled code that
Python stacks do not show; a process
that only loaded libhdf5 or h5py, as Keras does, gets it as a hint); the
Python GIL when, in a Python process, the top lock is shared by all its I/O
threads and some waits on it time out (ETIMEDOUT: the GIL's 5 ms switch
interval), else a lock all its Python threads share; else a user-space lock
(futex). With stacks, the functions the threads waited in are named.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import lock_evidence
from .base import Context, Finding, Rule
from .rates import human_s
from .views import register_columns

DATA_IO = "data_io"
HDF5_LIBS = r"libhdf5|/h5py/"
HDF5_FILES = r"\.(h5|hdf5|hdf|he5|nc|nc4)$"
WAIT_OPS = "('futex', 'lock_contention')"
ETIMEDOUT = -110
MAX_FINDINGS = 3

# lock_contention flags (LCB_F_*), most specific first
KERNEL_LOCKS = [(16, "kernel per-CPU rw semaphore"), (32, "kernel mutex"),
                (8, "kernel rt-mutex"), (4, "kernel rw semaphore (writer)"),
                (2, "kernel rw semaphore (reader)"), (1, "kernel spinlock")]

# Waits for an event, not a lock (lock_evidence.py): (tid, ts_ns) of futex rows
IDLE = "lock_idle_waits"
NOT_IDLE = (f"left join {IDLE} li on li.tid = e.tid and li.ts_ns = e.ts_ns")

# A lock: futex words of one 64-byte line, or a kernel lock's address.
LOCK_SQL = "case when op = 'futex' then arg - arg % 64 else arg end"


class IoThread(NamedTuple):
    pid: int
    tid: int
    name: str
    reads: int
    read_bytes: int
    write_bytes: int
    futex_ns: int            # waits, cut to the process's I/O window
    kernel_ns: int
    waits: int
    life_ns: int             # the thread's time in the I/O window
    top_op: str | None
    top_address: int | None
    w0: int                  # the process's I/O window
    w1: int

    @property
    def wait_ns(self) -> int:
        return self.futex_ns + self.kernel_ns


def io_threads(ctx: Context, ratio: float) -> list[IoThread]:
    """The I/O-path threads, with their waits inside their process's I/O window."""
    rows = ctx.rows(f"""
        with per as (
            select pid, tid, count(*) filter (where dir = 'read') as reads,
                   coalesce(sum(nbytes) filter (where dir = 'read'), 0) as read_bytes,
                   coalesce(sum(nbytes) filter (where dir = 'write'), 0) as write_bytes,
                   min(ts_ns) as first_ns, max(ts_ns + dur_ns) as last_ns
            from {DATA_IO} group by pid, tid),
        iot as (
            select * from per where read_bytes + write_bytes > 0
              and read_bytes + write_bytes >= {ratio} * (select max(read_bytes + write_bytes)
                                                          from per)),
        win as (select pid, min(first_ns) as w0, max(last_ns) as w1 from iot group by pid),
        wt as (select e.pid, e.tid, e.op, e.arg,
                      least(e.ts_ns + e.dur_ns, win.w1) - greatest(e.ts_ns, win.w0) as ns
               from events e join iot using (pid, tid) join win using (pid) {NOT_IDLE}
               where e.op in {WAIT_OPS} and e.ts_ns < win.w1 and e.ts_ns + e.dur_ns > win.w0
                 and li.tid is null),
        w as (select pid, tid, count(*) as waits,
                     coalesce(sum(ns) filter (where op = 'futex'), 0) as futex_ns,
                     coalesce(sum(ns) filter (where op = 'lock_contention'), 0) as kernel_ns
              from wt group by pid, tid),
        word as (select pid, tid, op, {LOCK_SQL} as lock, arg, sum(ns) as ns
                 from wt group by all),
        lk as (select pid, tid, op, lock, arg_max(arg, ns) as word, sum(ns) as ns
               from word group by all),
        top as (select pid, tid, arg_max({{'op': op, 'word': word}}, ns) as t
                from lk group by pid, tid)
        select i.pid, i.tid, coalesce(th.name, ''), i.reads, i.read_bytes, i.write_bytes,
               coalesce(w.futex_ns, 0), coalesce(w.kernel_ns, 0), coalesce(w.waits, 0),
               greatest(least(coalesce(th.exit_ns, win.w1), win.w1)
                        - greatest(coalesce(th.start_ns, i.first_ns), win.w0), 1),
               top.t.op, top.t.word, win.w0, win.w1
        from iot i join win using (pid) left join w using (pid, tid)
             left join top using (pid, tid)
             left join threads th on th.pid = i.pid and th.tid = i.tid
        order by i.pid, i.tid""")
    return [IoThread(*r) for r in rows]


def hexaddr(addr: int | None) -> str | None:
    return None if addr is None else hex(addr & 0xFFFF_FFFF_FFFF_FFFF)


def tid_list(tids) -> str:
    return "(" + ", ".join(str(int(t)) for t in tids) + ")"


def top_lock(ctx: Context, pid: int, tids, w0: int, w1: int) -> dict:
    """The lock the process's I/O threads waited on most in the window [w0, w1]."""
    waits = f"""(select e.tid, e.ts_ns, e.dur_ns, e.op, e.arg, {LOCK_SQL} as lock,
                        e.ret, e.flags,
                        least(e.ts_ns + e.dur_ns, {w1}) - greatest(e.ts_ns, {w0}) as ns
                 from events e {NOT_IDLE}
                 where e.pid = {pid} and e.tid in {tid_list(tids)} and li.tid is null
                   and e.op in {WAIT_OPS} and e.ts_ns < {w1} and e.ts_ns + e.dur_ns > {w0})"""
    op, lock, ns, nthreads, count, timeouts, flags, word = ctx.one(f"""
        with w as {waits},
        word as (select op, lock, arg, sum(ns) as ns from w group by all)
        select l.op, l.lock, l.ns, l.nthreads, l.waits, l.timeouts, l.flags,
               (select arg_max(arg, ns) from word where word.op = l.op and word.lock = l.lock)
        from (select op, lock, sum(ns) as ns, count(distinct tid) as nthreads,
                     count(*) as waits, count(*) filter (where ret = {ETIMEDOUT}) as timeouts,
                     mode(flags) as flags
              from w group by op, lock) l
        order by l.ns desc, l.lock limit 1""")
    examples = ctx.rows(f"""select ts_ns, tid, ns from {waits} as w
                            where op = '{op}' and lock = {lock} order by ns desc, ts_ns limit 3""")
    spans = np.array(ctx.rows(f"""select tid, ts_ns, ts_ns + dur_ns from {waits} as w
                                  where op = '{op}' and lock = {lock}"""),
                     dtype=np.int64).reshape(-1, 3)
    return {"op": op, "lock": lock, "wait_ns": ns, "threads": nthreads, "waits": count,
            "timeouts": timeouts, "flags": flags, "address": word, "examples": examples,
            "spans": spans}


def read_concurrency(ctx: Context, pid: int, tids) -> tuple[int, int]:
    """(most reads of these threads in progress at once, number of reads): a sweep
    over +1 at each read's start and -1 at its end (ends first at equal times)."""
    return ctx.one(f"""
        with r as (select ts_ns as s, ts_ns + greatest(dur_ns, 1) as e from {DATA_IO}
                   where pid = {pid} and tid in {tid_list(tids)} and dir = 'read'),
        x as (select s as t, 1 as d from r union all select e as t, -1 as d from r)
        select coalesce(max(c), 0), (select count(*) from r)
        from (select sum(d) over (order by t, d rows unbounded preceding) as c from x)""")


def lineage(pid: int) -> str:
    """SQL: the process and its ancestors (forked workers inherit loaded libraries)."""
    # UNION ALL with a depth bound, not UNION: Spark's recursive CTEs take
    # only the former, and the bound ends a cycle that reused pids could make
    return f"""with recursive anc(pid, depth) as (
                   select {pid}::integer, 0
                   union all
                   select p.ppid, anc.depth + 1
                   from (select distinct pid, ppid from processes) p join anc on p.pid = anc.pid
                   where p.ppid > 0 and anc.depth < 32)"""


def loaded_hdf5(ctx: Context, pid: int) -> bool:
    """The process or an ancestor loaded libhdf5 or h5py (a hint, not evidence:
    Keras loads h5py whatever it reads)."""
    return ctx.one(f"""{lineage(pid)}
        select count(*) from events e left join files f using (file_id)
        where e.pid in (select pid from anc) and e.op in ('open', 'openat', 'openat2', 'mmap')
          and (e.op = 'mmap' or e.ret >= 0)
          and regexp_matches(coalesce(e.path, f.path, ''), '{HDF5_LIBS}')""")[0] > 0


def reads_hdf5(ctx: Context, pid: int, reader_tids) -> bool:
    """Its readers read HDF5 files (.h5, .hdf5, .nc...)."""
    return bool(reader_tids) and ctx.one(f"""
        select count(*) from io where pid = {pid} and tid in {tid_list(reader_tids)}
          and dir = 'read' and regexp_matches(lower(coalesce(path, '')), '{HDF5_FILES}')""")[0] > 0


def is_python(ctx: Context, pid: int) -> bool:
    """The process or an ancestor is a Python interpreter (by name, or it loaded .pyc files)."""
    return ctx.one(f"""{lineage(pid)}
        select (select count(*) from processes where pid in (select pid from anc)
                  and regexp_matches(coalesce(comm, '') || ' ' || coalesce(cmdline, ''),
                                     'python'))
             + (select count(*) from events where pid in (select pid from anc)
                  and op in ('open', 'openat') and path like '%.pyc')""")[0] > 0


def kernel_lock_name(flags: int) -> str:
    return next((name for bit, name in KERNEL_LOCKS if flags & bit), "kernel lock")


def likely_lock(ctx: Context, pid: int, lock: dict, n_io: int, reader_tids,
                seen: dict) -> tuple[str, str]:
    """(kind, description): hdf5, gil, python-lock, kernel or futex. seen: what
    the waiting threads' Python stacks show during the waits (lock_evidence.in_waits)."""
    if lock["op"] == "lock_contention":
        return "kernel", kernel_lock_name(lock["flags"])
    hdf5 = "h5py's global lock (HDF5 runs one call at a time)"
    if seen["samples"] and seen["hdf5_share"] >= 0.5:
        return "hdf5", f"{hdf5}: {seen['hdf5_share']:.0%} of their samples then were in h5py"
    # h5py's reads run in its compiled code, which Python stacks do not show:
    # the files the readers read are the evidence then
    if reads_hdf5(ctx, pid, reader_tids):
        return "hdf5", hdf5
    if n_io >= 2 and lock["threads"] >= n_io and is_python(ctx, pid):
        if lock["timeouts"] > 0:
            kind, text = "gil", "the Python GIL"
        else:
            kind, text = "python-lock", ("a lock all the Python threads share (the GIL or a "
                                         "threading.Lock)")
    else:
        kind, text = "futex", f"a user-space lock (futex {hexaddr(lock['address'])})"
    if not seen["samples"] and loaded_hdf5(ctx, pid):
        text += " (the process loaded HDF5: if its reads go through h5py, maybe its global lock)"
    return kind, text


RECOMMEND = {
    "hdf5": ("h5py lets one thread into HDF5 at a time, so reader threads take turns. Read "
             "with processes, not threads (DataLoader num_workers > 0, or multiprocessing), "
             "and open the file in each worker (lazily, after the fork) instead of sharing "
             "one h5py.File; or convert the hot data to a format read without the lock "
             "(raw .npy, memory-mapped arrays)."),
    "gil": ("The threads take turns on the Python GIL. Move the work that holds it (decoding, "
            "augmentation in Python) into processes: DataLoader worker processes or "
            "multiprocessing; keep threads for calls that release the GIL."),
    "python-lock": ("All the Python threads wait on one lock: the GIL or a shared "
                    "threading.Lock. Use processes (DataLoader workers, multiprocessing) "
                    "for Python-heavy loading, and give each thread its own file handle "
                    "and state instead of locking a shared one."),
    "kernel": ("The threads contend on a kernel lock: writers of one file serialise on its "
               "inode lock, and many threads creating or opening files in one directory "
               "contend on the directory's. Give each thread its own file (shards), or "
               "funnel the writes through one writer with large requests."),
    "futex": ("The I/O threads wait on a user-space lock (a mutex, condition variable or "
              "semaphore). Find it (gdb `info symbol ADDRESS` on the running job), do not "
              "read or write while holding it, and give each thread its own handle and "
              "buffers."),
}


def process_finding(ctx: Context, th: dict, threads: list[IoThread],
                    max_read: int, idle_ns: dict) -> Finding | None:
    """The finding for one process's I/O-path threads, or None below the trigger."""
    pid, w0, w1 = threads[0].pid, threads[0].w0, threads[0].w1
    tids = [t.tid for t in threads]
    wait_ns = sum(t.wait_ns for t in threads)
    share = wait_ns / sum(t.life_ns for t in threads)
    if not wait_ns or share < th["warn_wait_share"] or wait_ns < th["min_wait_s"] * 1e9:
        return None
    readers = [t.tid for t in threads
               if t.reads > 0 and t.read_bytes >= th["min_thread_io_ratio"] * max_read]
    max_conc, nreads = read_concurrency(ctx, pid, readers) if readers else (0, 0)
    serialised = len(readers) >= 2 and max_conc == 1 and nreads >= th["min_serial_reads"]
    lock = top_lock(ctx, pid, tids, w0, w1)
    seen = lock_evidence.in_waits(ctx.con, lock["spans"]) if ctx.stacks else \
        lock_evidence.NOTHING_SEEN
    kind, lock_name = likely_lock(ctx, pid, lock, len(tids), readers, seen)
    where = ", ".join(f"{fn} ({f}) {share:.0%}" for fn, f, share in seen["top"])
    shared = lock["threads"] >= 2 or lock["op"] == "lock_contention"
    high = (share >= th["high_wait_share"] and shared) or serialised
    cmdline = ctx.one(f"select any_value(cmdline) from processes where pid = {pid}")[0]
    kernel_ns = sum(t.kernel_ns for t in threads)
    idle = sum(idle_ns.get(t, 0) for t in tids)
    serial_text = (f"; the {nreads} reads of its {len(readers)} reader threads never ran "
                   f"at the same time" if serialised else "")
    n = len(tids)
    return Finding(
        id=RULE.id, severity="high" if high else "warn",
        title="I/O threads wait on a lock",
        summary=(f"{n} I/O thread{'s' if n > 1 else ''} of pid {pid} spent {share:.0%} of "
                 f"{'their' if n > 1 else 'its'} time waiting on locks "
                 f"({human_s(wait_ns / 1e9)}), most on {lock_name}{serial_text}."
                 + (f" Their Python stacks in those waits: {where}." if where else "")
                 + (f" Not counted: {human_s(idle / 1e9)} waiting for work or an event "
                    "(a pool's idle threads, a full queue), as their stacks show."
                    if idle > 0 else "")),
        recommendation=RECOMMEND[kind],
        evidence={
            "pid": pid,
            "cmdline": cmdline,
            "io_threads": n,
            "io_window_s": (w1 - w0) / 1e9,
            "total_wait_s": wait_ns / 1e9,
            "futex_wait_s": sum(t.futex_ns for t in threads) / 1e9,
            "kernel_lock_wait_s": kernel_ns / 1e9,
            "wait_share": share,
            "max_thread_wait_share": max(t.wait_ns / t.life_ns for t in threads),
            "min_thread_wait_share": min(t.wait_ns / t.life_ns for t in threads),
            "top_address": hexaddr(lock["address"]),
            "top_lock_wait_s": lock["wait_ns"] / 1e9,
            "top_lock_waits": lock["waits"],
            "top_lock_threads": lock["threads"],
            "top_lock_timed_out_waits": lock["timeouts"],
            "likely_lock": lock_name,
            "lock_kind": kind,
            "idle_wait_s": idle / 1e9,
            "waiting_in": [{"function": fn, "file": f, "share": round(x, 4)}
                           for fn, f, x in seen["top"]],
            "readers": len(readers),
            "reads": nreads,
            "max_concurrent_reads": max_conc,
        },
        processes=[{"pid": pid, "tid": t.tid, "thread": t.name, "wait_s": t.wait_ns / 1e9,
                    "wait_share": t.wait_ns / t.life_ns, "reads": t.reads,
                    "read_bytes": t.read_bytes, "top_address": hexaddr(t.top_address)}
                   for t in sorted(threads, key=lambda t: (-t.wait_ns, t.tid))],
        examples=[{"ts_ns": ts, "pid": pid, "tid": tid,
                   "what": f"{ns / 1e6:.3f} ms wait on {hexaddr(lock['address'])}"}
                  for ts, tid, ns in lock["examples"]])


def _idle_table(ctx: Context, tids: np.ndarray, ts: np.ndarray) -> None:
    """IDLE, with these rows (a registered view: the same on either engine)."""
    register_columns(ctx.con, IDLE, {"tid": np.asarray(tids, dtype=np.int32),
                                     "ts_ns": np.asarray(ts, dtype=np.int64)})


def idle_waits(ctx: Context, threads: list[IoThread]) -> dict[int, int]:
    """With Python stacks: the I/O threads' futex waits that were waits for an
    event (lock_evidence.idle_waits) go into IDLE; ns of them per thread, in
    their process's window."""
    if not ctx.stacks or not threads:
        return {}
    lock_evidence.create_native_threads(ctx.con)
    waits = np.array(ctx.rows(f"""
        select e.tid, e.ts_ns, e.ts_ns + e.dur_ns, w.w0, w.w1, e.pid, e.arg - e.arg % 64,
               case when {lock_evidence.event_wait_sql("e.")} then 1 else 0 end
        from events e
        join (values {", ".join(f"({t.tid}, {t.w0}, {t.w1})" for t in threads)}) as w(tid, w0, w1)
          on e.tid = w.tid
        where e.op = 'futex' and e.ts_ns < w.w1 and e.ts_ns + e.dur_ns > w.w0"""),
                     dtype=np.int64).reshape(-1, 8)
    # a lock: its process and futex line; a native thread's condition variable: an event
    idle = lock_evidence.idle_waits(ctx.con, waits[:, :3], waits[:, 5:7]) | (waits[:, 7] == 1)
    if not idle.any():
        return {}
    w = waits[idle]
    _idle_table(ctx, w[:, 0], w[:, 1])
    ns = np.maximum(np.minimum(w[:, 2], w[:, 4]) - np.maximum(w[:, 1], w[:, 3]), 0)
    out: dict[int, int] = {}
    for t, n in zip(w[:, 0], ns):
        out[int(t)] = out.get(int(t), 0) + int(n)
    return out


def run(ctx: Context) -> list[Finding]:
    th = ctx.th(RULE.id)
    _idle_table(ctx, np.zeros(0), np.zeros(0))
    threads = io_threads(ctx, th["min_thread_io_ratio"])
    idle_ns = idle_waits(ctx, threads)
    if idle_ns:          # again, without the waits for an event
        threads = io_threads(ctx, th["min_thread_io_ratio"])
    max_read = max((t.read_bytes for t in threads), default=0)
    by_pid: dict[int, list[IoThread]] = {}
    for t in threads:
        by_pid.setdefault(t.pid, []).append(t)
    ranked = sorted(by_pid.values(), key=lambda ts: (-sum(t.wait_ns for t in ts), ts[0].pid))
    findings = [process_finding(ctx, th, ts, max_read, idle_ns) for ts in ranked]
    return [f for f in findings if f][:MAX_FINDINGS]


RULE = Rule(
    id="lock-contention",
    title="Lock waits on the I/O path",
    question=("Do the threads that read and write files wait on locks, which lock, "
              "and does it serialise their reads?"),
    thresholds={"warn_wait_share": 0.2, "high_wait_share": 0.5, "min_wait_s": 0.01,
                "min_thread_io_ratio": 0.1, "min_serial_reads": 20},
    run=run,
)
