"""Which Python frame is the training loop's loader next(), and when was the loop in it?

A data wait, as MLPerf Storage, DLIO and the frameworks' profilers count it
(PyTorch's `enumerate(DataLoader)#...__next__`, TensorFlow's
`IteratorGetNext`), is the time the loop thread spends inside the loader's
next(): blocked there (the kernel shows why) or on its own CPU there
(decoding with num_workers=0, unpickling, collating), which the kernel alone
cannot tell from compute. With the job's Python stacks (pystacks.parquet):

1. The loader frame, in this order: `--loader-frame MODULE:FUNCTION`; a known
   loader's next() (KNOWN) that the loop thread enters and leaves at least
   `min_runs` times; else, from the data, the outermost frame on the loop's
   stack in at least `min_wait_share` of its samples taken during the waits
   the kernel saw, among the frames entered and left about once a step
   (at least `step_runs_share` of the most-entered such frame's runs).
2. The time in it: the share of the loop's samples that are in the frame.
   The sampler samples at random (exponential) intervals, so the share of
   samples in a state is an unbiased estimate of the share of time in it
   (Poisson arrivals see time averages), provided it is not held up more in
   one state than another (it runs at the recorder's priority: see
   pystacks.py). On the timeline, each run of consecutive samples in the
   frame is given the time its samples stand for, centred on the run.
   Measured against the loops' own clocks (5-10 s loops, 100 Hz, a loaded
   2-core machine), two other estimators were 3-11 AU points off where this
   one was within 1.2: edges halfway between samples (a next() shorter than
   the sampling interval, hit by one sample, gets the long gaps around it),
   and the kernel's exact waits with samples for the rest (the sampler was
   held up 3-5 times more while the loop was in the kernel's waits, inside
   its file opens and reads, than elsewhere, so the rest was over-sampled).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from . import intervals as ivl

THRESHOLDS = {
    "min_runs": 3,              # entries into the frame to call it a loader that is called per step
    "min_wait_share": 0.6,      # of the loop's samples in the kernel's waits, for a frame from the data
    "min_wait_samples": 3,      # samples in the kernel's waits needed to find a frame from the data
    "step_runs_share": 0.3,     # of the most-entered candidate's runs: called about once a step
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
    if hasattr(con, "spark"):       # the Spark engine reads no stacks (yet): kernel-only verdict
        return False
    return bool(con.execute("select count(*) from pystacks").fetchone()[0])


def loop_samples(con, tid: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ts_ns, stack_id, on_cpu) of the thread's samples, in time order."""
    r = con.execute(f"""select ts_ns, stack_id, on_cpu from pystacks where tid = {int(tid)}
                        order by ts_ns""").fetchnumpy()
    return (np.asarray(r["ts_ns"], dtype=np.int64), np.asarray(r["stack_id"], dtype=np.int64),
            np.asarray(r["on_cpu"], dtype=bool))


def _match(function: str, want: str) -> bool:
    return function == want or function.endswith("." + want)


def _stacks_with(con, file_suffix: str, function: str, sids: np.ndarray) -> np.ndarray:
    """Which of the stacks sids hold a frame of that function in a file ending so."""
    rows = con.execute("""select distinct stack_id, function from pyframes
                          where ends_with(file, ?)""", [file_suffix]).fetchall()
    hit = {int(s) for s, fn in rows if _match(fn, function)}
    return np.isin(sids, list(hit)) if hit else np.zeros(len(sids), dtype=bool)


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
    best = None
    for suffix, function, what in KNOWN:
        inside = _stacks_with(con, suffix, function, sid)
        n = runs_of(inside)
        if n >= th["min_runs"] and (best is None or n > best.runs):
            best = LoaderFrame(function, suffix, "known", what, n)
    if best:
        return best, ""
    return _from_data(con, ts, sid, kernel_waits, th)


def _from_data(con, ts, sid, kernel_waits, th) -> tuple[Optional[LoaderFrame], str]:
    in_wait = ivl.covered(ivl.union(kernel_waits), ts) if len(kernel_waits) else \
        np.zeros(len(ts), dtype=bool)
    if in_wait.sum() < th["min_wait_samples"]:
        return None, ("no known loader frame on the loop's stack, and too few samples in its "
                      f"kernel-seen waits ({int(in_wait.sum())}) to find one from the data")
    # each frame (function, file) with the outermost depth it is seen at
    con.register("_lf_sid", {"sid": np.unique(sid)})
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
        if share >= th["min_wait_share"] and n >= th["min_runs"]:
            cands.append((depth, -share, n, fn, file))
    if not cands:
        return None, ("no frame of the loop's stack is entered per step and present through "
                      "its kernel-seen waits")
    most = max(c[2] for c in cands)
    depth, _, n, fn, file = min(c for c in cands if c[2] >= th["step_runs_share"] * most)
    return LoaderFrame(fn, file, "data", "", n), ""


def _attempts(con, tid: int, frame: LoaderFrame) -> tuple[np.ndarray, np.ndarray]:
    """(ts, inside) of the loop thread's stack reads in time order. A failed
    read of its process's stacks (stack_id -1: a stack that changed while it
    was read, mostly of a thread running Python code) takes the state of the
    samples on either side where they agree, and is left out where they do
    not (it then counts for neither)."""
    ts, sid, _ = loop_samples(con, tid)
    if len(ts) == 0:
        return ts, np.zeros(0, dtype=bool)
    inside = _stacks_with(con, frame.file, frame.function, sid)
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


def time_inside(con, tid: int, frame: LoaderFrame) -> np.ndarray:
    """Intervals the loop thread spent in the frame, from its samples: each
    run of consecutive samples in the frame is given the time its samples
    stand for (the mean interval between samples each), centred on the run
    (see the module docstring)."""
    ts, inside = _attempts(con, tid, frame)
    if len(ts) < 2 or not inside.any():
        return ivl.EMPTY.copy()
    per = (ts[-1] - ts[0]) / (len(ts) - 1)
    enter = np.flatnonzero(inside & ~np.concatenate(([False], inside[:-1])))
    leave = np.flatnonzero(inside & ~np.concatenate((inside[1:], [False])))
    mid = (ts[enter] + ts[leave]) / 2
    half = (leave - enter + 1) * per / 2
    return ivl.union(ivl.as_iv((mid - half).astype(np.int64), (mid + half).astype(np.int64)))


def top_functions(con, tids: list[int], within: Optional[np.ndarray] = None,
                  frame: Optional[LoaderFrame] = None, limit: int = 5) -> list[dict]:
    """The innermost Python function of the threads' samples on CPU, inside
    the intervals `within` and/or with `frame` on their stack, by share of
    those samples."""
    if not tids:
        return []
    r = con.execute(f"""select ts_ns, stack_id from pystacks
                        where tid in ({",".join(map(str, tids))}) and on_cpu""").fetchnumpy()
    ts = np.asarray(r["ts_ns"], dtype=np.int64)
    sids = np.asarray(r["stack_id"], dtype=np.int64)
    keep = np.ones(len(ts), dtype=bool)
    if within is not None:
        keep &= ivl.covered(ivl.union(within), ts) if len(within) else False
    if frame is not None:
        keep &= _stacks_with(con, frame.file, frame.function, sids)
    if not keep.any():
        return []
    u, n = np.unique(sids[keep], return_counts=True)
    con.register("_tf_sid", {"sid": u, "n": n})
    rows = con.execute("""with leaf as (
            select stack_id, arg_max(function, depth) as function, arg_max(file, depth) as file
            from pyframes where stack_id in (select sid from _tf_sid) group by stack_id)
        select function, file, sum(n)::bigint from leaf join _tf_sid on sid = stack_id
        group by all order by 3 desc, 1 limit ?""", [limit]).fetchall()
    con.unregister("_tf_sid")
    total = int(keep.sum())
    return [{"function": fn, "file": "/".join(f.split("/")[-3:]), "samples": int(k),
             "share": round(k / total, 4)} for fn, f, k in rows]
