"""tracekit's own reading of every TCP segment: what it was, what triggered it.

Wireshark's verdicts (wireshark.py) are kept for comparison; these are the
ones the analyses build on. One sequential pass per capture, per direction
of each flow, with sequence numbers relative to the sender's ISN, counted in
64 bits (wireshark.py unwraps them: a transfer may cross 2^32 any number of
times).

Segment class (`seg_class`), for packets that carry payload, SYN or FIN:

- NEW: starts at or beyond the highest byte sent so far (snd_max); bytes
  skipped over (`gap_bytes`) become a hole: never seen at this vantage.
- REPEAT: carries bytes this capture already saw: a retransmission as the
  sender sees it (a capture near the sender, or one that saw the original).
- HOLE_FILL: carries only bytes of holes: the original was lost before the
  vantage point, so this is the retransmission that fills it (a capture near
  the receiver sees no original). Wireshark calls most of these
  out-of-order.
- REORDERED: fills a hole, but is the original arriving late: its TSval is
  not newer than that of the segment that opened the hole, or (without
  timestamps) it came within `reorder_window_ns` of it.
- KEEP_ALIVE: one byte at snd_max - 1 when everything sent was
  acknowledged, no SYN/FIN/RST (a keep-alive probe that carries the last
  byte again, as Windows and BSD send them; Linux sends none): not a
  retransmission, and it changes no sender state.
- DUPLICATE: a copy of an earlier packet of its direction (the same seq,
  ACK, length, flags, IP id and TSval, at the same instant, or with a
  non-zero IP id sooner than any retransmission timer, `rto_min_ns`): the
  capture or the network duplicated it, or the capture saw it twice one hop
  apart (TTL one lower, other packets between); not a retransmission. (Some stacks
  send every SYN-ACK with one IP id: one 2 s later is a retransmission.) Copies are otherwise ignored (a copied ACK is not a
  duplicate ACK).

Retransmission trigger (`trigger`, for REPEAT and HOLE_FILL), from what the
sender had seen (at a receiver-side vantage, from what the receiver sent):

- FAST: the peer had sent >= `dupthresh` duplicate ACKs for this data, or
  SACKed >= dupthresh segments above it (RFC 5681/6675);
- RTO: the sender had been silent (nothing sent, no new ACK received) for
  at least the RTO estimate of RFC 6298 (SRTT + 4 RTTVAR from this flow's
  samples, at least `rto_min_ns`, 1 s before any sample; Linux uses 200 ms);
- TLP: the highest segment sent again after a silence of >= 1.5 SRTT but
  less than the RTO, with no duplicate ACKs (RFC 8985 tail loss probe);
- RACK: fewer duplicate ACKs than dupthresh but data sent after it was
  already SACKed (RFC 8985 time-based loss detection);
- OTHER: none of these (e.g. a capture that missed the ACKs).

Spurious retransmissions (`spurious`): the peer reported the bytes twice in
a D-SACK block (RFC 2883), or the ACK that covered them echoed a TSecr
older than the retransmission's TSval (the Eifel test, RFC 3522).

In flight (`inflight_bytes`, SACK-aware): snd_max - snd_una - bytes SACKed
above snd_una, for the sender of each packet after it; `peer_inflight_bytes`
is the same for the other direction after this packet (an ACK lowers it).
It falls to zero when everything sent is acknowledged.

Flights (`flight`, on new data): a flight is what a sender sends in one
round trip: it begins with the first new segment sent after the ACK of the
previous flight's first segment arrived (the round counting of RFC 9406's
HyStart++ and of BBR). Its size is the effective window of that round. Near
the receiver the boundaries are seen half a round trip late but in order.

ACKs that advance the cumulative ACK also get `acked_segments` (new data
segments they newly cover) and `ack_delay_ns` (time since the newest of them
was seen: the receiver's delay where the capture is near the receiver).

For the retransmission analysis each segment that is not new also gets
`recovery_point` (the highest byte sent before it: for a retransmission,
RFC 6675's recovery point) and `hole_opened_ns` (a hole fill or late original: when the segment
beyond its hole was seen); `recovered_ns`, the
first ACK from the peer at or beyond the recovery point after it, is known
only later and is handed back as a late update (below). ACKs get `ack_gap_ns`
(time since the previous ACK of the same direction) and
`window_full_segments` (the other direction's segments Wireshark called
window-full since this side's previous ACK).

Streaming. The pass runs over a capture in chunks of frames with all state
carried between calls: per flow slot and direction (`st`), and pools for
the lists that grow with the data (holes, unacknowledged new segments,
TSvals, retransmissions for D-SACK matching, recovery points waiting for
their ACK), each a free-list allocator whose live entries are bounded by
what is outstanding, not by the capture's length. A flow's slot is reset
at its first packet. Verdicts that change a packet of an earlier chunk
(spurious found later by D-SACK or Eifel, a retransmission's recovery time)
are written to `late_*` as (frame, kind, value) for the caller to apply.

RTT samples (on packets that advance the cumulative ACK): `rtt_ns` from
the newest segment this ACK newly covers, only if no covered segment was
ever sent twice (Karn's rule, RFC 6298); `ts_rtt_ns` from the TSecr: the
time since the peer first sent a segment with that TSval (RFC 7323 sec. 4).
"""

from ..core.jit import kernel
from .wireshark import alloc, release

NONE, NEW, REPEAT, HOLE_FILL, REORDERED, DUPLICATE, KEEP_ALIVE = 0, 1, 2, 3, 4, 5, 6
SEG_CLASS = ("", "new", "repeat", "hole_fill", "reordered", "duplicate", "keep_alive")
T_NONE, T_FAST, T_RTO, T_TLP, T_RACK, T_OTHER = 0, 1, 2, 3, 4, 5
TRIGGER = ("", "fast", "rto", "tlp", "rack", "other")
LATE_SPURIOUS, LATE_RECOVERED = 0, 1
NO_TIME = -(2 ** 63)  # "no value" where any int64 is a time
DSACK_MEMORY = 256  # retransmissions per direction a D-SACK is matched against

TH_FIN, TH_SYN, TH_RST, TH_ACK = 0x01, 0x02, 0x04, 0x10
WS_WINDOW_FULL = 128

# per-direction state (int64 columns)
(SND_MAX, SND_UNA, STARTED, LAST_SEND, LAST_ADVANCE, DUPACKS, LAST_ACK, SACKED, HIGH_SACK,
 SRTT, RTTVAR, HOLES, SENT_HEAD, SENT_TAIL, TS_HEAD, TS_TAIL, RETX_HEAD, MSS, LAST_TSVAL,
 FLIGHT, FLIGHT_MARK, FLIGHT_DONE, RETX_N, RQ_HEAD, RQ_TAIL, LAST_ACK_TS, FULL_SENT, FULL_SEEN, FL_START, FL_END,
 FL_SEGS, FL_BYTES, FL_PEAK, FL_RETX, FL_WIN, FL_PREV, ADV_WIN, FLOW_ID,
 EX_NUM, EX_LAST_CLIENT, EX_REQ_FIRST, EX_REQ_LAST, EX_RESP_FIRST, EX_RESP_LAST, EX_END,
 EX_UP_LO, EX_UP_HI, EX_DOWN_LO, EX_DOWN_HI, EX_PK_UP, EX_PK_DOWN,
 DELIVERED, DELIVERED_TS, MIN_RTT, FL_RATE, FL_QUEUED, FIRST_TX) = range(57)
NSTATE = 57
# exchange rows (requests.sql reads them): a request/response exchange of a
# connection, kept in the flow's client-direction row of `st`
EXCHANGE_OUT = ("flow", "exchange", "request_first", "request_last", "response_first",
                "response_last", "end", "bytes_up", "bytes_down", "packets_up", "packets_down")
LISTS = (HOLES, SENT_HEAD, SENT_TAIL, TS_HEAD, TS_TAIL, RETX_HEAD, RQ_HEAD, RQ_TAIL)
# flight rows (flights.sql reads them): one per flight, written when it ends
FLIGHT_OUT = ("flow", "from_client", "flight", "start", "end", "duration", "segments", "bytes",
              "peak_inflight", "prev_bytes", "retransmissions", "peer_window", "delivery_rate",
              "queued")
QUEUE_RTT = 1.25  # an RTT sample this far above the direction's smallest: a queue
# pools: holes, sent (unacknowledged new segments), tsvals, retx (for D-SACK),
# rq (retransmissions waiting for the ACK of their recovery point)
POOLS = ("hole", "sent", "tsval", "retx", "rq")
HOLE_FIELDS = ("lo", "hi", "tsval", "ts")
SENT_FIELDS = ("lo", "end", "ts", "len", "retx_row", "retx_tsval", "retx_frame", "dlv",
               "dlv_ts", "first_tx")
TSVAL_FIELDS = ("val", "ts")
RETX_FIELDS = ("lo", "hi", "row", "frame")
RQ_FIELDS = ("point", "row", "frame", "after")


def _clear_list(head, meta, link):
    u = head
    while u != -1:
        nxt = link[u]
        release(meta, link, u)
        u = nxt


def _reset(st, d, holes_m, h_next, sent_m, s_next, ts_m, t_next, retx_m, r_next, rq_m, q_next):
    _clear_list(st[d, HOLES], holes_m, h_next)
    _clear_list(st[d, SENT_HEAD], sent_m, s_next)
    _clear_list(st[d, TS_HEAD], ts_m, t_next)
    _clear_list(st[d, RETX_HEAD], retx_m, r_next)
    _clear_list(st[d, RQ_HEAD], rq_m, q_next)
    for c in range(NSTATE):
        st[d, c] = 0
    st[d, SRTT] = -1
    st[d, HOLES] = -1
    st[d, SENT_HEAD] = -1
    st[d, SENT_TAIL] = -1
    st[d, TS_HEAD] = -1
    st[d, TS_TAIL] = -1
    st[d, RETX_HEAD] = -1
    st[d, LAST_TSVAL] = -1
    st[d, RQ_HEAD] = -1
    st[d, RQ_TAIL] = -1
    st[d, LAST_ACK_TS] = -1
    st[d, ADV_WIN] = -1


def _emit_flight(st, d, duration, fo, fo_m):
    """Write direction d's open flight as a row of `fo`."""
    if st[d, FLIGHT] == 0:
        return
    k = fo_m[0]
    fo[k, 0] = st[d, FLOW_ID]
    fo[k, 1] = 1 if d % 2 == 0 else 0
    fo[k, 2] = st[d, FLIGHT]
    fo[k, 3] = st[d, FL_START]
    fo[k, 4] = st[d, FL_END]
    fo[k, 5] = duration
    fo[k, 6] = st[d, FL_SEGS]
    fo[k, 7] = st[d, FL_BYTES]
    fo[k, 8] = st[d, FL_PEAK]
    fo[k, 9] = st[d, FL_PREV]
    fo[k, 10] = st[d, FL_RETX]
    fo[k, 11] = st[d, FL_WIN]
    fo[k, 12] = st[d, FL_RATE]
    fo[k, 13] = st[d, FL_QUEUED]
    fo_m[0] = k + 1


def _emit_exchange(st, c, xo, xo_m):
    """Write the open exchange of the flow whose client row is c as a row of `xo`."""
    if st[c, EX_NUM] == 0:
        return
    k = xo_m[0]
    xo[k, 0] = st[c, FLOW_ID]
    xo[k, 1] = st[c, EX_NUM]
    xo[k, 2] = st[c, EX_REQ_FIRST]
    xo[k, 3] = st[c, EX_REQ_LAST]
    xo[k, 4] = st[c, EX_RESP_FIRST]
    xo[k, 5] = st[c, EX_RESP_LAST]
    xo[k, 6] = st[c, EX_END]
    xo[k, 7] = st[c, EX_UP_HI] - st[c, EX_UP_LO]
    xo[k, 8] = st[c, EX_DOWN_HI] - st[c, EX_DOWN_LO] if st[c, EX_PK_DOWN] > 0 else 0
    xo[k, 9] = st[c, EX_PK_UP]
    xo[k, 10] = st[c, EX_PK_DOWN]
    xo_m[0] = k + 1


def _exchange(st, c, from_client, now, s, end, ln):
    """A packet with payload: it opens an exchange when it is client data after
    server data (or the flow's first data), else it belongs to the open one."""
    if from_client and st[c, EX_LAST_CLIENT] != 1:
        st[c, EX_NUM] += 1
        st[c, EX_REQ_FIRST] = now
        st[c, EX_RESP_FIRST] = NO_TIME
        st[c, EX_RESP_LAST] = NO_TIME
        st[c, EX_UP_LO] = s
        st[c, EX_UP_HI] = end
        st[c, EX_DOWN_LO] = 0
        st[c, EX_DOWN_HI] = 0
        st[c, EX_PK_UP] = 0
        st[c, EX_PK_DOWN] = 0
        st[c, EX_END] = now
    st[c, EX_LAST_CLIENT] = 1 if from_client else 0
    if st[c, EX_NUM] == 0:  # server data before any request: not an exchange
        return
    if now > st[c, EX_END]:
        st[c, EX_END] = now
    if from_client:
        st[c, EX_REQ_LAST] = now
        st[c, EX_PK_UP] += 1
        st[c, EX_UP_LO] = min(st[c, EX_UP_LO], s)
        st[c, EX_UP_HI] = max(st[c, EX_UP_HI], end)
    else:
        if st[c, EX_RESP_FIRST] == NO_TIME:
            st[c, EX_RESP_FIRST] = now
            st[c, EX_DOWN_LO] = s
            st[c, EX_DOWN_HI] = end
        st[c, EX_RESP_LAST] = now
        st[c, EX_PK_DOWN] += 1
        st[c, EX_DOWN_LO] = min(st[c, EX_DOWN_LO], s)
        st[c, EX_DOWN_HI] = max(st[c, EX_DOWN_HI], end)


@kernel(helpers=(_emit_flight, _emit_exchange))
def flush_flights(slots, st, fo, fo_m, xo, xo_m):
    """The open flights and exchanges of flows that ended (their slots), as rows
    of `fo` and `xo`."""
    for k in range(len(slots)):
        for d in (2 * slots[k], 2 * slots[k] + 1):
            _emit_flight(st, d, -1, fo, fo_m)
            st[d, FLIGHT] = 0
        _emit_exchange(st, 2 * slots[k], xo, xo_m)
        st[2 * slots[k], EX_NUM] = 0


def _late(late, meta, frame, kind, value):
    k = meta[0]
    late[k, 0] = frame
    late[k, 1] = kind
    late[k, 2] = value
    meta[0] = k + 1


@kernel(helpers=(alloc, release, _clear_list, _reset, _late, _emit_flight, _emit_exchange,
                 _exchange))
def classify(row0, frame, ts, flow, slot, first, from_client, seq, ack, flags, seglen, tsval,
             tsecr, copy, window_bytes, ws_flags, sack_n, sack_l, sack_r, dupthresh,
             rto_min_ns, reorder_window_ns,
             st, holes_m, h_lo, h_hi, h_tsval, h_ts, h_next,
             sent_m, s_lo, s_end, s_ts, s_len, s_retx_row, s_retx_tsval, s_retx_frame,
             s_dlv, s_dlv_ts, s_first_tx, s_next, ts_m, t_val, t_ts, t_next, retx_m, r_lo, r_hi, r_row, r_frame,
             r_next, rq_m, q_point, q_row, q_frame, q_after, q_next, late, late_m, fo, fo_m,
             xo, xo_m,
             seg_class, gap_bytes, trigger, silence_ns, peer_dupacks, spurious, inflight,
             peer_inflight, acked_bytes, rtt_ns, ts_rtt_ns, dsack, flight, acked_segments,
             ack_delay, ack_gap, window_full_segs, recovery_point, hole_opened, recovered):
    """One chunk of a capture's TCP packets (relative seq/ack, SACK edges relative);
    `row0` is the chunk's first row in the capture (row ids name earlier chunks)."""
    n = len(ts)
    for i in range(n):
        fl = slot[i]
        fw = 2 * fl + (0 if from_client[i] else 1)
        rv = 2 * fl + (1 if from_client[i] else 0)
        if first[i]:
            for d in (2 * fl, 2 * fl + 1):
                _reset(st, d, holes_m, h_next, sent_m, s_next, ts_m, t_next, retx_m, r_next,
                       rq_m, q_next)
                st[d, FLOW_ID] = flow[i]
        f = flags[i]
        now = ts[i]
        ln = seglen[i]
        s = seq[i]
        end = s + ln + (1 if f & (TH_SYN | TH_FIN) else 0)
        if st[fw, STARTED] == 0:
            st[fw, STARTED] = 1
            st[fw, SND_MAX] = s
            st[fw, SND_UNA] = s
            st[fw, LAST_ADVANCE] = now
        if ln > st[fw, MSS]:
            st[fw, MSS] = ln
        if ln > 0:  # request/response exchanges (every copy of the data counts)
            c = 2 * fl
            if from_client[i] and st[c, EX_LAST_CLIENT] != 1 and st[c, EX_NUM] > 0:
                _emit_exchange(st, c, xo, xo_m)
            _exchange(st, c, from_client[i], now, s, s + ln, ln)
        if ws_flags[i] & WS_WINDOW_FULL:
            st[fw, FULL_SENT] += 1
        if (f & (TH_SYN | TH_ACK)) == TH_ACK and window_bytes[i] >= 0:
            st[fw, ADV_WIN] = window_bytes[i]  # bounds the other direction's flights
        if f & TH_ACK and not f & TH_SYN:  # ACK timing (ack_gaps)
            if st[fw, LAST_ACK_TS] >= 0:
                ack_gap[i] = now - st[fw, LAST_ACK_TS]
            st[fw, LAST_ACK_TS] = now
            window_full_segs[i] = st[rv, FULL_SENT] - st[fw, FULL_SEEN]
            st[fw, FULL_SEEN] = st[rv, FULL_SENT]
        # a copy of an earlier packet of this direction (found before the
        # loop, sequence.copies: a capture or network duplicate)
        if copy[i]:
            if ln > 0 or f & (TH_SYN | TH_FIN):
                seg_class[i] = DUPLICATE
                recovery_point[i] = st[fw, SND_MAX]
            inflight[i] = max(0, st[fw, SND_MAX] - st[fw, SND_UNA] - st[fw, SACKED])
            if st[rv, STARTED]:
                peer_inflight[i] = max(0, st[rv, SND_MAX] - st[rv, SND_UNA] - st[rv, SACKED])
            continue

        # --- the ACK side of this packet: what it tells about the peer's data
        if f & TH_ACK and st[rv, STARTED]:
            a = ack[i]
            # SACK blocks: scoreboard size above the cumulative ACK, D-SACK
            sacked = 0
            high = st[rv, HIGH_SACK]
            for b in range(sack_n[i]):
                lo = sack_l[i, b]
                hi = sack_r[i, b]
                is_dsack = hi <= a
                if b == 0 and sack_n[i] > 1 and not is_dsack:
                    is_dsack = lo >= sack_l[i, 1] and hi <= sack_r[i, 1]
                if is_dsack and b == 0:
                    dsack[i] = 1
                    r = st[rv, RETX_HEAD]
                    k = 0
                    while r != -1 and k < DSACK_MEMORY:
                        k += 1
                        if r_lo[r] < hi and lo < r_hi[r]:
                            if r_row[r] >= row0:
                                spurious[r_row[r] - row0] = 1
                            else:
                                _late(late, late_m, r_frame[r], LATE_SPURIOUS, 1)
                            break
                        r = r_next[r]
                    continue
                if hi > a:
                    sacked += hi - max(lo, a)
                    if hi > high:
                        high = hi
            st[rv, SACKED] = sacked
            st[rv, HIGH_SACK] = high
            if a > st[rv, SND_UNA]:
                if a >= st[rv, FLIGHT_MARK]:  # the flight's first segment is acknowledged
                    st[rv, FLIGHT_DONE] = 1
                acked_bytes[i] = a - st[rv, SND_UNA]
                st[rv, SND_UNA] = a
                st[rv, LAST_ADVANCE] = now
                st[fw, DUPACKS] = 0
                # Karn: a sample from the newest newly covered segment, unless one was resent
                resent = False
                newest_ts = -1
                dlv_of_newest = 0
                dlv_ts_of_newest = 0
                first_tx_of_newest = 0
                newest_data_ts = -1
                covered = 0
                u = st[rv, SENT_HEAD]
                while u != -1 and s_end[u] <= a:
                    if s_len[u] > 0:
                        covered += 1
                        newest_data_ts = s_ts[u]
                    if s_retx_row[u] >= 0:
                        resent = True
                        if tsecr[i] >= 0 and s_retx_tsval[u] >= 0 and tsecr[i] < s_retx_tsval[u]:
                            # Eifel: this ACK answers the original
                            if s_retx_row[u] >= row0:
                                spurious[s_retx_row[u] - row0] = 1
                            else:
                                _late(late, late_m, s_retx_frame[u], LATE_SPURIOUS, 1)
                    newest_ts = s_ts[u]
                    dlv_of_newest = s_dlv[u]
                    dlv_ts_of_newest = s_dlv_ts[u]
                    first_tx_of_newest = s_first_tx[u]
                    nu = s_next[u]
                    release(sent_m, s_next, u)
                    u = nu
                st[rv, SENT_HEAD] = u
                if u == -1:
                    st[rv, SENT_TAIL] = -1
                acked_segments[i] = covered
                if newest_data_ts != -1:
                    ack_delay[i] = now - newest_data_ts
                st[rv, DELIVERED] += acked_bytes[i]
                st[rv, DELIVERED_TS] = now
                if newest_ts != -1:
                    st[rv, FIRST_TX] = newest_ts
                if newest_ts != -1 and not resent:
                    sample = now - newest_ts
                    # delivery rate (as Linux's tcpi_delivery_rate): what was
                    # delivered since the newest covered segment was sent, over
                    # the longer of the time since the delivery before it and
                    # the time it took to send them (ACK compression guard)
                    elapsed = max(now - dlv_ts_of_newest, newest_ts - first_tx_of_newest)
                    if elapsed > 0 and st[rv, FLIGHT] > 0:
                        rate = (st[rv, DELIVERED] - dlv_of_newest) * 1_000_000_000 // elapsed
                        if rate > st[rv, FL_RATE]:
                            st[rv, FL_RATE] = rate
                    if st[rv, MIN_RTT] == 0 or sample < st[rv, MIN_RTT]:
                        st[rv, MIN_RTT] = sample
                    elif sample * 4 >= st[rv, MIN_RTT] * 5 and st[rv, FLIGHT] > 0:
                        st[rv, FL_QUEUED] = 1
                    rtt_ns[i] = sample
                    if st[rv, SRTT] < 0:
                        st[rv, SRTT] = sample
                        st[rv, RTTVAR] = sample // 2
                    else:
                        st[rv, RTTVAR] = (3 * st[rv, RTTVAR] + abs(st[rv, SRTT] - sample)) // 4
                        st[rv, SRTT] = (7 * st[rv, SRTT] + sample) // 8
                # RFC 7323: the TSecr of an ACK that advances the left edge
                if tsecr[i] >= 0:
                    u = st[rv, TS_HEAD]
                    while u != -1 and t_val[u] < tsecr[i]:
                        nu = t_next[u]
                        release(ts_m, t_next, u)
                        u = nu
                    st[rv, TS_HEAD] = u
                    if u == -1:
                        st[rv, TS_TAIL] = -1
                    elif t_val[u] == tsecr[i]:
                        ts_rtt_ns[i] = now - t_ts[u]
            elif a == st[fw, LAST_ACK] and ln == 0 and not f & (TH_SYN | TH_FIN | TH_RST):
                st[fw, DUPACKS] += 1
            st[fw, LAST_ACK] = a
            # retransmissions whose recovery point this ACK (or an earlier one) covers:
            # recovered now, if the ACK came after them
            q = st[rv, RQ_HEAD]
            while q != -1 and q_point[q] <= st[rv, SND_UNA] and now > q_after[q]:
                if q_row[q] >= row0:
                    recovered[q_row[q] - row0] = now
                else:
                    _late(late, late_m, q_frame[q], LATE_RECOVERED, now)
                nq = q_next[q]
                release(rq_m, q_next, q)
                q = nq
            st[rv, RQ_HEAD] = q
            if q == -1:
                st[rv, RQ_TAIL] = -1

        # --- the data side
        if ln > 0 or f & (TH_SYN | TH_FIN):
            smax = st[fw, SND_MAX]
            if (ln == 1 and not f & (TH_SYN | TH_FIN | TH_RST) and s == smax - 1
                    and st[fw, SND_UNA] >= smax):
                seg_class[i] = KEEP_ALIVE
            elif s >= smax:
                seg_class[i] = NEW
                if st[fw, FLIGHT] == 0 or st[fw, FLIGHT_DONE]:
                    _emit_flight(st, fw, now - st[fw, FL_START], fo, fo_m)
                    st[fw, FL_PREV] = st[fw, FL_BYTES] if st[fw, FLIGHT] > 0 else -1
                    st[fw, FLIGHT] += 1
                    st[fw, FLIGHT_MARK] = end
                    st[fw, FLIGHT_DONE] = 0
                    st[fw, FL_START] = now
                    st[fw, FL_SEGS] = 0
                    st[fw, FL_BYTES] = 0
                    st[fw, FL_PEAK] = 0
                    st[fw, FL_RETX] = 0
                    st[fw, FL_RATE] = 0
                    st[fw, FL_QUEUED] = 0
                    st[fw, FL_WIN] = st[rv, ADV_WIN]
                flight[i] = st[fw, FLIGHT]
                st[fw, FL_END] = now
                st[fw, FL_SEGS] += 1
                st[fw, FL_BYTES] += ln
                if s > smax:
                    gap_bytes[i] = s - smax
                    h = alloc(holes_m, h_next)
                    h_lo[h] = smax
                    h_hi[h] = s
                    h_tsval[h] = tsval[i]
                    h_ts[h] = now
                    h_next[h] = st[fw, HOLES]
                    st[fw, HOLES] = h
                # remember when new data and new TSvals went out
                u = alloc(sent_m, s_next)
                s_lo[u] = s
                s_end[u] = end
                s_ts[u] = now
                s_len[u] = ln
                s_retx_row[u] = -1
                s_retx_tsval[u] = -1
                s_retx_frame[u] = -1
                s_dlv[u] = st[fw, DELIVERED]
                s_dlv_ts[u] = st[fw, DELIVERED_TS] if st[fw, DELIVERED_TS] > 0 else now
                s_first_tx[u] = st[fw, FIRST_TX] if st[fw, FIRST_TX] > 0 else now
                s_next[u] = -1
                if st[fw, SENT_TAIL] == -1:
                    st[fw, SENT_HEAD] = u
                else:
                    s_next[st[fw, SENT_TAIL]] = u
                st[fw, SENT_TAIL] = u
                if tsval[i] >= 0 and tsval[i] > st[fw, LAST_TSVAL]:
                    u = alloc(ts_m, t_next)
                    t_val[u] = tsval[i]
                    t_ts[u] = now
                    t_next[u] = -1
                    if st[fw, TS_TAIL] == -1:
                        st[fw, TS_HEAD] = u
                    else:
                        t_next[st[fw, TS_TAIL]] = u
                    st[fw, TS_TAIL] = u
                st[fw, SND_MAX] = end
            else:
                # which of its bytes were never seen here (holes)?
                in_hole = 0
                reordered = False
                opened = -1
                prev = -1
                h = st[fw, HOLES]
                while h != -1:
                    lo = max(h_lo[h], s)
                    hi = min(h_hi[h], end)
                    nxt_h = h_next[h]
                    if lo < hi:
                        in_hole += hi - lo
                        if h_lo[h] <= s < h_hi[h] and h_ts[h] > opened:
                            opened = h_ts[h]
                        if tsval[i] >= 0 and h_tsval[h] >= 0:
                            reordered = tsval[i] <= h_tsval[h]
                        else:
                            reordered = now - h_ts[h] < reorder_window_ns
                        # cut [lo, hi) out of the hole
                        if lo == h_lo[h] and hi == h_hi[h]:
                            if prev == -1:
                                st[fw, HOLES] = nxt_h
                            else:
                                h_next[prev] = nxt_h
                            release(holes_m, h_next, h)
                            h = nxt_h
                            continue
                        if lo == h_lo[h]:
                            h_lo[h] = hi
                        elif hi == h_hi[h]:
                            h_hi[h] = lo
                        else:  # split in two
                            k = alloc(holes_m, h_next)
                            h_lo[k] = hi
                            h_hi[k] = h_hi[h]
                            h_tsval[k] = h_tsval[h]
                            h_ts[k] = h_ts[h]
                            h_next[k] = nxt_h
                            h_hi[h] = lo
                            h_next[h] = k
                    prev = h
                    h = nxt_h
                seen = (end - s) - in_hole
                if end > smax:  # resent bytes and new ones beyond them (repacketized)
                    st[fw, SND_MAX] = end
                if in_hole > 0 and seen <= 0:
                    seg_class[i] = REORDERED if reordered else HOLE_FILL
                    hole_opened[i] = opened
                else:
                    seg_class[i] = REPEAT
                recovery_point[i] = smax
                if seg_class[i] == REPEAT or seg_class[i] == HOLE_FILL:
                    if st[fw, FLIGHT] > 0:
                        st[fw, FL_RETX] += 1
                    quiet = now - max(st[fw, LAST_SEND], st[fw, LAST_ADVANCE])
                    silence_ns[i] = quiet
                    peer_dupacks[i] = st[rv, DUPACKS]
                    srtt = st[fw, SRTT]
                    rto = rto_min_ns
                    if srtt < 0:
                        rto = max(rto, 1_000_000_000)
                    else:
                        rto = max(rto, srtt + 4 * st[fw, RTTVAR])
                    mss = max(st[fw, MSS], 1)
                    if st[rv, DUPACKS] >= dupthresh or st[fw, SACKED] >= dupthresh * mss:
                        trigger[i] = T_FAST
                    elif quiet >= rto * 9 // 10:
                        trigger[i] = T_RTO
                    elif st[fw, HIGH_SACK] > end:
                        trigger[i] = T_RACK
                    elif end >= smax and srtt > 0 and quiet >= srtt * 3 // 2:
                        trigger[i] = T_TLP
                    else:
                        trigger[i] = T_OTHER
                    # mark the queued originals it resends (Karn)
                    u = st[fw, SENT_HEAD]
                    while u != -1:
                        if s_lo[u] < end and s < s_end[u]:
                            s_retx_row[u] = row0 + i
                            s_retx_tsval[u] = tsval[i]
                            s_retx_frame[u] = frame[i]
                        u = s_next[u]
                    # remember it for D-SACK matching (the newest DSACK_MEMORY)
                    r = alloc(retx_m, r_next)
                    r_lo[r] = s
                    r_hi[r] = end
                    r_row[r] = row0 + i
                    r_frame[r] = frame[i]
                    r_next[r] = st[fw, RETX_HEAD]
                    st[fw, RETX_HEAD] = r
                    st[fw, RETX_N] += 1
                    if st[fw, RETX_N] >= 2 * DSACK_MEMORY:
                        r = st[fw, RETX_HEAD]
                        for _ in range(DSACK_MEMORY - 1):
                            r = r_next[r]
                        _clear_list(r_next[r], retx_m, r_next)
                        r_next[r] = -1
                        st[fw, RETX_N] = DSACK_MEMORY
                    # wait for the peer's ACK of its recovery point
                    q = alloc(rq_m, q_next)
                    q_point[q] = smax
                    q_row[q] = row0 + i
                    q_frame[q] = frame[i]
                    q_after[q] = now
                    q_next[q] = -1
                    if st[fw, RQ_TAIL] == -1:
                        st[fw, RQ_HEAD] = q
                    else:
                        q_next[st[fw, RQ_TAIL]] = q
                    st[fw, RQ_TAIL] = q
            st[fw, LAST_SEND] = now
            if tsval[i] > st[fw, LAST_TSVAL]:
                st[fw, LAST_TSVAL] = tsval[i]
        inflight[i] = max(0, st[fw, SND_MAX] - st[fw, SND_UNA] - st[fw, SACKED])
        if seg_class[i] == NEW and inflight[i] > st[fw, FL_PEAK]:
            st[fw, FL_PEAK] = inflight[i]
        if st[rv, STARTED]:
            peer_inflight[i] = max(0, st[rv, SND_MAX] - st[rv, SND_UNA] - st[rv, SACKED])
