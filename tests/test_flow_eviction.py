"""The flow table holds the live flows, not every flow of the capture.

A scan of 50,000 one-packet TCP flows (a SYN each, 20 a second: 2,500 s)
ingested in batches of 2,048 packets with flows leaving after 4,096 packets
(instead of 65,536, so that a small capture shows it): the table never holds
more than the flows of the last 5 minutes (6,000) plus what waits for the
next eviction, and the rows are those of the closed form the capture was
made from and of an ingest that keeps every flow to the end.
"""

import ipaddress
import os

import duckdb
import pytest

import tracekit.pipeline.captures as captures
from tracekit import api
from tracekit.readers.decode import flows as flowtable

from pcapgen import pcap_bytes, scan_syn as _syn

N, RATE, T0 = 50_000, 20, 1_700_000_000 * 10**9
COUNTS = ("SELECT (SELECT count(*) FROM captures), (SELECT count(*) FROM flows),"
          " (SELECT count(*) FROM packets)")


@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    path = tmp_path_factory.mktemp("scan") / "scan.pcap"
    path.write_bytes(pcap_bytes([(T0 + i * 10**9 // RATE, _syn(i)) for i in range(N)]))
    return path


def _ingest(scan, db, monkeypatch, after):
    live = []
    evict = flowtable.FlowTable.evict

    def counted(self, now_ns, frame):
        live.append(self.live())
        return evict(self, now_ns, frame)

    with monkeypatch.context() as m:
        m.setattr(flowtable, "AFTER_PACKETS", after)
        m.setattr(captures, "DEFAULT_BATCH_PACKETS", 2048)
        m.setattr(flowtable.FlowTable, "evict", counted)
        api.ingest(db, [scan])
    return live


def test_a_scan_keeps_the_live_flows_only_and_the_same_rows(scan, tmp_path, monkeypatch):
    live = _ingest(scan, tmp_path / "evicted.duckdb", monkeypatch, 4096)
    kept = _ingest(scan, tmp_path / "kept.duckdb", monkeypatch, 1 << 40)
    assert len(live) == N // 2048 + 1
    # 6,000 flows of the last 5 minutes, a batch, and up to an eighth more
    # before an eviction pays: bounded by the working set, not by N
    assert max(live) <= (6000 + 2048) * 8 // 7 + 1
    assert kept[-1] > N - 2048  # without eviction every flow stays
    con = duckdb.connect(str(tmp_path / "evicted.duckdb"))
    con.execute(f"ATTACH '{tmp_path / 'kept.duckdb'}' AS kept (READ_ONLY)")
    for table in ("flows", "packets"):
        for a, b in ((table, f"kept.{table}"), (f"kept.{table}", table)):
            assert con.execute(f"SELECT count(*) FROM (FROM {a} EXCEPT ALL FROM {b})"
                               ).fetchone()[0] == 0, (table, a)
    rows = con.execute("SELECT flow_id, client_port, server_port, server_addr, first_ts_ns,"
                       " packets_c2s, packets_s2c, syn_count, handshake_rtt_ns FROM flows"
                       " ORDER BY flow_id").fetchall()
    assert len(rows) == N
    for i in (0, 1, 4095, 4096, 12_345, N - 1):
        dst = str(ipaddress.IPv4Address(0xC6120000 + i % 4096))
        assert rows[i] == (i, 1024 + i % 60000, 1 + i // 4096, dst, T0 + i * 10**9 // RATE,
                           1, 0, 1, None)
    assert con.execute("SELECT count(*) FROM packets WHERE flow_id = frame - 1"
                       ).fetchone()[0] == N


def test_memory_that_runs_out_is_one_line_and_the_store_as_it_was(scan, tmp_path, monkeypatch):
    """numpy's MemoryError (as under `ulimit -v`: "Unable to allocate ... (2097152, 30)
    int64") ends ingest in one line naming it, exit 2 -- not an internal error."""
    import numpy as np
    from click.testing import CliRunner

    from tracekit.cli import main

    def grow(self):
        np.full((1 << 50, 30), 0, np.int64)

    db = str(tmp_path / "s.duckdb")
    udp = os.path.join(os.path.dirname(__file__), "..", "captures", "udp-echo.pcapng")
    api.ingest(db, [udp])
    with duckdb.connect(db, read_only=True) as con:
        before = con.execute(COUNTS).fetchone()
    monkeypatch.setattr(flowtable.FlowTable, "_grow", grow)
    r = CliRunner().invoke(main, ["ingest", str(scan), "--db", db])
    assert r.exit_code == 2, r.output
    assert r.output.startswith("tracekit: error: out of memory during `ingest` (Unable to "
                               "allocate") and r.output.count("\n") == 1, r.output
    assert "the store is as it was before this command" in r.output
    with duckdb.connect(db, read_only=True) as con:
        assert con.execute(COUNTS).fetchone() == before
