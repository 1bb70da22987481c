"""Write small pcap and pcapng files for tests (crafted edge cases)."""

import struct


def pcap_bytes(packets, link_type=1, big_endian=False, nanoseconds=False, snaplen=65535):
    """packets: list of (ts_ns, data) or (ts_ns, data, wire_len)."""
    e = ">" if big_endian else "<"
    magic = 0xA1B23C4D if nanoseconds else 0xA1B2C3D4
    out = [struct.pack(e + "IHHiIII", magic, 2, 4, 0, 0, snaplen, link_type)]
    for p in packets:
        ts, data = p[0], p[1]
        wire = p[2] if len(p) > 2 else len(data)
        sec, frac = divmod(ts, 1_000_000_000)
        if not nanoseconds:
            frac //= 1000
        out.append(struct.pack(e + "IIII", sec, frac, len(data), wire) + data)
    return b"".join(out)


def _pad(b):
    return b + b"\x00" * (-len(b) % 4)


def _options(opts, e):
    if not opts:
        return b""
    out = b""
    for code, value in opts:
        out += struct.pack(e + "HH", code, len(value)) + _pad(value)
    return out + struct.pack(e + "HH", 0, 0)


def block(btype, body, e="<"):
    body = _pad(body)
    n = len(body) + 12
    return struct.pack(e + "II", btype, n) + body + struct.pack(e + "I", n)


def shb(e="<"):
    return block(0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1), e)


def idb(link_type, snaplen=0, tsresol=None, tsoffset=None, name=None, e="<"):
    opts = []
    if name:
        opts.append((2, name.encode()))
    if tsresol is not None:
        opts.append((9, bytes([tsresol])))
    if tsoffset is not None:
        opts.append((14, struct.pack(e + "q", tsoffset)))
    return block(1, struct.pack(e + "HHI", link_type, 0, snaplen) + _options(opts, e), e)


def epb(iface, ts_units, data, wire_len=None, e="<"):
    wire = len(data) if wire_len is None else wire_len
    body = struct.pack(e + "IIIII", iface, ts_units >> 32, ts_units & 0xFFFFFFFF,
                       len(data), wire) + _pad(data)
    return block(6, body, e)


def spb(data, wire_len=None, e="<"):
    wire = len(data) if wire_len is None else wire_len
    return block(3, struct.pack(e + "I", wire) + _pad(data), e)


def pb(iface, ts_units, data, e="<"):
    body = struct.pack(e + "HHIIII", iface, 0, ts_units >> 32, ts_units & 0xFFFFFFFF,
                       len(data), len(data)) + _pad(data)
    return block(2, body, e)


def scan_syn(i):
    """Ethernet frame of a scan's i-th SYN: 10.0.0.1 to one of 4,096 hosts in
    198.18.0.0/20, a new source port (and a new destination port every 4,096)
    each time, so every SYN is a flow of its own."""
    dst = 0xC6120000 + i % 4096
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 40, 0, 0, 64, 6, 0, bytes([10, 0, 0, 1]),
                     dst.to_bytes(4, "big"))
    tcp = struct.pack(">HHIIBBHHH", 1024 + i % 60000, 1 + i // 4096, i * 7919, 0, 5 << 4, 0x02,
                      1024, 0, 0)
    return b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x08\x00" + ip + tcp
