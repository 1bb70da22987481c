"""Captures that are legal but odd, or crafted to hurt: nothing wraps, nothing
allocates more than the file holds, any block pattern costs the same per packet."""

import io
import struct
from pathlib import Path

import numpy as np
from conftest import SHARED, needs_shared
from pcapgen import block, epb, idb, pcap_bytes, shb
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from tracekit.pipeline.captures import load_captures
from tracekit.readers.capture import open_capture
from tracekit.readers.capture.base import timestamps_from_units
from tracekit.store.db import connect

INT64_MAX = (1 << 63) - 1


def _tcp(seq=1, payload=b"x" * 10, flags="PA"):
    return bytes(Ether() / IP(src="198.18.0.1", dst="198.18.0.2") /
                 TCP(sport=40000, dport=80, seq=seq, flags=flags) / payload)


def test_timestamp_conversion_flags_what_does_not_fit():
    raw = np.array([0, 9_223_372_036, 9_223_372_037, 2**64 - 1], np.uint64)
    ns, bad = timestamps_from_units(raw, 1)  # if_tsresol 10^0: whole seconds
    assert bad.tolist() == [False, False, True, True]
    assert ns.tolist() == [0, 9_223_372_036_000_000_000, 0, 0]
    # microseconds of a 64-bit value: 2^63 us is far beyond 2262
    ns, bad = timestamps_from_units(np.array([2**63, 1_700_000_000_000_000], np.uint64), 10**6)
    assert bad.tolist() == [True, False] and ns[1] == 1_700_000_000_000_000_000
    # the interface's offset may push a good value out, either way; INT64_MIN is out too
    ns, bad = timestamps_from_units(np.array([INT64_MAX - 10**9 + 1, 5], np.uint64), 10**9, 1)
    assert bad.tolist() == [True, False] and ns[1] == 10**9 + 5
    ns, bad = timestamps_from_units(np.array([0, 1], np.uint64), 10**9,
                                    np.array([-(INT64_MAX // 10**9), -(INT64_MAX // 10**9)]))
    assert bad.tolist() == [False, False] and ns[0] == -(INT64_MAX // 10**9) * 10**9
    ns, bad = timestamps_from_units(np.array([7], np.uint64), 10**9, -(1 << 62))
    assert bad.tolist() == [True]


def test_out_of_range_times_are_null_and_flagged_not_wrapped(tmp_path):
    """Whole-second resolution with 64-bit values, and an offset that overflows:
    the packets are kept, their ts_ns is NULL, they are in no flow, and the
    rest of the capture is analysed."""
    good = [epb(0, 1_700_000_000 + i, _tcp(seq=1 + 10 * i)) for i in range(3)]
    data = (shb() + idb(1, tsresol=0) + b"".join(good)
            + epb(0, 2**63 + 5, _tcp(seq=31))       # ~2.9e11 years
            + idb(1, tsoffset=-(1 << 62))          # second interface: offset far before 1677
            + epb(1, 1, _tcp(seq=41)))
    path = tmp_path / "times.pcapng"
    path.write_bytes(data)
    con = connect(tmp_path / "s.duckdb")
    (s,) = load_captures(con, [path])
    assert s.packets == 5 and s.decode_status == {"timestamp_out_of_range": 2}
    assert s.first_bad_ts_offset == len(shb() + idb(1, tsresol=0) + b"".join(good))
    rows = con.execute("SELECT frame, ts_ns, decode_status, flow_id FROM packets "
                       "ORDER BY frame").fetchall()
    assert rows[3:] == [(4, None, "timestamp_out_of_range", None),
                        (5, None, "timestamp_out_of_range", None)]
    assert [r[1] for r in rows[:3]] == [(1_700_000_000 + i) * 10**9 for i in range(3)]
    first, last = con.execute("SELECT first_ts_ns, last_ts_ns FROM captures").fetchone()
    assert (first, last) == (1_700_000_000 * 10**9, 1_700_000_002 * 10**9)
    assert con.execute("SELECT packets_c2s FROM flows").fetchall() == [(3,)]


def test_cli_warns_with_the_offset_and_analyze_works(tmp_path):
    from click.testing import CliRunner

    from tracekit.cli import main
    data = shb() + idb(1, tsresol=0) + epb(0, 1_700_000_000, _tcp()) + epb(0, 2**62, _tcp(seq=11))
    path = tmp_path / "t.pcapng"
    path.write_bytes(data)
    db = str(tmp_path / "s.duckdb")
    r = CliRunner().invoke(main, ["ingest", str(path), "--db", db])
    assert r.exit_code == 0, r.output
    offset = len(shb() + idb(1, tsresol=0) + epb(0, 1_700_000_000, _tcp()))
    assert (f"1 packet with a time outside 1677-2262 (int64 ns; the first at byte offset "
            f"{offset})") in r.output
    r = CliRunner().invoke(main, ["analyze", "--db", db])
    assert r.exit_code == 0, r.output
    assert "not analysed" not in r.output


def test_a_record_claiming_4_gib_allocates_nothing(tmp_path):
    """40 bytes: a header with snaplen 0xFFFFFFFF and one record claiming ~4 GiB."""
    head = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 0xFFFFFFFF, 1)
    data = head + struct.pack("<IIII", 1, 0, 0xFFFFFFF0, 0xFFFFFFF0)
    reader = open_capture("big.pcap", io.BytesIO(data))
    assert sum(len(b) for b in reader.batches()) == 0
    assert reader.stop.reason == "truncated" and "cut short" in reader.stop.message
    assert reader.chunks.buf.nbytes <= 1 << 16


def test_wire_length_beyond_int32_is_stored_exactly(tmp_path):
    path = tmp_path / "w.pcap"
    path.write_bytes(pcap_bytes([(10**18, _tcp(), 3_000_000_000)]))
    con = connect(tmp_path / "s.duckdb")
    load_captures(con, [path])
    assert con.execute("SELECT wire_bytes, truncated FROM packets").fetchall() == [
        (3_000_000_000, True)]


def test_ip_total_length_shorter_than_its_headers_is_in_no_flow(tmp_path):
    """IPv4 total length 20: the TCP header is outside the datagram. Its length
    is unknown, so it must not reach the sequence analysis (it became a
    retransmission ending at -9.2e18)."""
    short = bytearray(_tcp(seq=11))
    short[14 + 2:14 + 4] = struct.pack(">H", 20)
    path = tmp_path / "short.pcap"
    path.write_bytes(pcap_bytes([(10**18, _tcp(flags="S", payload=b"")),
                                 (10**18 + 1000, _tcp(seq=1)), (10**18 + 2000, bytes(short))]))
    con = connect(tmp_path / "s.duckdb")
    load_captures(con, [path])
    assert con.execute("SELECT frame, decode_status, flow_id FROM packets WHERE frame = 3"
                       ).fetchall() == [(3, "bad_tcp_header", None)]
    from tracekit.pipeline.analyze import analyze
    analyze(con)
    assert con.execute("SELECT count(*) FROM tcp_analysis").fetchone()[0] == 2
    assert con.execute("SELECT count(*) FROM tcp_analysis WHERE rel_end < 0").fetchone()[0] == 0


def test_blocks_between_packets_do_not_cut_batches():
    """A name-resolution block and a new interface after every packet (legal
    pcapng): the packets still come in full batches, not one per block."""
    nrb = block(4, struct.pack("<HH", 0, 0))
    n = 3000
    parts = [shb(), idb(1)]
    for i in range(n):
        parts.append(epb(len(parts) // 3, 1_700_000_000_000_000 + i, _tcp(seq=1 + 10 * i)))
        parts.append(nrb)
        parts.append(idb(1, tsresol=9 if i % 2 else 6))
    reader = open_capture("many.pcapng", io.BytesIO(b"".join(parts)))
    batches = list(reader.batches())
    assert [len(b) for b in batches] == [n]
    assert reader.stop is None and reader.stats.skipped_blocks == {"name resolution block": n}
    assert len(reader.interfaces) == n + 1
    ts = batches[0].ts_ns
    # packet i is on interface i, whose resolution the previous IDB set
    assert ts[0] == 1_700_000_000_000_000 * 1000
    assert ts[2] == (1_700_000_000_000_000 + 2) * 1  # 10^-9 (i = 1 wrote tsresol 9)
    assert ts[3] == (1_700_000_000_000_000 + 3) * 1000


@needs_shared
def test_the_store_is_self_contained(tmp_path):
    """TLS messages come from the payload bytes ingest kept: move the capture
    file away and analyze gives the rows that reading the file gives. Without
    them (a store from before) the file is read, and a missing file is
    reported per capture, never 0 rows in silence."""
    import shutil

    import duckdb
    from click.testing import CliRunner

    from tracekit.cli import main
    path = tmp_path / "tls.pcap"
    shutil.copy(SHARED / "zeek__tls13_wolfssl.pcap", path)
    db = str(tmp_path / "s.duckdb")
    query = "SELECT * EXCLUDE (capture_id) FROM tls_messages ORDER BY ALL"

    def analyze_again():
        with duckdb.connect(db) as con:
            con.execute("DELETE FROM analysis_runs")
        return CliRunner().invoke(main, ["analyze", "--db", db])

    assert CliRunner().invoke(main, ["ingest", str(path), "--db", db]).exit_code == 0
    path.rename(tmp_path / "elsewhere.pcap")
    r = analyze_again()
    assert r.exit_code == 0 and "warning" not in r.output, r.output
    with duckdb.connect(db) as con:
        kept = con.execute(query).fetchall()
        assert con.execute("SELECT count(*), sum(octet_length(payload)) FROM payloads"
                           ).fetchone() == (8, 1637)
        con.execute("DELETE FROM store.payloads")  # a store from before payloads were kept
        con.execute("UPDATE captures SET payloads_kept = false")
    assert len(kept) == 8
    assert {(r[1], r[2]) for r in kept} >= {("c2s", "client_hello"), ("s2c", "server_hello")}
    (tmp_path / "elsewhere.pcap").rename(path)
    assert analyze_again().exit_code == 0
    with duckdb.connect(db) as con:
        assert con.execute(query).fetchall() == kept  # read back from the file: the same
    path.rename(tmp_path / "elsewhere.pcap")
    r = analyze_again()
    assert r.exit_code == 0
    assert "tls_messages: capture 1 was not analysed" in r.output
    assert f"the capture file {path} cannot be read" in r.output


def test_a_store_without_tls_never_reads_the_moved_file(tmp_path):
    """Connections that are not TLS keep no payload; their store does not need
    the capture file either (it used to be read for each one's first segment)."""
    import shutil

    from click.testing import CliRunner

    from tracekit.cli import main
    repo = Path(__file__).parent.parent
    path = tmp_path / "http.pcap"
    shutil.copy(repo / "captures" / "http-fresh-vs-persistent.pcap", path)
    db = str(tmp_path / "s.duckdb")
    assert CliRunner().invoke(main, ["ingest", str(path), "--db", db]).exit_code == 0
    path.unlink()
    r = CliRunner().invoke(main, ["analyze", "--db", db])
    assert r.exit_code == 0 and "warning" not in r.output and "not analysed" not in r.output, r.output


def test_packets_before_any_interface_are_kept():
    """A packet block before any interface description (found by the fuzz test:
    the timestamp table was empty): kept, with no interface and no time (flagged:
    stored NULL, not 1970)."""
    reader = open_capture("x.pcapng", io.BytesIO(shb() + epb(0, 5, _tcp()) + idb(1) + epb(0, 7, _tcp())))
    (batch,) = list(reader.batches())
    assert batch.interface_id.tolist() == [-1, 0]
    assert batch.ts_ns.tolist() == [0, 7000] and batch.ts_bad.tolist() == [True, False]


def _handshake_pcapng(path, raw_s, offset_s, stray_iface=None):
    """A TCP handshake on interface 0 (microseconds, `raw_s` seconds in the file,
    if_tsoffset `offset_s`), 20 ms between packets; perhaps a packet naming an
    interface no IDB described."""
    c, s = "198.18.0.1", "198.18.0.2"
    pkts = [bytes(Ether() / IP(src=a, dst=b) / TCP(sport=sp, dport=dp, flags=f, seq=q, ack=k))
            for a, b, sp, dp, f, q, k in ((c, s, 40000, 80, "S", 100, 0),
                                          (s, c, 80, 40000, "SA", 500, 101),
                                          (c, s, 40000, 80, "A", 101, 501))]
    blocks = [shb(), idb(1, tsresol=6, tsoffset=offset_s)]
    for i, p in enumerate(pkts):
        blocks.append(epb(0, raw_s * 10**6 + i * 20_000, p))
        if i == 1 and stray_iface is not None:
            blocks.append(epb(stray_iface, raw_s * 10**6, pkts[0]))
    path.write_bytes(b"".join(blocks))
    return path


def _ingest_cli(*args):
    from click.testing import CliRunner

    from tracekit.cli import main
    return CliRunner().invoke(main, ["ingest", *map(str, args)])


def test_a_packet_of_an_undescribed_interface_has_no_time_not_1970(tmp_path):
    """Counted as no_such_interface with ts_ns NULL; the capture's span is its
    described packets' (before: ts_ns 0, a capture from 1970 lasting 53 years)."""
    cap = _handshake_pcapng(tmp_path / "c.pcapng", 1_700_000_000, None, stray_iface=3)
    db = tmp_path / "s.duckdb"
    r = _ingest_cli(cap, "--db", db)
    assert r.exit_code == 0 and "skipped no_such_interface 1" in r.output, r.output
    con = connect(db)
    assert con.execute("SELECT frame, ts_ns, decode_status FROM packets WHERE ts_ns IS NULL"
                       ).fetchall() == [(3, None, "no_such_interface")]
    assert con.execute("SELECT first_ts_ns, last_ts_ns FROM captures").fetchone() == (
        1_700_000_000 * 10**9, 1_700_000_000 * 10**9 + 40_000_000)


def test_times_before_1970_are_signed_nanoseconds(tmp_path):
    """An if_tsoffset taking times before 1970 (1954 here): every time kept, signed,
    and the handshake measured from them."""
    cap = _handshake_pcapng(tmp_path / "c.pcapng", 1_000_000_000, -1_500_000_000)
    db = tmp_path / "s.duckdb"
    assert _ingest_cli(cap, "--db", db).exit_code == 0
    from tracekit.pipeline.analyze import analyze
    con = connect(db)
    analyze(con)
    t0 = -500_000_000 * 10**9
    assert con.execute("SELECT list(ts_ns ORDER BY frame) FROM packets").fetchone()[0] == [
        t0, t0 + 20_000_000, t0 + 40_000_000]
    assert con.execute("SELECT start_ns, server_hello_ns, duration_ns FROM handshakes"
                       ).fetchone() == (t0, t0 + 20_000_000, 40_000_000)


def test_times_after_2200_are_held_and_warned(tmp_path):
    cap = _handshake_pcapng(tmp_path / "c.pcapng", 7_300_000_000, None)  # 2201
    r = _ingest_cli(cap, "--db", tmp_path / "s.duckdb")
    assert r.exit_code == 0
    assert ("warning: " + str(cap) + ": 3 packets timed in 2200 or later (the first at byte "
            "offset ") in r.output, r.output


def test_the_tcp_server_hello_is_the_syn_ack_the_connection_goes_on_with(tmp_path):
    """nDPI's capture of four SYN-ACKs (three new ISNs over 29 s): the handshake's
    server_hello is the SYN-ACK whose ISN the client acknowledges (found here
    from the packets with scapy), not the first (before: 29 s early)."""
    from scapy.all import rdpcap
    path = Path(__file__).parent / "data" / "pcap" / "ndpi-multiple-synack.pcapng"
    pkts = [p for p in rdpcap(str(path)) if TCP in p]
    synacks = [p for p in pkts if p[TCP].flags == "SA"]
    first_ack = next(p[TCP].ack for p in pkts if p[TCP].sport != 443 and "S" not in p[TCP].flags)
    (answered,) = [p for p in synacks if p[TCP].seq + 1 == first_ack]
    assert answered is not synacks[0]
    db = tmp_path / "s.duckdb"
    assert _ingest_cli(path, "--db", db).exit_code == 0
    from tracekit.pipeline.analyze import analyze
    con = connect(db)
    analyze(con)
    assert con.execute("SELECT server_hello_ns, retries FROM handshakes WHERE protocol = 'tcp'"
                       ).fetchone() == (round(answered.time * 10**9), 3)


def test_raw_pcapng_times_with_the_top_bit_set_are_before_1970(tmp_path):
    """PcapPlusPlus' pcapng-example, interface 1: 100 raw times 0xffffffffe1dfd279...
    (microseconds) read as signed 64-bit counts, 505 s before the epoch (before:
    out of range, stored NULL, and the interface's handshakes and intervals lost).
    The expected times are read from the blocks here with struct."""
    path = Path(__file__).parent / "data" / "pcap" / "pcpp-pcapng-example.pcapng"
    data = path.read_bytes()
    expected, pos = [], 0
    while pos + 12 <= len(data):
        btype, blen = struct.unpack_from("<II", data, pos)
        if btype == 6:
            iface, hi, lo = struct.unpack_from("<III", data, pos + 8)
            if iface == 1:
                expected.append((((hi << 32) | lo) - (1 << 64)) * 1000)  # us -> ns, signed
        pos += blen
    assert len(expected) == 100 and max(expected) < 0
    db = tmp_path / "s.duckdb"
    r = _ingest_cli(path, "--db", db)
    assert r.exit_code == 0 and "none skipped" in r.output, r.output
    from tracekit.pipeline.analyze import analyze
    con = connect(db)
    analyze(con)
    assert con.execute("SELECT list(ts_ns ORDER BY frame) FROM packets WHERE interface_id = 1"
                       ).fetchone()[0] == expected
    # the one handshake seen whole on that interface: its RTT measured (22 us)
    assert con.execute("SELECT list(handshake_rtt_ns) FILTER (handshake_rtt_ns IS NOT NULL) "
                       "FROM flows WHERE first_ts_ns < 0").fetchone()[0] == [22_000]
