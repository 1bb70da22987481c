"""`tracekit analyze` on the repository's sample captures: incremental, complete, safe."""

from pathlib import Path

import pytest

from tracekit.analyze import analyze
from tracekit.errors import TracekitError
from tracekit.store.ingest import load_captures

SAMPLES = Path(__file__).resolve().parents[1] / "captures"
LOSSY = SAMPLES / "lossy-download-server.pcap"


def _counts(con):
    return dict(con.execute("SELECT capture_id, count(*) FROM tcp_analysis GROUP BY ALL").fetchall())


def test_only_new_captures_are_analysed(db):
    load_captures(db, [LOSSY])
    first = {t: built for t, built, _, _ in analyze(db)}
    assert set(first.values()) == {1}
    load_captures(db, [SAMPLES / "udp-echo.pcapng"])
    second = {t: built for t, built, _, _ in analyze(db)}
    assert set(second.values()) == {1}  # the new capture only, in every table
    assert _counts(db) == {1: 476}


def test_a_replaced_capture_is_analysed_again(db):
    load_captures(db, [LOSSY])
    analyze(db)
    load_captures(db, [LOSSY], replace=True)  # a new capture id for the same file
    analyze(db)
    ids = [r[0] for r in db.execute("SELECT capture_id FROM captures").fetchall()]
    assert len(ids) == 1
    assert _counts(db) == {ids[0]: 476}  # the old capture's rows are gone
    runs = db.execute("SELECT DISTINCT capture_id FROM analysis_runs WHERE capture_id <> 0").fetchall()
    assert runs == [(ids[0],)]


def test_the_lossy_sample_shows_its_scripted_losses(db):
    """captures/make_lossy.py dropped the 21st segment twice and the 101st once."""
    load_captures(db, [LOSSY])
    analyze(db)
    rows = db.execute("SELECT rel_seq, round, episode FROM retransmissions "
                      "WHERE kind = 'retransmission' ORDER BY frame").fetchall()
    assert rows == [(1 + 20 * 1448, 1, 1), (1 + 20 * 1448, 2, 1), (1 + 100 * 1448, 1, 2)]


def test_an_empty_store_is_an_error(db):
    with pytest.raises(TracekitError, match="no captures"):
        analyze(db)


def test_thresholds_are_parameters_and_rebuild(db):
    """With dupthresh 100 no retransmission of the lossy sample is 'fast' any more
    (they become RACK/other); changing it back rebuilds again."""
    load_captures(db, [LOSSY])
    analyze(db)
    fast = "SELECT count(*) FILTER (trigger = 'fast') FROM retransmissions"
    assert db.execute(fast).fetchall()[0][0] == 3
    rebuilt = {t: built for t, built, _, _ in analyze(db, params={"dupthresh": 100})}
    assert rebuilt["tcp_analysis"] == 1 and rebuilt["handshakes"] == 1
    assert db.execute(fast).fetchall()[0][0] == 0
    analyze(db)
    assert db.execute(fast).fetchall()[0][0] == 3


@pytest.mark.parametrize("table", ["tcp_analysis", "stalls", "retransmissions", "ack_gaps"])
def test_compiled_and_python_kernels_agree(tmp_path, monkeypatch, table):
    """The kernels run compiled on large captures and as Python on small ones:
    both ways must store the very same rows."""
    from tracekit.store.db import connect
    results = []
    for mode in ("never", "always"):
        monkeypatch.setenv("TRACEKIT_JIT", mode)
        con = connect(tmp_path / f"{mode}.duckdb")
        load_captures(con, [LOSSY, SAMPLES / "http-fresh-vs-persistent.pcap"])
        analyze(con)
        results.append(con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall())
        con.close()
    assert results[0] == results[1] and len(results[0]) > 0
