"""The store's append thread (tracekit/store/writer.py): whole row groups,
every row once and in order, and memory held by rows, not by puts."""

import duckdb
import numpy as np
import pyarrow as pa

from tracekit.store import writer
from tracekit.store.schema import storage


def _table(start, n):
    return pa.table({"k": pa.array(np.arange(start, start + n, dtype=np.int64)),
                     "v": pa.array([f"r{i}" for i in range(start, start + n)]).dictionary_encode()})


def _store():
    con = duckdb.connect()
    con.execute(f"CREATE TABLE {storage('t')} (k BIGINT, v VARCHAR)")
    return con


def test_many_small_puts_are_held_compacted_and_all_appended():
    con = _store()
    w = writer.AppendWriter(con, row_group=10_000)
    w.start()
    sizes = [1 + (i % 7) for i in range(3_000)]  # 3,000 puts of 1-7 rows, 12,000 rows
    start = 0
    for n in sizes:
        w.put("t", _table(start, n))
        start += n
    w.finish()
    rows = con.execute(f"SELECT k, v FROM {storage('t')}").fetchall()
    assert sorted(rows) == [(k, f"r{k}") for k in range(start)]  # each row once, as put


def test_held_tables_stay_few_between_row_groups():
    con = _store()
    w = writer.AppendWriter(con, row_group=1_000_000)
    for i in range(1_000):  # on this thread: _take is what the thread runs
        w._take("t", _table(i * 3, 3))
    tables, rows, _ = w.pending["t"]
    assert rows == 3_000
    # 1,000 puts held as 15 tables of 64 compacted and the 40 put since
    assert writer.COMPACT == 64 and len(tables) == 15 + 40
    assert [t.num_rows for t in tables[:15]] == [192] * 15
    assert all(t.column("k").num_chunks == 1 for t in tables)
    w._flush()
    assert con.execute(f"SELECT count(DISTINCT k), min(k), max(k) FROM {storage('t')}").fetchone() \
        == (3_000, 0, 2_999)


def test_appends_reach_the_file_as_whole_row_groups(tmp_path):
    """Puts cut at other sizes than a row group still leave both of DuckDB's
    threads whole row groups to write straight to the file: before the
    checkpoint only the tail (under a row group) is held in memory. Cut as
    they came (batches of 50,000), each thread's share was under a row group
    and all of it waited for the checkpoint, then took twice the space."""
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    con.execute("SET threads = 2")
    con.execute("SET preserve_insertion_order = false")
    con.execute(f"CREATE TABLE {storage('t')} (k BIGINT, v VARCHAR)")
    w = writer.AppendWriter(con, row_group=2 * writer.ROW_GROUP)
    w.start()
    for i in range(7):  # 350,000 rows: one append of two row groups, then the tail
        w.put("t", _table(i * 50_000, 50_000))
    w.finish()
    groups = con.execute(
        "SELECT row_group_id, bool_and(persistent), max(\"count\") FROM pragma_storage_info(?) "
        "WHERE column_name = 'k' GROUP BY ALL ORDER BY 1", [storage("t")]).fetchall()
    assert [p for _, p, _ in groups] == [True, True, False]
    assert [n for *_, n in groups][:2] == [writer.ROW_GROUP] * 2
    assert con.execute(f"SELECT count(DISTINCT k), min(k), max(k) FROM {storage('t')}").fetchone() \
        == (350_000, 0, 349_999)


def test_two_lanes_append_every_row_once_and_a_call_sees_all_put_before_it():
    """lanes=2 (ingest): appends also go to a second thread with its own
    cursor; a task put with `call` still runs after every row put before it
    is appended, and finish waits for the lane's last append."""
    con = _store()
    w = writer.AppendWriter(con, row_group=10_000, first=10_000, lanes=2)
    w.start()
    seen = []
    for i in range(20):  # 60,000 rows: units of 10,000 to either thread
        w.put("t", _table(i * 3_000, 3_000))
    count = f"SELECT count(*) FROM {storage('t')}"
    w.call(lambda c: seen.append(c.execute(count).fetchall()[0][0]))
    for i in range(20, 35):  # then 45,000 more, the last 5,000 appended by finish
        w.put("t", _table(i * 3_000, 3_000))
    w.finish()
    assert seen == [60_000]
    assert not any(lane.is_alive() for lane in w.lanes)
    rows = con.execute(f"SELECT k, v FROM {storage('t')}").fetchall()
    assert sorted(rows) == [(k, f"r{k}") for k in range(105_000)]


def test_an_append_that_fails_on_the_lane_is_raised_by_finish():
    con = duckdb.connect()
    con.execute(f"CREATE TABLE {storage('t')} (k BIGINT CHECK (k >= 0), v VARCHAR)")
    w = writer.AppendWriter(con, row_group=1_000, first=1_000, lanes=2)
    w.start()
    w.put("t", _table(-500, 1_000))  # the first append (to the idle lane) breaks the check
    try:
        w.finish()
    except duckdb.ConstraintException:
        pass
    else:
        raise AssertionError("the lane's failed append was not raised")
    assert not any(lane.is_alive() for lane in w.lanes)


def test_three_lanes_take_turns_and_append_every_row_once(monkeypatch):
    """lanes=3 (tcp_analysis): two lanes, each with its own cursor, take the
    appends in turn (two at once); every row once, and a `call` still sees
    every row put before it."""
    con = _store()
    by_thread = []
    real = writer.append

    def append(cur, target, rows):
        by_thread.append(writer.threading.current_thread())
        real(cur, target, rows)
    monkeypatch.setattr(writer, "append", append)
    w = writer.AppendWriter(con, row_group=10_000, first=10_000, lanes=3)
    w.start()
    seen = []
    for i in range(20):
        w.put("t", _table(i * 3_000, 3_000))
    w.call(lambda c: seen.append(c.execute(f"SELECT count(*) FROM {storage('t')}").fetchall()[0][0]))
    for i in range(20, 35):
        w.put("t", _table(i * 3_000, 3_000))
    w.finish()
    assert seen == [60_000]
    assert len(w.lanes) == 2 and set(w.lanes) <= set(by_thread)  # both lanes appended
    assert not any(lane.is_alive() for lane in w.lanes)
    rows = con.execute(f"SELECT k, v FROM {storage('t')}").fetchall()
    assert sorted(rows) == [(k, f"r{k}") for k in range(105_000)]


def test_a_writer_inside_a_transaction_appends_in_it_alone():
    """A small capture's build is one transaction: a lane's cursor would append
    outside it, so its rows would outlive the ROLLBACK of a failed build."""
    con = _store()
    con.execute("BEGIN")
    w = writer.AppendWriter(con, row_group=10_000, first=10_000, lanes=3)
    assert w.lanes == []
    w.start()
    for i in range(10):
        w.put("t", _table(i * 3_000, 3_000))
    w.finish()
    assert con.execute(f"SELECT count(*) FROM {storage('t')}").fetchall() == [(30_000,)]
    con.execute("ROLLBACK")
    assert con.execute(f"SELECT count(*) FROM {storage('t')}").fetchall() == [(0,)]
