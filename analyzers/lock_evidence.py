"""What the Python stacks say about lock waits (lock-contention's evidence).

A futex wait is a contended lock only if the thread wanted a lock someone
held. A thread of a pool waiting for work, or a producer held back by a
full buffer, waits on a condition variable for an event: it is idle, not
contending. From the thread's samples during each wait:
  - idle: a sample inside threading's Condition.wait, Event.wait or
    Barrier.wait (queue.Queue's get and put wait there), or whose innermost
    frame is a pool's loop taking its next task (concurrent.futures'
    `_worker`, multiprocessing's `worker`: their queue's get is C code);
  - HDF5: a sample with a frame of h5py (its calls hold HDF5's global lock).
A wait is idle when most of its samples are; waits too short to be sampled
count as they are. A thread that runs no Python has no samples: its
condition-variable waits are idle (event_wait_sql). Without stacks (not
Python, or --py-stacks 0) nothing is decided here.
"""
from __future__ import annotations

import numpy as np

from .views import register_columns

EVENT_WAITS = ("Condition.wait", "Event.wait", "Barrier.wait")
POOL_LOOPS = (("concurrent/futures/thread.py", "_worker"), ("multiprocessing/pool.py", "worker"))
HDF5_FRAMES = "/h5py/"
NOTHING_SEEN = {"samples": 0, "hdf5_share": 0.0, "top": []}    # in_waits, without samples


# A wait for an event, not a lock, without stacks to show it: a condition
# variable's or a semaphore's futex wait (FUTEX_WAIT_BITSET, as glibc's
# pthread_cond_wait and sem_wait make them; a contended pthread mutex waits
# with FUTEX_WAIT) of a thread that runs no Python (native_threads): a
# native pool's threads waiting for work, TensorFlow's among them. CPython's
# own locks and GIL wait that way too, so a Python thread's waits are not
# decided by the op.
FUTEX_WAIT_BITSET = 9


def event_wait_sql(e: str = "") -> str:
    """SQL on an events row (alias e, with its dot: "e."): a native thread's
    wait for an event, as above."""
    return (f"{e}op = 'futex' and {e}flags % 128 = {FUTEX_WAIT_BITSET} "
            f"and {e}tid in (select tid from native_threads)")


def create_native_threads(con) -> None:
    """native_threads: the threads that run no Python, of the processes whose
    Python stacks were sampled with OS thread ids (CPython 3.11+): none of
    their samples has a Python frame. Elsewhere (no stacks, an older CPython,
    a process that is not Python) no thread is known to be one."""
    con.execute("""create or replace temp table native_threads as
                   select tid from threads
                   where pid in (select pid from pystacks where stack_id >= 0
                                 group by pid having min(tid) > 0)
                     and tid not in (select tid from pystacks where stack_id >= 0)""")


def _classes(con, sids: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
    """For stack ids: (idle, hdf5) masks, and {stack id: innermost (function, file)}."""
    u = np.unique(sids)
    if len(u) == 0:
        return np.zeros(0, bool), np.zeros(0, bool), {}
    register_columns(con, "_lk_sid", {"sid": u.astype(np.int64)})
    ev = " or ".join(f"(function = '{f}' and file like '%threading.py')" for f in EVENT_WAITS)
    pool = " or ".join(f"(function = '{f}' and file like '%{p}')" for p, f in POOL_LOOPS)
    rows = con.execute(f"""
        select stack_id, bool_or({ev}), bool_or(file like '%{HDF5_FRAMES}%'),
               arg_max(function, depth), arg_max(file, depth),
               bool_or(depth = max_depth and ({pool}))
        from (select *, max(depth) over (partition by stack_id) as max_depth from pyframes
              where stack_id in (select sid from _lk_sid)) as f
        group by stack_id""").fetchall()
    con.unregister("_lk_sid")
    idle = {int(s) for s, e, _, _, _, p in rows if e or p}
    hdf5 = {int(s) for s, _, h, _, _, _ in rows if h}
    leaf = {int(s): (fn, "/".join(f.split("/")[-2:])) for s, _, _, fn, f, _ in rows}
    return np.isin(sids, list(idle)), np.isin(sids, list(hdf5)), leaf


def samples_in(con, waits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The samples of the waits' threads inside them: (wait index, stack id).
    waits: rows of (tid, start, end)."""
    if len(waits) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    tids = sorted({int(t) for t in waits[:, 0]})
    r = con.execute(f"""select tid, ts_ns, stack_id from pystacks
                        where stack_id >= 0 and tid in ({",".join(map(str, tids))})
                        order by tid, ts_ns""").fetchnumpy()
    st, sts, ssid = (np.asarray(r[k], dtype=np.int64) for k in ("tid", "ts_ns", "stack_id"))
    idx, sid = [], []
    for t in tids:
        m = waits[:, 0] == t
        wi = np.flatnonzero(m)
        iv = waits[m][:, 1:]
        order = np.argsort(iv[:, 0], kind="stable")
        iv, wi = iv[order], wi[order]
        s = st == t
        ts = sts[s]
        j = np.searchsorted(iv[:, 0], ts, side="right") - 1
        ok = (j >= 0) & (ts < iv[np.maximum(j, 0), 1])
        idx.append(wi[j[ok]])
        sid.append(ssid[s][ok])
    return np.concatenate(idx), np.concatenate(sid)


def idle_waits(con, waits: np.ndarray, locks: np.ndarray) -> np.ndarray:
    """Which waits (rows of tid, start, end; `locks` the lock of each, a row
    of integers that name it) were
    waits for an event: those on a lock most of whose waits' samples are
    idle (see the module docstring). Decided per lock, so that the many waits
    shorter than the sampling interval go with the ones sampled: a condition
    variable is waited on for an event every time."""
    out = np.zeros(len(waits), dtype=bool)
    wi, sid = samples_in(con, waits)
    if len(wi) == 0:
        return out
    idle, _, _ = _classes(con, sid)
    u, inv = np.unique(locks, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    n = np.bincount(inv[wi], minlength=len(u))
    k = np.bincount(inv[wi], weights=idle.astype(float), minlength=len(u))
    return ((n > 0) & (k > 0.5 * n))[inv]


def in_waits(con, waits: np.ndarray) -> dict:
    """What the threads were in during these waits: {samples, hdf5_share,
    top: [(function, file, share)]} (top: innermost frames, by samples);
    NOTHING_SEEN where no sample fell in them."""
    wi, sid = samples_in(con, waits)
    if len(wi) == 0:
        return dict(NOTHING_SEEN)
    _, hdf5, leaf = _classes(con, sid)
    u, n = np.unique(sid, return_counts=True)
    by: dict = {}
    for s, k in zip(u, n):
        key = leaf.get(int(s), ("?", "?"))
        by[key] = by.get(key, 0) + int(k)
    top = sorted(by.items(), key=lambda kv: -kv[1])[:3]
    return {"samples": int(len(sid)), "hdf5_share": float(hdf5.mean()),
            "top": [(fn, f, k / len(sid)) for (fn, f), k in top]}

