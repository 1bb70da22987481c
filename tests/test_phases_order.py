"""request_phases puts its inputs in (key, time) order with `_lexorder`, which
skips the sort where the rows allow (already in order; or in time order, then
a stable sort of the key alone, a radix sort when the keys span < 2^16). The
permutation must be np.lexsort's exactly, ties included: the sweeps pair each
request with runs and packets by position, and the rows are put back by it."""

import numpy as np
import pytest

from tracekit.pipeline.steps.phases import _lexorder


def _cases(rng):
    n = 2000
    for span in (1, 5, 300, 70_000, 2 ** 40):  # (a partition's keys: one flow .. far apart)
        base = 7 * 4294967296
        key = base + rng.integers(0, span, n)
        sub = rng.integers(0, 50, n)  # many ties
        yield key, sub  # no order at all
        yield key, np.sort(sub)  # in time order (the packets, by frame)
        order = np.lexsort((sub, key))
        yield key[order], sub[order]  # in order already
        swapped = order.copy()
        swapped[[10, 11]] = swapped[[11, 10]]
        yield key[swapped], sub[swapped]  # in order but for one pair
    yield np.zeros(0, np.int64), np.zeros(0, np.int64)
    yield np.array([3]), np.array([1])


@pytest.mark.parametrize("seed", range(5))
def test_lexorder_is_lexsorts_permutation(seed):
    rng = np.random.default_rng(seed)
    paths = set()
    for key, sub in _cases(rng):
        key, sub = key.astype(np.int64), sub.astype(np.int64)
        got = _lexorder(sub, key)
        assert np.array_equal(got, np.lexsort((sub, key)))
        paths.add("identity" if np.array_equal(got, np.arange(len(key))) else "sorted")
    assert paths == {"identity", "sorted"}
