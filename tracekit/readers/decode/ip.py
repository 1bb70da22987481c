"""IPv4 and IPv6: addresses, lengths, fragments, extension headers.

Strategy: IPv4 is one layout read. IPv6 extension headers form a chain, so
the chain is walked a fixed number of steps for all packets at once, each
step only over the packets still inside the chain. Addresses are kept as two
big-endian uint64 per address (IPv4 mapped into ::ffff:0:0/96) so that IPv4
and IPv6 share one representation for flow keys and formatting.
"""

import numpy as np

from .layout import IPV4, IPV6, read_bytes16, read_fields, read_uint, selection
from .status import CODE

V4_MAPPED_HI = np.uint64(0)
V4_MAPPED_LO = np.uint64(0x0000FFFF00000000)

# IPv6 extension headers tracekit steps over (RFC 8200 sec. 4; AH RFC 4302;
# Mobility 135, HIP 139, Shim6 140 use the same length encoding)
EXT_HOP_BY_HOP = 0
EXT_ROUTING = 43
EXT_FRAGMENT = 44
EXT_AH = 51
EXT_DEST_OPTS = 60
EXT_HEADERS = (EXT_HOP_BY_HOP, EXT_ROUTING, EXT_FRAGMENT, EXT_AH, EXT_DEST_OPTS, 135, 139, 140)
MAX_EXT_HEADERS = 8


def new_ip_columns(n):
    return {
        "src_hi": np.zeros(n, np.uint64), "src_lo": np.zeros(n, np.uint64),
        "dst_hi": np.zeros(n, np.uint64), "dst_lo": np.zeros(n, np.uint64),
        "addr_ok": np.zeros(n, bool),
        "ip_ttl": np.zeros(n, np.uint8), "ip_tos": np.zeros(n, np.uint8),
        "ip_id": np.full(n, -1, np.int32),
        "ip_header_bytes": np.full(n, -1, np.int32),
        "ip_total_bytes": np.full(n, -1, np.int64),
        "ip_dont_fragment": np.zeros(n, bool), "ip_more_fragments": np.zeros(n, bool),
        "ip_fragment_offset": np.zeros(n, np.int32),
        "ipv6_flow_label": np.full(n, -1, np.int32),
        "ipv6_ext_headers": np.zeros(n, np.int8),
        "protocol": np.full(n, -1, np.int16),
        "l4": np.zeros(n, np.int64), "ip_end": np.zeros(n, np.int64),
    }


def decode_ipv4(hb, l3, end, wire_end, idx, out, status):
    pos = l3[idx]
    cend = end[idx]
    f = read_fields(hb, idx, pos, cend, IPV4)
    hdr_ok = f["dst"][1]
    version, ihl = f["version"][0], f["ihl"][0].astype(np.int64)
    bad = hdr_ok & ((version != 4) | (ihl < 5))
    status[idx[~hdr_ok]] = CODE["truncated_ip"]
    status[idx[bad]] = CODE["bad_ip_header"]
    good = hdr_ok & ~bad
    rows, pick, g = selection(idx, good)
    out["src_hi"][rows] = V4_MAPPED_HI
    out["src_lo"][rows] = V4_MAPPED_LO | f["src"][0][pick].astype(np.uint64)
    out["dst_hi"][rows] = V4_MAPPED_HI
    out["dst_lo"][rows] = V4_MAPPED_LO | f["dst"][0][pick].astype(np.uint64)
    out["addr_ok"][rows] = True
    out["ip_ttl"][rows] = f["ttl"][0][pick]
    out["ip_tos"][rows] = f["tos"][0][pick]
    out["ip_id"][rows] = f["identification"][0][pick]
    hlen = ihl[pick] * 4
    out["ip_header_bytes"][rows] = hlen
    total = f["total_length"][0][pick].astype(np.int64)
    gpos = pos[pick]
    # total length 0 happens with TSO on the capturing host: use the wire length
    wire_total = wire_end[rows] - gpos
    total = np.where(total == 0, wire_total, total)
    out["ip_total_bytes"][rows] = total
    out["ip_dont_fragment"][rows] = f["dont_fragment"][0][pick] == 1
    out["ip_more_fragments"][rows] = f["more_fragments"][0][pick] == 1
    frag_off = f["fragment_offset"][0][pick].astype(np.int32) * 8
    out["ip_fragment_offset"][rows] = frag_off
    out["protocol"][rows] = f["protocol"][0][pick]
    out["l4"][rows] = gpos + hlen
    # a header length beyond the frame is cut to the frame (as Wireshark does)
    out["ip_end"][rows] = gpos + np.maximum(np.minimum(total, wire_total), hlen)
    status[g[frag_off > 0]] = CODE["ip_fragment"]


def decode_ipv6(hb, l3, end, wire_end, idx, out, status):
    pos = l3[idx]
    cend = end[idx]
    f = read_fields(hb, idx, pos, cend, IPV6)
    shi, slo, sok = read_bytes16(hb, idx, pos + 8, cend)
    dhi, dlo, dok = read_bytes16(hb, idx, pos + 24, cend)
    hdr_ok = dok & sok & f["hop_limit"][1]
    bad = hdr_ok & (f["version"][0] != 6)
    status[idx[~hdr_ok]] = CODE["truncated_ip"]
    status[idx[bad]] = CODE["bad_ip_header"]
    good = hdr_ok & ~bad
    g = idx[good]
    out["src_hi"][g], out["src_lo"][g] = shi[good], slo[good]
    out["dst_hi"][g], out["dst_lo"][g] = dhi[good], dlo[good]
    out["addr_ok"][g] = True
    out["ip_ttl"][g] = f["hop_limit"][0][good]
    out["ip_tos"][g] = f["traffic_class"][0][good]
    out["ipv6_flow_label"][g] = f["flow_label"][0][good]
    payload = f["payload_length"][0][good].astype(np.int64)
    p0 = pos[good]
    wire_total = wire_end[g] - p0
    total = np.where(payload == 0, wire_total, payload + 40)  # 0: jumbogram or TSO
    out["ip_total_bytes"][g] = total
    out["ip_end"][g] = p0 + np.maximum(np.minimum(total, wire_total), 40)

    # walk the extension header chain
    nh = f["next_header"][0][good].astype(np.int64)
    cur = p0 + 40
    ext = np.zeros(len(g), np.int8)
    gend = end[g]
    active = np.isin(nh, EXT_HEADERS)
    for _ in range(MAX_EXT_HEADERS):
        if not active.any():
            break
        a = np.nonzero(active)[0]
        p = cur[a]
        kind = nh[a]
        nxt, ok1 = read_uint(hb, g[a], p, gend[a], 1)
        hl, ok2 = read_uint(hb, g[a], p + 1, gend[a], 1)
        ok = ok1 & ok2
        length = np.where(kind == EXT_FRAGMENT, 8,
                          np.where(kind == EXT_AH, (hl.astype(np.int64) + 2) * 4,
                                   (hl.astype(np.int64) + 1) * 8))
        frag = ok & (kind == EXT_FRAGMENT)
        if frag.any():
            fo, fok = read_uint(hb, g[a][frag], p[frag] + 2, gend[a][frag], 2)
            fi = g[a[frag]]
            out["ip_fragment_offset"][fi] = np.where(fok, (fo >> 3).astype(np.int32) * 8, 0)
            out["ip_more_fragments"][fi] = fok & ((fo & 1) == 1)
        # a chain cut by the snaplen ends the walk with the status below
        status[g[a[~ok]]] = CODE["truncated_ip"]
        nh[a] = np.where(ok, nxt, nh[a])
        cur[a] = np.where(ok, p + length, p)
        ext[a] += ok.astype(np.int8)
        active[a] = ok & np.isin(nxt, EXT_HEADERS)
    still = active
    status[g[still]] = CODE["ipv6_extension_limit"]
    out["ipv6_ext_headers"][g] = ext
    out["ip_header_bytes"][g] = cur - p0
    out["protocol"][g] = np.where(still, -1, nh)
    out["l4"][g] = cur
    fragmented = (out["ip_fragment_offset"][g] > 0) & (status[g] == 0)
    status[g[fragmented]] = CODE["ip_fragment"]
