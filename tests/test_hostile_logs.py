"""Malformed event logs (tests/hostile_logs.py): each ends in a counted skip of
its bad records, or, when nothing in it can be read, one line naming the file
and exit 2 -- never an internal error, never a swallowed record."""

import re

import duckdb
import pytest
from click.testing import CliRunner
from hostile_logs import cases

from tracekit.cli import main

CASES = dict(cases())
# (events stored, malformed records counted) where the answer is known exactly
EXPECTED = {
    "jsonl_year_0001.jsonl": (2, 1), "jsonl_year_9999.jsonl": (2, 1),
    "jsonl_year_1969.jsonl": (3, 0), "jsonl_year_1972.jsonl": (3, 0),
    "jsonl_offset_99.jsonl": (2, 1), "jsonl_int_5000_digits.jsonl": (2, 1),
    "jsonl_deep_nesting.jsonl": (2, 1), "jsonl_not_object.jsonl": (2, 3),
    "jsonl_bom_utf8.jsonl": (2, 0), "jsonl_utf16le.jsonl": (2, 0),
    "jsonl_utf16be.jsonl": (2, 0), "jsonl_utf32le.jsonl": (2, 0),
    "csv_unterminated_quote.csv": (2, 1), "csv_field_200k.csv": (2, 1),
    "csv_int_5000_digits.csv": (2, 1), "csv_year_9999.csv": (2, 1),
    "csv_bom.csv": (2, 0), "csv_utf16.csv": (2, 0), "csv_bad_utf8.csv": (2, 1),
    "qlog_time_nan.qlog": (1, 1), "qlog_time_inf.qlog": (1, 1),
    "qlog_time_digits.qlog": (1, 1), "qlog_name_int.qlog": (1, 1),
    "qlog_seq_bad_records.sqlog": (1, 3), "qlog_seq_deep.sqlog": (1, 1),
    "queqiao_msg_list.log": (3, 0), "queqiao_msg_object.log": (3, 0),
    "queqiao_duration_huge.log": (2, 1), "queqiao_time_year_0.log": (2, 1),
    "queqiao_deep.log": (2, 1), "queqiao_not_object.log": (2, 2),
    "queqiao_counter_strings.log": (3, 1),
    "slog_text_unclosed_quote.log": (2, 1), "slog_text_duration_garbage.log": (2, 0),
    "lane_text_no_t.log": (1, 2), "prom_nan_values.prom": (1, 1), "harness_ragged.tsv": (1, 2),
    "har_bad_entries.har": (8, 4), "har_url_garbage.har": (3, 0),
}
# nothing readable: exit 2 with the file named
EMPTY = {"jsonl_only_bad.jsonl", "jsonl_empty_lines.jsonl", "csv_only_header.csv",
         "qlog_events_int.qlog", "qlog_config_list.qlog", "qlog_common_list.qlog",
         "qlog_time_offset_string.qlog", "qlog_deep.qlog", "qlog_truncated.qlog",
         "qlog_seq_trace_list.sqlog", "queqiaobench_deep.json", "prom_time_garbage.prom",
         "har_entries_not_list.har", "har_deep.har"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_malformed_log(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(CASES[name])
    db = tmp_path / "s.duckdb"
    r = CliRunner().invoke(main, ["ingest", str(path), "--db", str(db),
                                  "--time", "2026-05-01T10:00:00Z"])
    assert "internal error" not in r.output and "Traceback" not in r.output, r.output
    assert r.exit_code in (0, 2), r.output
    if r.exit_code == 2:
        (line,) = [ln for ln in r.output.splitlines() if ln.startswith("tracekit: error:")]
        assert str(path) in line
        assert name in EMPTY or name not in EXPECTED, line
        if db.exists():  # nothing half-written
            con = duckdb.connect(str(db), read_only=True)
            assert con.execute("SELECT count(*) FROM event_logs").fetchone()[0] == 0
        return
    assert name not in EMPTY, r.output
    con = duckdb.connect(str(db), read_only=True)
    events, malformed = con.execute("SELECT events, malformed FROM event_logs").fetchone()
    assert events > 0
    if name in EXPECTED:
        assert (events, malformed) == EXPECTED[name], r.output
    if malformed:
        assert re.search(rf"{re.escape(str(path))}: {malformed} malformed records? skipped", r.output)


def test_clock_offset_overflow_is_one_clear_line(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(CASES["jsonl_bom_utf8.jsonl"])
    for offset, says in (("1e400s", "beyond what int64"), ("1e10s", "beyond what int64"),
                         ("8e18ns", "moves its events outside 1677-2262")):
        r = CliRunner().invoke(main, ["ingest", str(path), "--db", str(tmp_path / "s.duckdb"),
                                      "--clock-offset", offset])
        assert r.exit_code == 2 and says in r.output, r.output
        assert "transaction" not in r.output.lower()


def test_absurd_frame_counts_do_not_overflow_the_playback_analyses(tmp_path):
    """Found by the mutation campaign: frames = 48,720,347,886,446 made playback.sql
    overflow INT64 and the whole analyze fail. Such a chunk is unusable, not fatal."""
    import json
    ns = 1_700_000_000_000_000_000
    recs = [{"ts_ns": ns, "kind": "chunk_arrived", "run": "r", "stream": "s", "seq": 0,
             "frames": 48_720_347_886_446, "sample_rate": 24000},
            {"ts_ns": ns + 1, "kind": "chunk_arrived", "run": "r", "stream": "s", "seq": 1,
             "frames": 480, "sample_rate": 24000},
            {"ts_ns": ns + 2, "kind": "playback_callback", "run": "r", "stream": "s",
             "requested_frames": 2**40, "delivered_frames": 480, "sample_rate": 24000}]
    path = tmp_path / "big.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    db = str(tmp_path / "s.duckdb")
    assert CliRunner().invoke(main, ["ingest", str(path), "--db", db]).exit_code == 0
    r = CliRunner().invoke(main, ["analyze", "--db", db])
    assert r.exit_code == 0, r.output
    assert "playback: rebuilt over the whole store" in r.output


def test_non_finite_numbers_odd_kinds_and_huge_records_are_counted_malformed(tmp_path):
    """JSON has no NaN or Infinity (sums of them become -inf), a kind is a string,
    and an event is at most 8 KiB (one 10 MB field emptied the store-wide tables:
    analyze hit DuckDB's memory limit). Strings that only spell NaN are fine."""
    ns = 1_700_000_000_000_000_000
    lines = [
        f'{{"ts_ns": {ns}, "kind": "request_start", "request": "a", "bytes_up": NaN}}',
        f'{{"ts_ns": {ns}, "kind": "request_start", "request": "b", "x": [1, -Infinity]}}',
        f'{{"ts_ns": {ns}, "kind": 5, "request": "c"}}',
        f'{{"ts_ns": {ns}, "kind": ["request_start"], "request": "d"}}',
        f'{{"ts_ns": {ns}, "kind": "note", "request": "e", "text": "{"x" * 10_000_000}"}}',
        f'{{"ts_ns": {ns}, "kind": "request_start", "request": "f", "note": "NaN, Infinity]"}}',
        f'{{"ts_ns": {ns + 10**6}, "kind": "request_end", "request": "f", "bytes_up": 1.5e3}}',
    ]
    path = tmp_path / "e.jsonl"
    path.write_text("\n".join(lines) + "\n")
    from tracekit.readers.events import read_log
    assert read_log(str(path)).malformed == [
        (1, "a number that is not finite (NaN or Infinity)"),
        (2, "a number that is not finite (NaN or Infinity)"),
        (3, "kind is not a string (a JSON ubigint)"), (4, "kind is not a string (a JSON array)"),
        (5, f"a record of {len(lines[4]):,} bytes (an event is at most 8 KiB)".replace(",", ""))]
    db = str(tmp_path / "s.duckdb")
    assert CliRunner().invoke(main, ["ingest", str(path), "--db", db]).exit_code == 0
    r = CliRunner().invoke(main, ["analyze", "--db", db])
    assert r.exit_code == 0 and "warning" not in r.output, r.output
    with duckdb.connect(db, read_only=True) as con:
        assert con.execute("SELECT list(request ORDER BY line) FROM events").fetchone() == (
            ["f", "f"],)
        assert con.execute("SELECT count(*) FROM attribution").fetchone() == (1,)
