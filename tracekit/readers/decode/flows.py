"""Assign packets to transport flows and summarise each flow, in capture order.

Strategy: flow assignment is a state machine over packets in capture order
(a SYN after a FIN or RST on the same ports starts a new connection, window
scaling becomes known only once the SYNs were seen, the handshake's first
ACK is the first one after the SYN), so it runs as one sequential kernel
(tracekit/core/jit.py) over each batch. Its state lives in plain numpy arrays
between batches: one row per live flow (its endpoints, counters and
connection state, in int64, int32 and int8 parts: 226 bytes), which
becomes its `flows` row, and an open-addressing hash table of row numbers
(4 bytes a slot, at most half full), whose keys are the rows' endpoints.
One pass, no second scan of the packets.

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
NONE = np.iinfo(np.int64).min  # "no value" in the per-flow counters (WIDE)
NONE32 = np.iinfo(np.int32).min  # in the small ones (NARROW)
NONE8 = np.iinfo(np.int8).min  # and in the tiny ones (TINY)

TH_FIN, TH_SYN, TH_RST, TH_ACK = 0x01, 0x02, 0x04, 0x10

# A flow's row, in five arrays of the same length (one row per live flow):
# - KEY (uint64 x 5): proto << 32 | a_port << 16 | b_port, a_hi, a_lo, b_hi,
#   b_lo -- the endpoints, stored once: the hash table holds row numbers only;
# - WIDE (int64): times, frames, counters, and the last pure SYN's seq + 1
#   (0: none), which tells a new connection on the same ports from a SYN sent
#   again; the last SYN's time stays as it was at the handshake's first ACK,
#   so the handshake RTT is their difference (FlowRows.column);
# - NARROW (int32): SYN counts (the store's are INTEGER), MSS, window scale
#   (as the options carry them);
# - TINY (int8): what takes a few values: protocol (TCP or UDP), IP version,
#   the client's side, SACK permitted, Fast Open, and the connection's state:
#   FIN or RST since the last SYN, each side's shift (-2..14), and whether the
#   hash table points at this row (0: a newer connection on the same ports has it);
# - the flow id (int64).
# 8 * (5 + 18 + 1) + 4 * 6 + 10 = 226 bytes a flow, and 4 bytes a hash slot.
WIDE = (
    "first_frame", "last_frame", "first_ts_ns", "last_ts_ns", "packets_c2s", "packets_s2c",
    "payload_bytes_c2s", "payload_bytes_s2c", "wire_bytes_c2s", "wire_bytes_s2c",
    "syn_ts_ns", "synack_ts_ns", "last_syn_ts_ns", "ack_ts_ns",
    "fin_c2s_ts_ns", "fin_s2c_ts_ns", "rst_ts_ns", "isn",
)
NARROW = ("syn_count", "synack_count", "client_mss", "server_mss", "client_wscale",
          "server_wscale")
TINY = ("protocol", "ip_version", "client_is_a", "client_sack_permitted",
        "server_sack_permitted", "fast_open", "finrst_since_syn", "client_shift",
        "server_shift", "current")
KEY_COLUMNS = 5
W = {name: i for i, name in enumerate(WIDE)}
N = {name: i for i, name in enumerate(NARROW)}
T = {name: i for i, name in enumerate(TINY)}
# (the kernels index by these: numba takes module-level ints as constants;
# a per-direction column is the client's + d, d = 0 client, 1 server)
FIRST_FRAME, LAST_FRAME, FIRST_TS, LAST_TS = 0, 1, 2, 3
PACKETS, PAYLOAD, WIRE, SYN_TS, LAST_SYN_TS, ACK_TS, FIN_TS, RST_TS, ISN = (
    4, 6, 8, 10, 12, 13, 14, 16, 17)
SYN_COUNT, MSS, WSCALE = 0, 2, 4
PROTOCOL, IP_VERSION, CLIENT_IS_A, SACK, FAST_OPEN, FINRST, SHIFT, CURRENT = (
    0, 1, 2, 3, 5, 6, 7, 9)
assert [W[n] for n in ("first_frame", "last_frame", "first_ts_ns", "last_ts_ns", "packets_c2s",
                       "payload_bytes_c2s", "wire_bytes_c2s", "syn_ts_ns", "last_syn_ts_ns",
                       "ack_ts_ns", "fin_c2s_ts_ns", "rst_ts_ns", "isn")] == [
    FIRST_FRAME, LAST_FRAME, FIRST_TS, LAST_TS, PACKETS, PAYLOAD, WIRE, SYN_TS, LAST_SYN_TS,
    ACK_TS, FIN_TS, RST_TS, ISN]
assert [N[n] for n in ("syn_count", "client_mss", "client_wscale")] == [SYN_COUNT, MSS, WSCALE]
assert [T[n] for n in ("protocol", "ip_version", "client_is_a", "client_sack_permitted",
                       "fast_open", "finrst_since_syn", "client_shift", "current")] == [
    PROTOCOL, IP_VERSION, CLIENT_IS_A, SACK, FAST_OPEN, FINRST, SHIFT, CURRENT]
DTYPES = {"key": np.uint64, "wide": np.int64, "narrow": np.int32, "tiny": np.int8,
          "ids": np.int64}
COLUMNS = {"key": KEY_COLUMNS, "wide": len(WIDE), "narrow": len(NARROW), "tiny": len(TINY),
           "ids": 1}
ROW_BYTES = sum(np.dtype(DTYPES[a]).itemsize * COLUMNS[a] for a in DTYPES)  # 226
IDLE_NS = 300 * 10**9
CLOSED_NS = 60 * 10**9
AFTER_PACKETS = 1 << 16
EVICT_AT = 1 << 13  # flows over (an eighth of the table at least) before an eviction pays
NEXT_ID, ROWS = 0, 1  # FlowTable.state: the next flow id, the rows in use


class FlowRows:
    """Flows' rows (the table's, or a copy of those that left it): `key`,
    `wide`, `narrow`, `tiny` and `ids` as above."""

    def __init__(self, key, wide, narrow, tiny, ids):
        self.key, self.wide, self.narrow, self.tiny, self.ids = key, wide, narrow, tiny, ids

    def __len__(self):
        return len(self.ids)

    def part(self, begin, end):
        return FlowRows(self.key[begin:end], self.wide[begin:end], self.narrow[begin:end],
                        self.tiny[begin:end], self.ids[begin:end])

    def column(self, name):
        """(values, null mask) of a `flows` column held in WIDE, NARROW or TINY."""
        if name == "handshake_rtt_ns":
            ack = self.wide[:, ACK_TS]
            null = ack == NONE
            return np.where(null, NONE, ack - self.wide[:, LAST_SYN_TS]), null
        for names, rows, none in ((W, self.wide, NONE), (N, self.narrow, NONE32),
                                  (T, self.tiny, NONE8)):
            if name in names:
                v = rows[:, names[name]]
                return v, v == none
        raise KeyError(name)

    def endpoints(self):
        """((a_hi, a_lo, a_port), (b_hi, b_lo, b_port)): a is the smaller endpoint."""
        k0 = self.key[:, 0]
        return ((self.key[:, 1], self.key[:, 2], ((k0 >> np.uint64(16)) & np.uint64(0xFFFF))),
                (self.key[:, 3], self.key[:, 4], k0 & np.uint64(0xFFFF)))


class FlowTable:
    """Flow state carried from one batch to the next, and the flows found."""

    def __init__(self, jit=False, capacity=1 << 10):
        self.jit = jit
        self.state = np.zeros(2, np.int64)
        self.slots = np.full(2 * capacity, EMPTY, np.int32)  # hash table: row numbers
        self.used = 0  # slots in use
        # one row per live flow (no value is set before its flow opens it)
        for name, dtype in DTYPES.items():
            shape = (capacity,) if name == "ids" else (capacity, COLUMNS[name])
            setattr(self, name, np.zeros(shape, dtype))

    def _rows(self):
        return (self.key, self.wide, self.narrow, self.tiny, self.ids)

    @property
    def next_flow_id(self):
        return int(self.state[NEXT_ID])

    def live(self):
        """Flows in the table now (the rest were written as they ended)."""
        return int(self.state[ROWS])

    def nbytes(self):
        """Bytes the table holds now (rows allocated and hash slots)."""
        return sum(a.nbytes for a in (*self._rows(), self.slots))

    def _grow(self):
        """Grow what is full: the hash table (past half full: doubled) or the
        rows (by a sixteenth: at most 6 % of them unused)."""
        if 2 * (self.used + 1) > len(self.slots):
            self.slots = np.full(2 * len(self.slots), EMPTY, np.int32)
            self.used = _rehash(self.jit, self.key, self.tiny, self.live(), self.slots)
        if self.state[ROWS] >= len(self.ids):
            # in place (realloc: a large block is remapped, not copied beside itself)
            cap = len(self.ids) + max(len(self.ids) // 16, 1 << 10)
            for rows in self._rows():
                rows.resize((cap,) + rows.shape[1:], refcheck=False)

    def evict(self, now_ns, frame):
        """Take the flows that are over at time `now_ns`, frame `frame`, out of
        the table; returns their FlowRows (copies), or None while they are
        fewer than an eighth of the table (each eviction costs a pass over
        it). The rows left are renumbered: `self.moved` maps each former row
        to its new one (-1: gone)."""
        n = self.live()
        wide = self.wide[:n]
        quiet = wide[:, LAST_FRAME] <= frame - AFTER_PACKETS
        if not quiet.any():
            return None
        last = wide[:, LAST_TS]
        closed = (wide[:, RST_TS] != NONE) | ((wide[:, FIN_TS] != NONE)
                                             & (wide[:, FIN_TS + 1] != NONE))
        over = quiet & ((last <= now_ns - IDLE_NS) | (closed & (last <= now_ns - CLOSED_NS)))
        if 8 * int(over.sum()) < max(n, EVICT_AT):
            return None
        gone = FlowRows(*(rows[:n][over] for rows in self._rows()))
        keep = np.flatnonzero(~over)
        new_row = np.cumsum(~over) - 1
        new_row[over] = -1
        self.moved = new_row
        # in place, so that an eviction costs a copy of the flows kept, not
        # of the tables: the rows moved down, the hash table refilled from them
        for begin in range(0, len(keep), 1 << 16):  # (keep[j] >= j: moving down is safe)
            part = keep[begin:begin + (1 << 16)]
            for rows in self._rows():
                rows[begin:begin + len(part)] = rows[part]
        self.state[ROWS] = len(keep)
        self.slots.fill(EMPTY)
        self.used = _rehash(self.jit, self.key, self.tiny, len(keep), self.slots)
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
                self.jit, *args, done, self.slots, self.used, self.state, self.key,
                self.wide, self.narrow, self.tiny, self.ids, flow_id, self.rows, from_client,
                scale)
            self.used += added
            if done < n:
                self._grow()
        return flow_id, from_client, scale

    def flows(self):
        """FlowRows of the flows still in the table; the table is done with
        (its hash table is let go)."""
        n = self.live()
        self.slots = None
        return FlowRows(*(rows[:n] for rows in self._rows()))


def _slot(mask, k0, ahi, alo, bhi, blo):
    """The endpoints' home slot in the hash table."""
    h = np.uint64(0x9E3779B97F4A7C15)
    for kk in (k0, ahi, alo, bhi, blo):
        h ^= kk
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(31)
    return h & mask


@kernel(helpers=(_slot,))
def _rehash(key, tiny, rows, slots):
    """Fill the (empty) hash table with the first `rows` rows, each the current
    connection on its endpoints; returns the slots used."""
    mask = np.uint64(len(slots) - 1)
    used = 0
    for r in range(rows):
        if tiny[r, CURRENT] == 0:
            continue
        h = _slot(mask, key[r, 0], key[r, 1], key[r, 2], key[r, 3], key[r, 4])
        while slots[h] != EMPTY:
            h = (h + np.uint64(1)) & mask
        slots[h] = r
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


def _lookup(slots, key, mask, k0, ahi, alo, bhi, blo):
    """The hash table's slot for these endpoints: where their row is, or the
    empty slot where it would go (open addressing, linear probing)."""
    h = _slot(mask, k0, ahi, alo, bhi, blo)
    while slots[h] != EMPTY:
        r = slots[h]
        if (key[r, 0] == k0 and key[r, 1] == ahi and key[r, 2] == alo
                and key[r, 3] == bhi and key[r, 4] == blo):
            break
        h = (h + np.uint64(1)) & mask
    return h


def _open_flow(r, src_is_a, synack, proto, ipver, frame, now, k0, ahi, alo, bhi, blo,
               key, wide, narrow, tiny):
    """Row r starts a flow at this packet: every column of it set (its client,
    its endpoints, counters at 0, the rest without a value)."""
    key[r, 0] = k0
    key[r, 1] = ahi
    key[r, 2] = alo
    key[r, 3] = bhi
    key[r, 4] = blo
    for c in range(wide.shape[1]):
        wide[r, c] = NONE
    wide[r, FIRST_FRAME] = frame
    wide[r, FIRST_TS] = now
    for c in range(PACKETS, SYN_TS):
        wide[r, c] = 0
    wide[r, ISN] = 0
    for c in range(narrow.shape[1]):
        narrow[r, c] = NONE32
    narrow[r, SYN_COUNT] = 0
    narrow[r, SYN_COUNT + 1] = 0
    for c in range(tiny.shape[1]):
        tiny[r, c] = NONE8
    tiny[r, PROTOCOL] = proto
    tiny[r, IP_VERSION] = ipver
    if synack:
        tiny[r, CLIENT_IS_A] = 0 if src_is_a else 1  # SYN-ACK first: its receiver is the client
    else:
        tiny[r, CLIENT_IS_A] = 1 if src_is_a else 0
    tiny[r, FINRST] = 0
    tiny[r, SHIFT] = UNKNOWN
    tiny[r, SHIFT + 1] = UNKNOWN
    tiny[r, CURRENT] = 1


def _tcp_stats(r, d, fc, f, now, mss, wscale, sack_perm, tfo, tcp_ack, wide, narrow, tiny):
    """A TCP packet's counters: the handshake (the client's SYN, d = 0, or the
    server's SYN-ACK, d = 1; the first ACK after them), Fast Open, FINs, RST."""
    syn = (f & TH_SYN) != 0
    ack = (f & TH_ACK) != 0
    if (syn and not ack and fc) or (syn and ack and not fc):
        if wide[r, SYN_TS + d] == NONE:  # syn_ts_ns / synack_ts_ns
            wide[r, SYN_TS + d] = now
            narrow[r, MSS + d] = mss if mss >= 0 else NONE32
            narrow[r, WSCALE + d] = wscale if wscale >= 0 else NONE32
            tiny[r, SACK + d] = 1 if sack_perm else 0
        narrow[r, SYN_COUNT + d] += 1  # syn_count / synack_count
        if d == 0 and wide[r, ACK_TS] == NONE:  # (the handshake RTT: ACK_TS - LAST_SYN_TS)
            wide[r, LAST_SYN_TS] = now
    elif (wide[r, SYN_TS] != NONE and wide[r, ACK_TS] == NONE and ack and not syn
          and (not fc or tcp_ack != 0)):
        wide[r, ACK_TS] = now
    if syn and tfo:
        tiny[r, FAST_OPEN] = 1
    if (f & TH_FIN) != 0:
        if wide[r, FIN_TS + d] == NONE:
            wide[r, FIN_TS + d] = now
    if (f & TH_RST) != 0 and wide[r, RST_TS] == NONE:
        wide[r, RST_TS] = now


def _connection(r, fc, f, isn, wscale, wide, tiny):
    """Port reuse and window scaling: a pure SYN records its ISN, FIN or RST
    marks the connection ended; the SYNs decide each side's shift. Returns
    the shift that scales this segment."""
    syn = (f & TH_SYN) != 0
    ack = (f & TH_ACK) != 0
    if syn and not ack:
        tiny[r, FINRST] = 0
        wide[r, ISN] = isn
    side = SHIFT if fc else SHIFT + 1
    other = SHIFT + 1 if fc else SHIFT
    shift = tiny[r, side]
    if syn:
        if not ack and tiny[r, side] != UNKNOWN:
            pass  # a SYN sent again: the connection's first SYN decided
        elif wscale >= 0 and not (ack and tiny[r, other] == NOT_SCALED):
            tiny[r, side] = min(wscale, 14)
        else:  # the first SYN, or the SYN-ACK, without the option: neither side scales
            tiny[r, SHIFT] = NOT_SCALED
            tiny[r, SHIFT + 1] = NOT_SCALED
        shift = UNKNOWN
    if (f & (TH_FIN | TH_RST)) != 0:
        tiny[r, FINRST] = 1
    return shift


@kernel(helpers=(_slot, _endpoints, _lookup, _open_flow, _tcp_stats, _connection))
def _track(is_flow, is_tcp, proto, ipver, src_hi, src_lo, dst_hi, dst_lo, sport, dport,
           flags, wscale, tcp_seq, tcp_ack, mss, sack_perm, tfo, payload, wire, ts, first_frame,
           begin, slots, used, state, key, wide, narrow, tiny, ids, flow_id, row_of,
           from_client, scale):
    """Process packets from `begin`; returns (slots filled, where it stopped).
    `state` holds the next flow id and the rows in use, updated in place.

    Stops early, before the packet that would start a flow, when the hash
    table would pass half full or the rows are used up; the caller grows
    what is full and calls again from there.
    """
    mask = np.uint64(len(slots) - 1)
    added = 0
    for i in range(begin, len(is_flow)):
        if not is_flow[i]:
            continue
        src_is_a, ahi, alo, ap, bhi, blo, bp = _endpoints(src_hi[i], src_lo[i], sport[i],
                                                          dst_hi[i], dst_lo[i], dport[i])
        k0 = (np.uint64(proto[i]) << np.uint64(32)) | (np.uint64(ap) << np.uint64(16)) | np.uint64(bp)
        h = _lookup(slots, key, mask, k0, ahi, alo, bhi, blo)
        r = np.int64(slots[h])
        f = flags[i] if is_tcp[i] else 0
        pure_syn = (f & TH_SYN) != 0 and (f & TH_ACK) == 0
        # a SYN after a FIN or RST starts a new connection, unless it is the
        # same attempt sent again (the same ISN: Windows retries a refused SYN)
        isn = tcp_seq[i] + 1 if pure_syn else 0
        reuse = (is_tcp[i] and pure_syn and r != EMPTY and tiny[r, FINRST] == 1
                 and wide[r, ISN] != isn)
        frame = first_frame + i
        if r == EMPTY or reuse:
            if 2 * (used + added + 1) > len(slots) or state[1] >= len(ids):
                return added, i
            if r == EMPTY:
                added += 1
            else:
                tiny[r, CURRENT] = 0  # port reuse after FIN/RST: the old row stays, unseen
            r = state[1]
            _open_flow(r, src_is_a, (f & (TH_SYN | TH_ACK)) == (TH_SYN | TH_ACK), proto[i],
                       ipver[i], frame, ts[i], k0, ahi, alo, bhi, blo, key, wide, narrow, tiny)
            slots[h] = r
            ids[r] = state[0]
            state[0] += 1
            state[1] += 1
        fc = (tiny[r, CLIENT_IS_A] == 1) == src_is_a
        flow_id[i] = ids[r]
        row_of[i] = r
        from_client[i] = fc
        wide[r, LAST_FRAME] = frame
        wide[r, LAST_TS] = ts[i]
        d = 0 if fc else 1
        wide[r, PACKETS + d] += 1
        wide[r, PAYLOAD + d] += payload[i]
        wide[r, WIRE + d] += wire[i]
        if not is_tcp[i]:
            continue
        _tcp_stats(r, d, fc, f, ts[i], mss[i], wscale[i], sack_perm[i], tfo[i], tcp_ack[i],
                   wide, narrow, tiny)
        scale[i] = _connection(r, fc, f, isn, wscale[i], wide, tiny)
    return added, len(is_flow)
