"""qlog beside the packets of the same HTTP/3 run (aioquic over the emulated path).

The client's qlog and the client-side capture see the same datagrams on one
clock. The capture is the independent view: every datagram qlog says the
client sent must be on the wire, in order, with the same UDP payload size
and stamped a little after qlog's (the capture point is past sendto); the
handshake's packets must agree to within a millisecond or so; and every
byte qlog counts in flight must have been seen leaving. (QUIC ACKs are
encrypted, so the packet view alone cannot compute in-flight bytes; with
the keys, tshark could: tracekit tls-keys covers TLS over TCP only.)
"""

import os
import shutil

import pytest

from tracekit.lab.wan import Direction, EmulatedPath, PathSpec
from tracekit.pipeline.analyze import analyze
from tracekit.pipeline.captures import load_captures
from tracekit.pipeline.logs import load_logs
from tracekit.readers.events import read_log

pytest.importorskip("aioquic")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (network namespaces)"),
    pytest.mark.skipif(not shutil.which("tcpdump"), reason="tcpdump is not installed"),
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from tracekit.lab import h3
    from tracekit.store.db import connect

    work = tmp_path_factory.mktemp("h3")
    spec = PathSpec(up=Direction(delay_ms=10), down=Direction(delay_ms=10), seed=2)
    with EmulatedPath(spec, str(work)) as path:
        files = h3.record(path, str(work), requests=2, size=100_000)
    con = connect(work / "h3.duckdb")
    load_captures(con, [files["capture"]])
    assert len(files["client_qlog"]) == 1 and len(files["server_qlog"]) == 1
    load_logs(con, [read_log(files["client_qlog"][0]), read_log(files["server_qlog"][0]),
                    read_log(files["events"])])
    analyze(con)
    yield con, files
    con.close()


def datagrams(con, kind, from_client):
    logged = con.execute(f"""
        SELECT ts_ns, (fields->'data'->'raw'->0->>'payload_length')::INTEGER FROM events
        WHERE log_id = 1 AND kind = '{kind}' ORDER BY ts_ns, line""").fetchall()
    wire = con.execute("SELECT ts_ns, payload_bytes FROM packets WHERE from_client = ? ORDER BY frame",
                       [from_client]).fetchall()
    return logged, wire


def test_every_datagram_qlog_sent_is_on_the_wire(run):
    con, _ = run
    logged, wire = datagrams(con, "quic_datagrams_sent", True)
    assert [n for _, n in logged] == [n for _, n in wire]
    lags = [w - q for (q, _), (w, _) in zip(logged, wire)]
    # qlog stamps before sendto, the tap after: tens of us here, more on a loaded machine
    assert 0 < min(lags) and max(lags) < 20e6


def test_every_datagram_received_was_captured_first(run):
    con, _ = run
    logged, wire = datagrams(con, "quic_datagrams_received", False)
    # the capture may hold a datagram or two that came after the client stopped reading
    assert 0 <= len(wire) - len(logged) <= 2
    assert [n for _, n in logged] == [n for _, n in wire[:len(logged)]]
    assert all(q >= w for (q, _), (w, _) in zip(logged, wire))


def test_handshake_times_agree_with_the_packet_view(run):
    con, _ = run
    (start, server_hello), = con.execute(
        "SELECT start_ns, server_hello_ns FROM handshakes WHERE protocol = 'quic'").fetchall()
    (q_initial, q_server_initial), = con.execute("""
        SELECT min(ts_ns) FILTER (kind = 'quic_packet_sent'),
               min(ts_ns) FILTER (kind = 'quic_packet_received')
        FROM events WHERE log_id = 1 AND fields->'data'->'header'->>'packet_type' = 'initial'
        """).fetchall()
    assert 0 < start - q_initial < 10e6  # seen: 0.1 ms
    assert 0 < q_server_initial - server_hello < 20e6  # the client's event loop reads it later


def test_bytes_in_flight_were_seen_leaving(run):
    con, _ = run
    for log_id, from_client in ((1, True), (2, False)):
        rows = con.execute("""
            WITH m AS (SELECT ts_ns, (fields->'data'->>'bytes_in_flight')::BIGINT AS inflight
                       FROM events WHERE log_id = ? AND kind = 'quic_metrics_updated'
                         AND fields->'data'->>'bytes_in_flight' IS NOT NULL),
                 sent AS (SELECT ts_ns, sum(payload_bytes) OVER (ORDER BY frame) AS total
                          FROM packets WHERE from_client = ?)
            SELECT m.inflight, coalesce(max(s.total), 0) AS seen
            FROM m LEFT JOIN sent s ON s.ts_ns <= m.ts_ns + ?
            GROUP BY m.ts_ns, m.inflight""", [log_id, from_client, 50_000_000]).fetchall()
        assert rows and max(r[0] for r in rows) > 0
        assert all(inflight <= seen for inflight, seen in rows)


def test_requests_link_to_the_quic_flow(run):
    con, _ = run
    rows = con.execute("SELECT request, capture_id, flow_id, bytes_down FROM requests "
                       "WHERE source = 'events' AND request LIKE 'h3-%' ORDER BY request").fetchall()
    assert rows == [("h3-0", 1, 0, 100_000), ("h3-1", 1, 0, 100_000)]
