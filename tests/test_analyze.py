"""`tracekit analyze` on the repository's sample captures: incremental, complete, safe."""

from pathlib import Path

import pytest

from tracekit.core.errors import TracekitError
from tracekit.pipeline.analyze import analyze
from tracekit.pipeline.captures import load_captures

SAMPLES = Path(__file__).resolve().parents[1] / "captures"
LOSSY = SAMPLES / "lossy-download-server.pcap"


def _counts(con):
    return dict(con.execute("SELECT capture_id, count(*) FROM tcp_analysis GROUP BY ALL").fetchall())


def test_only_new_captures_are_analysed(db):
    load_captures(db, [LOSSY])
    first = {r.table: r.built for r in analyze(db)}
    assert set(first.values()) == {1}
    load_captures(db, [SAMPLES / "udp-echo.pcapng"])
    second = analyze(db)
    # the new capture only, in every table; views are created once
    assert {r.built for r in second if r.scope != "view"} == {1}
    assert {r.built for r in second if r.scope == "view"} == {0}
    assert _counts(db) == {1: 476}


def test_chunks_of_any_size_give_the_same_tables(tmp_path, monkeypatch):
    """The kernels stream a capture in chunks of frames with their state
    carried between chunks: chunks of 7 frames and one chunk for the whole
    capture store the same rows (a capture with fresh and reused
    connections, one with losses at both vantages)."""
    from tracekit.pipeline.steps import sequence, stalls
    from tracekit.store.db import connect
    inputs = [SAMPLES / "http-fresh-vs-persistent.pcap", LOSSY,
              SAMPLES / "lossy-download-client.pcap"]
    tables = ("tcp_analysis", "flights", "stalls", "retransmissions", "recovery_rounds")
    results = []
    for chunk in (7, 1 << 20):
        monkeypatch.setattr(sequence, "CHUNK_FRAMES", chunk)
        monkeypatch.setattr(stalls, "CHUNK_FRAMES", chunk)
        monkeypatch.setattr(sequence.build, "__defaults__", (chunk,))
        monkeypatch.setattr(stalls.build, "__defaults__", (chunk,))
        con = connect(tmp_path / f"c{chunk}.duckdb")
        load_captures(con, inputs)
        analyze(con)
        results.append({t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
                        for t in tables})
        con.close()
    for t in tables:
        assert results[0][t] == results[1][t], t
        assert results[0][t], t


def test_a_large_capture_on_two_lanes_gives_the_same_tables(tmp_path, monkeypatch):
    """A capture too large for one transaction is built in short ones, and
    tcp_analysis's rows go to the store on two lanes at once (store/writer.py):
    the same rows as one transaction on one connection. Here every capture
    takes that path, in chunks of 500 frames appended every 1,000 rows, so both
    lanes append."""
    from tracekit.pipeline import analyze as a, stepkinds
    from tracekit.pipeline.steps import sequence
    from tracekit.store import writer
    from tracekit.store.db import connect
    inputs = [SAMPLES / "http-fresh-vs-persistent.pcap", LOSSY]
    tables = ("tcp_analysis", "tcp_events", "flights", "exchanges", "stalls", "retransmissions")
    gave = []
    real_give = writer._Lane.give
    monkeypatch.setattr(writer._Lane, "give", lambda lane, *job: (gave.append(lane), real_give(lane, *job)))
    results = []
    for large in (False, True):
        if large:
            monkeypatch.setattr(stepkinds, "ONE_TRANSACTION_PACKETS", 0)
            monkeypatch.setattr(a, "ONE_TRANSACTION_PACKETS", 0)
            monkeypatch.setattr(writer.AppendWriter.__init__, "__defaults__", (1_000, None, 1))
            monkeypatch.setattr(sequence.build, "__defaults__", (500,))  # chunks of 500 frames
        con = connect(tmp_path / f"{large}.duckdb")
        load_captures(con, inputs)
        analyze(con)
        results.append({t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in tables})
        con.close()
        assert bool(gave) == large
    assert len(set(gave)) == 2  # the two lanes of tcp_analysis's writer took turns
    for t in tables:
        assert results[0][t] == results[1][t], t
        assert results[0][t] or t == "tcp_events", t


def test_a_capture_an_analysis_cannot_take_is_skipped_and_named(db, monkeypatch):
    """Failure isolation: the capture a step fails on is recorded with the
    reason and left out of later steps; the other capture is analysed in
    every table."""
    from tracekit.pipeline.steps import sequence
    load_captures(db, [LOSSY, SAMPLES / "http-fresh-vs-persistent.pcap"])
    bad = db.execute("SELECT capture_id FROM captures WHERE file_name = ?",
                     [LOSSY.name]).fetchall()[0][0]
    real = sequence.build

    def broken(con, writer, capture_id, **kw):
        if capture_id == bad:
            raise ValueError("a value this analysis cannot take")
        return real(con, writer, capture_id, **kw)
    monkeypatch.setattr(sequence, "build", broken)
    results = {r.table: r for r in analyze(db)}
    assert results["tcp_analysis"].failures == [(bad, "a value this analysis cannot take")]
    assert _counts(db) == {bad + 1 if bad == 1 else 1: 2131}
    # nothing of the failed capture is visible, in any table; later steps left it out
    for table in ("tcp_analysis", "flights", "retransmissions", "stalls", "handshakes"):
        assert db.execute(f"SELECT count(*) FROM {table} WHERE capture_id = ?",
                          [bad]).fetchall()[0][0] == 0, table
    assert db.execute("SELECT count(*) FROM handshakes WHERE capture_id <> ?",
                      [bad]).fetchall()[0][0] == 4
    (error,), = db.execute("SELECT error FROM analysis_runs WHERE capture_id = ?",
                           [bad]).fetchall()
    assert error == "a value this analysis cannot take"


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
    rebuilt = {r.table: r.built for r in analyze(db, params={"dupthresh": 100})}
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


def test_code_steps_append_from_both_threads_and_the_setting_is_put_back(tmp_path, monkeypatch):
    """The per-packet tables are appended with DuckDB's insertion order off
    (both of its threads write an append of several row groups: tcp_analysis
    of 2.9 M packets 10.7-12.3 s -> 8.7-9.2 s); the SQL steps, whose tables
    are written in their ORDER BY, run with it on, and analyze leaves the
    database's (global) setting as it found it."""
    from tracekit.pipeline.steps import sequence, stalls
    from tracekit.store.db import connect
    seen = {}

    def spy(module):
        real = module.build

        def build(con, writer, capture_id, *args, **kw):
            (seen[module.__name__],), = con.execute(
                "SELECT current_setting('preserve_insertion_order')").fetchall()
            return real(con, writer, capture_id, *args, **kw)
        monkeypatch.setattr(module, "build", build)

    spy(sequence)
    spy(stalls)
    con = connect(tmp_path / "s.duckdb")
    load_captures(con, [LOSSY])
    assert con.execute("SELECT current_setting('preserve_insertion_order')").fetchone() == (True,)
    analyze(con)
    assert seen == {"tracekit.pipeline.steps.sequence": False, "tracekit.pipeline.steps.stalls": False}
    assert con.execute("SELECT current_setting('preserve_insertion_order')").fetchone() == (True,)
    assert con.execute("SELECT count(*) FROM retransmissions").fetchone()[0] > 0


def test_analyze_does_not_import_pandas(tmp_path):
    """A fixed cost of every analyze: pyarrow's array() and to_numpy() import
    pandas (about half a second). The analyses read with fetchnumpy and build
    Arrow arrays from numpy buffers; requests and loss rounds are exercised,
    and a store without a request first (combine_chunks() of an empty result
    imported it: 0.2 s of a small capture's analyze)."""
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    samples = Path(__file__).resolve().parents[1] / "captures"
    files = [str(samples / n) for n in ("lossy-download-client.pcap", "http-fresh-vs-persistent.pcap")]
    code = textwrap.dedent(f"""
        import sys
        from tracekit.pipeline.analyze import analyze
        from tracekit.store.db import connect
        from tracekit.pipeline.captures import load_captures
        empty = connect({str(tmp_path / 'e.duckdb')!r})
        load_captures(empty, [{str(samples / "udp-echo.pcapng")!r}])
        analyze(empty)
        assert empty.execute("SELECT count(*) FROM requests").fetchone()[0] == 0
        con = connect({str(tmp_path / 's.duckdb')!r})
        load_captures(con, {files!r})
        analyze(con)
        n = con.execute("SELECT count(*) FROM request_phases").fetchone()[0]
        print(n, "pandas" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    requests, pandas = out.stdout.split()
    assert int(requests) > 0 and pandas == "False"


def test_rtt_summary_quantiles_equal_numpys(db):
    """rtt_summary's median and p90 rank every sample of a flow direction and
    interpolate between the two nearest ranks; numpy's percentile (linear
    method) over the same samples gives the same to the nanosecond."""
    import numpy as np
    load_captures(db, [LOSSY, SAMPLES / "http-fresh-vs-persistent.pcap"])
    analyze(db)
    samples = {}
    for cid, flow, direction, rtt in db.execute(
            "SELECT capture_id, flow_id, direction, rtt_ns FROM rtt_samples "
            "WHERE kind <> 'handshake'").fetchall():
        samples.setdefault((cid, flow, direction), []).append(rtt)
    rows = db.execute("SELECT capture_id, flow_id, direction, samples, median_rtt_ns, p90_rtt_ns "
                      "FROM rtt_summary WHERE samples > 0").fetchall()
    assert len(rows) == len(samples) and max(r[3] for r in rows) > 100
    uneven = 0
    for cid, flow, direction, n, median, p90 in rows:
        values = np.array(samples[(cid, flow, direction)], np.float64)
        assert n == len(values)
        for got, q in ((median, 50), (p90, 90)):
            want = np.percentile(values, q)
            uneven += want != round(want)
            assert abs(got - want) <= 0.5, (cid, flow, direction, q)
    assert uneven > 0  # some quantile falls between two samples: the interpolation is tested


def test_small_captures_of_a_code_step_share_a_transaction_and_a_large_one_goes_alone():
    """A transaction per capture cost a code step ~15 ms a capture (27 small
    captures: its line 0.06 -> 0.5 s); small ones go together, up to
    SMALL_BATCH_PACKETS, a large one (written in many transactions) alone;
    SQL steps take runs of consecutive ids up to BATCH_PACKETS."""
    from tracekit.pipeline import analyze as a
    from tracekit.pipeline.steps import stalls
    from tracekit.pipeline.stepkinds import CodeStep, SqlStep
    big = a.ONE_TRANSACTION_PACKETS + 1
    sizes = {1: 10, 2: 20, 3: big, 4: 30, 5: a.SMALL_BATCH_PACKETS - 20, 6: 50, 8: 5}
    code = list(a._batches(list(sizes), sizes, CodeStep(stalls)))
    assert code == [[1, 2], [3], [4], [5], [6, 8]]
    assert list(a._batches(list(sizes), sizes, SqlStep("handshakes"))) == [[1, 2, 3, 4, 5, 6], [8]]
