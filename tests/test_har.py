"""HAR files exported by Chrome, Firefox, Safari, Charles and Insomnia
(tests/data/har, provenance in its README): every entry a request whose
times are the entry's own, computed independently here from the file."""

import json
from datetime import datetime
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from tracekit.cli import main
from tracekit.readers.events import read_log

DATA = Path(__file__).parent / "data" / "har"


def entries(name):
    with open(DATA / name, encoding="utf-8-sig") as f:
        return json.load(f)["log"]["entries"]


def start_us(entry):
    """startedDateTime in us since the epoch (all these files give <= 6 digits)."""
    return round(datetime.fromisoformat(entry["startedDateTime"].replace("Z", "+00:00"))
                 .timestamp() * 1e6)


@pytest.mark.parametrize("name, n", [("chrome.har", 3), ("with-bom.har", 1), ("firefox.har", 14),
                                     ("head-content-length.har", 1), ("safari.har", 19),
                                     ("charles.har", 1), ("insomnia.har", 1)])
def test_every_entry_is_a_request_with_its_own_times(name, n):
    parsed = read_log(str(DATA / name))
    assert parsed.format == "har" and parsed.records == n and parsed.malformed == []
    rows = parsed.table.to_pylist()
    for i, entry in enumerate(entries(name), start=1):
        mine = {r["kind"]: r for r in rows if r["request"] == f"har:{i}"}
        assert mine["request_start"]["ts_ns"] // 1000 == start_us(entry)
        assert mine["request_end"]["ts_ns"] - mine["request_start"]["ts_ns"] == round(
            entry["time"] * 1e6)
        fields = json.loads(mine["request_start"]["fields"])
        assert fields["url"] == entry["request"]["url"] and fields["status"] == entry["response"]["status"]
        if entry.get("serverIPAddress"):
            assert mine["request_start"]["remote_addr"] == entry["serverIPAddress"].strip("[]")


def test_phases_in_order_and_ssl_where_the_exporter_put_it():
    # Charles: dns 43, connect 37 (ssl 26 inside it), send 1, wait 24, receive 2 = 107 ms
    rows = {r["kind"]: r["ts_ns"] for r in read_log(str(DATA / "charles.har")).table.to_pylist()}
    t0 = rows["request_start"]
    assert [rows[k] - t0 for k in ("connect_start", "connect_end", "first_byte", "request_end")] == [
        43_000_000, 80_000_000, 105_000_000, 107_000_000]
    # Firefox: connect 31.687 and ssl 35.333 after it (the phases sum to time 101.564 only so)
    rows = read_log(str(DATA / "head-content-length.har")).table.to_pylist()
    got = {r["kind"]: r["ts_ns"] for r in rows}
    t0 = got["request_start"]
    t = entries("head-content-length.har")[0]["timings"]
    # (ms as binary floats: equal to the ns, +-1)
    assert abs(got["connect_end"] - t0 - (t["connect"] + t["ssl"]) * 1e6) <= 1
    assert abs(got["first_byte"] - t0 - (t["connect"] + t["ssl"] + t["send"] + t["wait"]) * 1e6) <= 1
    assert got["first_byte"] - t0 > 100_000_000  # not 64.9 ms, as ssl inside connect would give
    assert json.loads(rows[0]["fields"])["ssl_in_connect"] is False


def test_har_entries_become_requests(tmp_path):
    db = str(tmp_path / "x.duckdb")
    r = CliRunner().invoke(main, ["ingest", str(DATA / "charles.har"), str(DATA / "chrome.har"),
                                  "--db", db])
    assert r.exit_code == 0, r.output
    assert "charles.har: ingested as event log 1 (har): 5 events of 1 record" in r.output
    assert CliRunner().invoke(main, ["analyze", "--db", db]).exit_code == 0
    con = duckdb.connect(db)
    got = con.execute("SELECT log_id, request, duration_ns, connection, response_first_byte_ns - start_ns "
                      "FROM requests ORDER BY log_id, request").fetchall()
    assert got == [(1, "har:1", 107_000_000, "fresh", 105_000_000),
                   (2, "har:1", 14_666_000, "reused", 12_964_000),
                   (2, "har:2", 4_119_000, "reused", 4_119_000),
                   (2, "har:3", 58_205_000, "reused", 57_613_000)]  # blocked + send + wait
