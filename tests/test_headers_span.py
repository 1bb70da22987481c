"""The response's packet headers at the bottleneck (issue #26: spans from evidence).

B is measured in IP bytes, S_d counts payload: a response that crossed a
full bottleneck took S_d / B plus its headers' time, and that time is the
span `headers`, not a wait of the sender's. The capture (tests/data/shaped,
made by hand): a token bucket on a router shaping to 20 Mbit/s of Ethernet
frames, BBR, two 2 MB downloads captured at the client.
"""

from pathlib import Path

import pytest
from click.testing import CliRunner

import tracekit
from tracekit.cli import main

from test_gap_account import gap_residuals

CAPTURE = Path(__file__).parent / "data" / "shaped" / "tbf20-bbr-client.pcap"
UPLOAD = CAPTURE.with_name("tbf20-bbr-upload-client.pcap")
SHAPED_BPS = 20e6  # tbf counts the frame: 14 bytes of Ethernet on each IP packet
FRAME, PACKET, SEGMENT = 1514, 1500, 1448  # full-sized, with TCP timestamps


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    yield from _store(tmp_path_factory, CAPTURE)


@pytest.fixture(scope="module")
def upload_store(tmp_path_factory):
    yield from _store(tmp_path_factory, UPLOAD)


def _store(tmp_path_factory, capture):
    db = tmp_path_factory.mktemp("shaped") / "shaped.duckdb"
    for args in (["ingest", str(capture)], ["analyze"]):
        r = CliRunner().invoke(main, [*args, "--db", str(db)])
        assert r.exit_code == 0, r.output
    with tracekit.open(str(db), read_only=True) as s:
        yield s.con


def test_the_rate_is_the_buckets_in_ip_bytes(store):
    rates = store.execute("SELECT rate_bps FROM bounds").fetchall()
    assert len(rates) == 2
    for (rate,) in rates:
        assert rate == pytest.approx(SHAPED_BPS * PACKET / FRAME, rel=0.01)


def phase_spans(con, phase):
    """Per request: the phase's time, S, headers_ns; its transfer, headers and other spans."""
    up = phase == "upload"
    rows = con.execute(f"""
        SELECT {"p.b_ns - p.a_ns, b.bytes_up, b.headers_up_ns" if up else
                "p.d_ns - p.c_ns, b.bytes_down, b.headers_down_ns"},
            sum(a.ns) FILTER (a.span = '{phase}_transfer' AND a.phase = '{phase}'),
            sum(a.ns) FILTER (a.span = 'headers' AND a.phase = '{phase}'),
            coalesce(sum(a.ns) FILTER (a.phase = '{phase}'
                     AND a.span NOT IN ('{phase}_transfer', 'headers')), 0)
        FROM request_phases p JOIN bounds b USING (request_key)
        JOIN attribution a USING (request_key) GROUP BY ALL""").fetchall()
    assert len(rows) == 2
    return rows


def test_the_download_is_its_transfer_and_its_headers(store):
    rows = phase_spans(store, "download")
    for download, size, headers_ns, transfer, headers, other in rows:
        # physics: the bucket sends every frame of the response at 20 Mbit/s
        # (less its burst, 15 kB let through at once: 6 ms)
        assert download == pytest.approx(size * FRAME / SEGMENT * 8e9 / SHAPED_BPS, rel=0.02)
        # the download's gaps are the transfer: S_d / B, then the headers, nothing waited
        assert transfer + headers == download and other == 0
        assert 0.025 * transfer < headers and headers >= 0.8 * headers_ns


def test_the_upload_is_its_transfer_and_its_headers(upload_store):
    """At the sender the upload's states: the bucket's pace held its window
    (busy) throughout; S_u / B and the headers' time fill it."""
    rows = phase_spans(upload_store, "upload")
    for upload, size, headers_ns, transfer, headers, other in rows:
        assert upload == pytest.approx(size * FRAME / SEGMENT * 8e9 / SHAPED_BPS, rel=0.02)
        assert other < 0.001 * upload  # (the client's 0.1 ms before its first byte left)
        assert 0.02 * transfer < headers


@pytest.mark.parametrize("name", ["store", "upload_store"])
def test_the_gap_is_still_one_account(name, request):
    rows, off = gap_residuals(request.getfixturevalue(name))
    assert len(rows) == 2 and off == []


def test_a_rate_mbps_label_is_the_bounds_rate_as_it_is_the_what_ifs(tmp_path):
    """`rate_mbps` (the what-if factor's name) states B as `bottleneck_mbps` (the
    lab's) does: a user who labels runs for `tracekit whatif` gets the same B in
    the bound (it was read by whatif only)."""
    db = str(tmp_path / "labelled.duckdb")
    for args in (["ingest", str(CAPTURE), "--label", "rate_mbps=19.5"], ["analyze"]):
        r = CliRunner().invoke(main, [*args, "--db", db])
        assert r.exit_code == 0, r.output
    with tracekit.open(db, read_only=True) as s:
        assert s.con.execute("SELECT DISTINCT rate_bps, rate_source FROM bounds").fetchall() == [
            (19_500_000, "given")]
