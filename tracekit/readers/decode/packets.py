"""Decode a batch of raw packets into columns: link, IP, transport.

`decode_packets` is a pure function: bytes and record metadata in, numpy
columns out. Every packet produces a row; a packet that cannot be decoded
all the way carries a status code (see `status.py`) and keeps every field
that was captured before the problem.
"""

import numpy as np

from ...core.arrays import distinct
from .ip import decode_ipv4, decode_ipv6, new_ip_columns
from .layout import HeaderBytes
from .link import decode_link
from .status import CODE
from .transport import decode_tcp, decode_udp, new_transport_columns

IPPROTO_TCP = 6
IPPROTO_UDP = 17


def decode_packets(data, start, captured_bytes, wire_bytes, link_type):
    """Decode packets data[start:start+captured_bytes]; link_type is per packet.

    Returns a dict of numpy arrays, one entry per packet in each.
    """
    n = len(start)
    hb = HeaderBytes(data, start, captured_bytes)
    # from here on every position is relative to the packet's first byte
    begin = np.zeros(n, np.int64)
    end = captured_bytes.astype(np.int64, copy=False)
    wire_end = wire_bytes.astype(np.int64, copy=False)
    status = np.zeros(n, np.uint8)
    l3 = np.zeros(n, np.int64)
    net = np.zeros(n, np.int8)
    ethertype = np.full(n, -1, np.int32)
    vlan_outer = np.full(n, -1, np.int32)
    vlan_inner = np.full(n, -1, np.int32)
    for lt in distinct(link_type):
        sel = np.nonzero(link_type == lt)[0]
        if lt < 0:
            status[sel] = CODE["no_such_interface"]
            continue
        r = decode_link(hb, sel, begin[sel], end[sel], int(lt))
        l3[sel], net[sel], status[sel], ethertype[sel], vlan_outer[sel], vlan_inner[sel] = r

    cols = new_ip_columns(n)
    v4 = np.nonzero(net == 4)[0]
    v6 = np.nonzero(net == 6)[0]
    if len(v4):
        decode_ipv4(hb, l3, end, wire_end, v4, cols, status)
    if len(v6):
        decode_ipv6(hb, l3, end, wire_end, v6, cols, status)
    cols.update(new_transport_columns(n))
    l4_ready = (status == 0) & (net != 0)
    proto = cols["protocol"]
    tcp = np.nonzero(l4_ready & (proto == IPPROTO_TCP))[0]
    udp = np.nonzero(l4_ready & (proto == IPPROTO_UDP))[0]
    if len(tcp):
        decode_tcp(hb, cols["l4"], cols["ip_end"], end, tcp, cols, status)
    if len(udp):
        decode_udp(hb, cols["l4"], cols["ip_end"], end, udp, cols, status)
    is_tcp = np.zeros(n, bool)
    is_tcp[tcp] = True
    is_udp = np.zeros(n, bool)
    is_udp[udp] = True
    cols.update(status=status, ip_version=net, ethertype=ethertype,
                vlan_outer=vlan_outer, vlan_inner=vlan_inner, is_tcp=is_tcp, is_udp=is_udp)
    return cols
