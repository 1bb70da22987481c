"""A small TCP conversation model that writes what a capture would see.

Crafted traffic for cases no real capture in reach has (sequence numbers
that cross 2^32 in every field, transfers beyond 4 GiB). One client sends a
request, the server answers with `response_bytes` in MSS-sized segments at
`gap_ns` apart; segments listed in `lose` (0-based index of the server's
data segments) are dropped on the path once. The client acknowledges every
segment, with SACK blocks above a hole (newest block first, RFC 2018), and
the server retransmits a segment once three segments above it are SACKed
(RFC 6675's IsLost). Both vantages are produced from the same events: `client` (the lost
segment is never seen, ACKs leave at once) and `server` (the lost segment
leaves and is seen, ACKs arrive a one-way delay later).

No checksums: tracekit does not verify them, as Wireshark by default.
"""

import heapq
import struct

ETH = b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x08\x00"
M32 = 0xFFFFFFFF
FIN, SYN, ACK, PSH = 0x01, 0x02, 0x10, 0x08


def tcp_packet(src, dst, sport, dport, seq, ack, flags, payload_len=0, window=65535,
               options=b"", snap=None, ip_id=1, payload=None):
    """Ethernet + IPv4 + TCP bytes; the payload is `payload`, else `payload_len`
    zeros (cut at `snap` bytes)."""
    if payload is not None:
        payload_len = len(payload)
    options += b"\x00" * (-len(options) % 4)
    tcp = struct.pack(">HHIIBBHHH", sport, dport, seq & M32, ack & M32,
                      (5 + len(options) // 4) << 4, flags, window, 0, 0) + options
    total = 20 + len(tcp) + payload_len
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, min(total, 65535), ip_id & 0xFFFF, 0x4000, 64, 6, 0,
                     bytes(src), bytes(dst))
    frame = ETH + ip + tcp
    wire = len(frame) + payload_len
    keep = wire if snap is None else min(snap, wire)
    body = payload if payload is not None else b"\x00" * payload_len
    return (frame + body)[:keep], wire


def sack_option(blocks):
    body = b"".join(struct.pack(">II", lo & M32, hi & M32) for lo, hi in blocks)
    return b"\x01\x01" + bytes([5, 2 + len(body)]) + body


def conversation(isn_c, isn_s, response_bytes, mss=1448, lose=(), request_bytes=100,
                 owd_ns=10_000_000, gap_ns=20_000, start_ns=1_700_000_000_000_000_000,
                 snap=None):
    """{vantage: [(ts_ns, frame bytes, wire length)]} for 'client' and 'server'."""
    c, s = (198, 18, 0, 1), (198, 19, 0, 1)
    cp, sp = 40000, 443
    events = []  # (time at sender, from_client, seq, ack, flags, payload, sack blocks, lost)

    def send(t, from_client, seq, ack, flags, payload=0, sack=(), lost=False):
        events.append((t, from_client, seq, ack, flags, payload, tuple(sack), lost))

    t = start_ns
    send(t, True, isn_c, 0, SYN)
    send(t + owd_ns, False, isn_s, isn_c + 1, SYN | ACK)
    t += 2 * owd_ns
    send(t, True, isn_c + 1, isn_s + 1, ACK)
    # the request, in MSS segments
    off = 0
    while off < request_bytes:
        n = min(mss, request_bytes - off)
        send(t, True, isn_c + 1 + off, isn_s + 1, ACK | PSH, n)
        off += n
        t += gap_ns
    c_next = isn_c + 1 + request_bytes
    t = t + owd_ns  # the server has the request
    # the response: segments, the client's ACKs, fast retransmission of losses,
    # as events in time order (a heap: arrivals at the client, ACKs at the server)
    segs = []
    off = 0
    while off < response_bytes:
        segs.append((isn_s + 1 + off, min(mss, response_bytes - off)))
        off += segs[-1][1]
    lost = set(lose)
    heap = []
    for k, (seq, n) in enumerate(segs):
        ts = t + k * gap_ns
        send(ts, False, seq, c_next, ACK, n, lost=k in lost)
        if k not in lost:
            heapq.heappush(heap, (ts + owd_ns, 0, k))
    highest = -1  # the highest segment the client has; `missing` the holes below it
    missing = set()
    resent = set()
    while heap:
        now, kind, value = heapq.heappop(heap)
        if kind == 0:  # segment `value` reaches the client: it ACKs at once
            if value > highest:
                missing.update(range(highest + 1, value))
                highest = value
            missing.discard(value)
            j = min(missing) if missing else highest + 1
            cum = segs[j - 1][0] + segs[j - 1][1] if j else isn_s + 1
            send(now, True, c_next, cum, ACK,
                 sack=_sack_blocks(segs, missing, highest, j, value))
            heapq.heappush(heap, (now + owd_ns, 1, (highest, tuple(sorted(missing)))))
        else:  # an ACK reaches the server: a segment with 3 SACKed above it is
            # lost (RFC 6675 IsLost) and sent again at once, once
            top, holes = value
            for n_above, k in enumerate(reversed(holes)):
                if (top - k) - n_above >= 3 and k not in resent:
                    resent.add(k)
                    seq, n = segs[k]
                    send(now, False, seq, c_next, ACK, n)
                    heapq.heappush(heap, (now + owd_ns, 0, k))
    end = max(e[0] for e in events) + owd_ns
    s_fin = isn_s + 1 + response_bytes
    send(end, False, s_fin, c_next, FIN | ACK)
    send(end + owd_ns, True, c_next, s_fin + 1, FIN | ACK)
    send(end + 2 * owd_ns, False, s_fin + 1, c_next + 1, ACK)

    out = {"client": [], "server": []}
    ip_ids = {True: 0, False: 0}  # each sender numbers its datagrams
    for ts, from_client, seq, ack, flags, payload, sack, lost_here in sorted(
            events, key=lambda e: e[0]):
        ip_ids[from_client] += 1
        src, dst, sport, dport = (c, s, cp, sp) if from_client else (s, c, sp, cp)
        opts = sack_option(sack) if sack else b""
        frame, wire = tcp_packet(src, dst, sport, dport, seq, ack, flags, payload,
                                 options=opts, snap=snap, ip_id=ip_ids[from_client])
        own = "client" if from_client else "server"
        other = "server" if from_client else "client"
        out[own].append((ts, frame, wire))
        if not lost_here:
            out[other].append((ts + owd_ns, frame, wire))
    for v in out.values():
        v.sort(key=lambda p: p[0])
    return out


def _sack_blocks(segs, missing, highest, cum_index, newest):
    """SACK blocks above the hole at `cum_index`: runs of received segments
    between the holes, the one holding `newest` first, at most 3."""
    runs = []
    bounds = sorted(k for k in missing if k >= cum_index) + [highest + 1]
    lo = cum_index
    for hole in bounds:
        if hole > lo:
            runs.append((segs[lo][0], segs[hole - 1][0] + segs[hole - 1][1], lo, hole - 1))
        lo = hole + 1
    if newest is not None:
        runs.sort(key=lambda r: not (r[2] <= newest <= r[3]))
    return [(lo, hi) for lo, hi, _, _ in runs[:3]]
