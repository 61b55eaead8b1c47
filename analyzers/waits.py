"""Does the training loop wait for data, and why?

Finds the training loop thread of each process that trains, its data waits
(the time between asking a loader for a batch and getting it), the training
window, the loop's time budget and the stall causes: what the producers
(loader worker processes or threads, or the loop itself) were doing while
the loop waited.

How the loop is found (per process, from the recorded wake-ups and data
flows, never from names):
  1. worker processes: threads of other processes that read the dataset
     write to a pipe the thread reads or polls, over most of the reading
     span; a relay (a pin thread fed by the workers that wakes another
     thread) hands its score on;
  2. the process's main thread reads most of the process's dataset bytes
     itself (num_workers=0, a plain loop over files, fio): self-loading;
  3. reader threads of the process wake it up (thread-based loaders);
     with no such wake-up, the main thread when only other threads read;
  4. otherwise the thread that read the most.
Reads through io_uring or libaio are the submitting thread's: its data
waits are the time it is blocked while its requests are in flight.
With no dataset reads, the thread that wrote the most checkpoint bytes is
the loop (a job that only computes and checkpoints).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np

from iotrace.storage_io import REQ_OP_READ
from iotrace.abi import (ASYNC_READ_OPS, ASYNC_WRITE_OPS, OPEN_OPS, POLL_OPS, READ_OPS,
                         RECV_OPS, SLEEP_OPS, SYNC_OPS, WRITE_OPS, sql_list)

from . import intervals as ivl
from . import folded_stacks, loader_frame, lock_evidence, runtime_steps
from .loader_frame import LoaderFrame
from .runtime_steps import RuntimeLoop
from .views import LOCAL_FS, mem_available, register_columns

AF_UNIX = 1
THRESHOLDS = {
    "min_deliveries": 3,          # producer-side wake-ups or pipe reads to call a thread a consumer
    "min_delivery_span": 0.5,     # ... spread over at least this share of the dataset's reading span
    "merge_gap_ms": 1.0,          # loader calls closer than this form one data wait
    "release_gap_ms": 5.0,        # a batch's shared memory freed this soon after a wait: part of it
    "min_producer_share": 0.005,  # of the dataset bytes, for a thread to count as a producer
    "min_dataset_bytes": 1048576,  # data bytes read below this: no dataset (a config file)
    "io_bound_share": 0.10,       # data-wait share of the window at and above which: io-bound
    "au_target": 0.90,            # MLPerf Storage's accelerator-utilisation bar
    "min_window_s": 1.0,          # a training window shorter than this: too little to judge
    "min_data_waits": 3,          # ... and fewer data waits than this
}
# loop_cpu: the loop itself on CPU inside its loader's next() (decoding,
# unpickling, collating in its own thread): seen only with Python stacks
STALL_KEYS = ("fetch", "prep", "cpu_starved", "transfer", "other", "loop_cpu")
# painter layers, lowest priority first (label = index + 1); 0 = on CPU.
# GET and BACKOFF are fetch too (an object's GET over HTTP, the client's
# backoff before it asks again), counted apart as well (FETCH_PARTS)
IDLE, OTHER, TRANSFER, FETCH, GET, BACKOFF, STARVED = 1, 2, 3, 4, 5, 6, 7
LABEL_STALL = {OTHER: "other", TRANSFER: "transfer", FETCH: "fetch", GET: "fetch",
               BACKOFF: "fetch", STARVED: "cpu_starved"}
FETCH_PARTS = {GET: "object_get", BACKOFF: "backoff"}


@dataclass
class Loop:
    pid: int
    tid: int
    name: str
    how: str                                   # worker-processes | loader-threads | self-loading | runtime-threads | checkpoint-only
    producers: list[int] = field(default_factory=list)    # producer-side thread ids
    episodes: np.ndarray = field(default_factory=lambda: ivl.EMPTY.copy())
    # the waits the kernel shows alone (blocked for a producer, its own reads);
    # episodes adds the time in the loader frame where Python stacks show it
    kernel_waits: np.ndarray = field(default_factory=lambda: ivl.EMPTY.copy())
    loader: Optional[LoaderFrame] = None
    loader_why: str = ""                      # why no loader frame, where none
    end_ns: Optional[int] = None              # the loop's last sample in its own function
    # a loop whose steps run in a framework's runtime threads (model.fit):
    # those threads, and the one that takes its batches (runtime_steps.py)
    runtime: Optional[RuntimeLoop] = None


@dataclass
class Waits:
    loops: list[Loop]
    window: tuple[int, int]
    window_source: str                         # detected | option | trace
    budget: dict                               # seconds
    stall: dict                                # shares of the data wait
    steps: int
    reason: Optional[str] = None
    per_loop: list[dict] = field(default_factory=list)
    states: list[LoopStates] = field(default_factory=list)
    stacks: bool = False                       # the trace has Python stacks
    # shares of the data wait (as stall's) in fetch's parts: objects GET over
    # HTTP, and the client's backoff between a refused try and the next
    fetch_parts: dict = field(default_factory=dict)


@dataclass
class LoopStates:
    """A loop's timeline in the window, for the viewers: each data wait with
    its causes (ns, columns in STALL_KEYS order) and the thread that woke the
    loop at its end (tid, pid, wake-up ns; -1 where none was seen), and its
    checkpoint intervals. Everything else in the window is compute."""
    pid: int
    tid: int
    name: str
    waits: np.ndarray                          # (n, 2) start, end ns
    causes: np.ndarray                         # (n, len(STALL_KEYS)) ns by cause
    wakers: np.ndarray                         # (n, 3) tid, pid, ns
    checkpoints: np.ndarray                    # (m, 2) start, end ns


def _threads(con) -> dict[int, tuple[int, str]]:
    """{tid: (pid, name)}"""
    return {t: (p, n or "") for t, p, n in con.execute(
        "select tid, any_value(pid), any_value(name) from threads group by tid").fetchall()}


def _producers(con, th: dict) -> dict[int, int]:
    """{tid: dataset bytes read} of threads that read at least the minimum share."""
    rows = con.execute("""select tid, sum(nbytes) from data_reads
                          group by tid having sum(nbytes) > 0""").fetchall()
    tot = sum(int(b) for _, b in rows)
    if tot < th["min_dataset_bytes"]:
        return {}
    return {int(t): int(b) for t, b in rows if b >= th["min_producer_share"] * tot}


# An off-CPU row (alias e) with its waker's thread row (t), and whether the
# waker was still alive at the wake-up: a wake-up by a thread that had already
# exited is that thread ending (a join), not a batch handed over.
WAKER_JOIN = "left join threads t on t.tid = e.ret"
WAKER_ALIVE = """(t.exit_ns is null or e.ts_ns + e."offset" < t.exit_ns)"""


def _deliveries(con, prod: dict, threads: dict) -> list[tuple[int, ...]]:
    """(consumer tid, producer pid, count, first ts, last ts): reads and polls
    of a thread on a pipe that threads of another, producing process write to
    (how worker processes hand over batches), plus wake-ups by reader threads
    of its own process (a waker that had already exited does not count: that
    is a thread ending, not a batch). Wake-ups across processes alone (a
    futex in shared memory) do not make a consumer: a launcher woken by its
    job's state changes would pass for one."""
    prod_pids = sorted({threads[t][0] for t in prod if t in threads})
    if not prod_pids:
        return []
    pp = "(" + ",".join(map(str, prod_pids)) + ")"
    pt = "(" + ",".join(map(str, sorted(prod))) + ")"
    flows = con.execute(f"""
        with w as (select distinct chan_ino, pid from events
                   where chan_ino is not null and pid in {pp}
                     and op in {sql_list(WRITE_OPS + ('sendto', 'sendmsg'))})
        select e.tid, w.pid, count(*), min(e.ts_ns), max(e.ts_ns) from events e join w using (chan_ino)
        where e.pid != w.pid and e.op in {sql_list(READ_OPS + POLL_OPS + RECV_OPS)}
        group by all""").fetchall()
    wakes = con.execute(f"""
        select e.tid, e.arg as wpid, count(*), min(e.ts_ns), max(e.ts_ns)
        from events e {WAKER_JOIN}
        where e.op = 'offcpu' and e.ret > 0 and e.ret != e.tid
          and e.arg = e.pid and e.ret in {pt} and {WAKER_ALIVE}
        group by all""").fetchall()
    return [tuple(map(int, r)) for r in flows + wakes]


def _relay_wakes(con, tids: list[int]) -> list[tuple[int, int, int]]:
    """(waker tid, woken tid, count) of wake-ups inside one process (not
    counting a waker's exit: a thread joined is not a batch handed on)."""
    if not tids:
        return []
    return [tuple(map(int, r)) for r in con.execute(f"""
        select e.ret, e.tid, count(*) from events e {WAKER_JOIN}
        where e.op = 'offcpu' and e.ret > 0 and e.ret != e.tid and e.arg = e.pid
          and e.ret in ({",".join(map(str, tids))}) and {WAKER_ALIVE}
        group by all""").fetchall()]


def find_loops(con, th: dict, prod: dict[int, int]) -> tuple[list[Loop], Optional[str]]:
    """prod: the producer threads (_producers)."""
    threads = _threads(con)
    by_proc: dict[int, list[int]] = {}
    for t, (p, _) in threads.items():
        by_proc.setdefault(p, []).append(t)
    if not prod:
        return _checkpoint_only(con, threads)
    score: dict[int, int] = {}
    sources: dict[int, set] = {}
    # a consumer gets batches while the dataset is read, not only at start-up
    first, last = con.execute("""select min(ts_ns), max(ts_ns) from data_reads
                                 where file_id in (select file_id from data_files)""").fetchone()
    if first is None:   # reads, but none of a data set (many small files, none named)
        return _checkpoint_only(con, threads)
    min_span = th["min_delivery_span"] * (last - first)
    spans: dict[int, list[int]] = {}
    for tid, ppid, n, a, b in _deliveries(con, prod, threads):
        if tid in prod and ppid == threads.get(tid, (None,))[0]:
            continue                     # a reader woken by a peer reader: not a consumer
        score[tid] = score.get(tid, 0) + n
        sources.setdefault(tid, set()).add(ppid)
        sp = spans.setdefault(tid, [a, b])
        sp[0], sp[1] = min(sp[0], a), max(sp[1], b)
    for tid, (a, b) in spans.items():
        if b - a < min_span:
            score[tid] = 0
    # relays: a thread fed by producers that mostly wakes one other thread of its
    # process (a pin-memory thread), or that wakes its process's main thread again
    # and again (multiprocessing.Pool's result handler: it wakes the main thread
    # only when that waits, which a loop that computes most of the time seldom
    # does). A process's main thread is never a relay: it wakes the threads that
    # send the loader its next indices, and it is the loop.
    # Wake-ups of the main thread first: a relay hands the loop its batches
    # (torchdata.nodes' Prefetcher thread wakes the loop once a batch, and
    # ParallelMapper's reader thread more often, for its next indices; taken
    # in order of count alone, the reader took the relay's score and the
    # loop's waits, 1.5 s by its own clock, were 0.1 s of GIL hand-overs)
    for waker, woken, n in sorted(_relay_wakes(con, list(score)),
                                  key=lambda r: (threads.get(r[1], (None,))[0] != r[1], -r[2])):
        pid = threads.get(waker, (None,))[0]
        if waker in score and woken != waker and waker != pid \
                and threads.get(woken, (None,))[0] == pid \
                and (n >= 0.5 * score[waker] or (woken == pid and n >= th["min_deliveries"])):
            score[woken] = score.get(woken, 0) + score.pop(waker)
            sources.setdefault(woken, set()).update(sources.pop(waker, set()))
            sources[woken].add(("relay", waker))
    loops: list[Loop] = []
    workers: set[int] = _helpers(con)
    depth = _depths(con)
    # 1. consumers of other processes' data (ancestors first: a worker is not a consumer)
    for pid in sorted(by_proc, key=lambda p: (depth.get(p, 0), p)):
        if pid in workers:
            continue
        cands = [t for t in by_proc[pid] if score.get(t, 0) >= th["min_deliveries"]
                 and any(isinstance(s, int) and s != pid for s in sources.get(t, ()))]
        if cands:
            best = max(cands, key=lambda t: (score[t], t == pid))
            # the process's other threads fed by other processes hand the loop
            # their batches too (Grain's DataLoader: a thread reads each worker's
            # queue; one whose wake-ups of the loop were too few to count as a
            # relay had left its worker to be a loop of its own)
            srcs = {s for t in cands for s in sources[t] if isinstance(s, int) and s != pid}
            workers |= srcs
            relays = [s[1] for s in sources[best] if isinstance(s, tuple)] + \
                [t for t in cands if t != best]
            side = [t for p in srcs for t in by_proc.get(p, [])] + relays + \
                [t for t in by_proc[pid] if t in prod and t != best]
            loops.append(Loop(pid, best, threads[best][1], "worker-processes", side))
    done = {lp.pid for lp in loops} | workers
    # 2-4. processes that read their dataset themselves
    for pid in sorted({threads[t][0] for t in prod if t in threads} - done):
        readers = [t for t in by_proc[pid] if t in prod]
        pbytes = sum(prod[t] for t in readers)
        if pid in prod and prod[pid] >= 0.5 * pbytes:
            loops.append(Loop(pid, pid, threads[pid][1], "self-loading", [pid]))
            continue
        cands = [t for t in by_proc[pid] if t not in prod and score.get(t, 0) >= th["min_deliveries"]]
        if cands:
            best = max(cands, key=lambda t: (score[t], t == pid))
        elif pid in threads:
            # other threads read most of it: the main thread consumes (tf.data's
            # readers; the main thread's own few reads, a config, do not make
            # one of those readers the loop)
            best = pid
        else:
            best = max(readers, key=lambda t: prod[t])
            loops.append(Loop(pid, best, threads[best][1], "self-loading", [best]))
            continue
        relays = [s[1] for s in sources.get(best, ()) if isinstance(s, tuple)]
        loops.append(Loop(pid, best, threads[best][1], "loader-threads",
                          [t for t in readers + relays if t != best]))
    if not loops:
        return [], "dataset reads were seen, but no thread that consumes them"
    return loops, None


# Python's own helper processes, which the loader's processes write to (the
# resource tracker is told of each shared-memory batch Grain's workers make):
# woken by the producers again and again, they are never a training loop
HELPERS = r"from multiprocessing\.(resource_tracker|forkserver|semaphore_tracker) import main"


def _helpers(con) -> set[int]:
    return {int(p) for (p,) in con.execute(
        "select distinct pid from processes where regexp_matches(cmdline, ?)",
        [HELPERS]).fetchall()}


def _parents(con) -> dict[int, int]:
    """{pid: ppid} of the trace's processes."""
    return dict(con.execute("select pid, any_value(ppid) from processes group by pid").fetchall())


def _depths(con) -> dict[int, int]:
    parent = _parents(con)
    out: dict[int, int] = {}
    for p in parent:
        d, q = 0, p
        while q in parent and d < 64:
            q = parent[q]
            d += 1
        out[p] = d
    return out


def _checkpoint_only(con, threads: dict) -> tuple[list[Loop], Optional[str]]:
    r = con.execute("""select tid, sum(nbytes) from all_data_io where dir = 'write'
                       group by tid order by 2 desc, 1 limit 1""").fetchone()
    if not r:
        return [], "no dataset reads and no file writes: nothing to judge"
    tid = int(r[0])
    pid, name = threads.get(tid, (tid, ""))
    return [Loop(pid, tid, name, "checkpoint-only", [])], None


# ---- per-thread timelines ---------------------------------------------------

# What the timelines need of each call, decided in SQL (strings are never
# fetched): one bit per class of op, fd kind and file set.
CALL_FLAGS = {
    "loader_op": READ_OPS + POLL_OPS + RECV_OPS + ("connect", "sendmsg"),
    # io_uring and libaio requests: submission to completion, not time blocked
    "async_op": ASYNC_READ_OPS + ASYNC_WRITE_OPS,
    "sleep_op": SLEEP_OPS,
    "wait_op": ("futex",) + POLL_OPS,
    "nfs_fetch_op": ("nfs_read", "nfs_readahead"),
    "xfer_op": WRITE_OPS + ("sendto", "sendmsg"),
    "ckpt_op": WRITE_OPS + SYNC_OPS + OPEN_OPS + ("close", "rename", "renameat", "renameat2"),
}
KIND_FLAGS = {"is_pipe": "pipe", "is_socket": "socket", "is_chr": "chr"}
FILE_FLAGS = {"is_data": "data_files", "is_ckpt": "ckpt_files"}
# a unix-domain socket (its family is the call's mode): the one use of the
# mode, so a bit rather than a fetched column
UNIX_FLAG = "is_unix"
# a native thread's wait for an event, not a lock (lock_evidence.event_wait_sql)
EVENT_FLAG = "is_event_wait"
FLAG_BIT = {k: 1 << i for i, k in enumerate([*CALL_FLAGS, *KIND_FLAGS, *FILE_FLAGS, UNIX_FLAG,
                                             EVENT_FLAG])}
NO_COST = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0))


def _flags_sql() -> str:
    """SQL: the bits of an events row (FLAG_BIT)."""
    ops: dict[str, int] = {}
    for k, names in CALL_FLAGS.items():
        for n in names:
            ops[n] = ops.get(n, 0) | FLAG_BIT[k]
    op_bits = "case " + " ".join(f"when op = '{n}' then {b}" for n, b in sorted(ops.items())) \
        + " else 0 end"
    kind_bits = "case " + " ".join(f"when fd_kind = '{v}' then {FLAG_BIT[k]}"
                                   for k, v in KIND_FLAGS.items()) + " else 0 end"
    file_bits = " + ".join(f"case when file_id in (select file_id from {t}) then {FLAG_BIT[k]} "
                           "else 0 end" for k, t in FILE_FLAGS.items())
    unix_bit = (f"case when fd_kind = 'socket' and mode = {AF_UNIX} "
                f"then {FLAG_BIT[UNIX_FLAG]} else 0 end")
    event_bit = f"case when {lock_evidence.event_wait_sql()} then {FLAG_BIT[EVENT_FLAG]} else 0 end"
    return f"({op_bits}) + ({kind_bits}) + {file_bits} + {unix_bit} + {event_bit}"


class Timelines:
    """The calls and off-CPU intervals of the threads the analysis looks at,
    read from the events in one query per batch of threads (not one per thread
    and question) and kept in numpy, sorted by time. At most `max_rows` events
    are kept (a tenth of the memory available): batches are cut to fit, and
    the threads loaded longest ago make room (read again if asked for again)."""

    ROW_BYTES = 80              # numpy bytes per event kept, about

    def __init__(self, con, max_rows: Optional[int] = None):
        self.con = con
        self.max_rows = max_rows or max(1, int(0.1 * mem_available()) // self.ROW_BYTES)
        self._calls: dict[int, dict[str, np.ndarray]] = {}
        self._off: dict[int, dict[str, np.ndarray]] = {}
        self._rows: dict[int, int] = {}        # in load order
        self._net: Optional[dict[tuple[int, bool], np.ndarray]] = None
        self._life: Optional[dict[int, list]] = None
        self._leaders: Optional[set[int]] = None

    def load(self, tids) -> None:
        want = {int(t) for t in tids}
        need = sorted(want - set(self._calls))
        if not need:
            return
        counts = dict(self.con.execute(f"""select tid, count(*) from events
                                          where tid in ({",".join(map(str, need))})
                                          group by tid""").fetchall())
        batch, n = [], 0
        for t in need:
            c = int(counts.get(t, 0))
            if batch and n + c > self.max_rows:
                self._fetch(batch, want)
                batch, n = [], 0
            batch.append(t)
            n += c
        self._fetch(batch, want)

    def _fetch(self, need: list[int], keep: set) -> None:
        # two queries, calls and off-CPU intervals, each with only the columns
        # its rows use; sorted by thread, so each thread's rows are a slice
        where = f"""tid in ({",".join(map(str, need))}) and ts_ns is not null
                    and dur_ns is not null"""
        order = "order by tid, ts_ns, end_ns"
        calls = self._columns(f"""
            select tid, ts_ns, ts_ns + dur_ns as end_ns, {_flags_sql()} as bits,
                   coalesce(chan_ino, -1) as chan_ino
            from events where {where} and op != 'offcpu' {order}""", need)
        off = self._columns(f"""
            select tid, ts_ns, ts_ns + dur_ns as end_ns, "offset" as wake, ret as waker,
                   arg as waker_pid
            from events where {where} and op = 'offcpu' {order}""", need)
        one = len(need) == 1    # own copies when several threads share the arrays
        for t in need:
            c = {k: (v if one else v.copy()) for k, v in calls.pop(t).items()}
            bits = c.pop("bits")
            for k, bit in FLAG_BIT.items():
                c[k] = (bits & bit) != 0
            self._calls[t] = c
            self._off[t] = {k: (v if one else v.copy()) for k, v in off.pop(t).items()}
        del calls, off
        for t in need:
            self._rows[t] = len(self._calls[t]["ts_ns"]) + len(self._off[t]["ts_ns"])
        # make room: the threads loaded longest ago that are not asked for now
        for t in list(self._rows):
            if sum(self._rows.values()) <= self.max_rows:
                break
            if t not in keep and t not in need:
                self.drop([t])

    def _columns(self, sql: str, need: list[int]) -> dict[int, dict[str, np.ndarray]]:
        """{tid: {column: array}}: slices (views) of one query's result sorted by tid."""
        cols = {k: np.asarray(v) for k, v in self.con.execute(sql).fetchnumpy().items()}
        tid = cols.pop("tid")
        bounds = np.searchsorted(tid, need + [need[-1] + 1])
        del tid
        return {t: {k: v[bounds[i]:bounds[i + 1]] for k, v in cols.items()}
                for i, t in enumerate(need)}

    def net_fetch(self, tid: int, lo: int, hi: int, backoff: bool = False) -> np.ndarray:
        """The thread's GETs of data objects (or, backoff, its backoffs between
        their attempts) overlapping [lo, hi): net_fetch's rows, as intervals."""
        if self._net is None:
            cols = self.con.execute("""select tid, ts_ns, end_ns, backoff from net_fetch
                                       order by tid, ts_ns""").fetchnumpy()
            t, b = np.asarray(cols["tid"]), np.asarray(cols["backoff"], dtype=bool)
            iv = ivl.as_iv(np.asarray(cols["ts_ns"], dtype=np.int64),
                           np.asarray(cols["end_ns"], dtype=np.int64))
            self._net = {(int(k), f): iv[(t == k) & (b == f)] for k in np.unique(t)
                         for f in (False, True)}
        iv = self._net.get((int(tid), backoff), ivl.EMPTY)
        return iv[(iv[:, 0] < hi) & (iv[:, 1] > lo)] if len(iv) else iv

    def alive(self, tid: int) -> np.ndarray:
        """The thread's lifetimes (a reused id has several) as intervals: from
        its start (or the trace's) to its exit (or the trace's end)."""
        if self._life is None:
            rows = self.con.execute("""select tid, coalesce(start_ns, 0),
                                              coalesce(exit_ns, 9223372036854775807)
                                       from threads order by tid, 2""").fetchall()
            self._life = {}
            for t, a, b in rows:
                self._life.setdefault(int(t), []).append((int(a), int(b)))
        life = self._life.get(int(tid))
        return ivl.union(np.array(life, dtype=np.int64)) if life else ivl.as_iv(
            np.zeros(1, dtype=np.int64), np.full(1, np.iinfo(np.int64).max))

    def leaders(self) -> set[int]:
        """The threads that are their process's main thread (tid = pid)."""
        if self._leaders is None:
            self._leaders = {int(r[0]) for r in self.con.execute(
                "select tid from threads where tid = pid").fetchall()}
        return self._leaders

    def drop(self, tids) -> None:
        for t in tids:
            self._calls.pop(int(t), None)
            self._off.pop(int(t), None)
            self._rows.pop(int(t), None)

    @staticmethod
    def _window(cols: dict[str, np.ndarray], lo: int, hi: int) -> dict[str, np.ndarray]:
        """The rows overlapping [lo, hi): read-only slices where they are
        contiguous (the usual case: a thread's calls rarely overlap), else copies."""
        b = int(np.searchsorted(cols["ts_ns"], hi, side="left"))     # ts_ns < hi before b
        keep = cols["end_ns"][:b] > lo
        a = int(np.argmax(keep)) if b else 0
        if keep[a:].all():
            out = {k: v[a:b] for k, v in cols.items()}
            for v in out.values():
                v.flags.writeable = False
            return out
        return {k: v[:b][keep] for k, v in cols.items()}

    def calls(self, tid: int, lo: int, hi: int) -> dict[str, np.ndarray]:
        """The thread's calls (not off-CPU intervals) overlapping [lo, hi), by start."""
        self.load([tid])
        return self._window(self._calls[int(tid)], lo, hi)

    def offcpu(self, tid: int, lo: int, hi: int) -> dict[str, np.ndarray]:
        """Its off-CPU intervals overlapping [lo, hi): wake (ns from the start to the
        wake-up, -1: none seen), waker (tid) and waker_pid."""
        self.load([tid])
        return self._window(self._off[int(tid)], lo, hi)


def _runnable(off) -> np.ndarray:
    s = np.where(off["wake"] >= 0, off["ts_ns"] + off["wake"], off["ts_ns"])
    return ivl.as_iv(s, off["end_ns"])


def _blocked(off, wakers: Optional[set] = None, but: set = frozenset()) -> np.ndarray:
    """Its blocked intervals (off CPU until a wake-up): those that one of
    wakers ended, where given, and none that one of but ended."""
    keep = off["wake"] >= 0
    if wakers is not None:
        keep &= np.isin(off["waker"], list(wakers))
    if but:
        keep &= ~np.isin(off["waker"], list(but))
    return ivl.as_iv(off["ts_ns"][keep], (off["ts_ns"] + off["wake"])[keep])


def _episodes(tl: Timelines, loop: Loop, lo: int, hi: int, th: dict) -> np.ndarray:
    """The loop's data waits: its loader calls (poll, read or receive on a pipe
    or unix socket, its own dataset I/O) and the off-CPU time a producer-side
    thread ended, with gaps under merge_gap_ms closed."""
    c = tl.calls(loop.tid, lo, hi)
    off = tl.offcpu(loop.tid, lo, hi)
    side = set(loop.producers)
    loader_op = c["loader_op"]
    pipes = _producer_pipes(tl.con, side) if side else []
    chan = c["is_pipe"] & np.isin(c["chan_ino"], pipes) & loader_op
    unix = c[UNIX_FLAG] & loader_op
    pieces = [ivl.as_iv(c["ts_ns"][chan], c["end_ns"][chan])]
    if loop.how == "self-loading":      # its own dataset I/O (a consumer's own reads are not waits)
        own = c["is_data"] & ~c["is_ckpt"]
        sync, aio = own & ~c["async_op"], own & c["async_op"]
        pieces.append(ivl.as_iv(c["ts_ns"][sync], c["end_ns"][sync]))
        pieces += [tl.net_fetch(loop.tid, lo, hi, b) for b in (False, True)]  # objects it GETs
        # its io_uring or libaio requests in flight wait for it only while it
        # is blocked (in io_uring_enter, io_getevents): in flight while it
        # computes, they are prefetch
        if aio.any():
            pieces.append(ivl.intersect(ivl.union(ivl.as_iv(c["ts_ns"][aio], c["end_ns"][aio])),
                                        ivl.union(_blocked(off))))
    if side:
        # a wake-up by a producer that had already exited is it ending (the
        # loader joining its workers at the end of an epoch), not a batch
        woken = np.isin(off["waker"], list(side))
        woken &= ~_exited(tl.con, side, off["waker"], off["ts_ns"] + off["wake"])
        sl = c["sleep_op"]
        sleeping = ivl.union(ivl.as_iv(c["ts_ns"][sl], c["end_ns"][sl]))
        w = ivl.as_iv(off["ts_ns"][woken], off["end_ns"][woken])
        pieces.append(ivl.subtract(ivl.union(w), sleeping))
        # a futex or poll call whose wait a producer ended is a wait for data as a whole
        waits = c["wait_op"]
        calls = ivl.as_iv(c["ts_ns"][waits], c["end_ns"][waits])
        if len(calls) and len(w):
            mid = (w[:, 0] + w[:, 1]) // 2
            i = np.searchsorted(calls[:, 0], mid, side="right") - 1
            ok = (i >= 0) & (mid < calls[np.maximum(i, 0), 1])
            pieces.append(calls[ivl.sorted_unique(i[ok])])
    gap = int(th["merge_gap_ms"] * 1e6)
    core = ivl.union(np.concatenate([p for p in pieces if len(p)]), gap) \
        if any(len(p) for p in pieces) else ivl.EMPTY
    # unix-socket calls (tensors passed as fds) belong to a wait they are next to
    glue = ivl.as_iv(c["ts_ns"][unix], c["end_ns"][unix])
    if len(glue) and len(core):
        near = ivl.covered(ivl.union(np.stack([core[:, 0] - gap, core[:, 1] + gap], axis=1)),
                           glue[:, 0])
        core = ivl.union(np.concatenate([core, glue[near]]), gap)
    return ivl.clip(core, lo, hi)


def _without_shutdown(con, lp: Loop, eps: np.ndarray, joins: np.ndarray) -> np.ndarray:
    """A worker-processes loop's waits less the loader joining its workers
    once the data ran out: not a wait for a batch (no batch comes from a
    process that exits), and left out by the loop's own clock, which leaves
    the StopIteration out. A join is a run of consecutive waits, each with an
    exit of a worker process alive at its start, at whose end none is alive:
    one wait where the workers exit together (Grain's DataLoader in the
    next() that ends the data, 0.5 s of a 6.6 s loop; PyTorch's
    _shutdown_workers, which the loader frame also leaves out where the
    job's stacks show it), or one as each exits where the loader joins them
    in turn. Waits after a join that begin with no worker alive go too (a
    last wake-up 3 ms after it had kept the loop's end, and the join, in
    the window). So do the last waits, each with a worker's exit, where none
    starts after them, though one is still alive at their end (Grain's last
    next() woken as the first of its 2 workers exited, 454 ms in; the other
    exited 69 ms after that wait, then the call returned). Where the last
    waits go, lp.end_ns is set to the first one's start: the loop's steps
    ended there (its stacks, read later, can only make it earlier); and so
    where the loop, after its last wait, was woken by a worker's exit
    (joins: _exit_wakes), none starting after: at the first such wake-up's
    wait."""
    if not len(eps) or not lp.producers:
        return eps
    start, end = _worker_lives(con, lp)
    if not len(start):
        return eps
    s, e = eps[:, :1], eps[:, 1:]
    alive_s = ((start <= s) & (end > s)).any(axis=1)
    alive_e = ((start <= e) & (end > e)).any(axis=1)
    # a worker alive at the wait's start exits in it
    exits = ((start <= s) & (end > s) & (end <= e)).any(axis=1)
    keep = np.ones(len(eps), dtype=bool)
    joined = False
    i = 0
    while i < len(eps):
        j = i
        while exits[j] and alive_e[j] and j + 1 < len(eps) and exits[j + 1]:
            j += 1
        if exits[i] and not alive_e[j]:
            keep[i:j + 1], joined = False, True
        elif joined and not alive_s[i]:
            keep[i] = False         # after the join, with no worker left: no batch to wait for
        i = j + 1 if not keep[i] else i + 1
    for i in np.flatnonzero(keep)[::-1]:
        if not (exits[i] and not (start > eps[i, 0]).any()):
            break
        keep[i] = False
    if not keep[-1]:            # the steps ended where the first of the last ones began
        kept = np.flatnonzero(keep)
        lp.end_ns = int(eps[kept[-1] + 1 if len(kept) else 0, 0])
    # the loop woken by a worker's exit after its last wait, none starting
    # after: the loader joining its workers (p.join() in turn, 0.3 and 0.6 s
    # after their last samples). The kernel's view leaves such wake-ups out
    # of the waits; the time in the loader's frame would take them back in.
    last = eps[np.flatnonzero(keep)[-1], 1] if keep.any() else np.iinfo(np.int64).min
    later = joins[joins[:, 0] >= last] if len(joins) else joins
    if len(later) and not (start > later[0, 0]).any():
        lp.end_ns = int(later[0, 0]) if lp.end_ns is None else min(lp.end_ns, int(later[0, 0]))
    return eps[keep]


def _worker_lives(con, lp: Loop) -> tuple[np.ndarray, np.ndarray]:
    """Each worker process's life (the producers' processes but the loop's):
    its first thread's start (or -1: before the trace) to its last thread's
    exit (or never), as (starts, ends)."""
    if not lp.producers:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    life = con.execute(f"""
        select coalesce(min(start_ns), -1) as s,
               case when bool_or(exit_ns is null) then {np.iinfo(np.int64).max}
                    else max(exit_ns) end as e
        from threads where pid != {lp.pid} and pid in (select pid from threads
              where tid in ({",".join(map(str, lp.producers))})) group by pid""").fetchnumpy()
    return np.asarray(life["s"], dtype=np.int64), np.asarray(life["e"], dtype=np.int64)


def _join_in_frame(con, lp: Loop, samples: tuple[np.ndarray, np.ndarray]) -> Optional[int]:
    """Where the loop's last run of samples in its loader's frame began, where
    a worker process exited before the run's last sample, none starting
    after it began:
    that call to next() joined them (it ends the data) and was no step.
    The kernel's view can hold no wait of it (Grain polling its queue with
    timeouts while its 2 workers exited 127 and 284 ms into it, after the
    loop's last step: the samples in the frame then took 0.29 s into the
    window as a data wait)."""
    ts, inside = samples
    if lp.how != "worker-processes" or not inside.any():
        return None
    j = len(inside) - 1 - int(np.argmax(inside[::-1]))      # the last sample inside
    i = j
    while i > 0 and inside[i - 1]:
        i -= 1
    began = int((ts[i - 1] + ts[i]) // 2) if i > 0 else int(ts[i])
    start, end = _worker_lives(con, lp)
    if not len(start) or (start > began).any():
        return None
    # a worker exited while the loop was still seen in the frame: an exit
    # after its last sample there is the loader's close after the loop
    # (multiprocessing.Pool's join: the run, three steps whose 10 ms of
    # compute fell between samples, was once taken for a join and the
    # window lost them)
    return began if ((end > began) & (end <= int(ts[j]))).any() else None


def _exit_wakes(tl: Timelines, lp: Loop, lo: int, hi: int) -> np.ndarray:
    """The loop's off-CPU intervals that a producer's exit ended (the loader
    joining a worker), which _episodes leaves out of its waits."""
    off = tl.offcpu(lp.tid, lo, hi)
    side = set(lp.producers)
    if not side or not len(off["ts_ns"]):
        return ivl.EMPTY.copy()
    woken = np.isin(off["waker"], list(side))
    woken &= _exited(tl.con, side, off["waker"], off["ts_ns"] + off["wake"])
    return ivl.as_iv(off["ts_ns"][woken], off["end_ns"][woken])


def _with_releases(con, tid: int, core: np.ndarray, lo: int, hi: int, gap: int) -> np.ndarray:
    """The waits with the loop's freeing of the batches handed to it. A worker
    process's batch comes in shared memory (a deleted /dev/shm file): the
    loop frees the last one as it takes the next (`for batch in loader`
    rebinds it), and the kernel frees its pages on the loop's way back to
    user space from the munmap (file_release records): 4-6 ms for 24 MiB,
    10% of a DLIO step, which DLIO's own clock counts as loading and which
    was taken for compute. The first release after a wait, where it began
    within `gap` of the wait's end, extends that wait (the time between is
    the loop's own in next(): unpacking); a later one before the next wait
    is a step whose batch was ready, its next() no wait in the kernel's
    eyes, and is a wait of its own (46 of a DLIO run's 160 steps with 2
    readers), as is a first one that began later than `gap` after its wait
    where another wait follows."""
    rel = np.array(con.execute(
        """select ts_ns, ts_ns + dur_ns from events
           where tid = ? and op = 'file_release' and ts_ns < ? and ts_ns + dur_ns > ?
           order by ts_ns""", [tid, hi, lo]).fetchall(), dtype=np.int64).reshape(-1, 2)
    if not len(rel) or not len(core):
        return core
    # the wait each release follows (-1: none), whether it is the first after
    # it, and whether it began inside the next wait (taken in already: not to
    # join the two)
    k = np.searchsorted(core[:, 1], rel[:, 0], side="right") - 1
    first = np.concatenate(([True], k[1:] != k[:-1])) & (k >= 0)
    inside = (k + 1 < len(core)) & (rel[:, 0] >= core[np.minimum(k + 1, len(core) - 1), 0])
    near = first & ~inside & (rel[:, 0] <= core[np.maximum(k, 0), 1] + gap)
    # later ones count alone, and so does a first one further from its wait
    # but before another (the loop woken for the GIL by its index queue's
    # feeder thread between: 24 of DLIO's 160 releases of 24 MiB batches,
    # 0.17 s of 5.4 s, were once lost); after the last wait, the last batch
    # freed as the loop ends is not a step's
    alone = (k >= 0) & ~inside & ~near & (~first | (k + 1 < len(core)))
    took = np.concatenate([np.stack([core[k[near], 1], rel[near, 1]], axis=1), rel[alone]])
    return ivl.union(np.concatenate([core, took]))


def _exited(con, side: set, wakers: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Whether each waker in `side` had exited by the time `at` of its wake-up
    (the exit of the thread with that id that started last before it: ids
    are reused)."""
    out = np.zeros(len(wakers), dtype=bool)
    rows = con.execute(f"""select tid, coalesce(start_ns, 0), exit_ns from threads
        where exit_ns is not null and tid in ({",".join(map(str, sorted(side)))})
        order by tid, 2""").fetchall()
    for tid in {r[0] for r in rows}:
        life = np.array([(s, e) for t, s, e in rows if t == tid], dtype=np.int64)
        m = wakers == tid
        i = np.searchsorted(life[:, 0], at[m], side="right") - 1
        out[m] = (i >= 0) & (life[np.maximum(i, 0), 1] <= at[m])
    return out


def _producer_pipes(con, side: set) -> list[int]:
    return [r[0] for r in con.execute(f"""
        select distinct chan_ino from events where chan_ino is not null and fd_kind = 'pipe'
          and tid in ({",".join(map(str, sorted(side)))})
          and op in {sql_list(WRITE_OPS)}""").fetchall()]


def _fetch_calls(c: dict) -> np.ndarray:
    """Of a thread's calls, its fetches: reads of the data set (not of
    checkpoints) and NFS calls that fetch."""
    return c["is_data"] & ~c["is_ckpt"] | c["nfs_fetch_op"]


def _paint_producer(tl: Timelines, tid: int, eps: np.ndarray, readers: set, helper: bool):
    """Elementary segments of a producer thread inside the episodes:
    (starts, ends, label, call ts) where label 0 is on CPU (prep, or transfer
    for a helper thread that reads no data), and call ts the covering call's
    entry time (-1 if none)."""
    lo, hi = int(eps[0, 0]), int(eps[-1, 1])
    c = tl.calls(tid, lo, hi)
    off = tl.offcpu(tid, lo, hi)
    runnable = _runnable(off)
    contention = _blocked(off, readers - {tid}) if tid in readers else ivl.EMPTY
    ev = c[EVENT_FLAG]
    if len(contention) and ev.any():     # readers handing work on through condition variables
        contention = ivl.subtract(ivl.union(contention),
                                  ivl.union(ivl.as_iv(c["ts_ns"][ev], c["end_ns"][ev])))
    blocked = _blocked(off)
    fetch = _fetch_calls(c) & ~c["async_op"]
    # io_uring and libaio requests in flight are a fetch only while the thread
    # is blocked: on CPU meanwhile, it prepares
    aio = c["is_data"] & ~c["is_ckpt"] & c["async_op"]
    fetching = ivl.as_iv(c["ts_ns"][fetch], c["end_ns"][fetch])
    if aio.any():
        fetching = np.concatenate([fetching, ivl.intersect(
            ivl.union(ivl.as_iv(c["ts_ns"][aio], c["end_ns"][aio])), ivl.union(blocked))])
    gets, backoffs = (tl.net_fetch(tid, lo, hi, b) for b in (False, True))
    xfer = c["xfer_op"] & (c["is_pipe"] | c["is_socket"])
    if len(gets):      # its sends inside a GET are the request, not a batch handed on
        xfer &= ~ivl.covered(ivl.union(gets), c["ts_ns"])
    layers = [blocked, contention, ivl.as_iv(c["ts_ns"][xfer], c["end_ns"][xfer]),
              fetching, gets, backoffs, runnable]
    layers = [ivl.clip(x, lo, hi) for x in layers]
    # before it started and after it exited it did nothing (a thread made
    # when the first batch is put on a queue: its feeder; a worker of an
    # epoch that has ended): its start and exit bound segments too, or the
    # time from its last call to the end was "on CPU"
    life = tl.alive(tid)
    bounds = ivl.sorted_unique(np.concatenate([eps.ravel(), ivl.clip(life, lo, hi).ravel()]
                                              + [x.ravel() for x in layers]))
    label = ivl.paint(bounds, layers)
    s, e = bounds[:-1], bounds[1:]
    inside = ivl.covered(eps, s)
    s, e, label = s[inside], e[inside], label[inside]
    label = np.where(ivl.covered(life, s), label, IDLE)
    if helper:
        label = np.where(label == 0, TRANSFER, label)
    # the call covering each segment (calls of one thread do not overlap)
    cts = np.full(len(s), -1, dtype=np.int64)
    if len(c["ts_ns"]):
        i = np.searchsorted(c["ts_ns"], s, side="right") - 1
        ok = (i >= 0) & (s < c["end_ns"][np.maximum(i, 0)])
        cts[ok] = c["ts_ns"][i[ok]]
    return s, e, label, cts


def _relays(tl: Timelines, tid: int, lo: int, hi: int) -> bool:
    """Whether a producer thread that reads no data relays batches: it reads
    or writes a pipe or socket (a pin-memory thread taking the workers'
    batches, a queue's feeder thread pickling them into its pipe). Its time
    on CPU is then transfer; that of one that does not (tf.data's map
    threads, decoding what its reader threads read) is prep."""
    c = tl.calls(tid, lo, hi)
    return bool(((c["loader_op"] | c["xfer_op"]) & (c["is_pipe"] | c["is_socket"])).any())


def _col(labels: np.ndarray) -> np.ndarray:
    """Producer segment labels -> column in STALL_KEYS (0 = on CPU: prep; idle: other)."""
    out = np.full(len(labels), STALL_KEYS.index("other"))
    out[labels == 0] = STALL_KEYS.index("prep")
    for k, name in LABEL_STALL.items():
        out[labels == k] = STALL_KEYS.index(name)
    return out


def _add(per: np.ndarray, eps: np.ndarray, starts: np.ndarray, amounts, col) -> None:
    """Adds amounts (ns; an array or one value) to column(s) `col` of the
    episodes the pieces starting at `starts` lie in."""
    i = np.searchsorted(eps[:, 0], starts, side="right") - 1
    ok = i >= 0
    np.add.at(per, (i[ok], np.broadcast_to(col, i.shape)[ok]),
              np.broadcast_to(amounts, i.shape)[ok])


def _add_parts(per: np.ndarray, eps: np.ndarray, s: np.ndarray, amounts, lab) -> None:
    """The parts of fetch (FETCH_PARTS) into the columns after STALL_KEYS."""
    for i, k in enumerate(FETCH_PARTS):
        m = lab == k
        if m.any():
            _add(per, eps, s[m], np.broadcast_to(amounts, lab.shape)[m], len(STALL_KEYS) + i)


def _per_episode(eps: np.ndarray, iv: np.ndarray) -> np.ndarray:
    """Ns of the intervals `iv` (each inside one episode) per episode."""
    i = np.searchsorted(eps[:, 0], iv[:, 0], side="right") - 1
    ok = i >= 0
    return np.bincount(i[ok], weights=(iv[ok, 1] - iv[ok, 0]).astype(float),
                       minlength=len(eps))


def stall_causes(tl: Timelines, loop: Loop, eps: np.ndarray, readers: set):
    """Ns of each data wait by cause ((n, len(STALL_KEYS)), in STALL_KEYS order,
    then the parts of fetch in FETCH_PARTS order), and (tids, call ts, ns):
    arrays of the wait attributed to each producer call.
    While the loop is blocked, each instant is shared equally among the
    producer-side threads that are active then (not idle); the loop's own
    time on CPU inside a wait is transfer (it receives and unpacks the
    batch), its runnable time cpu-starved."""
    per = np.zeros((len(eps), len(STALL_KEYS) + len(FETCH_PARTS)))
    cost = NO_COST
    if len(eps) == 0:
        return per, cost
    other, starved, transfer = (STALL_KEYS.index(k) for k in ("other", "cpu_starved", "transfer"))
    if loop.how == "self-loading":
        s, e, lab, cts = _paint_producer(tl, loop.tid, eps, {loop.tid}, False)
        lens = (e - s).astype(float)
        _add(per, eps, s, lens, _col(lab))
        _add_parts(per, eps, s, lens, lab)
        m = cts >= 0
        cost = (np.full(int(m.sum()), loop.tid, dtype=np.int64), cts[m], lens[m])
        return per, cost
    lo, hi = int(eps[0, 0]), int(eps[-1, 1])
    off = tl.offcpu(loop.tid, lo, hi)
    l_run = ivl.intersect(ivl.union(_runnable(off)), eps)
    l_blk = ivl.intersect(ivl.union(_blocked(off)), eps)
    # the loop's own time: on CPU -> transfer, runnable -> cpu_starved
    ep_len = (eps[:, 1] - eps[:, 0]).astype(float)
    run_ep, blk_ep = _per_episode(eps, l_run), _per_episode(eps, l_blk)
    per[:, starved] += run_ep
    per[:, transfer] += ep_len - run_ep - blk_ep
    segs = []
    for tid in loop.producers:
        s, e, lab, cts = _paint_producer(tl, tid, eps, readers,
                                         tid not in readers and _relays(tl, tid, lo, hi))
        act = lab != IDLE
        segs.append((np.full(act.sum(), tid), s[act], e[act], lab[act], cts[act]))
    if not segs:
        per[:, other] += blk_ep
        return per, cost
    tids, s, e, lab, cts = (np.concatenate(x) for x in zip(*segs))
    g = ivl.sorted_unique(np.concatenate([s, e, l_blk.ravel()]))
    if len(g) < 2:
        per[:, other] += blk_ep
        return per, cost
    cnt = np.zeros(len(g) + 1, dtype=np.int64)
    np.add.at(cnt, np.searchsorted(g, s), 1)
    np.add.at(cnt, np.searchsorted(g, e), -1)
    n_active = np.cumsum(cnt)[:-2]
    glen = np.diff(g).astype(float)
    blk = ivl.covered(l_blk, g[:-1])
    idle = blk & (n_active == 0)
    _add(per, eps, g[:-1][idle], glen[idle], other)
    w = np.where(blk & (n_active > 0), glen / np.maximum(n_active, 1), 0.0)
    W = np.concatenate(([0.0], np.cumsum(w)))
    share = W[np.searchsorted(g, e)] - W[np.searchsorted(g, s)]
    _add(per, eps, s, share, _col(lab))
    _add_parts(per, eps, s, share, lab)
    m = (cts >= 0) & (share > 0)
    cost = (tids[m], cts[m], share[m])
    return per, cost


def wakers(tl: Timelines, loop: Loop, eps: np.ndarray) -> np.ndarray:
    """(tid, pid, wake-up ns) of the thread that woke the loop at the end of
    each data wait: the waker of its last off-CPU interval ending in the wait
    that a producer ended, else of its last one (a wake-up by a thread of
    its own after the batch came, such as a queue's feeder thread releasing
    a lock, is not the batch handed over); -1 where it ended on CPU or no
    waker was seen."""
    out = np.full((len(eps), 3), -1, dtype=np.int64)
    if len(eps) == 0:
        return out
    off = tl.offcpu(loop.tid, int(eps[0, 0]), int(eps[-1, 1]))
    ok = (off["wake"] >= 0) & (off["waker"] > 0)
    for keep in (ok, ok & np.isin(off["waker"], loop.producers)):   # producers' win
        end = off["end_ns"][keep]
        if len(end) == 0:
            continue
        j = np.searchsorted(end, eps[:, 1], side="right") - 1
        hit = (j >= 0) & (end[np.maximum(j, 0)] >= eps[:, 0])
        jj = j[hit]
        out[hit, 0] = off["waker"][keep][jj]
        out[hit, 1] = off["waker_pid"][keep][jj]
        out[hit, 2] = (off["ts_ns"] + off["wake"])[keep][jj]
    return out


PRODUCER_PARTS = {0: "cpu", FETCH: "fetch", GET: "fetch", BACKOFF: "backoff",
                  STARVED: "starved", TRANSFER: "transfer", OTHER: "blocked", IDLE: "idle"}


def pipeline_costs(tl: Timelines, lp: Loop, eps: np.ndarray, per: np.ndarray,
                   hi: int, readers: set, compute_cpu_share: float) -> Optional[dict]:
    """What each batch cost the input pipeline in the window's steady part
    (from the end of the loop's first wait, which holds the start-up, to the
    end of its last), for the what-if model (whatif.py): the loop's steps, its
    time outside its waits (compute) and inside them on its own CPU
    (`loop_serial_s`: unpacking, collating, or, for a loop that loads
    itself, its decoding), and each producer's seconds by state: on CPU
    (`cpu`, its prep), blocked in storage reads or object GETs (`fetch`),
    backing off, runnable (`starved`), handing over (`transfer`), blocked
    otherwise (`blocked`, `idle`), and its time alive in that part (`alive`).
    None with fewer than 3 waits."""
    if lp.how != "self-loading" and len(eps):
        k = _startup_wait(tl, lp.producers, eps)
        eps, per = eps[k:], per[k:]
    if len(eps) < 3:
        return None
    s0 = int(eps[0, 1])
    # to the end of the last wait: from the first's end that holds each
    # step's compute and the next wait once (to the window's end, the last
    # step's compute, or what the loop did after it, counted once more: a
    # DLIO epoch's 16 computes over 15 steps, its step 3.3 ms, 4%, long)
    hi = min(hi, int(eps[-1, 1]))
    if hi <= s0:
        return None
    rest = per[1:] / 1e9
    col = {k: i for i, k in enumerate(STALL_KEYS)}
    span = (hi - s0) / 1e9
    wait = ivl.total(eps[1:]) / 1e9
    out = {"from_ns": s0, "to_ns": hi, "steps": len(eps) - 1, "span_s": span, "data_wait_s": wait,
           "compute_s": span - wait, "compute_cpu_s": (span - wait) * compute_cpu_share,
           "how": lp.how, "producers": []}
    if lp.how == "self-loading":
        # the loop is its own producer: what it did inside its waits
        out["loop_serial_s"] = float(rest[:, col["transfer"]].sum())
        out["producers"].append({"tid": lp.tid, "cpu": float(rest[:, col["loop_cpu"]].sum()),
                                 "fetch": float(rest[:, col["fetch"]].sum()),
                                 "starved": float(rest[:, col["cpu_starved"]].sum()),
                                 "backoff": 0.0, "transfer": 0.0, "blocked": 0.0,
                                 "idle": 0.0, "alive": span})
        return out
    out["loop_serial_s"] = float(rest[:, col["loop_cpu"]].sum() + rest[:, col["transfer"]].sum())
    win = np.array([[s0, hi]], dtype=np.int64)
    for tid in lp.producers:
        s, e, lab, _ = _paint_producer(tl, tid, win, readers,
                                       tid not in readers and _relays(tl, tid, s0, hi))
        if lp.how == "worker-processes":
            s, e, lab = _past_startup(tl, tid, s0, s, e, lab)
        d = (e - s) / 1e9
        got = dict.fromkeys(("cpu", "fetch", "backoff", "starved", "transfer", "blocked", "idle"),
                            0.0)
        for code, key in PRODUCER_PARTS.items():
            got[key] += float(d[lab == code].sum())
        # of the fetch, the time on CPU (reads copying from the page cache,
        # a client parsing its answers): CPU work the CPUs' stage counts
        f = (lab == FETCH) | (lab == GET)
        segs = ivl.as_iv(s[f], e[f])
        off = ivl.union(_blocked(tl.offcpu(tid, s0, hi)))
        got["fetch_cpu"] = (ivl.total(segs) - ivl.total(ivl.intersect(ivl.union(segs), off))) \
            / 1e9 if len(segs) else 0.0
        # alive: a DataLoader's workers of one epoch exit and the next's start
        got["alive"] = ivl.total(ivl.clip(tl.alive(tid), s0, hi)) / 1e9
        out["producers"].append({"tid": int(tid), **got})
    out["restarts"] = _restarts(tl, lp.producers, eps, s0, hi, readers)
    out["batches"] = _batches(tl, lp.producers, eps, s0, hi)
    out["other_cpu_s"] = other_cpu(tl.con, {lp.tid, *map(int, lp.producers)}, s0, hi)
    return out


def other_cpu(con, exclude: set, lo: int, hi: int) -> float:
    """Seconds on CPU in [lo, hi) of the job's threads other than `exclude`
    (the loop and its producers): the runtime's own work on the CPUs the
    pipeline shares (Ray Data's executor in the loop's process, its raylet:
    14 s of 27 in a 20 s window where the producers' prep was 6 s; a
    framework's compute threads; a pin-memory thread). A thread's time on
    CPU is its life in the window less its off-CPU intervals there."""
    ex = ",".join(str(int(t)) for t in sorted(exclude)) or "-1"
    got = con.execute(f"""
        with life as (
            select tid, greatest(coalesce(start_ns, {lo}), {lo}) as a,
                   least(coalesce(exit_ns, {hi}), {hi}) as b
            from threads where tid not in ({ex})),
        alive as (select tid, sum(greatest(b - a, 0)) as ns from life group by tid),
        off as (
            select tid, sum(least(ts_ns + dur_ns, {hi}) - greatest(ts_ns, {lo})) as ns
            from events where op = 'offcpu' and ts_ns < {hi} and ts_ns + dur_ns > {lo}
              and tid not in ({ex}) group by tid)
        select coalesce(sum(greatest(alive.ns - coalesce(off.ns, 0), 0)), 0)
        from alive left join off using (tid)""").fetchall()
    return float(got[0][0]) / 1e9


def _startup_wait(tl: Timelines, producers, eps: np.ndarray) -> int:
    """The loop's wait that holds the producers' start-up: the first that
    ends after one of them began to fetch (a file read, an object GET). A
    wait before (the loop blocked on the interpreter's lock or a thread's
    start while it started a DataLoader's queue threads: 9 ms, ended 7 ms
    before the first next()'s 572 ms) is not it. The first, where the
    producers fetch nothing (they make or decode what is in memory)."""
    lo, hi = int(eps[0, 0]), int(eps[-1, 1])
    first = []
    for tid in producers:
        c = tl.calls(tid, lo, hi)
        f = _fetch_calls(c)
        if f.any():
            first.append(int(c["ts_ns"][f].min()))
        g = tl.net_fetch(tid, lo, hi)
        if len(g):
            first.append(int(g[:, 0].min()))
    if not first:
        return 0
    return min(int(np.searchsorted(eps[:, 1], min(first), side="right")), len(eps) - 1)


def _past_startup(tl: Timelines, tid: int, s0: int, s: np.ndarray, e: np.ndarray,
                  lab: np.ndarray) -> tuple:
    """A producer's segments from its first fetch on, where it started before
    the steady part and had fetched nothing by then: what it did before is
    its start-up, not a batch's cost (a DataLoader worker creating its S3
    client, ~0.5 s of CPU importing botocore and loading its service
    models, still at it when the loop's first wait ended: a wait of the
    loop's while it started the workers' queue threads). Worker processes
    only (threads start in microseconds, and a thread of a pool that had
    no file yet may have been preparing); a producer that never fetches (it
    decodes what another read) keeps all its time."""
    f = (lab == FETCH) | (lab == GET)
    life = tl.alive(tid)
    if not f.any() or not len(life) or life[0, 0] >= s0:
        return s, e, lab
    keep = s >= s[np.argmax(f)]
    return s[keep], e[keep], lab[keep]


SPLIT_GAP = 0.1     # of the median gap between waits: a gap this short is inside one next()


def _batches(tl: Timelines, producers, eps: np.ndarray, s0: int, hi: int) -> int:
    """The batches among the loop's waits after the first: less the calls to
    next() in which the producers exited (an epoch's end: StopIteration, the
    workers shut down, where that call waited), and less the waits
    split in one next() (a DataLoader woken by a batch out of order, which it
    keeps, then waiting again: a gap far shorter than a step's)."""
    rest = eps[1:]
    if not len(rest):
        return 1
    # worker processes live and exit as their main threads do: a Ray worker
    # starts and ends hundreds of short threads, whose exits were each taken
    # for an epoch's end (1 batch counted for 128 steps)
    leaders = tl.leaders() & {int(t) for t in producers}
    lives = [iv for t in (leaders or producers) for iv in tl.alive(t).tolist()]
    exits = np.array(sorted({b for _, b in lives if s0 < b <= hi}), dtype=np.int64)
    ends = [i for i, (a, b) in enumerate(rest.tolist())
            if len(exits) and ((exits >= a) & (exits <= b)).any()]
    gaps = eps[1:, 0] - eps[:-1, 1]
    splits = int((gaps < SPLIT_GAP * np.median(gaps)).sum()) if len(gaps) >= 3 else 0
    # an epoch's end and the next one's start (producers exiting or starting
    # in the wait before a gap or in it) are no steps that did not wait
    marks = np.array(sorted({x for iv in lives for x in iv if s0 < x <= hi}), dtype=np.int64)
    i = np.searchsorted(marks, eps[:-1, 0], side="left")
    j = np.searchsorted(marks, eps[1:, 0], side="right")
    return max(len(rest) - len(ends) - splits + _unwaited(gaps, j > i), 1)


REGULAR = 0.1       # the median deviation of a step's compute from the median, at most
NEAR = 0.25         # of a step: how near a whole number of steps a gap must be


def _unwaited(gaps: np.ndarray, boundary: np.ndarray) -> int:
    """The steps whose batch was ready (no wait: nothing marks them), where
    the loop's compute is regular enough to count them: a gap between two
    waits about k times the median gap holds k - 1 of them (DLIO over a 50
    MB/s store, 2 workers ahead: 2 of 15 steps did not wait, and counting
    only the waits made each batch 15% dearer). Irregular compute (an
    evaluation, a checkpoint, steps of varying length) counts none, nor does
    a gap at an epoch's boundary (`boundary`)."""
    ok = gaps > 0
    g = gaps[ok]
    if len(g) < 5:
        return 0
    r = g / np.median(g)
    one = r[(r > 0.5) & (r < 1.5)]
    if len(one) < 4 or np.median(np.abs(one - 1)) > REGULAR:
        return 0
    k = np.rint(r)
    more = (k >= 2) & (np.abs(r - k) <= NEAR) & ~boundary[ok]
    return int((k[more] - 1).sum())


def _restarts(tl: Timelines, producers, eps: np.ndarray, s0: int, hi: int,
              readers: set) -> list[dict]:
    """The producers started anew inside the window after all earlier ones had
    exited (a DataLoader without persistent workers, each epoch). Per
    restart: `wait_s`, from the first new producer's start to the end of the
    loop's first wait after it (the workers' start-up and first batch); and
    `startup_s`, the time the busiest new producer spent in it blocked other
    than in reads (its start-up's waits: an init that opens files, a barrier;
    not its CPU, which the tracer's own work on a new process inflates); and
    `spawn_s`, what each new worker process cost the loop before it asked
    for a batch (its fork: from the old workers' exit to the last new one's
    start, over the new ones), None where no old worker exited first."""
    lives = {int(t): tl.alive(t).tolist() for t in producers}
    every = [iv for lv in lives.values() for iv in lv]
    out = []
    for start in sorted({a for a, _ in every if s0 < a < hi}):
        if out and start < out[-1][1]:
            continue            # of the generation just counted (before its first batch)
        if any(a < start < b for a, b in every):
            continue            # an earlier producer still alive: a pool growing
        ends = eps[eps[:, 1] > start, 1]
        if len(ends):
            out.append((start, int(ends[0])))
    leaders = tl.leaders() & set(lives)
    got = []
    for a, b in out:
        win = np.array([[a, b]], dtype=np.int64)
        best = (0.0, 0.0)       # (cpu, blocked) of the busiest new producer
        for t, lv in lives.items():
            if not any(a <= x < b for x, _ in lv):
                continue
            s, e, lab, _ = _paint_producer(tl, t, win, readers, False)
            d = (e - s) / 1e9
            cpu = float(d[lab == 0].sum())
            if cpu > best[0]:
                best = (cpu, float(d[(lab == IDLE) | (lab == OTHER)].sum()))
        # each new worker process costs the loop its fork before next():
        # from the old workers' exit to the last new one's start, a worker
        new = [x for t in leaders for x, _ in lives[t] if a <= x < b]
        gone = [y for lv in lives.values() for _, y in lv if y <= a]
        spawn = (max(new) - max(gone)) / len(new) / 1e9 if new and gone else None
        got.append({"wait_s": round((b - a) / 1e9, 6), "startup_s": round(best[1], 6),
                    "spawn_s": round(spawn, 6) if spawn is not None and spawn > 0 else None})
    return got


# ---- the whole analysis -------------------------------------------------------

def create_file_sets(con) -> None:
    """The dataset: files read in directories that hold at least 1% of the
    bytes read from data files (a stray config file read at start-up is not
    the dataset); checkpoint files: files written with at least 1 MiB. A file
    without a path (an fd reused unseen before an attach) is a directory of
    its own."""
    # bytes per file first, the directory per file (not per read) after
    con.execute("""create or replace temp table data_files as
                   with fb as (select file_id, path, sum(nbytes) as b
                               from data_reads group by file_id, path),
                        f as (select file_id, coalesce(regexp_replace(path, '/[^/]*$', ''),
                                                       '#' || file_id) as d, b
                              from fb),
                        dirs as (select d from f group by d
                                 having sum(b) >= 0.01 * (select sum(b) from f))
                   select file_id from f where d in (select d from dirs)""")
    # the data set's objects fetched over HTTP: each attempt of a GET from
    # its start to its end, and the client's backoff after one that failed
    # (a throttled answer) until it asked again (same thread, same object)
    con.execute("""create or replace temp table net_fetch as
                   with g as (select tid, ts_ns, ts_ns + dur_ns as end_ns, ok,
                                     lead(ts_ns) over (partition by tid, file_id
                                                       order by ts_ns) as next_ts
                              from net_gets where file_id in (select file_id from data_files))
                   select tid, ts_ns, end_ns, false as backoff from g
                   union all
                   select tid, end_ns as ts_ns, next_ts as end_ns, true as backoff from g
                   where not ok and next_ts > end_ns""")
    lock_evidence.create_native_threads(con)
    con.execute("""create or replace temp table ckpt_files as
                   select file_id from all_data_io where dir = 'write'
                   group by file_id having sum(nbytes) >= 1048576""")


def _in_loader(con, tl: Timelines, lp: Loop, t0: int, t1: int, th: dict,
               override: Optional[str]) -> None:
    """With Python stacks: the loop's loader frame, and its data waits widened
    to the time it spent in that frame (loader_frame.py), its sleep calls
    told apart by its samples in them."""
    lp.loader, lp.loader_why = loader_frame.find(con, lp.tid, lp.kernel_waits, th, override)
    if lp.loader:
        caller = loader_frame.loop_caller(con, lp.tid, lp.loader)
        samples = loader_frame.attempts(con, lp.tid, lp.loader)
        for end in (loader_frame.loop_end(con, caller), _join_in_frame(con, lp, samples)):
            if lp.end_ns is None or (end is not None and end < lp.end_ns):
                lp.end_ns = end             # (a shutdown at the end set it already)
        if lp.end_ns is not None:       # after the loop: not data waits (shutdown joins)
            lp.kernel_waits = ivl.clip(lp.kernel_waits, t0, lp.end_ns)
        lp.kernel_waits = loader_frame.waits_in_frame(
            lp.kernel_waits, samples, loader_frame.in_loop(con, caller))
        c = tl.calls(lp.tid, t0, t1)
        sl = c["sleep_op"]
        inside = loader_frame.time_inside(con, lp.tid, lp.loader, lp.kernel_waits, lp.end_ns,
                                          rest_only=lp.how != "self-loading",
                                          sleeps=ivl.as_iv(c["ts_ns"][sl], c["end_ns"][sl]),
                                          samples=samples)
        lp.episodes = ivl.clip(ivl.union(inside, int(th["merge_gap_ms"] * 1e6)), t0, t1)


def _loops_from_stacks(con, loops: list[Loop], th: dict, threads_of: dict) -> list[Loop]:
    """The loops as the Python stacks show them: the thread of a process that
    calls a known loader's next() is that process's loop. Where the kernel
    took another thread of it (tf.data: one of its native pool threads,
    which hand elements to one another on futexes), that thread joins the
    producers; where the kernel took its worker processes for loops that
    load themselves (it saw no batch handed to the caller: a pin-memory
    thread in between, batches through shared memory), they become its
    producers, with the threads of its own process that they feed (relays)."""
    callers = loader_frame.known_loops(con, th)
    if not callers:
        return loops
    parent = _parents(con)

    def under(pid: int, top: int) -> bool:
        for _ in range(64):
            pid = parent.get(pid)
            if pid is None:
                return False
            if pid == top:
                return True
        return False

    # a caller under another is its worker (webdataset's pipeline iterated
    # in a DataLoader's worker processes: each was once a loop of its own,
    # and the job's AU 51% against the loop's own 31%)
    callers = {p: t for p, t in callers.items() if not any(under(p, q) for q in callers)}
    absorbed: set[int] = set()
    out = list(loops)
    for pid, tid in callers.items():
        lp = next((x for x in out if x.pid == pid), None)
        if lp is None:
            lp = Loop(pid, tid, threads_of.get(tid, (pid, ""))[1], "loader-threads", [])
            out.append(lp)
        elif lp.tid != tid:
            # the thread the kernel took for the loop feeds the one that calls
            # next(): a loop that seemed to read its data itself has a loader
            lp.producers = list(dict.fromkeys([t for t in lp.producers if t != tid] + [lp.tid]))
            lp.tid, lp.name = tid, threads_of.get(tid, (pid, ""))[1]
            if lp.how == "self-loading":
                lp.how = "loader-threads"
        kids = [x for x in out if x.pid != pid and x.pid not in callers and under(x.pid, pid)]
        if not kids:
            continue
        lp.how = "worker-processes"
        kid_pids = {k.pid for k in kids}
        for k in kids:
            absorbed.add(id(k))
        workers = {t: 1 for t, (p, _) in threads_of.items() if p in kid_pids}
        lp.producers += list(workers)
        # relays: threads of its process fed by the workers (a pin-memory
        # thread reading their pipes), not any thread that wakes it (a CUDA
        # driver thread ending a GPU sync is compute)
        lp.producers += [t for t, ppid, n, _, _ in _deliveries(con, workers, threads_of)
                         if ppid in kid_pids and threads_of.get(t, (None,))[0] == pid
                         and n >= th["min_deliveries"]]
        lp.producers = list(dict.fromkeys(t for t in lp.producers if t != tid))
    return [x for x in out if id(x) not in absorbed]


def _runtime_loops(con, loops: list[Loop], th: dict, threads_of: dict) -> list[Loop]:
    """The loops whose steps run in a framework's runtime (model.fit), as the
    Python stacks show them: the Python thread that runs the steps is the
    loop, the threads that take its batches its consumers, and the rest of
    its process (tf.data's threads) its producers."""
    runners = runtime_steps.step_runners(con, th)
    out = list(loops)
    for pid, (tid, what, a, b) in runners.items():
        rl = runtime_steps.find(con, pid, tid, what, a, b, th)
        lp = next((x for x in out if x.pid == pid), None)
        if lp is None:
            lp = Loop(pid, tid, "", "runtime-threads")
            out.append(lp)
        lp.tid, lp.name, lp.how, lp.runtime = tid, threads_of.get(tid, (pid, ""))[1], \
            "runtime-threads", rl
        # the runtime's threads are producers too: tf.data runs its map
        # functions' ops on them (the JPEG decoding of a parallel map)
        skip = {tid, *rl.consumers}
        lp.producers = [t for t, (p, _) in threads_of.items() if p == pid and t not in skip]
        lp.loader, lp.loader_why = None, rl.why
    return out


def _loop_cpu(tl: Timelines, lp: Loop, eps: np.ndarray) -> np.ndarray:
    """Ns per episode the loop was on CPU in its loader frame outside the
    waits the kernel shows (the loop's own decoding, unpickling, collating)."""
    if len(eps) == 0 or lp.loader is None:
        return np.zeros(len(eps))
    lo, hi = int(eps[0, 0]), int(eps[-1, 1])
    off = tl.offcpu(lp.tid, lo, hi)
    extra = ivl.subtract(ivl.union(eps), ivl.union(lp.kernel_waits))
    on = ivl.subtract(extra, ivl.union(ivl.as_iv(off["ts_ns"], off["end_ns"])))
    return _per_episode(eps, on)


def analyse(con, th: dict, t0: int, t1: int,
            window: Optional[tuple[int, int]] = None,
            loader_override: Optional[str] = None, use_stacks: bool = True) -> Waits:
    create_file_sets(con)
    con.execute("create or replace temp table wait_cost (tid integer, ts_ns bigint, cost_ns double)")
    prod = _producers(con, th)
    loops, reason = find_loops(con, th, prod)
    if not loops:
        return Waits([], (t0, t1), "trace", {}, dict.fromkeys(STALL_KEYS, 0.0), 0, reason)
    tl = Timelines(con)
    loop_tids = {lp.tid for lp in loops}
    tl.load(loop_tids)
    stacks = use_stacks and loader_frame.have_stacks(con)
    th = {**loader_frame.THRESHOLDS, **th}      # the loader frame's, where not given
    if stacks:
        th = {**runtime_steps.THRESHOLDS, **th}
        threads_of = _threads(con)
        loops = _loops_from_stacks(con, loops, th, threads_of=threads_of)
        loops = _runtime_loops(con, loops, th, threads_of)
        tl.load({lp.tid for lp in loops} - loop_tids)
        loop_tids = {lp.tid for lp in loops}
    for lp in loops:
        if lp.runtime is not None:
            rl = lp.runtime
            tl.load(set(rl.runtime) | set(rl.consumers))
            lp.episodes = lp.kernel_waits = runtime_steps.consumer_busy(
                tl, rl, max(t0, rl.first_ns), min(t1, rl.last_ns)) \
                if rl.consumer is not None else ivl.EMPTY.copy()
            lp.end_ns = runtime_steps.last_step_end(tl, rl, lp.episodes)
            continue
        lp.episodes = lp.kernel_waits = _episodes(tl, lp, t0, t1, th)
        if lp.how == "worker-processes" and len(lp.episodes):
            lp.episodes = lp.kernel_waits = _without_shutdown(con, lp, lp.episodes,
                                                              _exit_wakes(tl, lp, t0, t1))
        if stacks and lp.how != "checkpoint-only":
            _in_loader(con, tl, lp, t0, t1, th, loader_override)
        if lp.how == "worker-processes" and len(lp.episodes):
            lp.episodes = ivl.clip(_with_releases(con, lp.tid, lp.episodes, t0, t1,
                                                  int(th["release_gap_ms"] * 1e6)), t0, t1)
    source = "option"
    if window is None:
        window = detect_window(loops, t0, t1, con)
        source = "detected" if window else "trace"
        window = window or (t0, t1)
    lo, hi = window
    readers = set(prod)
    budget = dict.fromkeys(("window", "compute", "compute_cpu", "compute_sleep", "compute_gpu",
                            "data_wait", "checkpoint", "other"), 0.0)
    stall = dict.fromkeys(STALL_KEYS, 0.0)
    fetch_parts = dict.fromkeys(FETCH_PARTS.values(), 0.0)
    costs: list = []      # (tids, call ts, ns) arrays
    per_loop = []
    steps = 0
    states = []
    for lp in loops:
        eps = ivl.clip(lp.episodes, lo, hi)
        tl.load(lp.producers)
        rl = lp.runtime
        # a loop that runs its steps in a runtime: it waits for them whole
        # (compute); its data waits are its consumer thread's
        b, ck = loop_budget(tl, lp, eps, lo, hi,
                            compute_wakers=set(rl.runtime) | set(rl.consumers) if rl else set())
        waiter = replace(lp, tid=rl.consumer) if rl and rl.consumer is not None else lp
        per, cost = stall_causes(tl, waiter, eps, readers)
        per, parts = per[:, :len(STALL_KEYS)], per[:, len(STALL_KEYS):]
        for i, k in enumerate(FETCH_PARTS.values()):
            fetch_parts[k] += parts[:, i].sum() / 1e9
        if lp.loader is not None:
            lc, prep, xfer = (STALL_KEYS.index(k) for k in ("loop_cpu", "prep", "transfer"))
            if lp.how == "self-loading":     # the loop is its own producer: its prep is in-loop
                per[:, lc] += per[:, prep]
                per[:, prep] = 0.0
            else:                            # its time on CPU was counted as transfer
                mine = _loop_cpu(tl, lp, eps)
                per[:, xfer] -= np.minimum(mine, per[:, xfer])
                per[:, lc] += mine
        costs.append(cost)
        pipe = None if rl is not None else pipeline_costs(
            tl, lp, eps, per, hi, readers,
            b["compute_cpu"] / b["compute"] if b["compute"] > 0 else 0.0)
        if pipe:
            # fetchall: a fetchone leaves the result open, and DuckDB then
            # refuses to register a table on the connection
            pipe["bytes_read"] = int(con.execute(
                "select coalesce(sum(nbytes), 0) from data_reads where ts_ns >= ? and ts_ns < ?",
                [pipe["from_ns"], pipe["to_ns"]]).fetchall()[0][0])
            # of those, the bytes of files on local disks or in memory (not
            # network file systems, not objects over HTTP): with the device's
            # completions, whether the reads came from the page cache already
            pipe["local_bytes_read"] = int(con.execute(
                f"""select coalesce(sum(r.nbytes), 0) from data_reads r
                    join files f using (file_id) where f.fs_type in {sql_list(LOCAL_FS)}
                    and r.ts_ns >= ? and r.ts_ns < ?""",
                [pipe["from_ns"], pipe["to_ns"]]).fetchall()[0][0])
            # what the block devices completed meanwhile: a throttled or busy
            # device's pace (the reads' bytes count readahead brought earlier)
            pipe["device_bytes_read"] = int(con.execute(
                f"""select coalesce(sum(req_bytes), 0) from events where op = 'block_rq'
                    and ret = 0 and flags & 255 = {REQ_OP_READ}
                    and ts_ns + dur_ns >= ? and ts_ns + dur_ns < ?""",
                [pipe["from_ns"], pipe["to_ns"]]).fetchall()[0][0])
        for k in budget:
            budget[k] += b[k]
        for i, k in enumerate(STALL_KEYS):
            stall[k] += per[:, i].sum() / 1e9
        states.append(LoopStates(lp.pid, lp.tid, lp.name, eps, per, wakers(tl, waiter, eps), ck))
        tl.drop(set(lp.producers) - loop_tids)
        n = len(eps)        # episodes are already merged: one per step
        steps += n
        per_loop.append({"pid": lp.pid, "tid": lp.tid, "thread": lp.name, "how": lp.how,
                         "producers": len(lp.producers), "data_waits": n,
                         **_loader_info(con, lp, eps, lo, hi),
                         **{f"{k}_s": round(v, 6) for k, v in b.items()},
                         "data_wait_share": b["data_wait"] / b["window"] if b["window"] else None,
                         "pipeline": pipe})
    tot = sum(stall.values())
    shares = {k: (v / tot if tot > 0 else 0.0) for k, v in stall.items()}
    if sum(len(c[0]) for c in costs):
        cols = {"tid": np.concatenate([c[0] for c in costs]).astype(np.int32),
                "ts_ns": np.concatenate([c[1] for c in costs]).astype(np.int64),
                "cost_ns": np.concatenate([c[2] for c in costs]).astype(np.float64)}
        register_columns(con, "wait_cost_in", cols)
        con.execute("""insert into wait_cost select tid, ts_ns, sum(cost_ns)
                       from wait_cost_in group by all""")
        con.unregister("wait_cost_in")
    nl = len(loops)
    budget = {k: v / nl for k, v in budget.items()}     # the mean loop
    return Waits(loops, window, source, budget, shares, steps, None, per_loop, states, stacks,
                 {k: (v / tot if tot > 0 else 0.0) for k, v in fetch_parts.items()})


def _loader_info(con, lp: Loop, eps: np.ndarray, lo: int, hi: int) -> dict:
    """The loader frame, the kernel-only wait, and the functions the loop ran
    on CPU inside the loader and its producers ran while it waited."""
    kernel = ivl.total(ivl.clip(lp.kernel_waits, lo, hi)) / 1e9
    if lp.runtime is not None:
        rl = lp.runtime
        return {"loader_frame": None, "loader_frame_why": rl.why or None,
                "data_wait_kernel_s": round(kernel, 6),
                "step_runner": {"what": rl.what, "runtime_tids": rl.runtime,
                                "consumer_tids": rl.consumers},
                **_cpu_named(con, "prep", lp.producers, eps)}
    if lp.loader is None:
        return {"loader_frame": None, "loader_frame_why": lp.loader_why or None,
                "data_wait_kernel_s": round(kernel, 6)}
    side = [t for t in lp.producers if t != lp.tid]
    span = np.array([[lo, hi]], dtype=np.int64)
    return {"loader_frame": {"function": lp.loader.function, "file": lp.loader.file,
                             "source": lp.loader.source, "what": lp.loader.what or None,
                             "entries_seen": lp.loader.runs},
            "data_wait_kernel_s": round(kernel, 6),
            **_cpu_named(con, "loop_cpu", [lp.tid], span, lp.loader),
            **_cpu_named(con, "prep", side, eps)}


def _cpu_named(con, key: str, tids: list[int], within: np.ndarray,
               frame: Optional[LoaderFrame] = None) -> dict:
    """{KEY_top, KEY_stacks}: the threads' samples on CPU inside `within`
    (and `frame`), by innermost function and as folded stacks (one read of
    the samples for both)."""
    u, n = loader_frame.on_cpu_stacks(con, tids, within, frame)
    return {f"{key}_top": loader_frame.top_functions(con, u, n),
            f"{key}_stacks": folded_stacks.fold(con, u, n)}


def detect_window(loops: list[Loop], t0: int, t1: int, con=None) -> Optional[tuple[int, int]]:
    """From the first data wait of any loop to the end of the last step: the
    last wait plus the loop's median time between waits (its compute). A loop
    that seldom waits (its loader keeps ahead) has long gaps between waits,
    and that guess runs past its end: for a loop fed by worker processes, the
    first of its workers to exit after its last wait began (the loader shut
    down once the loop was done with it) ends the window if it comes first.
    With Python stacks, the loop thread's last sample in the function that
    calls its loader ends it instead of the guess (a loop whose next() calls
    are shorter than the sampling interval shows few of them)."""
    starts, ends = [], []
    for lp in loops:
        e = lp.episodes
        if len(e) == 0:
            continue
        starts.append(int(e[0, 0]))
        tail = int(np.median(e[1:, 0] - e[:-1, 1])) if len(e) > 1 else 0
        end = min(int(e[-1, 1]) + tail, t1)
        if lp.end_ns is not None and lp.end_ns > e[0, 0]:   # the loop left its own function
            end = min(lp.end_ns, t1)
        if con is not None and lp.how == "worker-processes" and lp.producers:
            shut = con.execute(f"""select min(exit_ns) from threads
                where tid in ({",".join(map(str, lp.producers))})
                  and pid != {lp.pid} and exit_ns > {int(e[-1, 0])}""").fetchone()[0]
            if shut is not None:
                end = min(end, max(int(shut), int(e[-1, 0])))
        ends.append(end)
    if not starts:
        return None
    return min(starts), max(ends)


def loop_budget(tl: Timelines, lp: Loop, eps: np.ndarray, lo: int, hi: int,
                compute_wakers: set = frozenset()) -> tuple[dict, np.ndarray]:
    """Seconds of the loop thread in the window: data wait (eps), checkpoint
    (its writes, syncs, opens and renames of checkpoint files), compute as a
    sleep or on a device (char device calls: GPU drivers), other time
    blocked (but for its waits that compute_wakers ended: a runtime that ran
    its step), and the rest on CPU (compute); and its checkpoint intervals."""
    c = tl.calls(lp.tid, lo, hi)
    off = tl.offcpu(lp.tid, lo, hi)
    data = ivl.union(eps)
    ck_ops = c["ckpt_op"]
    ck = ivl.subtract(ivl.union(ivl.clip(ivl.as_iv(c["ts_ns"][ck_ops & c["is_ckpt"]],
                                                  c["end_ns"][ck_ops & c["is_ckpt"]]), lo, hi)), data)
    used = ivl.union(np.concatenate([data, ck]))
    sl = c["sleep_op"]
    sleep = ivl.subtract(ivl.union(ivl.clip(ivl.as_iv(c["ts_ns"][sl], c["end_ns"][sl]), lo, hi)), used)
    gp = c["is_chr"]
    gpu = ivl.subtract(ivl.union(ivl.clip(ivl.as_iv(c["ts_ns"][gp], c["end_ns"][gp]), lo, hi)),
                       ivl.union(np.concatenate([used, sleep])))
    used = ivl.union(np.concatenate([used, sleep, gpu]))
    blocked = ivl.subtract(ivl.union(ivl.clip(_blocked(off, but=compute_wakers), lo, hi)), used)
    win = (hi - lo) / 1e9
    out = {"window": win, "data_wait": ivl.total(data) / 1e9, "checkpoint": ivl.total(ck) / 1e9,
           "compute_sleep": ivl.total(sleep) / 1e9, "compute_gpu": ivl.total(gpu) / 1e9,
           "other": ivl.total(blocked) / 1e9}
    out["compute_cpu"] = max(0.0, win - sum(out[k] for k in ("data_wait", "checkpoint",
                                                             "compute_sleep", "compute_gpu",
                                                             "other")))
    out["compute"] = out["compute_cpu"] + out["compute_sleep"] + out["compute_gpu"]
    return out, ck
