"""Decoders on crafted packets (scapy) for cases the real captures lack."""

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import (
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
)
from scapy.layers.l2 import CookedLinux, Dot1AD, Dot1Q, Ether
from scapy.layers.ppp import HDLC, PPP, PPPoE
from scapy.packet import Raw

from tracekit.readers.decode.addresses import address_dictionary
from tracekit.readers.decode.packets import decode_packets
from tracekit.readers.decode.status import CODE


def decode(packets, link_type=1, snaplen=None):
    raws = [bytes(p) for p in packets]
    caps = [r[:snaplen] if snaplen else r for r in raws]
    data = np.frombuffer(b"".join(caps), np.uint8)
    lens = np.array([len(c) for c in caps], np.int64)
    start = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    wire = np.array([len(r) for r in raws], np.int64)
    return decode_packets(data, start, lens, wire, np.full(len(raws), link_type, np.int32))


def addresses(cols):
    cache = {}
    s, d = address_dictionary([(cols["src_hi"], cols["src_lo"], cols["addr_ok"]),
                               (cols["dst_hi"], cols["dst_lo"], cols["addr_ok"])], cache)
    names = cache["_list"]
    return [(names[a] if a >= 0 else None, names[b] if b >= 0 else None) for a, b in zip(s, d)]


A, B = "198.18.0.1", "198.19.255.254"
A6, B6 = "2001:db8::1", "2001:db8:0:1::2"


def test_decode_vlan_and_qinq():
    p1 = Ether() / Dot1Q(vlan=100) / IP(src=A, dst=B) / TCP(sport=1, dport=2)
    p2 = Ether() / Dot1AD(vlan=7) / Dot1Q(vlan=4094) / IP(src=A, dst=B) / UDP(sport=3, dport=4)
    c = decode([p1, p2])
    assert list(c["vlan_outer"]) == [100, 7]
    assert list(c["vlan_inner"]) == [-1, 4094]
    assert list(c["src_port"]) == [1, 3]
    assert list(c["status"]) == [0, 0]


def test_decode_pppoe_session():
    p = Ether() / PPPoE(sessionid=5) / PPP(proto=0x0021) / IP(src=A, dst=B) / TCP(sport=10, dport=20)
    c = decode([p])
    assert c["status"][0] == 0 and c["dst_port"][0] == 20


def test_decode_ipv4_options_and_fragments():
    opt = IP(src=A, dst=B, options=b"\x01\x01\x01\x00") / TCP(sport=5, dport=6) / Raw(b"x" * 10)
    frags = [Ether() / f for f in (IP(src=A, dst=B, id=9) / UDP(sport=7, dport=8) / Raw(b"y" * 64)).fragment(24)]
    c = decode([Ether() / opt] + frags)
    assert c["ip_header_bytes"][0] == 24 and c["payload_bytes"][0] == 10
    assert c["ip_more_fragments"][1] and c["ip_fragment_offset"][1] == 0
    assert c["src_port"][1] == 7  # the first fragment carries the UDP header
    assert all(c["status"][2:] == CODE["ip_fragment"])
    assert c["ip_fragment_offset"][2] == 24
    assert all(c["src_port"][2:] == -1)


def test_decode_ipv6_extension_chain():
    p = (Ether() / IPv6(src=A6, dst=B6) / IPv6ExtHdrHopByHop() / IPv6ExtHdrRouting()
         / IPv6ExtHdrDestOpt() / TCP(sport=443, dport=5555) / Raw(b"z" * 7))
    frag = Ether() / IPv6(src=A6, dst=B6) / IPv6ExtHdrFragment(offset=10, m=1, nh=17) / Raw(b"q" * 16)
    c = decode([p, frag])
    assert c["ipv6_ext_headers"][0] == 3
    assert c["protocol"][0] == 6
    assert c["src_port"][0] == 443 and c["payload_bytes"][0] == 7
    assert c["status"][1] == CODE["ip_fragment"] and c["ip_fragment_offset"][1] == 80
    assert addresses(c)[0] == (A6, B6)


def test_decode_tcp_options_all_kinds():
    opts = [("MSS", 1460), ("NOP", None), ("WScale", 7), ("SAckOK", b""),
            ("Timestamp", (123456, 654321)), ("TFO", b"\x01\x02\x03\x04")]
    syn = Ether() / IP(src=A, dst=B) / TCP(sport=1, dport=2, flags="S", options=opts)
    sack = Ether() / IP(src=A, dst=B) / TCP(sport=1, dport=2, flags="A", options=[
        ("NOP", None), ("NOP", None),
        ("SAck", (100, 200, 300, 400, 500, 600, 4294967000, 4294967295))])
    c = decode([syn, sack])
    assert c["tcp_mss"][0] == 1460 and c["tcp_wscale"][0] == 7
    assert c["tcp_sack_permitted"][0] and c["tcp_fast_open"][0]
    assert (c["tcp_tsval"][0], c["tcp_tsecr"][0]) == (123456, 654321)
    assert c["tcp_sack_count"][1] == 4
    assert list(c["tcp_sack_left"][1]) == [100, 300, 500, 4294967000]
    assert list(c["tcp_sack_right"][1]) == [200, 400, 600, 4294967295]
    assert list(c["status"]) == [0, 0]


def test_decode_timestamps_fast_path_equals_option_walk():
    """NOP NOP TS (the common case, read in one step) and TS NOP NOP (walked)."""
    fast = Ether() / IP(src=A, dst=B) / TCP(options=[("NOP", None), ("NOP", None), ("Timestamp", (7, 4294967295))])
    walked = Ether() / IP(src=A, dst=B) / TCP(options=[("Timestamp", (7, 4294967295)), ("NOP", None), ("NOP", None)])
    near_miss = Ether() / IP(src=A, dst=B) / TCP(options=[("NOP", None), ("NOP", None), ("SAck", (1, 2)), ("NOP", None), ("NOP", None)])
    c = decode([fast, walked, near_miss])
    assert list(c["tcp_tsval"][:2]) == [7, 7] and list(c["tcp_tsecr"][:2]) == [4294967295] * 2
    assert list(c["tcp_has_ts"]) == [True, True, False]
    assert c["tcp_sack_count"][2] == 1


def test_decode_bad_tcp_option_keeps_options_before_it():
    options = b"\x02\x04\x05\x78" + b"\x01" * 4 + b"\x08\x30\x00\x00"  # MSS 1400, NOPs, TS claiming 48 bytes
    tcp = struct.pack(">HHIIHHHH", 1, 2, 0, 0, (8 << 12) | 0x02, 1000, 0, 0) + options
    c = decode([Ether() / IP(src=A, dst=B, proto=6) / Raw(tcp)])
    assert c["status"][0] == CODE["bad_tcp_options"]
    assert c["tcp_mss"][0] == 1400
    assert not c["tcp_has_ts"][0]


def test_decode_snaplen_cut_keeps_captured_fields():
    p = Ether() / IP(src=A, dst=B) / TCP(sport=80, dport=9999, seq=77, flags="PA") / Raw(b"d" * 500)
    c = decode([p], snaplen=14 + 20 + 8)  # cut inside the TCP header
    assert c["status"][0] == CODE["truncated_tcp"]
    assert (c["src_port"][0], c["dst_port"][0], c["tcp_seq"][0]) == (80, 9999, 77)
    assert not c["tcp_ok"][0]
    full = decode([p], snaplen=54)  # header complete, payload cut
    assert full["status"][0] == 0 and full["payload_bytes"][0] == 500


def test_decode_truncated_ip_and_not_ip():
    arp = Ether(type=0x0806) / Raw(b"\x00" * 28)
    c = decode([arp, Ether() / IP(src=A, dst=B) / TCP()], snaplen=20)
    assert c["status"][0] == CODE["not_ip"]
    assert c["status"][1] == CODE["truncated_ip"]


@pytest.mark.parametrize("link_type,frame", [
    (113, CookedLinux(proto=0x0800) / IP(src=A, dst=B) / TCP(sport=1, dport=2)),
    (101, IP(src=A, dst=B) / TCP(sport=1, dport=2)),
    (12, IPv6(src=A6, dst=B6) / TCP(sport=1, dport=2)),
    (14, IP(src=A, dst=B) / TCP(sport=1, dport=2)),
    (228, IP(src=A, dst=B) / TCP(sport=1, dport=2)),
    (229, IPv6(src=A6, dst=B6) / TCP(sport=1, dport=2)),
    (0, Raw(struct.pack("<I", 2)) / IP(src=A, dst=B) / TCP(sport=1, dport=2)),
    (0, Raw(struct.pack(">I", 30)) / IPv6(src=A6, dst=B6) / TCP(sport=1, dport=2)),
    (108, Raw(struct.pack(">I", 24)) / IPv6(src=A6, dst=B6) / TCP(sport=1, dport=2)),
    (9, PPP(proto=0x0021) / IP(src=A, dst=B) / TCP(sport=1, dport=2)),
    (9, HDLC(address=0xFF, control=0x03) / PPP(proto=0x0057) / IPv6(src=A6, dst=B6) / TCP(sport=1, dport=2)),
    (276, Raw(struct.pack(">HHIHBB8s", 0x86DD, 0, 1, 1, 0, 6, b"\x00" * 8)) / IPv6(src=A6, dst=B6) / TCP(sport=1, dport=2)),
])
def test_decode_link_types(link_type, frame):
    c = decode([frame], link_type=link_type)
    assert c["status"][0] == 0
    assert (c["src_port"][0], c["dst_port"][0]) == (1, 2)
    assert addresses(c)[0] in ((A, B), (A6, B6))


def test_decode_raw_ipv4_link_rejects_ipv6():
    c = decode([IPv6(src=A6, dst=B6) / TCP()], link_type=228)
    assert c["status"][0] == CODE["bad_ip_header"]


def test_decode_unsupported_link_type_counts():
    c = decode([Raw(b"\x00" * 40)], link_type=147)
    assert c["status"][0] == CODE["link_type_unsupported"]


def _quic(first, version, dcid=8, scid=8):
    return bytes([first]) + struct.pack(">I", version) + bytes([dcid]) + b"\x11" * dcid + bytes([scid]) + b"\x22" * scid + b"\x00" * 20


@pytest.mark.parametrize("payload,expected", [
    (_quic(0xC0, 1), 0),  # v1 Initial
    (_quic(0xE0, 1), 2),  # v1 Handshake
    (_quic(0xF0, 1), 3),  # v1 Retry
    (_quic(0xD0, 1), 1),  # v1 0-RTT
    (_quic(0xD0, 0x6B3343CF), 0),  # v2: type bits 01 are Initial (RFC 9369)
    (_quic(0xC0, 0x6B3343CF), 3),  # v2: 00 is Retry
    (_quic(0x80, 0), 4),  # version negotiation
    (_quic(0x40, 1), -1),  # short header: not recognised
    (_quic(0xC0, 0x12345678), -1),  # unknown version
    (_quic(0xC0, 1, dcid=40), -1),  # connection id too long for v1
])
def test_decode_quic_long_header(payload, expected):
    c = decode([Ether() / IP(src=A, dst=B) / UDP(sport=5000, dport=443) / Raw(payload)])
    assert c["quic_type"][0] == expected
    if expected >= 0:
        assert c["quic_dcid_len"][0] == 8


def test_decode_icmp_is_ip_without_ports():
    c = decode([Ether() / IP(src=A, dst=B) / ICMP()])
    assert c["status"][0] == 0 and c["protocol"][0] == 1 and c["src_port"][0] == -1


def test_decode_udp_bad_length():
    raw = bytearray(bytes(Ether() / IP(src=A, dst=B) / UDP(sport=1, dport=2) / Raw(b"a" * 10)))
    raw[14 + 20 + 4:14 + 20 + 6] = (400).to_bytes(2, "big")
    c = decode([Ether(bytes(raw))])
    assert c["status"][0] == CODE["bad_udp_length"]
    assert c["payload_bytes"][0] == 10


tcp_fields = st.fixed_dictionaries({
    "sport": st.integers(0, 65535), "dport": st.integers(0, 65535),
    "seq": st.integers(0, 2**32 - 1), "ack": st.integers(0, 2**32 - 1),
    "flags": st.integers(0, 0x0FFF), "window": st.integers(0, 65535),
    "urgptr": st.integers(0, 65535), "chksum": st.integers(0, 65535),
})


@settings(max_examples=200, deadline=None)
@given(tcp_fields, st.binary(max_size=30))
def test_decode_tcp_header_round_trip(f, payload):
    """Any TCP header written byte by byte reads back field by field."""
    hdr = struct.pack(">HHIIHHHH", f["sport"], f["dport"], f["seq"], f["ack"],
                      (5 << 12) | f["flags"], f["window"], f["chksum"], f["urgptr"])
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + 20 + len(payload), 0, 0, 64, 6, 0,
                     bytes([198, 18, 0, 1]), bytes([198, 18, 0, 2]))
    c = decode([Raw(ip + hdr + payload)], link_type=101)
    assert (c["src_port"][0], c["dst_port"][0]) == (f["sport"], f["dport"])
    assert (c["tcp_seq"][0], c["tcp_ack"][0]) == (f["seq"], f["ack"])
    assert c["tcp_flags"][0] == f["flags"]
    assert (c["tcp_window"][0], c["tcp_checksum"][0], c["tcp_urgent_pointer"][0]) == (
        f["window"], f["chksum"], f["urgptr"])
    assert c["payload_bytes"][0] == len(payload)


def test_a_rst_ack_refusing_a_syn_without_window_scaling_is_not_scaled(tmp_path):
    """RFC 7323: scaling needs both SYNs' options, so a SYN without one means
    neither side scales; tshark 4.0.17 shows the RST-ACK that refuses it with
    tcp.window_size_scalefactor -2 (this SYN, then that RST-ACK)."""
    from pcapgen import pcap_bytes
    from tcpsim import SYN, tcp_packet

    from tracekit.pipeline.captures import load_captures
    from tracekit.store.db import connect
    c, s = [10, 0, 0, 1], [10, 0, 0, 2]
    packets = [(10 ** 18, tcp_packet(c, s, 5000, 80, 100, 0, SYN, options=b"\x02\x04\x05\xb4")[0]),
               (10 ** 18 + 10 ** 6, tcp_packet(s, c, 80, 5000, 0, 101, 0x14)[0])]
    path = tmp_path / "refused.pcap"
    path.write_bytes(pcap_bytes(packets))
    con = connect(tmp_path / "s.duckdb")
    load_captures(con, [path])
    assert con.execute("SELECT frame, tcp_window_shift FROM packets ORDER BY frame").fetchall() == [
        (1, -1), (2, -2)]
    con.close()
