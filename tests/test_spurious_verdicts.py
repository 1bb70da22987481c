"""One spurious verdict per retransmission, from the evidence at either vantage.

A client's SYN goes out, the server answers, the SYN-ACK is lost; the
client sends its SYN again after a second. Near the client nothing says the
second SYN was unnecessary (the SYN-ACK that comes back echoes the second
SYN's TSval, no D-SACK covers a SYN); near the server both SYNs arrived, so
the original had not been lost. The same retransmission gets the server
capture's verdict in both captures; the second SYN-ACK, whose original was
lost, is spurious in neither.
"""

import struct

import pytest
from pcapgen import pcap_bytes
from tcpsim import ACK, SYN, tcp_packet

from tracekit.pipeline.analyze import analyze
from tracekit.pipeline.captures import load_captures
from tracekit.store.db import connect

C, S = [198, 18, 0, 1], [198, 19, 0, 1]
CISN, SISN = 1000, 900_000
MS = 1_000_000
T0 = 1_700_000_000 * 10 ** 9


def ts_option(tsval, tsecr):
    return b"\x01\x01\x08\x0a" + struct.pack(">II", tsval, tsecr)


def syn(t, ip_id, tsval):
    return t, tcp_packet(C, S, 40000, 443, CISN, 0, SYN, options=ts_option(tsval, 0), ip_id=ip_id)[0]


def synack(t, ip_id, tsval, tsecr):
    return t, tcp_packet(S, C, 443, 40000, SISN, CISN + 1, SYN | ACK, options=ts_option(tsval, tsecr),
                         ip_id=ip_id)[0]


def pure_ack(t, ip_id, tsval, tsecr):
    return t, tcp_packet(C, S, 40000, 443, CISN + 1, SISN + 1, ACK, options=ts_option(tsval, tsecr),
                         ip_id=ip_id)[0]


def captures(tmp_path):
    """The same handshake seen at the client and at the server (10 ms one way)."""
    client = [syn(T0, 1, 100), syn(T0 + 1000 * MS, 2, 1100),
              synack(T0 + 1020 * MS, 51, 6000, 1100), pure_ack(T0 + 1020 * MS + 50_000, 3, 1120, 6000)]
    server = [syn(T0 + 10 * MS, 1, 100), synack(T0 + 10 * MS + 40_000, 50, 5000, 100),  # lost
              syn(T0 + 1010 * MS, 2, 1100), synack(T0 + 1010 * MS + 40_000, 51, 6000, 1100),
              pure_ack(T0 + 1030 * MS + 50_000, 3, 1120, 6000)]
    paths = []
    for name, packets in (("client.pcap", client), ("server.pcap", server)):
        path = tmp_path / name
        path.write_bytes(pcap_bytes(packets, nanoseconds=True))
        paths.append(path)
    return paths


@pytest.fixture
def verdicts(tmp_path):
    con = connect(tmp_path / "s.duckdb")
    load_captures(con, captures(tmp_path))
    analyze(con)
    ids = dict(con.execute("SELECT file_name, capture_id FROM captures").fetchall())
    rows = con.execute("""
        SELECT c.file_name, v.direction, p.ip_id, v.spurious_here, v.spurious, v.basis,
               v.evidence_capture_id, v.captures
        FROM spurious_verdicts v JOIN captures c USING (capture_id) JOIN packets p USING (capture_id, frame)
        ORDER BY c.file_name, v.frame""").fetchall()
    con.close()
    return ids, rows


def test_the_receivers_evidence_decides_at_both_vantages(verdicts):
    ids, rows = verdicts
    server = ids["server.pcap"]
    assert rows == [
        # near the client: no evidence of its own; the server capture's decides
        ("client.pcap", "c2s", 2, False, True, "other_capture", server, 2),
        # near the server: both SYNs arrived
        ("server.pcap", "c2s", 2, False, True, "receiver_copies", server, 2),
        # the SYN-ACK sent again after its original was lost: necessary
        ("server.pcap", "s2c", 51, False, False, None, None, 1),
    ]


def test_one_capture_alone_keeps_its_own_verdict(tmp_path):
    con = connect(tmp_path / "s.duckdb")
    load_captures(con, captures(tmp_path)[:1])
    analyze(con)
    assert con.execute("SELECT spurious, basis, captures FROM spurious_verdicts").fetchall() == [
        (False, None, 1)]
    con.close()
