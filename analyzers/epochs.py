"""Epochs, where the trace shows them: a map-style dataset of files opens each
file once per epoch (in any order, shuffled or not), so an epoch ends where a
file opened since the last boundary is opened again. Shown only when every
epoch but the last opened at least `min_epoch_files` (90%) of the dataset's
files, and there are at least two: one file read over and over (an HDF5 or
tar shard kept open), or a dataset re-opened per sample, shows no epochs, and
iotrace says so rather than guess."""
from __future__ import annotations

import numpy as np

from .intervals import sorted_unique

MIN_EPOCH_FILES = 0.9


def find_epochs(con, lo: int, hi: int) -> list[tuple[int, int]]:
    """[(start_ns, end_ns)] of the epochs in the window [lo, hi], or []."""
    rows = con.execute(f"""
        select ts_ns, file_id from events
        where op in ('open', 'openat', 'openat2') and ret >= 0
          and file_id in (select file_id from data_files)
          and ts_ns < {hi}
        order by ts_ns""").fetchnumpy()
    ts, fid = np.asarray(rows["ts_ns"]), np.asarray(rows["file_id"])
    n = len(sorted_unique(fid))
    if n < 2:
        return []
    starts, sizes, seen = [int(ts[0])], [], set()
    for t, f in zip(ts.tolist(), fid.tolist()):
        if f in seen:
            starts.append(t)
            sizes.append(len(seen))
            seen = set()
        seen.add(f)
    if len(starts) < 2 or min(sizes) < MIN_EPOCH_FILES * n:
        return []
    # a pass before the window (files indexed at start-up) is not an epoch of it;
    # the first epoch starts with the window (the loop's first wait for data)
    spans = [(max(s, lo), e) for s, e in zip(starts, starts[1:] + [hi]) if e > lo]
    if len(spans) < 2:
        return []
    spans[0] = (lo, spans[0][1])
    return spans
