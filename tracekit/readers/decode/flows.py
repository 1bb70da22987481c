"""Assign packets to transport flows and summarise each flow, in capture order.

Strategy: flow assignment is a state machine over packets in capture order
(a SYN after a FIN or RST on the same ports starts a new connection, window
scaling becomes known only once the SYNs were seen, the handshake's first
ACK is the first one after the SYN), so it runs as one sequential kernel
(tracekit/core/jit.py) over each batch. Its state lives in plain numpy arrays
between batches: an open-addressing hash table from endpoint pair to the
current flow, and one row of counters per flow, which becomes the `flows`
table at the end. One pass, no second scan of the packets.

Rules (the contract documented in the README):
- A flow is a TCP connection or a UDP conversation between two endpoints
  (address, port). Flow ids count from 0 in the order of each flow's first
  packet, so they are stable for a given capture.
- TCP client: the sender of the SYN; if the first packet seen is a SYN-ACK,
  its receiver; otherwise the first sender. UDP client: the first sender.
- Port reuse: a SYN without ACK that follows a FIN or RST of the current
  connection on the same endpoints starts a new flow, unless it carries the
  same sequence number as the connection's last SYN (the same attempt sent
  again after a RST, as Windows retries a refused SYN: one connection, as
  Wireshark's tcp.stream has it).
- Window scaling (RFC 7323 sec. 2.2-2.3), as Wireshark applies it
  (tcp.window_size_scalefactor): each side's shift is unknown (-1) until its
  SYN is seen; the connection's first SYN with the option sets that side's
  shift, and a first SYN or a SYN-ACK without it sets -2 (not scaled) for
  both sides (RFC 7323: scaling needs both; a RST-ACK refusing such a SYN is
  not scaled either); a SYN sent again changes nothing. A
  segment is scaled by its sender's shift when that is >= 0; SYN segments
  are never scaled (shift -1).
- Handshake: SYN = SYN without ACK from the client. The first ACK is the
  first segment after the first SYN with ACK set and SYN clear, either way
  (normally the client's ACK of the SYN-ACK; the server's RST-ACK when the
  connection is refused); a client segment with acknowledgment number 0
  acknowledges nothing and does not count. handshake_rtt = the first ACK's
  time - the last SYN's time before it (Wireshark: tcp.analysis.initial_rtt,
  except that Wireshark skips a difference of exactly 0, which we keep).
- A flow is over, and leaves the table with its row written, once it was
  silent for IDLE_NS (5 min), or for CLOSED_NS (60 s) after a RST or a FIN
  each way -- and AFTER_PACKETS (65,536) packets came since its last one. A
  packet on its endpoints after that starts a new flow (Wireshark's
  tcp.stream would go on with the old one: docs/guide.md, Flows). So the
  table holds the flows live at one time (a scan's: its last 5 minutes),
  not every flow of the capture.
"""

import numpy as np

from ...core.jit import kernel

EMPTY = -1
UNKNOWN = -1
NOT_SCALED = -2
NONE = np.iinfo(np.int64).min  # "no value" in the per-flow counters

TH_FIN, TH_SYN, TH_RST, TH_ACK = 0x01, 0x02, 0x04, 0x10

# Columns of the per-flow counter matrix (int64).
STATS = (
    "protocol", "ip_version", "client_is_a", "first_frame", "last_frame", "first_ts_ns",
    "last_ts_ns", "packets_c2s", "packets_s2c", "payload_bytes_c2s", "payload_bytes_s2c",
    "wire_bytes_c2s", "wire_bytes_s2c", "syn_ts_ns", "syn_count", "synack_ts_ns",
    "synack_count", "last_syn_ts_ns", "ack_ts_ns", "handshake_rtt_ns", "client_mss",
    "server_mss", "client_wscale", "server_wscale", "client_sack_permitted",
    "server_sack_permitted", "fast_open", "fin_c2s_ts_ns", "fin_s2c_ts_ns", "rst_ts_ns",
)
S = {name: i for i, name in enumerate(STATS)}
IDLE_NS = 300 * 10**9
CLOSED_NS = 60 * 10**9
AFTER_PACKETS = 1 << 16
EVICT_AT = 1 << 13  # flows over (an eighth of the table at least) before an eviction pays
NEXT_ID, ROWS = 0, 1  # FlowTable.state: the next flow id, the rows in use


class FlowTable:
    """Flow state carried from one batch to the next, and the flows found."""

    def __init__(self, jit=False, capacity=1 << 10):
        self.jit = jit
        self._alloc(capacity)
        self.state = np.zeros(2, np.int64)
        # one row per live flow: its counters, endpoints and flow id
        self.stats = np.full((capacity, len(STATS)), NONE, np.int64)
        self.ends = np.zeros((capacity, 6), np.uint64)  # a_hi, a_lo, a_port, b_hi, b_lo, b_port
        self.ids = np.zeros(capacity, np.int64)

    @property
    def next_flow_id(self):
        return int(self.state[NEXT_ID])

    def live(self):
        """Flows in the table now (the rest were written as they ended)."""
        return int(self.state[ROWS])

    def _alloc(self, capacity):
        # proto|ports, a_hi, a_lo, b_hi, b_lo, the last SYN's seq + 1 (0: none)
        self.key = np.zeros((capacity, 6), np.uint64)
        self.val = np.full((capacity, 6), EMPTY, np.int64)
        # val: row, client_is_a, finrst_since_syn, client shift, server shift, used
        self.used = 0

    def _grow(self):
        """Grow what is full: the hash table (past 3/4: doubled) or the rows (by half)."""
        if 4 * (self.used + 1) > 3 * len(self.key):
            self._rehash(self.key, self.val, 2 * len(self.key))
        if self.state[ROWS] >= len(self.stats):
            # in place (realloc: a large block is remapped, not copied beside itself)
            old, cap = len(self.stats), len(self.stats) * 3 // 2
            for rows in (self.stats, self.ends, self.ids):
                rows.resize((cap,) + rows.shape[1:], refcheck=False)
            self.stats[old:] = NONE

    def _rehash(self, keys, vals, capacity):
        self._alloc(capacity)
        self.used = _rehash(self.jit, keys, vals, self.key, self.val)

    def evict(self, now_ns, frame):
        """Take the flows that are over at time `now_ns`, frame `frame`, out of
        the table; returns their (counters, endpoints, flow ids), or None while
        they are fewer than an eighth of the table (each eviction costs a pass
        over it). The rows left are renumbered: `self.moved` maps each former
        row to its new one (-1: gone)."""
        n = self.live()
        st = self.stats[:n]
        quiet = st[:, S["last_frame"]] <= frame - AFTER_PACKETS
        if not quiet.any():
            return None
        last = st[:, S["last_ts_ns"]]
        closed = (st[:, S["rst_ts_ns"]] != NONE) | ((st[:, S["fin_c2s_ts_ns"]] != NONE)
                                                    & (st[:, S["fin_s2c_ts_ns"]] != NONE))
        over = quiet & ((last <= now_ns - IDLE_NS) | (closed & (last <= now_ns - CLOSED_NS)))
        if 8 * int(over.sum()) < max(n, EVICT_AT):
            return None
        gone = (st[over].copy(), self.ends[:n][over].copy(), self.ids[:n][over].copy())
        keep = np.flatnonzero(~over)
        new_row = np.cumsum(~over) - 1
        new_row[over] = -1
        self.moved = new_row
        # in place, so that an eviction costs a copy of the flows kept, not
        # of the tables: the hash table refilled, the rows moved down
        slots = np.flatnonzero(self.val[:, 5] != EMPTY)
        slots = slots[~over[self.val[slots, 0]]]
        keys, vals = self.key[slots], self.val[slots]
        vals[:, 0] = new_row[vals[:, 0]]
        self.key.fill(0)
        self.val.fill(EMPTY)
        self.used = _rehash(self.jit, keys, vals, self.key, self.val)
        for begin in range(0, len(keep), 1 << 16):  # (keep[j] >= j: moving down is safe)
            part = keep[begin:begin + (1 << 16)]
            for rows in (self.stats, self.ends, self.ids):
                rows[begin:begin + len(part)] = rows[part]
        self.stats[len(keep):n] = NONE
        self.state[ROWS] = len(keep)
        return gone

    def track(self, cols, ts_ns, first_frame, wire_bytes, exclude=None):
        """Assign a batch's packets to flows; returns (flow_id, from_client, shift).
        Packets in `exclude` are in no flow."""
        n = len(cols["is_tcp"])
        flow_id = np.full(n, -1, np.int64)
        from_client = np.zeros(n, np.bool_)
        scale = np.full(n, -1, np.int8)
        self.rows = np.full(n, -1, np.int64)  # each packet's flow's row (for PayloadKeeper)
        is_flow = (cols["is_tcp"] | cols["is_udp"]) & (cols["src_port"] >= 0) & (cols["dst_port"] >= 0)
        if exclude is not None:
            is_flow &= ~exclude
        args = (is_flow, cols["is_tcp"], cols["protocol"].astype(np.int64),
                cols["ip_version"].astype(np.int64),
                cols["src_hi"], cols["src_lo"], cols["dst_hi"], cols["dst_lo"],
                cols["src_port"].astype(np.int64), cols["dst_port"].astype(np.int64),
                cols["tcp_flags"].astype(np.int64), cols["tcp_wscale"].astype(np.int64),
                cols["tcp_seq"].astype(np.int64),
                cols["tcp_ack"].astype(np.int64), cols["tcp_mss"].astype(np.int64),
                cols["tcp_sack_permitted"], cols["tcp_fast_open"],
                np.maximum(cols["payload_bytes"], 0), wire_bytes.astype(np.int64),
                ts_ns, np.int64(first_frame))
        done = 0
        while done < n:
            added, done = _track(
                self.jit, *args, done, self.key, self.val, self.used, self.state,
                self.stats, self.ends, self.ids, flow_id, self.rows, from_client, scale)
            self.used += added
            if done < n:
                self._grow()
        return flow_id, from_client, scale

    def flows(self):
        """(per-flow counters, endpoint columns, flow ids) of the flows still in
        the table; the table is done with (its hash table is let go)."""
        n = self.live()
        self.key = self.val = None
        return self.stats[:n], self.ends[:n], self.ids[:n]


@kernel
def _rehash(old_key, old_val, key, val):
    mask = np.uint64(len(key) - 1)
    used = 0
    for i in range(len(old_key)):
        if old_val[i, 5] == EMPTY:
            continue
        h = np.uint64(0x9E3779B97F4A7C15)
        for j in range(5):
            h ^= old_key[i, j]
            h *= np.uint64(0xBF58476D1CE4E5B9)
            h ^= h >> np.uint64(31)
        h &= mask
        while val[h, 5] != EMPTY:
            h = (h + np.uint64(1)) & mask
        for j in range(key.shape[1]):  # element by element: a row slice is a view, which
            key[h, j] = old_key[i, j]  # needs numba's reference counting (off: core/jit.py)
        for j in range(val.shape[1]):
            val[h, j] = old_val[i, j]
        used += 1
    return used


def _endpoints(shi, slo, sp, dhi, dlo, dp):
    """Canonical endpoint order: a is the smaller (address, port). Returns
    (the sender is a, a's address and port, b's address and port)."""
    if shi != dhi:
        src_is_a = shi < dhi
    elif slo != dlo:
        src_is_a = slo < dlo
    else:
        src_is_a = sp <= dp
    if src_is_a:
        return src_is_a, shi, slo, sp, dhi, dlo, dp
    return src_is_a, dhi, dlo, dp, shi, slo, sp


def _lookup(key, val, mask, k0, ahi, alo, bhi, blo):
    """The hash table's slot for this key: where it is, or the empty slot
    where it would go (open addressing, linear probing)."""
    h = np.uint64(0x9E3779B97F4A7C15)
    for kk in (k0, ahi, alo, bhi, blo):
        h ^= kk
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(31)
    h &= mask
    while val[h, 5] != EMPTY:
        if (key[h, 0] == k0 and key[h, 1] == ahi and key[h, 2] == alo
                and key[h, 3] == bhi and key[h, 4] == blo):
            break
        h = (h + np.uint64(1)) & mask
    return h


def _open_flow(fid, h, src_is_a, synack, proto, ipver, frame, now, ahi, alo, ap, bhi, blo, bp,
               val, st, ends):
    """Flow row `fid` starts at this packet (in hash slot h): its client, its row
    of counters and its endpoints."""
    val[h, 0] = fid
    if synack:
        val[h, 1] = 0 if src_is_a else 1  # SYN-ACK first: its receiver is the client
    else:
        val[h, 1] = 1 if src_is_a else 0
    val[h, 2] = 0
    val[h, 3] = UNKNOWN
    val[h, 4] = UNKNOWN
    st[fid, 0] = proto
    st[fid, 1] = ipver
    st[fid, 2] = val[h, 1]
    st[fid, 3] = frame
    st[fid, 5] = now
    for c in range(7, 13):
        st[fid, c] = 0
    st[fid, 14] = 0
    st[fid, 16] = 0
    ends[fid, 0] = ahi
    ends[fid, 1] = alo
    ends[fid, 2] = np.uint64(ap)
    ends[fid, 3] = bhi
    ends[fid, 4] = blo
    ends[fid, 5] = np.uint64(bp)


def _tcp_stats(fid, d, fc, f, now, mss, wscale, sack_perm, tfo, tcp_ack, st):
    """A TCP packet's counters: the handshake (the client's SYN, d = 0, or the
    server's SYN-ACK, d = 1; the first ACK after them), Fast Open, FINs, RST."""
    syn = (f & TH_SYN) != 0
    ack = (f & TH_ACK) != 0
    if (syn and not ack and fc) or (syn and ack and not fc):
        if st[fid, 13 + 2 * d] == NONE:  # syn_ts_ns / synack_ts_ns
            st[fid, 13 + 2 * d] = now
            st[fid, 20 + d] = mss if mss >= 0 else NONE
            st[fid, 22 + d] = wscale if wscale >= 0 else NONE
            st[fid, 24 + d] = 1 if sack_perm else 0
        st[fid, 14 + 2 * d] += 1  # syn_count / synack_count
        if d == 0:
            st[fid, 17] = now  # last_syn_ts_ns
    elif (st[fid, 13] != NONE and st[fid, 18] == NONE and ack and not syn
          and (not fc or tcp_ack != 0)):
        st[fid, 18] = now
        st[fid, 19] = now - st[fid, 17]
    if syn and tfo:
        st[fid, 26] = 1
    if (f & TH_FIN) != 0:
        if st[fid, 27 + d] == NONE:
            st[fid, 27 + d] = now
    if (f & TH_RST) != 0 and st[fid, 29] == NONE:
        st[fid, 29] = now


def _connection(h, new, fc, f, isn, wscale, key, val):
    """Port reuse and window scaling: a pure SYN records its ISN, FIN or RST
    marks the connection ended; the SYNs decide each side's shift. Returns
    the shift that scales this segment."""
    syn = (f & TH_SYN) != 0
    ack = (f & TH_ACK) != 0
    if new:
        key[h, 5] = 0
    if syn and not ack:
        val[h, 2] = 0
        key[h, 5] = isn
    side = 3 if fc else 4
    shift = val[h, side]
    if syn:
        if not ack and val[h, side] != UNKNOWN:
            pass  # a SYN sent again: the connection's first SYN decided
        elif wscale >= 0 and not (ack and val[h, 3 if side == 4 else 4] == NOT_SCALED):
            val[h, side] = min(wscale, 14)
        else:  # the first SYN, or the SYN-ACK, without the option: neither side scales
            val[h, 3] = NOT_SCALED
            val[h, 4] = NOT_SCALED
        shift = UNKNOWN
    if (f & (TH_FIN | TH_RST)) != 0:
        val[h, 2] = 1
    return shift


@kernel(helpers=(_endpoints, _lookup, _open_flow, _tcp_stats, _connection))
def _track(is_flow, is_tcp, proto, ipver, src_hi, src_lo, dst_hi, dst_lo, sport, dport,
           flags, wscale, tcp_seq, tcp_ack, mss, sack_perm, tfo, payload, wire, ts, first_frame,
           begin, key, val, used, state, st, ends, ids, flow_id, row_of, from_client, scale):
    """Process packets from `begin`; returns (keys added, where it stopped).
    `state` holds the next flow id and the rows in use, updated in place.

    Stops early, before the packet that would start a flow, when the hash
    table would pass 3/4 full or the per-flow rows are used up; the caller
    grows what is full and calls again from there.
    """
    mask = np.uint64(len(key) - 1)
    added = 0
    for i in range(begin, len(is_flow)):
        if not is_flow[i]:
            continue
        src_is_a, ahi, alo, ap, bhi, blo, bp = _endpoints(src_hi[i], src_lo[i], sport[i],
                                                          dst_hi[i], dst_lo[i], dport[i])
        k0 = (np.uint64(proto[i]) << np.uint64(32)) | (np.uint64(ap) << np.uint64(16)) | np.uint64(bp)
        h = _lookup(key, val, mask, k0, ahi, alo, bhi, blo)
        f = flags[i] if is_tcp[i] else 0
        pure_syn = (f & TH_SYN) != 0 and (f & TH_ACK) == 0
        # a SYN after a FIN or RST starts a new connection, unless it is the
        # same attempt sent again (the same ISN: Windows retries a refused SYN)
        isn = np.uint64(tcp_seq[i]) + np.uint64(1) if pure_syn else np.uint64(0)
        reuse = is_tcp[i] and pure_syn and val[h, 5] != EMPTY and val[h, 2] == 1 and key[h, 5] != isn
        new = False
        if val[h, 5] == EMPTY or reuse:
            if 4 * (used + added + 1) > 3 * len(key) or state[1] >= len(st):
                return added, i
        if val[h, 5] == EMPTY:
            key[h, 0] = k0
            key[h, 1] = ahi
            key[h, 2] = alo
            key[h, 3] = bhi
            key[h, 4] = blo
            val[h, 5] = 1
            added += 1
            new = True
        elif reuse:
            new = True  # port reuse after FIN/RST
        frame = first_frame + i
        if new:
            row = state[1]
            _open_flow(row, h, src_is_a, (f & (TH_SYN | TH_ACK)) == (TH_SYN | TH_ACK),
                       proto[i], ipver[i], frame, ts[i], ahi, alo, ap, bhi, blo, bp, val, st, ends)
            ids[row] = state[0]
            state[0] += 1
            state[1] += 1
        fid = val[h, 0]  # (its row)
        fc = (val[h, 1] == 1) == src_is_a
        flow_id[i] = ids[fid]
        row_of[i] = fid
        from_client[i] = fc
        st[fid, 4] = frame
        st[fid, 6] = ts[i]
        d = 0 if fc else 1
        st[fid, 7 + d] += 1
        st[fid, 9 + d] += payload[i]
        st[fid, 11 + d] += wire[i]
        if not is_tcp[i]:
            continue
        _tcp_stats(fid, d, fc, f, ts[i], mss[i], wscale[i], sack_perm[i], tfo[i], tcp_ack[i], st)
        scale[i] = _connection(h, new, fc, f, isn, wscale[i], key, val)
    return added, len(is_flow)
