"""core.arrays.distinct: np.unique's plain answer without importing numpy.ma."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tracekit.core.arrays import distinct


@given(arrays(st.sampled_from([np.int8, np.int64, np.uint32, np.uint64]),
              st.integers(0, 300), elements=st.integers(0, 100)))
def test_distinct_is_np_unique(values):
    got, want = distinct(values), np.unique(values)
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_distinct_of_a_negative_and_repeated_column():
    assert distinct(np.array([3, -1, 3, 3, -1, 7], np.int32)).tolist() == [-1, 3, 7]
    assert distinct(np.zeros(0, np.int64)).tolist() == []
