"""`tcp_analysis` stored in two parts: every packet's dense columns and the
sparse event facts (`tcp_events`), joined back by the view.

The checks do not trust the split's own predicate: which packets have an
event is recomputed here in SQL from the documented columns (a flag true or
a value present), on real captures whose retransmissions, spurious verdicts
and duplicate ACKs the tshark oracle tests (test_tcp_analysis) hold to
Wireshark's through the same view.
"""

from pathlib import Path

from tracekit.pipeline.analyze import analyze
from tracekit.pipeline.captures import load_captures
from tracekit.store.schema import EVENT_COLUMNS, TCP_ANALYSIS

SAMPLES = Path(__file__).resolve().parents[1] / "captures"
INPUTS = [SAMPLES / "lossy-download-server.pcap", SAMPLES / "lossy-download-client.pcap",
          SAMPLES / "http-fresh-vs-persistent.pcap"]
FLAGS = [c.name for c in TCP_ANALYSIS if c.sql == "BOOLEAN NOT NULL" and c.name in EVENT_COLUMNS]
VALUES = [c for c in EVENT_COLUMNS if c not in FLAGS]


def _any_event(alias="t"):
    return " OR ".join([f"{alias}.{c}" for c in FLAGS] +
                       [f"{alias}.{c} IS NOT NULL" for c in VALUES])


def test_events_hold_exactly_the_packets_with_an_event(db, monkeypatch):
    """In chunks of 7 frames, so most verdicts found later (a retransmission's
    recovery) are written late, as updates of tcp_events."""
    from tracekit.pipeline.steps import sequence
    monkeypatch.setattr(sequence.build, "__defaults__", (7,))
    load_captures(db, INPUTS)
    analyze(db)
    total, with_event, retransmitted, recovered = db.execute(f"""
        SELECT count(*), count(*) FILTER ({_any_event()}),
               count(*) FILTER (segment IN ('repeat', 'hole_fill')),
               count(recovered_ns) FROM tcp_analysis t""").fetchall()[0]
    # every TCP packet of a flow has its row in the view, as in `packets`
    (tcp,), = db.execute("SELECT count(*) FROM packets WHERE protocol = 6 AND flow_id IS NOT "
                         "NULL AND tcp_flags IS NOT NULL").fetchall()
    assert total == tcp > 2000
    # the samples' scripted losses: each retransmission acknowledged (set late)
    assert recovered == retransmitted >= 5
    (events,), = db.execute("SELECT count(*) FROM tcp_events").fetchall()
    assert events == with_event and 0 < events < total / 4
    # the same packets, both ways
    missing, extra = db.execute(f"""
        SELECT (SELECT count(*) FROM tcp_analysis t ANTI JOIN tcp_events e
                USING (capture_id, frame) WHERE {_any_event()}),
               (SELECT count(*) FROM tcp_events e ANTI JOIN (
                    SELECT capture_id, frame FROM tcp_analysis t WHERE {_any_event()})
                USING (capture_id, frame))""").fetchall()[0]
    assert (missing, extra) == (0, 0)
    # the view's columns are the documented ones, in order, of their types
    described = [(r[0], r[1]) for r in db.execute("DESCRIBE tcp_analysis").fetchall()]
    assert described == [(c.name, c.sql.replace(" NOT NULL", "")) for c in TCP_ANALYSIS]


def _wide_layout(db):
    """Make `db` (analysed) a store of the layout before the split: every column in
    `store.tcp_analysis`, no `tcp_events`, the step's version another. Its rows
    are kept in table `before`."""
    db.execute("CREATE TABLE before AS SELECT * FROM tcp_analysis")
    db.execute("DROP VIEW tcp_analysis")
    db.execute("DROP VIEW tcp_events")
    db.execute("DROP TABLE store.tcp_events")
    db.execute("DROP TABLE store.tcp_analysis")
    db.execute("CREATE TABLE store.tcp_analysis AS SELECT * FROM before")
    db.execute("CREATE VIEW tcp_analysis AS SELECT * FROM store.tcp_analysis")
    db.execute("UPDATE analysis_runs SET version = 'wide' WHERE analysis = 'tcp_analysis'")


def test_a_store_of_the_wide_layout_is_rebuilt_split_with_the_same_rows(db):
    """A store whose `store.tcp_analysis` holds every column (the layout before
    the split, its step's version another) is rebuilt by the next analyze."""
    load_captures(db, INPUTS[:1])
    analyze(db)
    _wide_layout(db)
    built = {r.table: r.built for r in analyze(db)}
    assert built["tcp_analysis"] == 1
    stored = {r[0] for r in db.execute("DESCRIBE store.tcp_analysis").fetchall()}
    assert not stored & set(EVENT_COLUMNS) and "inflight_bytes" in stored
    one, two = db.execute("""
        SELECT (SELECT count(*) FROM (FROM before EXCEPT ALL FROM tcp_analysis)),
               (SELECT count(*) FROM (FROM tcp_analysis EXCEPT ALL FROM before))""").fetchall()[0]
    assert (one, two) == (0, 0)


def test_a_store_of_the_wide_layout_exports_and_its_dataset_is_analysed_again(tmp_path):
    """`tracekit export` of a store made before the split (or imported from an
    old dataset) has no `tcp_events` to export: it writes the wide table as it
    is (it was an internal error: "Table with name tcp_events does not exist"),
    and the dataset's next analyze builds it again, with `tcp_events`, the
    same rows."""
    from click.testing import CliRunner

    from tracekit.cli import main
    from tracekit.store.db import connect
    path = tmp_path / "wide.duckdb"
    con = connect(path)
    load_captures(con, INPUTS[:1])
    analyze(con)
    _wide_layout(con)
    con.close()
    runner = CliRunner()
    exported = runner.invoke(main, ["export", "--parquet", str(tmp_path / "ds"), "--db", str(path)])
    assert exported.exit_code == 0, exported.output
    analysed = runner.invoke(main, ["analyze", "--store", str(tmp_path / "ds") + "/"])
    assert analysed.exit_code == 0, analysed.output
    assert "capture 1: analysed again" in analysed.output
    # (the capture was not read by this command: no packet count, not "0 packets")
    assert "total: 1 capture, 0 failures" in analysed.output
    ds = str(tmp_path / "ds").replace("'", "''")
    con = connect(path)
    try:
        one, two, events = con.execute(f"""
            WITH d AS (SELECT * FROM read_parquet('{ds}/tcp_analysis/*/*.parquet')),
                 e AS (SELECT * FROM read_parquet('{ds}/tcp_events/*/*.parquet'))
            SELECT (SELECT count(*) FROM (SELECT frame FROM before EXCEPT ALL SELECT frame FROM d)),
                   (SELECT count(*) FROM (SELECT frame FROM d EXCEPT ALL SELECT frame FROM before)),
                   (SELECT count(*) FROM e)""").fetchall()[0]
    finally:
        con.close()
    assert (one, two) == (0, 0)
    assert events > 0
