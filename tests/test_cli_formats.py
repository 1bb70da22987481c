"""The CLI's shared conventions: --format ndjson|parquet (and --out) on every
row-emitting command, the same rows as --format json; -q and -v on the group
and on every command."""

import json
from pathlib import Path

import click
import duckdb
import pytest
from click.testing import CliRunner

from tracekit.cli import main

SAMPLES = Path(__file__).parent.parent / "captures"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("fmt") / "s.duckdb")
    files = [str(SAMPLES / n) for n in ("http-fresh-vs-persistent.pcap", "udp-echo.pcapng")]
    assert CliRunner().invoke(main, ["ingest", *files, "--db", db]).exit_code == 0
    return db


def _commands(group, prefix=()):
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


def test_every_row_emitting_command_offers_ndjson_and_parquet_and_every_command_q_v():
    emitting = 0
    for path, command in _commands(main):
        names = {o for p in command.params for o in p.opts}
        assert {"-q", "-v"} <= names, path
        fmt = [p for p in command.params if p.name == "fmt"]
        if fmt and "markdown" in fmt[0].type.choices:
            assert {"ndjson", "parquet"} <= set(fmt[0].type.choices) and "--out" in names, path
            emitting += 1
    assert emitting >= 20
    assert {"-q", "-v"} <= {o for p in main.params for o in p.opts}


def test_ndjson_and_parquet_hold_the_rows_json_does(store, tmp_path):
    run = CliRunner().invoke
    want = json.loads(run(main, ["sessions", "--db", store, "--format", "json"]).output)
    assert len(want) >= 4
    lines = run(main, ["sessions", "--db", store, "--format", "ndjson"]).output.splitlines()
    assert [json.loads(line) for line in lines] == want
    out = tmp_path / "s.parquet"
    r = run(main, ["sessions", "--db", store, "--format", "parquet", "--out", str(out)])
    assert r.exit_code == 0 and r.output == "", r.output
    rel = duckdb.sql(f"SELECT * FROM '{out}'")
    assert [dict(zip(rel.columns, row)) for row in rel.fetchall()] == want
    csv_file = tmp_path / "s.csv"
    assert run(main, ["sessions", "--db", store, "--format", "csv", "--out", str(csv_file)]
               ).exit_code == 0
    assert csv_file.read_text() == run(main, ["sessions", "--db", store, "--format", "csv"]).output


def test_parquet_to_a_terminal_or_pipe_is_refused_in_one_line(store):
    r = CliRunner().invoke(main, ["sessions", "--db", store, "--format", "parquet"])
    assert r.exit_code == 2
    (line,) = r.output.splitlines()
    assert "--format parquet writes a file: give --out FILE" in line


def test_quiet_and_verbose(store):
    r = CliRunner().invoke(main, ["analyze", "-v", "--db", store])
    assert r.exit_code == 0, r.output
    assert "analysing tcp_analysis for capture 1 (" in r.stderr
    assert "analysing tcp_analysis for capture 2 (" in r.stderr
    r = CliRunner().invoke(main, ["-q", "ingest", str(SAMPLES / "udp-echo.pcapng"), "--db", store,
                                  "--replace", "-v"])  # the last one given wins
    assert r.exit_code == 0 and "reading " in r.stderr, r.output
    r = CliRunner().invoke(main, ["-v", "analyze", "-q", "--db", store])
    assert r.exit_code == 0 and r.stderr == "", r.stderr


def test_analyze_progress_carries_each_steps_share_in_packets(tmp_path):
    """What analyze's ETA is computed from: in a per-capture step, the packets
    of the captures done before each one, of the step's total (the captures'
    packet counts, from the store)."""
    import tracekit
    db = str(tmp_path / "s.duckdb")
    files = [str(SAMPLES / n) for n in ("http-fresh-vs-persistent.pcap", "udp-echo.pcapng")]
    assert CliRunner().invoke(main, ["ingest", *files, "--db", db]).exit_code == 0
    calls = []

    def progress(table, capture_id, done=None, total=None):
        calls.append((table, capture_id, done, total))
    progress.takes_share = True
    with tracekit.open(db) as store:
        (a, b), = store.sql("SELECT list(packets ORDER BY capture_id) FROM captures").fetchall()[0]
        store.analyze(progress)
    assert [c for c in calls if c[0] == "tcp_analysis"] == [
        ("tcp_analysis", 1, 0, a + b), ("tcp_analysis", 2, a, a + b)]
    assert ("requests", 0, None, None) in calls  # a store-wide step: no share
