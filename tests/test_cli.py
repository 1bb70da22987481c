"""The command line: exact output, formats, errors (one line, exit status 2)."""

import json

import pytest
from click.testing import CliRunner
from conftest import SHARED, needs_shared

from tracekit.cli import main

GET = str(SHARED / "zeek__get.pcap")


@pytest.fixture
def store(tmp_path):
    db = str(tmp_path / "cli.duckdb")
    r = CliRunner().invoke(main, ["ingest", GET, "--db", db, "--label", "path=direct",
                                  "--label", "conn=fresh"])
    assert r.exit_code == 0, r.output
    return db


@needs_shared
def test_ingest_prints_one_line_per_file_and_a_summary(store, tmp_path):
    r = CliRunner().invoke(main, ["ingest", GET, str(SHARED / "ndpi__ipp.pcap"),
                                  "--db", str(tmp_path / "two.duckdb")])
    lines = r.output.splitlines()
    assert lines[0] == "zeek__get.pcap: ingested as capture 1: 14 packets, 1 flow, none skipped"
    assert lines[1] == "ndpi__ipp.pcap: ingested as capture 2: 279 packets, 3 flows, skipped not_ip 2"
    assert lines[2].startswith("total: 293 packets, 4 flows, skipped not_ip 2; ")
    assert lines[2].endswith(" packets/s")


@needs_shared
def test_sessions_csv_exact(store):
    # tshark's oracle for this capture: conv,tcp 7 + 7 frames over 0.2116 s,
    # initial_rtt 0.070034 s, tcp.len summing to 136 and 5007 bytes.
    r = CliRunner().invoke(main, ["sessions", "--db", store, "--format", "csv"])
    assert r.exit_code == 0
    assert r.output == (
        "capture,flow,protocol,client,server,handshake_rtt_ms,duration_s,packets_c2s,"
        "packets_s2c,bytes_c2s,bytes_s2c\n"
        "1,0,tcp,141.142.228.5:59856,192.150.187.43:80,70.034,0.211628,7,7,136,5007\n")


@needs_shared
def test_sessions_table_is_aligned(store):
    r = CliRunner().invoke(main, ["sessions", "--db", store])
    header, rule, row = r.output.splitlines()
    assert header.split() == ["capture", "flow", "protocol", "client", "server", "handshake_rtt_ms",
                              "duration_s", "packets_c2s", "packets_s2c", "bytes_c2s", "bytes_s2c"]
    assert len(header) == len(rule) and rule.startswith("-------  ----")
    assert row.index("70.034") + len("70.034") == header.index("handshake_rtt_ms") + len("handshake_rtt_ms")


@needs_shared
def test_captures_markdown_and_labels(store):
    r = CliRunner().invoke(main, ["captures", "--db", store, "--format", "markdown"])
    lines = r.output.splitlines()
    assert lines[0].startswith("| capture | file | format | link_types | packets | flows |")
    assert "| 1 | zeek__get.pcap | pcap | 1 | 14 | 1 |" in lines[2]
    assert lines[2].endswith("| path=direct conn=fresh |")  # in the order given


@needs_shared
def test_sql_from_argument_and_stdin(store):
    q = "SELECT count(*) AS n, sum(payload_bytes) AS bytes FROM packets"
    r = CliRunner().invoke(main, ["sql", q, "--db", store, "--format", "json"])
    assert json.loads(r.output) == [{"n": 14, "bytes": 5143}]
    r = CliRunner().invoke(main, ["sql", "--db", store, "--format", "csv"], input=q)
    assert r.output == "n,bytes\n14,5143\n"


@needs_shared
def test_sql_error_is_one_line(store):
    r = CliRunner().invoke(main, ["sql", "SELECT * FROM nope", "--db", store])
    assert r.exit_code == 2
    assert r.output == ("tracekit: error: query failed: Catalog Error: Table with name nope "
                        "does not exist!\n")


def test_not_a_capture_exit_2(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("hello world")
    r = CliRunner().invoke(main, ["ingest", str(p), "--db", str(tmp_path / "x.duckdb")])
    assert r.exit_code == 2
    assert r.output == (f"tracekit: error: {p} is not a pcap or pcapng capture: its first bytes "
                        f"are 68656c6c ('hell'); expected the magic a1b2c3d4 or a1b23c4d in either "
                        f"byte order (pcap) or 0a0d0d0a (pcapng), or an event log (JSON Lines, "
                        f"CSV with ts and kind columns, qlog, Queqiao; --format names one)\n")


def test_missing_file_and_bad_label(tmp_path):
    db = str(tmp_path / "x.duckdb")
    r = CliRunner().invoke(main, ["ingest", str(tmp_path / "nope.pcap"), "--db", db])
    assert r.exit_code == 2
    assert r.output == f"tracekit: error: {tmp_path / 'nope.pcap'}: cannot read: No such file or directory\n"
    r = CliRunner().invoke(main, ["ingest", GET, "--db", db, "--label", "oops"])
    assert r.exit_code == 2
    assert r.output == ("tracekit: error: --label 'oops' is not KEY=VALUE "
                        "(e.g. --label path=direct)\n")


def test_reading_a_missing_database_says_how_to_make_one(tmp_path):
    db = str(tmp_path / "none.duckdb")
    r = CliRunner().invoke(main, ["sessions", "--db", db])
    assert r.exit_code == 2
    assert r.output == (f"tracekit: error: {db}: no such database; ingest a capture first "
                        f"(tracekit ingest FILE --db {db})\n")


def test_db_from_environment(tmp_path, monkeypatch):
    db = str(tmp_path / "env.duckdb")
    monkeypatch.setenv("TRACEKIT_DB", db)
    r = CliRunner().invoke(main, ["sql", "SELECT 42 AS answer"])
    assert r.exit_code == 2  # the store does not exist yet: nothing is created by a query
    assert db in r.output


@pytest.mark.parametrize("command", ["ingest", "captures", "sessions", "sql"])
def test_every_command_has_help_with_an_example(command):
    r = CliRunner().invoke(main, [command, "-h"])
    assert r.exit_code == 0
    assert "Example:" in r.output


def test_progress_appears_only_on_a_terminal_after_a_second(monkeypatch, capsys):
    from tracekit.cli import common as cli

    clock = iter([100.0, 100.5, 101.5, 200.0])
    monkeypatch.setattr(cli.time, "monotonic", lambda: next(clock))
    p = cli.Progress(enabled=True)  # started at 100.0
    p("/x/big.pcap", 10, 100)  # 0.5 s: too early to show
    assert capsys.readouterr().err == ""
    p("/x/big.pcap", 50_000_000, 200_000_000)  # 1.5 s; a quarter in 1 s since the file began
    assert capsys.readouterr().err == ("\ringesting big.pcap:  25.0% of 200 MB, about 3 s left"
                                       + " " * 8)
    quiet = cli.Progress(enabled=False)
    quiet("/x/big.pcap", 1, 2)
    assert capsys.readouterr().err == ""


def test_a_status_line_pads_over_the_last_and_wipes_only_what_it_showed(capsys):
    from tracekit.cli.common import StatusLine
    line = StatusLine(pad=3, width=12)
    line.clear()  # never shown: nothing to wipe
    assert capsys.readouterr().err == ""
    line.show("12/40 done")
    line.show("13/40")
    line.clear()
    line.clear()
    assert capsys.readouterr().err == "\r12/40 done   \r13/40   \r" + " " * 12 + "\r"


def test_every_room_lists_the_commands_it_holds():
    # the group loads a room (a module of tracekit.cli) when one of its commands
    # is asked for, by the names ROOMS gives: they must be the room's own
    import importlib

    from tracekit.cli.app import ROOMS
    for room, names in ROOMS.items():
        module = importlib.import_module(f"tracekit.cli.{room}")
        assert tuple(c.name for c in module.COMMANDS) == names, room
    assert sorted(main.commands) == sorted(n for names in ROOMS.values() for n in names)
    assert all(any(p.name == "quiet" for p in c.params) for c in main.commands.values())
