"""store.arrow.frame_rows: the row of each wanted frame in a read in frame order;
store.arrow.read_ahead: reads in order, the next one beside the caller's work."""

import duckdb
import numpy as np
import pytest
from hypothesis import given, strategies as st

from tracekit.store.arrow import among, frame_rows, read_ahead


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
    assert np.array_equal(among(frames, wanted), np.isin(wanted, frames))  # what it replaced


def test_read_ahead_gives_every_read_in_order_and_raises_a_failed_one_where_taken():
    """store.arrow.read_ahead: item k's arrays while item k+1 is read on a cursor
    of its own; a read that fails raises when its item is taken, not before."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT range AS k FROM range(10000)")
    sql = "SELECT k FROM t WHERE k >= $lo AND k < $hi ORDER BY k"
    items = [[(sql, {"lo": lo, "hi": lo + 1000}), ("SELECT $lo AS lo", {"lo": lo})]
             for lo in range(0, 10000, 1000)]
    got = list(read_ahead(con, iter(items)))
    assert [int(lo["lo"][0]) for _, lo in got] == list(range(0, 10000, 1000))
    assert np.array_equal(np.concatenate([part["k"] for part, _ in got]), np.arange(10000))
    assert list(read_ahead(con, iter([]))) == []
    bad = items[:2] + [[("SELECT k FROM no_such_table", {})]] + items[3:]
    taken = []
    with pytest.raises(duckdb.CatalogException):
        for part, *_ in read_ahead(con, iter(bad)):
            taken.append(int(part["k"][0]))
    assert taken == [0, 1000]
