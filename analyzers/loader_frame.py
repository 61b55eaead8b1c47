"""Which Python frame is the training loop's loader next(), and when was the loop in it?

A data wait, as MLPerf Storage, DLIO and the frameworks' profilers count it
(PyTorch's `enumerate(DataLoader)#...__next__`, TensorFlow's
`IteratorGetNext`), is the time the loop thread spends inside the loader's
next(): blocked there (the kernel shows why) or on its own CPU there
(decoding with num_workers=0, unpickling, collating), which the kernel alone
cannot tell from compute. With the job's Python stacks (pystacks.parquet):

1. The loader frame, in this order: `--loader-frame MODULE:FUNCTION`; a known
   loader's next() (KNOWN) that the loop thread is seen in; else, from the
   data (from the first wait the kernel saw to the last), the outermost frame
   on the loop's stack in at least `min_wait_share` of its samples taken
   during the waits the kernel saw, entered at least `min_runs` times, among the frames entered and left about once a step
   (at least `step_runs_share` of the most-entered such frame's runs).
2. The time in it: the waits the kernel saw (exact), and more from the
   loop's samples, from its first entry into the frame to its end
   (loop_end). The sampler samples at random (exponential) intervals, so the
   share of samples in a state estimates the share of time in it without
   bias (Poisson arrivals see time averages). For a loop fed by producers
   (worker processes, threads, tf.data), whose kernel-seen waits are its
   blocked waits for them, the extra is the share of the samples outside
   those waits that are in the frame, of the time outside them. For a loop
   that loads itself, whose kernel-seen waits are its own file calls, it is
   what the share of all its samples in the frame says in all, less those
   calls: the samples fell 3-5 times more sparsely inside such calls (a
   JPEG's open to its close) than just after them on this project's 2-core
   machine, for a reason not found, which over-counts the rest. The extra
   time is laid out on the runs of samples in the frame outside the kernel's
   waits (each sample an equal part, centred on its run), so that the
   timeline keeps the kernel's exact waits, and the stall causes come from
   what the producers did then.
   Measured against the loops' own clocks (11 loops of 1.5-10 s, 100 Hz, a
   loaded 2-core machine): within 2.7 AU points, 1 on the median; edges
   halfway between samples were 3-11 points off (a next() shorter than the
   sampling interval, hit by one sample, gets the long gaps around it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from . import intervals as ivl
from .views import register_columns

THRESHOLDS = {
    "min_runs": 3,              # entries into the frame to call it a loader that is called per step
    "min_wait_share": 0.6,      # of the loop's samples in the kernel's waits, for a frame from the data
    "min_wait_samples": 3,      # samples in the kernel's waits needed to find a frame from the data
    "step_runs_share": 0.3,     # of the most-entered candidate's runs: called about once a step
    "max_presence": 0.98,       # of all the loop's samples, for a frame from the data
    "min_known_samples": 50,    # in a known loader's next(), to call its thread a loop however seldom it entered
}

# (file suffix, function or qualified-name suffix, what it is)
KNOWN = [
    ("torch/utils/data/dataloader.py", "__next__", "PyTorch DataLoader"),
    ("tensorflow/python/data/ops/iterator_ops.py", "__next__", "tf.data iterator"),
    ("tensorflow/python/data/ops/iterator_ops.py", "get_next", "tf.data iterator"),
    ("nvidia/dali/plugin/pytorch/__init__.py", "__next__", "DALI iterator"),
    ("nvidia/dali/plugin/base_iterator.py", "__next__", "DALI iterator"),
    ("datasets/iterable_dataset.py", "__iter__", "Hugging Face IterableDataset"),
    ("webdataset/pipeline.py", "iterator", "webdataset pipeline"),
    ("lightning/pytorch/loops/fetchers.py", "__next__", "Lightning data fetcher"),
    ("multiprocessing/pool.py", "IMapIterator.next", "multiprocessing.Pool.imap"),
    # torchdata.nodes' Loader (its iterator a node: BaseNode.__next__, the
    # name every node's next() has, would be a producer thread's too)
    ("torchdata/nodes/loader.py", "LoaderIterator.next", "torchdata.nodes Loader"),
    # Ray Data's iter_batches, iter_torch_batches and iter_rows (a Ray Train
    # worker's dataset shard too): each the generator of a closure of this
    # name (DataIterator.iter_batches.<locals>._create_iterator in Ray 2.40,
    # DataIterator._iter_batches.<locals>._create_iterator in 2.60)
    ("ray/data/iterator.py", "_create_iterator", "Ray Data iterator"),
    # (the sampler names Grain's modules by their file alone)
    ("data_loader.py", "DataLoaderIterator.__next__", "Grain DataLoader"),
    # every Grain dataset iterator's next() runs in this wrapper: the dataset
    # API's (MapDataset ... to_iter_dataset(), mp_prefetch) outermost one
    ("traceback_util.py", "run_with_traceback_filter.<locals>.reraise_with_filtered_traceback",
     "Grain dataset iterator"),
]

# frames inside a loader's next() that are not waits for data: the loader
# shutting down after its last batch (PyTorch joins its workers in the call
# that raises StopIteration; benchmarks do not time it, and no batch comes)
NOT_WAITS = [
    ("torch/utils/data/dataloader.py", "_shutdown_workers"),
]


@dataclass
class LoaderFrame:
    function: str
    file: str
    source: str             # option | known | data
    what: str               # "PyTorch DataLoader", or "" for one found from the data
    runs: int               # times the loop was seen entering it

    def label(self) -> str:
        short = "/".join(self.file.split("/")[-3:])
        return f"{self.function} ({short})"


def have_stacks(con) -> bool:
    return bool(con.execute("select count(*) from pystacks").fetchone()[0])



def loop_samples(con, tid: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ts_ns, stack_id, on_cpu) of the thread's samples, in time order."""
    # a sample with no Python frame (the interpreter starting or ending)
    # says nothing of the loop: left out
    r = con.execute(f"""select ts_ns, stack_id, on_cpu from pystacks where tid = {int(tid)}
                          and stack_id in (select stack_id from pyframes)
                        order by ts_ns""").fetchnumpy()
    return (np.asarray(r["ts_ns"], dtype=np.int64), np.asarray(r["stack_id"], dtype=np.int64),
            np.asarray(r["on_cpu"], dtype=bool))


def _match(function: str, want: str) -> bool:
    """A function name against a wanted name or qualified name (CPython before
    3.11 gives no class: "next" for IMapIterator.next)."""
    return function == want or function.endswith("." + want) or \
        ("." in want and function == want.rsplit(".", 1)[1])


def frame_stacks(con, file_suffix: str, function: str) -> list[int]:
    """The stacks that hold a frame of that function in a file ending so."""
    return frames_stacks(con, [(file_suffix, function)])[0]


def frames_stacks(con, frames: list) -> list[list[int]]:
    """frame_stacks of each (file suffix, function, ...) of frames, in one
    query (a report asks for the dozen known loaders' frames on every loop
    thread: a query each was a twentieth of a small trace's report)."""
    suffixes = sorted({f[0] for f in frames})
    rows = con.execute("select distinct stack_id, function, file from pyframes where "
                       + " or ".join(["ends_with(file, ?)"] * len(suffixes)),
                       suffixes).fetchall()
    return [sorted({int(s) for s, fn, file in rows
                    if file.endswith(f[0]) and _match(fn, f[1])}) for f in frames]


def _stacks_with(con, file_suffix: str, function: str, sids: np.ndarray) -> np.ndarray:
    """Which of the stacks sids hold a frame of that function in a file ending so."""
    return np.isin(sids, frame_stacks(con, file_suffix, function))


def runs_of(inside: np.ndarray) -> int:
    """Runs of True in a sequence: times the frame was entered."""
    if len(inside) == 0:
        return 0
    return int(inside[0]) + int(np.count_nonzero(inside[1:] & ~inside[:-1]))


def find(con, tid: int, kernel_waits: np.ndarray, th: dict,
         override: Optional[str] = None) -> tuple[Optional[LoaderFrame], str]:
    """The loop's loader frame, or None with why not."""
    ts, sid, _ = loop_samples(con, tid)
    if len(ts) == 0:
        return None, f"no Python stack samples of the loop thread {tid}"
    if override:
        module, _, function = override.rpartition(":")
        suffix = module.replace(".", "/") + ".py"
        inside = _stacks_with(con, suffix, function, sid)
        if not inside.any():   # a package's __init__
            suffix = module.replace(".", "/") + "/__init__.py"
            inside = _stacks_with(con, suffix, function, sid)
        if not inside.any():
            return None, (f"--loader-frame {override}: the loop thread {tid} was never seen in "
                          "it (MODULE:FUNCTION, as in torch.utils.data.dataloader:__next__)")
        return LoaderFrame(function, suffix, "option", "", runs_of(inside)), ""
    # a known loader's next() on the loop's stack is its loader, however
    # seldom seen (a loader that keeps ahead returns at once); of two, not one
    # seen inside the other (but for 5% of its samples at most: stacks read
    # short of their outer frames), nor of two seen in the same samples (to
    # 5%) the one listed later (Grain's iterators' wrapper, inside its
    # DataLoader's next() but for one sample of 710: it had been taken, for
    # one more entry); then the most entered
    hits = frames_stacks(con, KNOWN)
    seen = [(k, inside, suffix, function, what)
            for k, ((suffix, function, what), hit) in enumerate(zip(KNOWN, hits))
            for inside in [np.isin(sid, hit)] if inside.any()]

    def within(c, o):
        tol = 0.05 * c[1].sum()
        alone, more = int((c[1] & ~o[1]).sum()), int((o[1] & ~c[1]).sum())
        return alone <= tol and (more > tol or o[0] < c[0])

    outer = [c for c in seen if not any(o is not c and within(c, o) for o in seen)]
    best = None
    for _, inside, suffix, function, what in outer:
        n = runs_of(inside)
        if best is None or n > best.runs:
            best = LoaderFrame(function, suffix, "known", what, n)
    if best:
        return best, ""
    return _from_data(con, ts, sid, kernel_waits, th)


def known_loops(con, th: dict) -> dict[int, int]:
    """{pid: tid} of the thread of each process that calls a known loader's
    next(): seen entering it at least min_runs times, or in it for at least
    min_known_samples samples (a loop whose first next() waits seconds on
    cold storage and whose next ones return at once, before any sample
    sees them: one run of 850 samples); the most of its process."""
    best: dict[int, tuple[int, int, int]] = {}
    for hit in frames_stacks(con, KNOWN):
        if not hit:
            continue
        pairs = con.execute(f"""select distinct pid, tid from pystacks where tid > 0
            and stack_id in ({",".join(map(str, hit))})""").fetchall()
        for pid, tid in pairs:
            _, sid, _ = loop_samples(con, tid)
            inside = np.isin(sid, hit)
            n, m = runs_of(inside), int(inside.sum())
            if (n >= th["min_runs"] or m >= th["min_known_samples"]) and \
                    (n, m) > best.get(pid, (0, 0, 0))[1:]:
                best[int(pid)] = (int(tid), n, m)
    return {p: t for p, (t, _, _) in best.items()}


def _from_data(con, ts, sid, kernel_waits, th) -> tuple[Optional[LoaderFrame], str]:
    if len(kernel_waits):      # the training: from the first wait the kernel saw to the last
        keep = (ts >= kernel_waits[0, 0]) & (ts <= kernel_waits[-1, 1])
        ts, sid = ts[keep], sid[keep]
    in_wait = ivl.covered(ivl.union(kernel_waits), ts) if len(kernel_waits) else \
        np.zeros(len(ts), dtype=bool)
    if in_wait.sum() < th["min_wait_samples"]:
        return None, ("no known loader frame on the loop's stack, and too few samples in its "
                      f"kernel-seen waits ({int(in_wait.sum())}) to find one from the data")
    # each frame (function, file) with the outermost depth it is seen at
    register_columns(con, "_lf_sid", {"sid": np.unique(sid)})
    rows = con.execute("""select function, file, stack_id, min(depth) from pyframes
                          where stack_id in (select sid from _lf_sid)
                          group by all""").fetchall()
    con.unregister("_lf_sid")
    where: dict[tuple[str, str], list] = {}
    for fn, file, s, d in rows:
        e = where.setdefault((fn, file), [set(), d])
        e[0].add(int(s))
        e[1] = min(e[1], d)
    cands = []
    for (fn, file), (sids, depth) in where.items():
        inside = np.isin(sid, list(sids))
        share = inside[in_wait].mean()
        n = runs_of(inside)
        # a frame the loop is (almost) never out of is its own (main, train)
        if share >= th["min_wait_share"] and n >= th["min_runs"] and \
                inside.mean() <= th["max_presence"]:
            cands.append((depth, -share, n, fn, file))
    if not cands:
        return None, ("no frame of the loop's stack is entered per step and present through "
                      "its kernel-seen waits")
    most = max(c[2] for c in cands)
    depth, _, n, fn, file = min(c for c in cands if c[2] >= th["step_runs_share"] * most)
    return LoaderFrame(fn, file, "data", "", n), ""


def attempts(con, tid: int, frame: LoaderFrame) -> tuple[np.ndarray, np.ndarray]:
    """(ts, inside) of the loop thread's stack reads in time order. A failed
    read of its process's stacks (stack_id -1: a stack that changed while it
    was read, mostly of a thread running Python code) takes the state of the
    samples on either side where they agree, and is left out where they do
    not (it then counts for neither)."""
    ts, sid, _ = loop_samples(con, tid)
    if len(ts) == 0:
        return ts, np.zeros(0, dtype=bool)
    inside = _stacks_with(con, frame.file, frame.function, sid)
    for suffix, function in NOT_WAITS:
        inside &= ~_stacks_with(con, suffix, function, sid)
    fail = np.asarray(con.execute(f"""select ts_ns from pystacks where stack_id = -1
        and pid = (select any_value(pid) from pystacks where tid = {int(tid)})
        and ts_ns between {int(ts[0])} and {int(ts[-1])}""").fetchnumpy()["ts_ns"],
                      dtype=np.int64)
    if len(fail):
        j = np.searchsorted(ts, fail)
        ok = (j > 0) & (j < len(ts))
        a, b = inside[np.maximum(j - 1, 0)], inside[np.minimum(j, len(ts) - 1)]
        keep = ok & (a == b)
        ts = np.concatenate([ts, fail[keep]])
        inside = np.concatenate([inside, a[keep]])
        order = np.argsort(ts, kind="stable")
        ts, inside = ts[order], inside[order]
    return ts, inside


def _samples_in(ts: np.ndarray, inside: np.ndarray,
                iv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each interval of iv: the loop's samples in it, and how many of
    them are in the frame."""
    a = np.searchsorted(ts, iv[:, 0], side="left")
    b = np.searchsorted(ts, iv[:, 1], side="right")
    n_in = np.concatenate(([0], np.cumsum(inside)))
    return b - a, n_in[b] - n_in[a]


def waits_in_frame(known: np.ndarray, samples: tuple[np.ndarray, np.ndarray],
                   looping: Optional[tuple[np.ndarray, np.ndarray]] = None) -> np.ndarray:
    """The kernel's waits of the loop (`known`) less those its samples show
    it outside the loader frame for (most of the samples that fall in them):
    blocked then, but not for data. The sampler reads blocked threads too.
    TensorFlow's first call of a tf.function (its tracing and graph
    optimisation, seconds) blocks the Python thread on the runtime's threads,
    which also hand it its batches: 2.4 s of a 5.5 s loop's compute were
    counted as waits for data (AU 2% against its own 61%). A wait with no
    sample in it stays, unless it ended before a sample outside the frame
    that came before the loop's first in it: the loop had not called next()
    yet (tf.data's threads start as the dataset is built, and the Python
    thread waited on them 1.7 s before its first next(), which the window
    took in). samples: the loop's (attempts). With `looping` (in_loop: the
    loop's samples, whether each is in the loop's body), such a wait is
    dropped only if the loop's next sample after it is not in its loop: a
    loop whose next() is short against the sampling interval (a reader of
    small files with num_workers=0, 2 ms of a 22 ms step) can run a dozen
    steps before a sample falls in its next(), and its waits until then are
    data waits (dropping them cut a 263 ms window to 61 ms)."""
    ts, inside = samples
    if not len(known) or not len(ts):
        return known
    sampled, in_frame = _samples_in(ts, inside, known)
    keep = (sampled == 0) | (2 * in_frame >= sampled)
    first = int(np.argmax(inside)) if inside.any() else len(ts)
    if first > 0:
        before = known[:, 1] <= ts[first - 1]
        if looping is not None and len(looping[0]):
            lts, lin = looping
            j = np.searchsorted(lts, known[:, 1], side="right")
            before &= ~((j < len(lts)) & lin[np.minimum(j, len(lts) - 1)])
        keep &= ~before
    return known[keep]


def time_inside(con, tid: int, frame: LoaderFrame, known: np.ndarray = ivl.EMPTY,
                end: Optional[int] = None, rest_only: bool = False,
                sleeps: np.ndarray = ivl.EMPTY,
                samples: Optional[tuple[np.ndarray, np.ndarray]] = None) -> np.ndarray:
    """Intervals the loop thread spent in the frame: the waits the kernel saw
    (`known`, exact), and more time from the loop's samples, from its first
    entry to `end`: as much as their share in the frame says in all, or
    (rest_only) the share of the samples outside `known` that are in the
    frame, of the time outside it. Laid out on the runs of samples in the
    frame outside `known` (see the module docstring). The loop's sleep calls
    (`sleeps`) are out of the frame where its samples in them mostly are (a
    compute emulated as a sleep, DLIO's): known time outside it, which the
    extra time neither counts nor spans (one sample in the frame between two
    of the kernel's waits 10 ms apart got the whole gap, and 5 steps' waits
    and the sleeps between them were one)."""
    ts, inside = samples if samples is not None else attempts(con, tid, frame)
    kw = ivl.union(known) if len(known) else ivl.EMPTY.copy()
    if len(ts) < 2 or not inside.any():
        return kw
    per = (ts[-1] - ts[0]) / (len(ts) - 1)
    lo = int(ts[np.argmax(inside)] - per / 2)
    hi = int(end) if end is not None else int(ts[-1] + per / 2)
    span = ts >= lo
    span &= ts < hi
    if hi <= lo or not span.any():
        return kw
    # (the sleeps from the loop's first entry on: Ray's start-up sleeps
    # before it, outside the frame, had made a poll without a sample in it
    # compute)
    away = _sleeps_outside(ts, inside, ivl.clip(ivl.subtract(ivl.union(sleeps), kw), lo, hi)
                           if len(sleeps) else ivl.EMPTY.copy())
    gone = ivl.union(np.concatenate([kw, away]))        # time the samples do not share
    out = ~ivl.covered(gone, ts) if len(gone) else np.ones(len(ts), dtype=bool)
    k_in = ivl.total(ivl.clip(kw, lo, hi))
    a_in = ivl.total(ivl.clip(away, lo, hi))
    if rest_only:
        rest = span & out
        extra = inside[rest].mean() * (hi - lo - k_in - a_in) if rest.any() else 0.0
    else:
        free = span & ~ivl.covered(away, ts) if len(away) else span
        extra = inside[free].mean() * (hi - lo - a_in) - k_in if free.any() else 0.0
    mine = inside & out & span
    if extra <= 0 or not mine.any():
        return kw
    # the rest in R-time (the kernel's waits and the sleeps taken out), each
    # sample of a run outside them given an equal part of the extra time,
    # centred on its run
    ts, inside = ts[out], inside[out] & span[out]
    ks, ke = (gone[:, 0], gone[:, 1]) if len(gone) else (np.zeros(0, np.int64),) * 2
    before = np.concatenate(([0], np.cumsum(ke - ks)))       # time taken out before each piece
    r = ts - before[np.searchsorted(ke, ts, side="right")]
    each = extra / int(mine.sum())
    enter = np.flatnonzero(inside & ~np.concatenate(([False], inside[:-1])))
    leave = np.flatnonzero(inside & ~np.concatenate((inside[1:], [False])))
    mid = (r[enter] + r[leave]) / 2
    half = (leave - enter + 1) * each / 2
    a, b = (mid - half).astype(np.int64), (mid + half).astype(np.int64)
    rstart = ks - before[:-1]                                # R-time of each piece's start

    def real(x):
        return x + before[np.searchsorted(rstart, x, side="right")]
    laid = ivl.union(ivl.as_iv(real(a), real(b)))
    return ivl.union(np.concatenate([kw, ivl.subtract(laid, away)]))


def _sleeps_outside(ts: np.ndarray, inside: np.ndarray, sleeps: np.ndarray) -> np.ndarray:
    """The sleeps the loop's samples put outside the frame. A compute
    emulated as a sleep (DLIO's) is outside; a loader that polls with sleeps
    sleeps in its next(); and a loop can do both: Ray Data's first next() of
    an epoch polls its executor with 10 ms sleeps for seconds while its
    workers start, between steps that sleep (taken all together by where
    most samples in sleeps were, the polls were compute: AU 94% against the
    loop's own 64%). So each sleep by the samples in it (most of them
    outside); one without a sample, as the nearest sleep with samples if
    that is within a sampling interval (a poll among polls); else as most
    samples in sleeps were (a 5 ms compute sleep between two waits for data,
    both sampled in the frame, is not a poll: DLIO's steps merged). None
    with fewer than 3 samples in sleeps in all: too few to tell."""
    if len(sleeps) == 0:
        return sleeps
    hit = ivl.covered(sleeps, ts)
    if hit.sum() < 3:
        return ivl.EMPTY.copy()
    sampled, in_frame = _samples_in(ts, inside, sleeps)
    out = np.full(len(sleeps), inside[hit].mean() < 0.5)
    has = sampled > 0
    out[has] = 2 * in_frame[has] < sampled[has]
    idx = np.flatnonzero(has)
    lone = np.flatnonzero(~has)
    if len(idx) and len(lone):
        per = (ts[-1] - ts[0]) / (len(ts) - 1)
        j = np.searchsorted(sleeps[idx, 0], sleeps[lone, 0])      # the next sampled sleep
        prev, nxt = idx[np.maximum(j - 1, 0)], idx[np.minimum(j, len(idx) - 1)]
        gap_prev = np.where(j > 0, sleeps[lone, 0] - sleeps[prev, 1], np.inf)
        gap_next = np.where(j < len(idx), sleeps[nxt, 0] - sleeps[lone, 1], np.inf)
        near = np.where(gap_prev <= gap_next, prev, nxt)
        close = np.minimum(gap_prev, gap_next) <= per
        out[lone[close]] = out[near[close]]
    return sleeps[out]


def loop_caller(con, tid: int, frame: LoaderFrame):
    """The function that runs the loop: the innermost caller of the loader on
    its most frequent stack that is also on the stack while the loop computes
    (train(), main(); not a generator that wraps the loader). (the loop
    thread's samples (ts, sid), whether each is in the loader, the frames of
    that stack innermost first, the index of the loader in it, the index of
    the loop's function), or None: what loop_end and in_loop take."""
    ts, sid, _ = loop_samples(con, tid)
    inside = _stacks_with(con, frame.file, frame.function, sid)
    if not inside.any():
        return None
    # between its first and last next() seen: what comes after (a shutdown
    # that joins the loader's threads, seconds under a throttle, at module
    # level) says little of which function runs the loop; all after the
    # first where no sample between them was outside the loader
    first, last = int(np.argmax(inside)), int(np.flatnonzero(inside)[-1])
    during = slice(first, last + 1)
    if not (~inside[during]).any():
        during = slice(first, len(inside))
    if not (~inside[during]).any():
        return None
    top = int(np.bincount(sid[inside]).argmax())
    chain = con.execute("""select function, file, depth from pyframes where stack_id = ?
                           order by depth desc""", [top]).fetchall()
    k = next((i for i, (fn, f, _) in enumerate(chain)
              if f.endswith(frame.file) and _match(fn, frame.function)), None)
    if k is None:
        return None
    n_out = int((~inside[during]).sum())
    for m in range(k + 1, len(chain)):
        fn, f, _ = chain[m]
        on = _stacks_with(con, f, fn, sid)
        if on[during][~inside[during]].sum() >= 0.5 * n_out:
            return ts, sid, inside, chain, k, m
    return None


def in_loop(con, caller) -> Optional[tuple[np.ndarray, np.ndarray]]:
    """(ts, in loop) of the loop thread's samples: whether the function that
    runs the loop (`caller`, loop_caller's) is on the stack calling what it
    calls from the loop's first sample in the loader on (the loop's body: the
    loader's next(), the step; a loop with short next() calls may show only
    one), not what it calls before the loop (building the dataset, starting
    its threads: Dataset.map, iter()) nor absent (imports, module level).
    The frames carry no current line, so the callee tells the loop's body
    from what comes before it. None where that function is not found."""
    if caller is None:
        return None
    ts, sid, inside, chain, _, m = caller
    fn, f, depth = chain[m]
    register_columns(con, "_il_sid", {"sid": np.unique(sid)})
    rows = con.execute("""select s.stack_id, any_value(c.function), any_value(c.file)
        from pyframes s left join pyframes c on c.stack_id = s.stack_id and c.depth = s.depth + 1
        where s.stack_id in (select sid from _il_sid) and s.function = ? and s.file = ?
          and s.depth = ? group by s.stack_id""", [fn, f, depth]).fetchall()
    con.unregister("_il_sid")
    key = {int(s): (c or "", cf or "") for s, c, cf in rows}
    ids = {}
    callee = np.array([ids.setdefault(key[int(s)], len(ids)) if int(s) in key else -1
                       for s in sid], dtype=np.int64)
    body = np.unique(callee[int(np.argmax(inside)):])
    return ts, np.isin(callee, body[body >= 0])


def loop_end(con, caller) -> Optional[int]:
    """When the training loop ended: the last sample of the loop thread in
    the function that runs the loop (`caller`, loop_caller's), or None. A
    loop whose next() calls are shorter than the sampling interval shows few
    of them, and the gap after the last one seen says little of when its
    last step ended."""
    if caller is None:
        return None
    ts, sid, _, chain, _, m = caller
    fn, f, _ = chain[m]
    on = _stacks_with(con, f, fn, sid)
    per = (ts[-1] - ts[0]) // max(len(ts) - 1, 1)
    return int(ts[np.flatnonzero(on)[-1]] + per // 2)


def on_cpu_stacks(con, tids: list[int], within: Optional[np.ndarray] = None,
                  frame: Optional[LoaderFrame] = None) -> tuple[np.ndarray, np.ndarray]:
    """(stack ids, samples of each) of the threads' samples on CPU, inside
    the intervals `within` and/or with `frame` on their stack."""
    none = np.zeros(0, dtype=np.int64)
    if not tids:
        return none, none
    r = con.execute(f"""select ts_ns, stack_id from pystacks where stack_id >= 0
                        and tid in ({",".join(map(str, tids))}) and on_cpu""").fetchnumpy()
    ts = np.asarray(r["ts_ns"], dtype=np.int64)
    sids = np.asarray(r["stack_id"], dtype=np.int64)
    keep = np.ones(len(ts), dtype=bool)
    if within is not None:
        keep &= ivl.covered(ivl.union(within), ts) if len(within) else False
    if frame is not None:
        keep &= _stacks_with(con, frame.file, frame.function, sids)
    if not keep.any():
        return none, none
    return np.unique(sids[keep], return_counts=True)


def top_functions(con, u: np.ndarray, n: np.ndarray, limit: int = 5) -> list[dict]:
    """The innermost Python functions of stacks as on_cpu_stacks gives them
    (stack ids, the samples of each), by share of those samples."""
    if len(u) == 0:
        return []
    register_columns(con, "_tf_sid", {"sid": u, "n": n})
    rows = con.execute("""with leaf as (
            select stack_id, arg_max(function, depth) as function, arg_max(file, depth) as file
            from pyframes where stack_id in (select sid from _tf_sid) group by stack_id)
        select function, file, sum(n)::bigint from leaf join _tf_sid on sid = stack_id
        group by all order by 3 desc, 1 limit ?""", [limit]).fetchall()
    con.unregister("_tf_sid")
    total = int(n.sum())
    return [{"function": fn, "file": "/".join(f.split("/")[-3:]), "samples": int(k),
             "share": round(k / total, 4)} for fn, f, k in rows]
