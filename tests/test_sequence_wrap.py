"""Sequence numbers that cross 2^32: every analysis is wrap-safe (RFC 1982).

The same conversation (a request, a response with three segments lost and
repaired by fast retransmission, SACK blocks above the holes) is written
with initial sequence numbers far from the wrap and with ISNs that make
every field cross 2^32 during the transfer -- the client's seq, the
server's seq, both ACK numbers and the SACK blocks (one block straddles the
wrap) -- at both vantages. Every analysis must run and every relative
value must be the same as in the run far from the wrap. A response of
4.5 GiB in 64 KiB segments (what a capture on a host with segmentation
offload sees) crosses 2^32 in relative sequence space too.
"""

import pytest
from conftest import write
from pcapgen import pcap_bytes
from tcpsim import conversation

from tracekit.pipeline.analyze import analyze
from tracekit.pipeline.captures import load_captures

FAR = (1_000, 50_000)
# the server's data crosses 2^32 inside its 60th segment, between the holes at
# 49-50 and 120 (so SACK blocks straddle it); the client's 6,000-byte request
# crosses it too
NEAR = (2**32 - 3_000, 2**32 - 60 * 1448 - 700)
LOSSES = (49, 50, 120)

COMPARED = {
    "tcp_analysis": "SELECT frame, rel_seq, rel_ack, rel_end, segment, gap_bytes, "
                    "retransmission_trigger, spurious, dsack, inflight_bytes, "
                    "peer_inflight_bytes, acked_bytes, rtt_ns, flight, acked_segments, "
                    "ws_retransmission, ws_fast_retransmission, ws_duplicate_ack, "
                    "ws_lost_segment, ws_bytes_in_flight, ws_ack_rtt_ns "
                    "FROM tcp_analysis ORDER BY frame",
    "ack_gaps": "SELECT frame, rel_ack, gap_ns, acked_bytes, sack_blocks, sacked_bytes, dsack "
                "FROM ack_gaps ORDER BY frame",
    "retransmissions": "SELECT frame, rel_seq, rel_end, kind, trigger, episode, round, "
                       "recovery_point FROM retransmissions ORDER BY frame",
    "recovery_rounds": "SELECT * EXCLUDE (capture_id) FROM recovery_rounds "
                       "ORDER BY episode, round",
    "inflight": "SELECT frame, direction, event, inflight_bytes, wireshark_bytes "
                "FROM inflight ORDER BY frame, direction",
    "flights": "SELECT * EXCLUDE (capture_id) FROM flights ORDER BY direction, flight",
    "stalls": "SELECT * EXCLUDE (capture_id) FROM stalls ORDER BY direction, start_ns",
    "requests": "SELECT bytes_up, bytes_down, duration_ns FROM requests",
}


def _analysed(db, tmp_path, name, packets):
    path = write(tmp_path, name, pcap_bytes(packets, nanoseconds=True))
    load_captures(db, [path])
    analyze(db)
    return {table: db.execute(sql).fetchall() for table, sql in COMPARED.items()}


def _raw_fields(packets):
    """(from_client, seq, ack, [(sack left, right)]) of each crafted packet."""
    import struct

    out = []
    for _, frame, _ in packets:
        tcp = frame[34:]
        seq, ack = struct.unpack(">II", tcp[4:12])
        opts = tcp[20:(tcp[12] >> 4) * 4]
        blocks = []
        k = 0
        while k < len(opts):
            if opts[k] in (0, 1):
                k += 1
                continue
            if opts[k] == 5:
                body = opts[k + 2:k + opts[k + 1]]
                blocks += [struct.unpack(">II", body[j:j + 8]) for j in range(0, len(body), 8)]
            k += opts[k + 1]
        out.append((tcp[1] == 0x40 and tcp[0] == 0x9C, seq, ack, blocks))
    return out


@pytest.mark.parametrize("vantage", ["client", "server"])
def test_sequence_wrap_every_field_crossing_2_32(tmp_path_factory, vantage):
    from tracekit.store.db import connect

    tables = {}
    for label, (isn_c, isn_s) in (("far", FAR), ("near", NEAR)):
        packets = conversation(isn_c, isn_s, 200 * 1448, lose=LOSSES, request_bytes=6_000)
        if label == "near":  # the raw fields really cross 2^32 at this vantage
            raw = _raw_fields(packets[vantage])
            for from_client in (True, False):
                for field in (1, 2):
                    values = [r[field] for r in raw if r[0] == from_client and r[field]]
                    assert max(values) > 2**32 - 2**20 and min(values) < 2**20
            assert any(lo > hi for r in raw for lo, hi in r[3]), "a SACK block straddles 2^32"
        tmp = tmp_path_factory.mktemp(label)
        con = connect(tmp / "t.duckdb")
        tables[label] = _analysed(con, tmp, f"{label}-{vantage}.pcap", packets[vantage])
        con.close()
    retransmitted = [r for r in tables["far"]["retransmissions"] if r[3] == "retransmission"]
    assert len(retransmitted) == len(LOSSES)
    for table in COMPARED:
        assert tables["near"][table] == tables["far"][table], table


def test_sequence_wrap_a_transfer_beyond_4_gib(db, tmp_path):
    """4.5 GiB in 65,000-byte segments: relative numbers count past 2^32,
    the losses beyond it are repaired where they are, bytes add up."""
    size = 4_500_000_000
    mss = 65_000
    late = size // mss - 10  # a segment lost beyond relative 2^32
    packets = conversation(2**32 - 10, 7, size, mss=mss, lose=(late,), gap_ns=5_000,
                           snap=128)["server"]
    path = write(tmp_path, "big.pcap", pcap_bytes(packets, nanoseconds=True, snaplen=128))
    load_captures(db, [path])
    analyze(db)
    (rel_end,), = db.execute("SELECT max(rel_end) FROM tcp_analysis WHERE NOT from_client").fetchall()
    assert rel_end == size + 2  # SYN and FIN count one each
    rows = db.execute("SELECT rel_seq, kind, trigger, round FROM retransmissions").fetchall()
    assert rows == [(1 + late * mss, "retransmission", "fast", 1)]
    (down,), = db.execute("SELECT bytes_down FROM requests").fetchall()
    assert down == size
    (peak,), = db.execute("SELECT max(inflight_bytes) FROM tcp_analysis "
                          "WHERE NOT from_client").fetchall()
    # what one round trip holds at 65,000 bytes per 5 us (the model's owd is
    # 10 ms), never a span of the sequence space
    assert 4_000 * mss <= peak <= 4_001 * mss
