"""Captures from the test suites of tcpdump, Zeek and nDPI (tests/data/pcap,
provenance in its README), held against tcpdump's own decoding of them (its
.out files) or tshark 4.0.17's."""

from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from tracekit.cli import main

DATA = Path(__file__).parent / "data" / "pcap"


def store(tmp_path, name, analyze=False):
    db = str(tmp_path / "x.duckdb")
    r = CliRunner().invoke(main, ["ingest", str(DATA / name), "--db", db])
    assert r.exit_code == 0, r.output
    if analyze:
        assert CliRunner().invoke(main, ["analyze", "--db", db]).exit_code == 0
    return duckdb.connect(db)


def test_nflog_link_type_239(tmp_path):
    # nflog-e.out: 74.82.42.42.53 > 10.0.0.20.{42585,45190,44031,48736}, DNS of 45/57/49/61 bytes
    con = store(tmp_path, "nflog.pcap")
    got = con.execute("""
        SELECT src_addr, dst_addr, src_port, dst_port, payload_bytes
        FROM packets ORDER BY frame""").fetchall()
    assert got == [("74.82.42.42", "10.0.0.20", 53, port, n)
                   for port, n in ((42585, 45), (45190, 57), (44031, 49), (48736, 61))]
    assert con.execute("SELECT count(*) FROM packets WHERE decode_status IS NOT NULL").fetchall() == [(0,)]
    assert con.execute("SELECT link_types FROM captures").fetchall()[0][0] == [239]


def test_quic_version_negotiation_with_a_reserved_version(tmp_path):
    # quic_vn.out: 1 initial v1a2a3a4a; 2 version negotiation; 3, 4 initial (v1)...
    con = store(tmp_path, "quic_vn.pcap", analyze=True)
    got = con.execute("SELECT quic_type, quic_version FROM packets WHERE frame <= 4 "
                      "ORDER BY frame").fetchall()
    assert got == [("initial", 0x1A2A3A4A), ("version_negotiation", 0), ("initial", 1),
                   ("initial", 1)]
    (row,) = con.execute("""
        SELECT h.start_ns - (SELECT min(ts_ns) FROM packets), h.version, h.version_negotiation,
               h.round_trips
        FROM handshakes h""").fetchall()
    # the handshake began with the first Initial and took the VN round trip too
    assert row == (0, "QUIC v1", True, 2)


# tshark 4.0.17 on zeek-smb2-keepalives.pcap: tcp.analysis.keep_alive and
# tcp.analysis.retransmission frames
TSHARK_KEEP_ALIVES = [148, 150, 151, 160, 162, 163, 166, 168, 170, 171, 174, 176, 178, 180,
                      182, 184, 185, 188, 196, 198, 199, 202, 204]
TSHARK_RETRANSMISSIONS = [90, 91, 118, 126]


def test_one_byte_keep_alives_are_not_retransmissions(tmp_path):
    con = store(tmp_path, "zeek-smb2-keepalives.pcap", analyze=True)
    got = [f for (f,) in con.execute("SELECT frame FROM tcp_analysis WHERE segment = 'keep_alive' "
                                     "ORDER BY frame").fetchall()]
    assert got == TSHARK_KEEP_ALIVES
    got = [f for (f,) in con.execute("SELECT frame FROM retransmissions ORDER BY frame").fetchall()]
    assert got == TSHARK_RETRANSMISSIONS


def test_data_after_several_syn_acks_counts_from_the_last(tmp_path):
    """tshark re-bases on each SYN-ACK with a new ISN (tcp.seq 0 on all four):
    the server's data starts at relative 1 after the last, is new data, and
    only the SYN-ACKs 2-4 are retransmissions (tshark: the same three)."""
    con = store(tmp_path, "ndpi-multiple-synack.pcapng", analyze=True)
    got = con.execute("SELECT frame, rel_seq, segment, inflight_bytes FROM tcp_analysis "
                      "WHERE NOT from_client AND payload_bytes > 0 ORDER BY frame").fetchall()
    assert got == [(6, 1, "new", 96), (7, 97, "new", 1456), (8, 1457, "new", 2816),
                   (9, 2817, "new", 4176), (10, 4177, "new", 5427)]
    got = con.execute("SELECT frame, kind FROM retransmissions ORDER BY frame").fetchall()
    assert got == [(2, "retransmission"), (3, "retransmission"), (4, "retransmission")]
    # the Wireshark-compatible view keeps tshark's own figure (its nextseq is
    # left from the first SYN-ACK): 1,704,071,691 bytes in flight
    assert con.execute("SELECT ws_bytes_in_flight FROM tcp_analysis WHERE frame = 6"
                       ).fetchall() == [(1_704_071_691,)]


def test_hello_retry_request_and_its_compatibility_change_cipher_spec(tmp_path):
    """tshark 4.0.17: Client Hello (4), Hello Retry Request + CCS (6), CCS +
    Client Hello (8); the ServerHello is in out-of-order frame 11 (tshark
    does not decode it there). The dummy CCS does not start encryption."""
    con = store(tmp_path, "zeek-tls-hrr.pcap", analyze=True)
    got = con.execute("SELECT direction, message, frame FROM tls_messages WHERE message NOT IN "
                      "('encrypted', 'application_data') ORDER BY direction, stream_offset").fetchall()
    assert got == [("c2s", "client_hello", 4), ("c2s", "change_cipher_spec", 8),
                   ("c2s", "client_hello", 8), ("s2c", "hello_retry_request", 6),
                   ("s2c", "change_cipher_spec", 6), ("s2c", "server_hello", 11)]
    (row,) = con.execute("SELECT version, retries, round_trips FROM handshakes "
                         "WHERE protocol = 'tls'").fetchall()
    assert row == ("TLS 1.3", 1, 2)


# tshark 4.0.17: frame -> TLS handshake message types (tls.handshake.type)
HANDSHAKE_TYPES = {1: "client_hello", 2: "server_hello", 4: "new_session_ticket",
                   11: "certificate", 12: "server_key_exchange", 13: "certificate_request",
                   14: "server_hello_done", 16: "client_key_exchange"}
TSHARK_STARTTLS = {
    "ndpi-smtp-starttls.pcap": "11:1 12:2 15:11,14 16:16 17:4 46:1 47:2,11,12,14 48:16 50:4",
    "ndpi-imap-starttls.pcap": "14:1 15:2 19:11,12,14 22:16",
    "ndpi-pop3_stls.pcap": "13:1 14:2 18:11,14 20:16 22:4",
    "ndpi-ftp-start-tls.pcap": "12:1 15:2 17:11,13,14 22:11,16",
}


@pytest.mark.parametrize("name", sorted(TSHARK_STARTTLS))
def test_tls_after_a_plaintext_start(tmp_path, name):
    """STARTTLS: every plaintext handshake message in the frame tshark decodes it."""
    con = store(tmp_path, name, analyze=True)
    want = sorted((int(frame), HANDSHAKE_TYPES[int(t)])
                  for item in TSHARK_STARTTLS[name].split()
                  for frame, types in [item.split(":")] for t in types.split(","))
    got = sorted(con.execute("SELECT frame, message FROM tls_messages WHERE record_type = "
                             "'handshake' AND message <> 'encrypted_handshake'").fetchall())
    assert got == want
    assert {v for (v,) in con.execute("SELECT version FROM handshakes WHERE protocol = 'tls'"
                                      ).fetchall()} <= {"TLS 1.0", "TLS 1.2"}


@pytest.mark.parametrize("name", ["ndpi-heuristic-tcp-ack-payload.pcap", "ndpi-reasm-crash-anon.pcapng"])
def test_acked_unseen_segments_and_what_follows_from_them(tmp_path, name):
    """Wireshark raises "ACKed unseen segment" once until the peer moves its own
    ACK on, and moves its mark of the peer's highest contiguous byte only when
    the peer has sent past it. Its fast-retransmission test reads the
    peer's duplicate-ACK count that the warning marks. With the rule before
    (warn on every such ACK, move the mark each time) reasm_crash_anon had
    158 warnings too many and heuristic_tcp_ack_payload 40 fast
    retransmissions tshark does not show. Oracle: tshark 4.0.17's frames
    (NAME.tshark.json)."""
    import json
    oracle = json.loads((DATA / f"{name}.tshark.json").read_text())["frames"]
    con = store(tmp_path, name, analyze=True)
    for field, frames in oracle.items():
        got = [f for (f,) in con.execute(f"SELECT frame FROM tcp_analysis WHERE ws_{field} "
                                         "ORDER BY frame").fetchall()]
        assert got == frames, field


@pytest.mark.parametrize("name", ["ndpi-fix2.pcap", "ndpi-whois.pcapng"])
def test_one_datagram_captured_twice_one_hop_apart(tmp_path, name):
    """A capture that sees each datagram before and after a router: the copy
    has the same IP id and TCP header, the TTL one lower, and up to 23 other
    packets of its direction between the two. tshark calls the data copies
    retransmissions (190 in fix2); they are network copies, kind `duplicate`
    (before: 1 of fix2's 189 data copies), and no copy is a retransmission.
    Oracle: the frames whose header repeats an earlier one's with the TTL one
    lower, read by tshark 4.0.17 (NAME.tshark.json)."""
    import json
    oracle = json.loads((DATA / f"{name}.tshark.json").read_text())
    con = store(tmp_path, name, analyze=True)
    copies = set(oracle["one_hop_copies"])
    rows = dict(con.execute("""
        SELECT t.frame, t.segment FROM tcp_analysis t JOIN packets p USING (capture_id, frame)
        WHERE t.payload_bytes > 0 OR p.tcp_flags & 3 <> 0""").fetchall())
    carrying = copies & set(rows)
    assert carrying and {rows[f] for f in carrying} == {"duplicate"}
    kinds = dict(con.execute("SELECT frame, kind FROM retransmissions").fetchall())
    assert {f for f, k in kinds.items() if k == "duplicate"} >= carrying
    assert not {f for f, k in kinds.items() if k == "retransmission"} & copies


@pytest.mark.parametrize("name", ["ndpi-tcp-scan.pcapng", "zeek-pop3.pcap"])
def test_window_scaling_of_refused_and_retried_syns(tmp_path, name):
    """A RST-ACK refusing a SYN without window scaling is not scaled (-2, as
    tshark says; it was "unknown"); a SYN retried with the same ISN after a
    RST-ACK (zeek's pop3: three SYNs per port, the third without the option)
    is the same connection, whose first SYN decided the scaling (tshark: one
    tcp.stream, -1 for the server's RST-ACKs). Oracle: tshark 4.0.17's
    tcp.window_size_scalefactor and tcp.stream (NAME.tshark.json)."""
    import json
    frames = json.loads((DATA / f"{name}.tshark.json").read_text())["frames"]
    con = store(tmp_path, name)
    mine = {f: (shift, flow) for f, shift, flow in con.execute(
        "SELECT frame, tcp_window_shift, flow_id FROM packets WHERE tcp_seq IS NOT NULL").fetchall()}
    assert sorted(mine) == [f for f, _, _ in frames]
    for frame, factor, _ in frames:
        # tshark prints the factor (2^shift), -1 (unknown), -2 (not scaled) or nothing (a SYN)
        want = -1 if factor is None else factor if factor < 0 else factor.bit_length() - 1
        assert mine[frame][0] == want, (frame, factor, mine[frame])
    pairs = {(stream, mine[frame][1]) for frame, _, stream in frames}
    assert len(pairs) == len({s for s, _ in pairs}) == len({f for _, f in pairs})
