"""tracekit as a library: the same store and numbers as the CLI."""

from pathlib import Path

import pytest
from click.testing import CliRunner

import tracekit
from tracekit.cli import main

SAMPLES = Path(__file__).resolve().parents[1] / "captures"


def test_open_ingest_analyze_and_ask(tmp_path):
    db = tmp_path / "lib.duckdb"
    with tracekit.open(db) as store:
        caps, logs = store.ingest([SAMPLES / "lossy-download-server.pcap",
                                   SAMPLES / "streaming-stalls-server-events.jsonl"],
                                  labels={"path": "direct"})
        assert [c.packets for c in caps] == [476] and [lg.events for lg in logs] == [606]
        store.analyze()
        rows = store.sql("SELECT count(*) FROM retransmissions WHERE capture_id = 1").fetchall()
        assert rows == [(3,)]
        assert store.table("captures").filter("labels['path'] = 'direct'").count("*").fetchall() == [(1,)]
    # the CLI reads the same file and prints the same retransmissions
    r = CliRunner().invoke(main, ["retransmissions", "--db", str(db), "--format", "csv"])
    assert r.exit_code == 0 and r.output.count("\n") == 2  # header + one flow row


def test_a_failing_file_leaves_the_store_as_it_was(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"ts": "yesterday", "kind": "x"}\n')
    with tracekit.open(tmp_path / "lib.duckdb") as store:
        with pytest.raises(tracekit.core.errors.TracekitError, match="no event could be read"):
            store.ingest([SAMPLES / "udp-echo.pcapng", bad])
        assert store.sql("SELECT count(*) FROM captures").fetchall() == [(0,)]


def test_read_only(tmp_path):
    db = tmp_path / "lib.duckdb"
    tracekit.open(db).close()
    with tracekit.open(db, read_only=True) as store:
        assert store.sql("SELECT count(*) FROM packets").fetchall() == [(0,)]


def test_the_readme_example_runs_as_written(tmp_path, monkeypatch):
    """The README's Python block, run from the repository root (its sample path)."""
    import re
    readme = (SAMPLES.parent / "README.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", readme, re.S)
    monkeypatch.chdir(SAMPLES.parent)
    code = code.replace('"tour.duckdb"', repr(str(tmp_path / "tour.duckdb")))
    out = {}
    exec(compile(code, "README.md", "exec"), out)  # noqa: S102 - the documented example
    with tracekit.open(tmp_path / "tour.duckdb", read_only=True) as store:
        df = store.view("retransmissions")
        assert list(df["retransmissions"]) == [3]
        assert store.ablation is not None


def test_ablation_and_views_as_dataframes(demo_store):
    with tracekit.open(demo_store, read_only=True) as store:
        df = store.ablation("path", by=["connection"], levels=["direct", "tunnel"],
                            where={"experiment": "cross-region"}, predict=True)
        assert list(df["connection"]) == ["fresh", "persistent"]
        assert list(df["direct_n"]) == [20, 20] and "prediction" in df.columns
        att = store.view("attribute", run="cross-region-001")
        assert len(att) == 2 and set(att["connection"]) == {"fresh"}
