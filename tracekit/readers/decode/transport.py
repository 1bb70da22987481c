"""TCP (every header field and the options tracekit uses), UDP, QUIC long headers.

Strategy: fixed headers are layout reads. TCP options are a chain of
kind/length records, walked for all packets at once: each step reads the
option at each packet's cursor, records the ones tracekit knows (MSS, window
scale, SACK-permitted, SACK blocks, timestamps, Fast Open), and advances the
cursor; packets leave the walk at End-of-Options, the end of the header, or
a malformed length. QUIC is recognised from the first bytes of a UDP payload
(RFC 8999 invariants plus a known version), without decrypting anything.
"""

import numpy as np

from .layout import TCP, UDP, read_fields, read_uint, selection
from .status import CODE

TCPOPT_EOL, TCPOPT_NOP, TCPOPT_MSS, TCPOPT_WSCALE = 0, 1, 2, 3
TCPOPT_SACK_PERMITTED, TCPOPT_SACK, TCPOPT_TIMESTAMP, TCPOPT_FASTOPEN = 4, 5, 8, 34
MAX_SACK_BLOCKS = 4

QUIC_V1 = 0x00000001
QUIC_V2 = 0x6B3343CF  # RFC 9369
# versions decoded as QUIC besides those: any IETF draft (0xff0000xx), and the
# versions reserved to exercise version negotiation (0x?a?a?a?a, RFC 9000 §15),
# which a client may offer first -- the Initial a Version Negotiation answers
QUIC_TYPE_NAMES = ("initial", "0rtt", "handshake", "retry", "version_negotiation")


def new_transport_columns(n):
    return {
        "src_port": np.full(n, -1, np.int32), "dst_port": np.full(n, -1, np.int32),
        "tcp_seq": np.zeros(n, np.uint32), "tcp_ack": np.zeros(n, np.uint32),
        "tcp_ok": np.zeros(n, bool),
        "tcp_flags": np.zeros(n, np.uint16), "tcp_header_bytes": np.zeros(n, np.int16),
        "tcp_window": np.zeros(n, np.uint16), "tcp_checksum": np.zeros(n, np.uint16),
        "tcp_urgent_pointer": np.zeros(n, np.uint16),
        "tcp_mss": np.full(n, -1, np.int32), "tcp_wscale": np.full(n, -1, np.int16),
        "tcp_sack_permitted": np.zeros(n, bool),
        "tcp_sack_count": np.zeros(n, np.int8),
        "tcp_sack_left": np.zeros((n, MAX_SACK_BLOCKS), np.uint32),
        "tcp_sack_right": np.zeros((n, MAX_SACK_BLOCKS), np.uint32),
        "tcp_tsval": np.zeros(n, np.uint32), "tcp_tsecr": np.zeros(n, np.uint32),
        "tcp_has_ts": np.zeros(n, bool),
        "tcp_fast_open": np.zeros(n, bool),
        "payload_bytes": np.full(n, -1, np.int64),
        "udp_length": np.full(n, -1, np.int32),
        "quic_type": np.full(n, -1, np.int8), "quic_version": np.zeros(n, np.uint32),
        "quic_dcid_len": np.full(n, -1, np.int16), "quic_scid_len": np.full(n, -1, np.int16),
    }


def decode_tcp(hb, l4, ip_end, end, idx, out, status):
    pos = l4[idx]
    cend = end[idx]
    f = read_fields(hb, idx, pos, cend, TCP)
    fixed_ok = f["urgent_pointer"][1]
    status[idx[~fixed_ok]] = CODE["truncated_tcp"]
    # ports, seq/ack/flags/window are kept wherever their bytes were captured
    for name, col in (("src_port", "src_port"), ("dst_port", "dst_port"), ("seq", "tcp_seq"),
                      ("ack", "tcp_ack"), ("flags", "tcp_flags"), ("window", "tcp_window"),
                      ("checksum", "tcp_checksum"), ("urgent_pointer", "tcp_urgent_pointer")):
        v, ok = f[name]
        rows, pick, _ = selection(idx, ok)
        out[col][rows] = v[pick]
    out["tcp_ok"][selection(idx, np.ones(len(idx), bool))[0]] = f["flags"][1]
    doff = f["data_offset"][0].astype(np.int64) * 4
    iend = ip_end[idx]
    bad = fixed_ok & ((doff < 20) | (pos + doff > iend))
    status[idx[bad]] = CODE["bad_tcp_header"]
    good = fixed_ok & ~bad
    rows, pick, g = selection(idx, good)
    gdoff, gpos = doff[pick], pos[pick]
    out["tcp_header_bytes"][rows] = gdoff
    out["payload_bytes"][rows] = iend[pick] - gpos - gdoff
    hend = gpos + gdoff
    gcend = cend[pick]
    opts_cut = hend > gcend
    status[g[opts_cut]] = CODE["truncated_tcp"]
    _tcp_options(hb, gpos + 20, np.minimum(hend, gcend), g, out, status)


def _tcp_options(hb, cursor, hend, g, out, status):
    active = cursor < hend
    # The option list Linux sends on every segment of a connection with
    # timestamps: NOP, NOP, Timestamps (RFC 7323 appendix A). Recognised in
    # one step; every other list is walked option by option below.
    canonical = active & (hend - cursor == 12)
    if canonical.any():
        c = np.flatnonzero(canonical)
        head, ok = read_uint(hb, g[c], cursor[c], hend[c], 4)
        match = ok & (head == 0x0101080A)
        if match.any():
            m = c[match]
            out["tcp_tsval"][g[m]], _ = read_uint(hb, g[m], cursor[m] + 4, hend[m], 4)
            out["tcp_tsecr"][g[m]], _ = read_uint(hb, g[m], cursor[m] + 8, hend[m], 4)
            out["tcp_has_ts"][g[m]] = True
            active[m] = False
    cursor = cursor.copy()
    for _ in range(40):
        if not active.any():
            return
        a = np.nonzero(active)[0]
        p = cursor[a]
        e = hend[a]
        gi = g[a]
        kind, _ = read_uint(hb, gi, p, e, 1)
        eol = kind == TCPOPT_EOL
        nop = kind == TCPOPT_NOP
        ln, lok = read_uint(hb, gi, p + 1, e, 1)
        ln = ln.astype(np.int64)
        rec = ~eol & ~nop
        bad = rec & (~lok | (ln < 2) | (p + ln > e))
        ok = rec & ~bad
        status[gi[bad]] = CODE["bad_tcp_options"]
        _option_values(hb, p, e, kind, ln, ok, gi, out)
        step = np.where(nop, 1, np.where(ok, ln, 0))
        cursor[a] = p + step
        active[a] = (nop | ok) & (p + step < e)


def _option_values(hb, p, e, kind, ln, ok, gi, out):
    sel = ok & (kind == TCPOPT_MSS) & (ln == 4)
    if sel.any():
        v, _ = read_uint(hb, gi[sel], p[sel] + 2, e[sel], 2)
        out["tcp_mss"][gi[sel]] = v
    sel = ok & (kind == TCPOPT_WSCALE) & (ln == 3)
    if sel.any():
        v, _ = read_uint(hb, gi[sel], p[sel] + 2, e[sel], 1)
        out["tcp_wscale"][gi[sel]] = v
    sel = ok & (kind == TCPOPT_SACK_PERMITTED)
    out["tcp_sack_permitted"][gi[sel]] = True
    sel = ok & (kind == TCPOPT_TIMESTAMP) & (ln == 10)
    if sel.any():
        out["tcp_tsval"][gi[sel]], _ = read_uint(hb, gi[sel], p[sel] + 2, e[sel], 4)
        out["tcp_tsecr"][gi[sel]], _ = read_uint(hb, gi[sel], p[sel] + 6, e[sel], 4)
        out["tcp_has_ts"][gi[sel]] = True
    sel = ok & (kind == TCPOPT_FASTOPEN)
    out["tcp_fast_open"][gi[sel]] = True
    sel = ok & (kind == TCPOPT_SACK) & (ln >= 10)
    if sel.any():
        blocks = np.minimum((ln[sel] - 2) // 8, MAX_SACK_BLOCKS)
        ps, es, gs = p[sel], e[sel], gi[sel]
        out["tcp_sack_count"][gs] = blocks
        for k in range(MAX_SACK_BLOCKS):
            has = blocks > k
            if not has.any():
                break
            left, _ = read_uint(hb, gs[has], ps[has] + 2 + 8 * k, es[has], 4)
            right, _ = read_uint(hb, gs[has], ps[has] + 6 + 8 * k, es[has], 4)
            out["tcp_sack_left"][gs[has], k] = left
            out["tcp_sack_right"][gs[has], k] = right


def decode_udp(hb, l4, ip_end, end, idx, out, status):
    pos = l4[idx]
    cend = end[idx]
    f = read_fields(hb, idx, pos, cend, UDP)
    for name in ("src_port", "dst_port"):
        v, ok = f[name]
        out[name][idx[ok]] = v[ok]
    hdr_ok = f["checksum"][1]
    status[idx[~hdr_ok]] = CODE["truncated_udp"]
    length = f["length"][0].astype(np.int64)
    room = ip_end[idx] - pos
    bad = hdr_ok & ((length < 8) | (length > room))
    status[idx[bad]] = CODE["bad_udp_length"]
    out["udp_length"][idx[hdr_ok]] = length[hdr_ok]
    payload = np.where(bad, room - 8, length - 8)
    ok = hdr_ok & (payload >= 0)
    out["payload_bytes"][idx[ok]] = payload[ok]
    _quic(hb, pos[ok] + 8, np.minimum(pos[ok] + 8 + payload[ok], cend[ok]), idx[ok], out)


def _quic(hb, q, qend, g, out):
    first, ok = read_uint(hb, g, q, qend, 1)
    version, vok = read_uint(hb, g, q + 1, qend, 4)
    dcid, dok = read_uint(hb, g, q + 5, qend, 1)
    dcid = dcid.astype(np.int64)
    scid, sok = read_uint(hb, g, q + 6 + dcid, qend, 1)
    long_header = ok & vok & dok & sok & ((first & 0x80) != 0)
    vn = long_header & (version == 0)
    known = (np.isin(version, (QUIC_V1, QUIC_V2)) | ((version >> 8) == 0xFF0000)
             | ((version & 0x0F0F0F0F) == 0x0A0A0A0A))
    fixed_bit = (first & 0x40) != 0
    quic = long_header & (vn | (known & fixed_bit & (dcid <= 20) & (scid <= 20)))
    if not quic.any():
        return
    bits = ((first >> 4) & 3).astype(np.int8)
    v2_type = np.array([3, 0, 1, 2], np.int8)[bits]  # v2 reorders the type bits
    qtype = np.where(version == QUIC_V2, v2_type, bits)
    qtype = np.where(vn, 4, qtype).astype(np.int8)
    s = g[quic]
    out["quic_type"][s] = qtype[quic]
    out["quic_version"][s] = version[quic]
    out["quic_dcid_len"][s] = dcid[quic]
    out["quic_scid_len"][s] = scid[quic]
