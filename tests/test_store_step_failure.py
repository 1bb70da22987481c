"""A store-wide step that fails is isolated like a capture that fails: its
table is left empty (not stale), the reason is recorded and printed, the
steps after it run, and the next analyze tries it again."""

from pathlib import Path

import duckdb
from click.testing import CliRunner

from tracekit.cli import main
from tracekit.pipeline import analyze as A

CAPTURES = Path(__file__).parent.parent / "captures"


def test_a_failing_store_step_does_not_stop_analyze(tmp_path, monkeypatch):
    db = str(tmp_path / "s.duckdb")
    files = [CAPTURES / "streaming-stalls-client.pcap",
             CAPTURES / "streaming-stalls-client-events.jsonl"]
    assert CliRunner().invoke(main, ["ingest", *map(str, files), "--db", db]).exit_code == 0
    assert CliRunner().invoke(main, ["analyze", "--db", db]).exit_code == 0
    with duckdb.connect(db) as con:
        before = con.execute("SELECT count(*) FROM playback").fetchone()[0]
        con.execute("DELETE FROM analysis_runs WHERE capture_id = 0")  # rebuild the store steps
    assert before > 0

    real = A.StoreStep.write_all

    def broken(self, con, target):
        if self.table == "playback":
            raise duckdb.ConversionException("Conversion Error: an absurd frame count")
        return real(self, con, target)

    monkeypatch.setattr(A.StoreStep, "write_all", broken)
    r = CliRunner().invoke(main, ["analyze", "--db", db])
    assert r.exit_code == 0, r.output
    assert ("warning: playback: could not be built over the whole store and is empty until the "
            "next analyze (the steps after it ran): Conversion Error: an absurd frame count"
            in r.output)
    assert "attribution: rebuilt over the whole store" in r.output  # a step after it
    with duckdb.connect(db) as con:
        assert con.execute("SELECT count(*) FROM playback").fetchone()[0] == 0  # not stale
        assert con.execute("SELECT version, error FROM analysis_runs WHERE analysis = 'playback'"
                           ).fetchall() == [("failed", "Conversion Error: an absurd frame count")]
    monkeypatch.setattr(A.StoreStep, "write_all", real)
    r = CliRunner().invoke(main, ["analyze", "--db", db])
    assert r.exit_code == 0 and "playback: rebuilt over the whole store" in r.output, r.output
    with duckdb.connect(db) as con:
        assert con.execute("SELECT count(*) FROM playback").fetchone()[0] == before
