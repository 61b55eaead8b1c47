"""The interval helpers of the wait analysis against numpy's own results."""
from __future__ import annotations

import numpy as np
from hypothesis import given, strategies as st
from hypothesis.extra.numpy import arrays

from iotrace.analyzers import intervals as ivl


@given(arrays(np.int64, st.tuples(st.integers(0, 40), st.integers(1, 2)),
              elements=st.integers(-2**62, 2**62)))
def test_sorted_unique_is_np_unique(x):
    """sorted_unique replaces np.unique (slow in numpy 2.4 on large arrays):
    the same values, sorted, of any shape (2-D interval sets are flattened)."""
    got = ivl.sorted_unique(x)
    assert got.dtype == x.dtype and np.array_equal(got, np.unique(x))


def test_sorted_unique_of_many_values_is_fast():
    """4 M values with repeats: a sort and a compare, not numpy 2.4's hashing
    (2.3 s here); well under a second on any machine of this kind."""
    import time
    x = np.random.default_rng(1).integers(0, 10**12, 2_000_000).repeat(2)
    t = time.perf_counter()
    u = ivl.sorted_unique(x)
    assert time.perf_counter() - t < 1.0
    assert np.all(u[1:] > u[:-1])                          # sorted, each once
    assert np.array_equal(u[np.searchsorted(u, x)], x)     # every value is there
