"""Link layers: where the IP header starts and which IP version it is.

Strategy: each supported link type is one small vectorised function over the
packets of that link type; they all return the offset of the network header
and a "network" code (4, 6, or 0 with a status saying why not). VLAN tags
(802.1Q, 802.1ad/QinQ) and PPPoE sessions are stepped over on Ethernet.
"""

import numpy as np

from .layout import read_uint
from .status import CODE

ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_IPV6 = 0x86DD
ETHERTYPE_PPPOE_SESSION = 0x8864
VLAN_TPIDS = (0x8100, 0x88A8, 0x9100)
MAX_VLAN_TAGS = 4

PPP_IPV4 = 0x0021
PPP_IPV6 = 0x0057

# BSD address families seen in DLT_NULL / DLT_LOOP headers
AF_INET = (2,)
AF_INET6 = (10, 24, 28, 30)

LINK_TYPE_NAMES = {
    0: "NULL (BSD loopback)", 1: "Ethernet", 9: "PPP", 12: "raw IP", 14: "raw IP",
    101: "raw IP", 108: "OpenBSD loopback", 113: "Linux cooked (SLL)",
    228: "raw IPv4", 229: "raw IPv6", 239: "Linux NFLOG", 276: "Linux cooked v2 (SLL2)",
}
NFLOG_PAYLOAD = 9  # NFULA_PAYLOAD: the packet, from its network header on
MAX_NFLOG_TLVS = 32
SUPPORTED_LINK_TYPES = frozenset(LINK_TYPE_NAMES)


def link_type_name(link_type):
    return LINK_TYPE_NAMES.get(link_type, f"link type {link_type}")


def _from_ethertype(ethertype, ok):
    net = np.zeros(len(ethertype), np.int8)
    net[ethertype == ETHERTYPE_IPV4] = 4
    net[ethertype == ETHERTYPE_IPV6] = 6
    status = np.where(net == 0, CODE["not_ip"], 0).astype(np.uint8)
    status[~ok] = CODE["truncated_link"]
    net[~ok] = 0
    return net, status


def _from_ip_version(hb, rows, pos, end):
    first, ok = read_uint(hb, rows, pos, end, 1)
    version = first >> 4
    net = np.where(version == 4, 4, np.where(version == 6, 6, 0)).astype(np.int8)
    status = np.where(net == 0, CODE["bad_ip_header"], 0).astype(np.uint8)
    status[~ok] = CODE["truncated_ip"]
    net[~ok] = 0
    return net, status


def _ppp_protocol(hb, rows, pos, end):
    """PPP protocol field (with or without HDLC framing and PFC); (proto, next pos, ok)."""
    head, ok = read_uint(hb, rows, pos, end, 2)
    pos = np.where(head == 0xFF03, pos + 2, pos)
    first, ok1 = read_uint(hb, rows, pos, end, 1)
    compressed = (first & 1) == 1  # protocol-field compression: one byte
    two, ok2 = read_uint(hb, rows, pos, end, 2)
    proto = np.where(compressed, first.astype(np.uint16), two)
    ok = ok & ok1 & (compressed | ok2)
    return proto, pos + np.where(compressed, 1, 2), ok


def _ppp_to_net(proto, ok):
    net = np.where(proto == PPP_IPV4, 4, np.where(proto == PPP_IPV6, 6, 0)).astype(np.int8)
    status = np.where(net == 0, CODE["not_ip"], 0).astype(np.uint8)
    status[~ok] = CODE["truncated_link"]
    net[~ok] = 0
    return net, status


def decode_ethernet(hb, rows, start, end):
    """Ethernet II with any number of VLAN tags (first two kept) and PPPoE."""
    n = len(start)
    pos = start + 12
    vlan_outer = np.full(n, -1, np.int32)
    vlan_inner = np.full(n, -1, np.int32)
    ethertype, ok = read_uint(hb, rows, pos, end, 2)
    for k in range(MAX_VLAN_TAGS):
        tagged = ok & np.isin(ethertype, VLAN_TPIDS)
        if not tagged.any():
            break
        tci, tci_ok = read_uint(hb, rows, pos + 2, end, 2)
        vid = (tci & 0x0FFF).astype(np.int32)
        if k == 0:
            vlan_outer = np.where(tagged & tci_ok, vid, vlan_outer)
        elif k == 1:
            vlan_inner = np.where(tagged & tci_ok, vid, vlan_inner)
        pos = np.where(tagged, pos + 4, pos)
        ethertype, ok = read_uint(hb, rows, pos, end, 2)
    l3 = pos + 2
    net, status = _from_ethertype(ethertype, ok)
    pppoe = ok & (ethertype == ETHERTYPE_PPPOE_SESSION)
    if pppoe.any():
        proto, after, pok = _ppp_protocol(hb, rows, l3 + 6, end)
        pnet, pstatus = _ppp_to_net(proto, pok)
        net = np.where(pppoe, pnet, net)
        status = np.where(pppoe, pstatus, status)
        l3 = np.where(pppoe, after, l3)
    return l3, net, status, ethertype.astype(np.int32), vlan_outer, vlan_inner


def _swap16(x):
    return ((x & 0xFF) << 8) | (x >> 8)


def decode_nflog(hb, rows, start, end):
    """Linux NFLOG (link type 239): a 4-byte header (address family, version,
    resource id), then TLVs (length including its 4-byte header, type; both
    in the capturing host's byte order, padded to 4 bytes); the packet is
    the payload TLV (type 9). The byte order is told by the first TLV's
    type, which is small (< 256) read the right way round."""
    n = len(start)
    family, fam_ok = read_uint(hb, rows, start, end, 1)
    pos = start + 4
    first_type, _ = read_uint(hb, rows, pos + 2, end, 2)
    little = _swap16(first_type) < 0x100
    l3 = np.full(n, -1, np.int64)
    found = np.zeros(n, bool)
    alive = fam_ok.copy()
    for _ in range(MAX_NFLOG_TLVS):
        raw_len, ok1 = read_uint(hb, rows, pos, end, 2)
        raw_type, ok2 = read_uint(hb, rows, pos + 2, end, 2)
        length = np.where(little, _swap16(raw_len), raw_len).astype(np.int64)
        tlv_type = np.where(little, _swap16(raw_type), raw_type)
        alive &= ok1 & ok2 & (length >= 4)
        payload = alive & (tlv_type == NFLOG_PAYLOAD)
        l3 = np.where(payload, pos + 4, l3)
        found |= payload
        alive &= ~payload
        if not alive.any():
            break
        pos = np.where(alive, pos + (length + 3) // 4 * 4, pos)
    net, status = _from_ip_version(hb, rows, np.where(found, l3, start), end)
    # the header's family, where it names one, must agree with the packet
    named = np.where(family == 2, 4, np.where(family == 10, 6, 0))
    disagree = found & (named != 0) & (net != 0) & (named != net)
    status = np.where(disagree, CODE["bad_ip_header"], status).astype(np.uint8)
    status = np.where(found, status, CODE["truncated_link"]).astype(np.uint8)
    net = np.where(found & ~disagree, net, 0).astype(np.int8)
    return np.where(found, l3, start).astype(start.dtype), net, status


def decode_link(hb, rows, start, end, link_type):
    """Vectorised link-layer decode for packets of one link type.

    Returns (l3 offset, network 4/6/0, status, ethertype, vlan outer, vlan inner).
    """
    n = len(start)
    no_vlan = np.full(n, -1, np.int32)
    no_type = np.full(n, -1, np.int32)
    if link_type == 1:
        return decode_ethernet(hb, rows, start, end)
    if link_type == 113:  # Linux cooked v1: 16-byte header, protocol at 14
        et, ok = read_uint(hb, rows, start + 14, end, 2)
        net, status = _from_ethertype(et, ok)
        return start + 16, net, status, et.astype(np.int32), no_vlan, no_vlan
    if link_type == 276:  # Linux cooked v2: 20-byte header, protocol at 0
        et, ok = read_uint(hb, rows, start, end, 2)
        net, status = _from_ethertype(et, ok)
        return start + 20, net, status, et.astype(np.int32), no_vlan, no_vlan
    if link_type in (12, 14, 101, 228, 229):
        net, status = _from_ip_version(hb, rows, start, end)
        if link_type == 228:
            bad = net == 6
        elif link_type == 229:
            bad = net == 4
        else:
            bad = np.zeros(n, bool)
        status = np.where(bad, CODE["bad_ip_header"], status).astype(np.uint8)
        net = np.where(bad, 0, net).astype(np.int8)
        return start, net, status, no_type, no_vlan, no_vlan
    if link_type in (0, 108):  # 4-byte address family
        raw_be, ok = read_uint(hb, rows, start, end, 4)
        if link_type == 0:  # host byte order of the capturing machine
            swapped = ((raw_be & 0xFF) << 24) | ((raw_be & 0xFF00) << 8) | \
                      ((raw_be >> 8) & 0xFF00) | (raw_be >> 24)
            family = np.where((raw_be & 0xFFFF0000) == 0, raw_be, swapped)
        else:
            family = raw_be
        net = np.where(np.isin(family, AF_INET), 4,
                       np.where(np.isin(family, AF_INET6), 6, 0)).astype(np.int8)
        status = np.where(net == 0, CODE["not_ip"], 0).astype(np.uint8)
        status[~ok] = CODE["truncated_link"]
        net[~ok] = 0
        return start + 4, net, status, no_type, no_vlan, no_vlan
    if link_type == 239:
        l3, net, status = decode_nflog(hb, rows, start, end)
        return l3, net, status, no_type, no_vlan, no_vlan
    if link_type == 9:
        proto, after, ok = _ppp_protocol(hb, rows, start, end)
        net, status = _ppp_to_net(proto, ok)
        return after, net, status, no_type, no_vlan, no_vlan
    status = np.full(n, CODE["link_type_unsupported"], np.uint8)
    return start, np.zeros(n, np.int8), status, no_type, no_vlan, no_vlan
