"""store.arrow.frame_rows: the row of each wanted frame in a read in frame order."""

import numpy as np
from hypothesis import given, strategies as st

from tracekit.store.arrow import frame_rows


def test_gapless_and_gapped_reads_agree_with_a_dictionary():
    for frames in (np.arange(10, 20), np.array([3, 4, 9, 10, 11, 40])):
        wanted = np.array([2, 3, 9, 11, 12, 19, 40, 41])
        at, found = frame_rows(frames, wanted)
        row = {f: i for i, f in enumerate(frames)}
        assert found.tolist() == [w in row for w in wanted]
        assert at[found].tolist() == [row[w] for w in wanted if w in row]
        assert ((at >= 0) & (at < len(frames))).all()  # safe to index with


def test_an_empty_read_finds_nothing():
    at, found = frame_rows(np.zeros(0, np.int64), np.array([1, 2]))
    assert not found.any() and len(at) == 2


@given(st.sets(st.integers(0, 200), max_size=60), st.lists(st.integers(-5, 210), max_size=40))
def test_any_frames(frames, wanted):
    frames = np.array(sorted(frames), np.int64)
    wanted = np.array(wanted, np.int64)
    at, found = frame_rows(frames, wanted)
    assert found.tolist() == [w in set(frames.tolist()) for w in wanted]
    assert (frames[at[found]] == wanted[found]).all()
