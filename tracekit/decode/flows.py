"""Assign packets to transport flows, in capture order, across batches.

Strategy: flow assignment is a state machine over packets in capture order
(a SYN after a FIN or RST on the same ports starts a new connection, window
scaling becomes known only once both SYNs were seen), so it runs as one
compiled loop (numba) over each batch with its state kept in an
open-addressing hash table of plain numpy arrays between batches.

Rules (the contract documented in the README):
- A flow is a TCP connection or a UDP conversation between two endpoints
  (address, port). Flow ids count from 0 in the order of each flow's first
  packet, so they are stable for a given capture.
- TCP client: the sender of the SYN; if the first packet seen is a SYN-ACK,
  its receiver; otherwise the first sender. UDP client: the first sender.
- Port reuse: a SYN without ACK that follows a FIN or RST of the current
  connection on the same endpoints starts a new flow.
- Window scaling (RFC 7323 sec. 2.2-2.3), as Wireshark applies it
  (tcp.window_size_scalefactor): each side's shift is unknown (-1) until its
  SYN is seen; a SYN with the option sets that side's shift, a SYN without
  it sets -2 (not scaled), and a SYN-ACK without the option, or answering a
  SYN without it, sets -2 for both sides (RFC 7323: scaling needs both). A segment is scaled by its sender's
  shift when that is >= 0; SYN segments are never scaled (shift -1).
"""

import numpy as np
from numba import njit

EMPTY = -1
UNKNOWN = -1
NOT_SCALED = -2

TH_FIN, TH_SYN, TH_RST, TH_ACK = 0x01, 0x02, 0x04, 0x10


class FlowTable:
    """State carried from one batch to the next."""

    def __init__(self, capacity=1 << 12):
        self._alloc(capacity)
        self.next_flow_id = 0

    def _alloc(self, capacity):
        self.key = np.zeros((capacity, 6), np.uint64)  # proto|ports, a_hi, a_lo, b_hi, b_lo, spare
        self.val = np.full((capacity, 6), EMPTY, np.int64)
        # val: flow_id, client_is_a, finrst_since_syn, client shift, server shift, used
        self.used = 0

    def ensure(self, extra):
        """Grow so that `extra` more flows keep the load factor under 1/2."""
        need = 2 * (self.used + extra)
        if need <= len(self.key):
            return
        cap = len(self.key)
        while cap < need:
            cap *= 2
        old_key, old_val = self.key, self.val
        self._alloc(cap)
        self.used = _rehash(old_key, old_val, self.key, self.val)

    def track(self, cols):
        n = len(cols["is_tcp"])
        self.ensure(n)
        flow_id = np.full(n, -1, np.int64)
        from_client = np.zeros(n, np.bool_)
        scale = np.full(n, -1, np.int8)
        is_flow = (cols["is_tcp"] | cols["is_udp"]) & (cols["src_port"] >= 0) & (cols["dst_port"] >= 0)
        self.next_flow_id, added = _track(
            is_flow, cols["is_tcp"], cols["protocol"].astype(np.int64),
            cols["src_hi"], cols["src_lo"], cols["dst_hi"], cols["dst_lo"],
            cols["src_port"].astype(np.int64), cols["dst_port"].astype(np.int64),
            cols["tcp_flags"].astype(np.int64), cols["tcp_wscale"].astype(np.int64),
            self.key, self.val, self.next_flow_id, flow_id, from_client, scale)
        self.used += added
        return flow_id, from_client, scale


@njit(cache=True, nogil=True, inline="always")
def _hash(k0, k1, k2, k3, k4):
    h = np.uint64(0x9E3779B97F4A7C15)
    for k in (k0, k1, k2, k3, k4):
        h ^= k
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(31)
    return h


@njit(cache=True, nogil=True)
def _rehash(old_key, old_val, key, val):
    mask = np.uint64(len(key) - 1)
    used = 0
    for i in range(len(old_key)):
        if old_val[i, 5] == EMPTY:
            continue
        h = _hash(old_key[i, 0], old_key[i, 1], old_key[i, 2], old_key[i, 3], old_key[i, 4]) & mask
        while val[h, 5] != EMPTY:
            h = (h + np.uint64(1)) & mask
        key[h, :] = old_key[i, :]
        val[h, :] = old_val[i, :]
        used += 1
    return used


@njit(cache=True, nogil=True)
def _track(is_flow, is_tcp, proto, src_hi, src_lo, dst_hi, dst_lo, sport, dport,
           flags, wscale, key, val, next_flow_id, flow_id, from_client, scale):
    mask = np.uint64(len(key) - 1)
    added = 0
    for i in range(len(is_flow)):
        if not is_flow[i]:
            continue
        # canonical endpoint order: a is the smaller (address, port)
        src_is_a = True
        if src_hi[i] != dst_hi[i]:
            src_is_a = src_hi[i] < dst_hi[i]
        elif src_lo[i] != dst_lo[i]:
            src_is_a = src_lo[i] < dst_lo[i]
        else:
            src_is_a = sport[i] <= dport[i]
        if src_is_a:
            ahi, alo, ap, bhi, blo, bp = src_hi[i], src_lo[i], sport[i], dst_hi[i], dst_lo[i], dport[i]
        else:
            ahi, alo, ap, bhi, blo, bp = dst_hi[i], dst_lo[i], dport[i], src_hi[i], src_lo[i], sport[i]
        k0 = (np.uint64(proto[i]) << np.uint64(32)) | (np.uint64(ap) << np.uint64(16)) | np.uint64(bp)
        h = _hash(k0, ahi, alo, bhi, blo) & mask
        while val[h, 5] != EMPTY:
            if (key[h, 0] == k0 and key[h, 1] == ahi and key[h, 2] == alo
                    and key[h, 3] == bhi and key[h, 4] == blo):
                break
            h = (h + np.uint64(1)) & mask
        f = flags[i] if is_tcp[i] else 0
        syn = (f & TH_SYN) != 0
        ack = (f & TH_ACK) != 0
        pure_syn = syn and not ack
        new = False
        if val[h, 5] == EMPTY:
            key[h, 0], key[h, 1], key[h, 2], key[h, 3], key[h, 4] = k0, ahi, alo, bhi, blo
            val[h, 5] = 1
            added += 1
            new = True
        elif is_tcp[i] and pure_syn and val[h, 2] == 1:
            new = True  # port reuse after FIN/RST
        if new:
            val[h, 0] = next_flow_id
            next_flow_id += 1
            if syn and ack:
                val[h, 1] = 0 if src_is_a else 1  # SYN-ACK first: its receiver is the client
            else:
                val[h, 1] = 1 if src_is_a else 0
            val[h, 2] = 0
            val[h, 3] = UNKNOWN
            val[h, 4] = UNKNOWN
        fc = (val[h, 1] == 1) == src_is_a
        flow_id[i] = val[h, 0]
        from_client[i] = fc
        if not is_tcp[i]:
            continue
        if pure_syn:
            val[h, 2] = 0
        side = 3 if fc else 4
        if syn:
            if wscale[i] >= 0 and not (ack and val[h, 3 if side == 4 else 4] == NOT_SCALED):
                val[h, side] = min(wscale[i], 14)
            elif ack:
                val[h, 3] = NOT_SCALED
                val[h, 4] = NOT_SCALED
            else:
                val[h, side] = NOT_SCALED
            scale[i] = UNKNOWN
        else:
            scale[i] = val[h, side]
        if (f & (TH_FIN | TH_RST)) != 0:
            val[h, 2] = 1
    return next_flow_id, added
