"""`handshakes` for QUIC and TCP against tshark's oracles."""

import pytest
from conftest import needs_shared
from oracle import epoch_ns, read_tsv

from tracekit.pipeline.analyze import analyze

pytestmark = needs_shared

QUIC_CAPTURES = ["tcpdump__quic_retry.pcap", "zeek__curl-8.1.2-dev-http3-www-google-de.pcap",
                 "zeek__quic-go_handshake.pcap"]


@pytest.fixture(scope="module")
def analyzed(shared_db):
    con, ids = shared_db
    analyze(con)
    return con, ids


@pytest.mark.parametrize("name", QUIC_CAPTURES)
def test_quic_initials_and_retries_are_tsharks(analyzed, name):
    """Client Initial, server Initial and Retry count per QUIC connection equal
    what tshark's quic.long.packet_type says (0 Initial, 3 Retry)."""
    con, ids = analyzed
    rows = [r for r in read_tsv(name, "handshake") if r["quic.long.packet_type"]]
    client_port = rows[0]["udp.srcport"]
    firsts, retries = {}, 0
    for r in rows:
        types = r["quic.long.packet_type"].split(",")
        side = "client" if r["udp.srcport"] == client_port else "server"
        if types[0] == "0":
            firsts.setdefault(side, epoch_ns(r["frame.time_epoch"]))
        retries += types.count("3")
    ours = con.execute("SELECT start_ns, server_hello_ns, retries, version FROM handshakes "
                       "WHERE capture_id = ? AND protocol = 'quic'", [ids[name]]).fetchall()
    assert len(ours) == 1
    start, server, n_retry, version = ours[0]
    assert (start, server, n_retry) == (firsts["client"], firsts["server"], retries)
    assert version == "QUIC v1"


def test_tcp_handshake_rows_are_the_flows(analyzed):
    """One tcp row per TCP flow whose SYN or SYN-ACK was captured; its duration
    is the flow's SYN -> first ACK (the handshake RTT when one SYN was sent)."""
    con, _ = analyzed
    mismatched = con.execute("""
        SELECT count(*) FROM handshakes h JOIN flows f USING (capture_id, flow_id)
        WHERE h.protocol = 'tcp' AND f.syn_count = 1
          AND h.duration_ns IS DISTINCT FROM f.handshake_rtt_ns""").fetchall()[0][0]
    assert mismatched == 0
    counts = con.execute("""
        SELECT (SELECT count(*) FROM handshakes WHERE protocol = 'tcp'),
               (SELECT count(*) FROM flows WHERE protocol = 'tcp'
                AND (syn_ts_ns IS NOT NULL OR synack_ts_ns IS NOT NULL))""").fetchall()[0]
    assert counts[0] == counts[1] > 0
