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
from .segments_acks import _advance, _covered, _recovered, _rtt_sample, _sack_blocks, _ts_sample
from .segments_data import (_cut_holes, _new_data, _old_data, _open_flight, _remember_retx,
                            _remember_sent, _trigger)
from .segments_state import (  # noqa: F401  (the layout sequence.py reads, too)
    DUPACKS, DUPLICATE, EX_NUM, EXCHANGE_OUT, FL_PEAK, FLIGHT, FLIGHT_OUT, HOLE_FIELDS, HOLE_FILL,
    KEEP_ALIVE, LAST_ACK, LAST_SEND, LAST_TSVAL, LATE_RECOVERED, LATE_SPURIOUS, LISTS, NEW, NSTATE,
    REPEAT, RETX_FIELDS, RQ_FIELDS, SEG_CLASS, SENT_FIELDS, SND_MAX, SND_UNA, STARTED, TH_ACK,
    TH_FIN, TH_RST, TH_SYN, TRIGGER, TSVAL_FIELDS, _clear_list, _count, _emit_exchange,
    _emit_flight, _exchange, _inflight, _late, _reset, _reset_flow)
from .wireshark import alloc, release


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


# every helper, for numba to compile with the kernel (they call one another)
HELPERS = (alloc, release, _clear_list, _reset, _reset_flow, _late, _emit_flight, _emit_exchange,
           _exchange, _count, _inflight, _sack_blocks, _covered, _rtt_sample, _ts_sample,
           _advance, _recovered, _open_flight, _remember_sent, _new_data, _cut_holes, _trigger,
           _remember_retx, _old_data)


@kernel(helpers=HELPERS)
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
    `row0` is the chunk's first row in the capture (row ids name earlier chunks).
    Per packet: the counters (segments_state), the ACK side (segments_acks),
    the data side (segments_data)."""
    # the pools' field arrays, one tuple per pool (as the helpers take them)
    holes = (h_lo, h_hi, h_tsval, h_ts, h_next)
    sent = (s_lo, s_end, s_ts, s_len, s_retx_row, s_retx_tsval, s_retx_frame, s_dlv, s_dlv_ts,
            s_first_tx, s_next)
    tsv = (t_val, t_ts, t_next)
    retx = (r_lo, r_hi, r_row, r_frame, r_next)
    rq = (q_point, q_row, q_frame, q_after, q_next)
    for i in range(len(ts)):
        fl = slot[i]
        fw = 2 * fl + (0 if from_client[i] else 1)
        rv = 2 * fl + (1 if from_client[i] else 0)
        if first[i]:
            _reset_flow(st, fl, flow[i], holes_m, h_next, sent_m, s_next, ts_m, t_next, retx_m,
                        r_next, rq_m, q_next)
        f = flags[i]
        now = ts[i]
        ln = seglen[i]
        s = seq[i]
        end = s + ln + (1 if f & (TH_SYN | TH_FIN) else 0)
        _count(i, fl, fw, rv, f, now, s, ln, from_client, window_bytes, ws_flags, st, xo, xo_m,
               ack_gap, window_full_segs)
        # a copy of an earlier packet of this direction (found before the
        # loop, sequence.copies: a capture or network duplicate)
        if copy[i]:
            if ln > 0 or f & (TH_SYN | TH_FIN):
                seg_class[i] = DUPLICATE
                recovery_point[i] = st[fw, SND_MAX]
            _inflight(i, fw, rv, st, inflight, peer_inflight)
            continue
        # --- the ACK side of this packet: what it tells about the peer's data
        if f & TH_ACK and st[rv, STARTED]:
            a = ack[i]
            _sack_blocks(i, a, rv, row0, st, sack_n, sack_l, sack_r, retx, late, late_m, dsack,
                         spurious)
            if a > st[rv, SND_UNA]:
                _advance(i, a, fw, rv, now, row0, st, tsecr, sent_m, sent, ts_m, tsv, late, late_m,
                         spurious, acked_bytes, acked_segments, ack_delay, rtt_ns, ts_rtt_ns)
            elif a == st[fw, LAST_ACK] and ln == 0 and not f & (TH_SYN | TH_FIN | TH_RST):
                st[fw, DUPACKS] += 1
            st[fw, LAST_ACK] = a
            _recovered(rv, now, row0, st, rq_m, rq, late, late_m, recovered)
        # --- the data side
        if ln > 0 or f & (TH_SYN | TH_FIN):
            smax = st[fw, SND_MAX]
            if (ln == 1 and not f & (TH_SYN | TH_FIN | TH_RST) and s == smax - 1
                    and st[fw, SND_UNA] >= smax):
                seg_class[i] = KEEP_ALIVE
            elif s >= smax:
                _new_data(i, s, end, ln, fw, rv, now, st, tsval, holes_m, holes, sent_m, sent,
                          ts_m, tsv, fo, fo_m, seg_class, gap_bytes, flight)
            else:
                _old_data(i, s, end, fw, rv, now, row0, st, frame, tsval, dupthresh, rto_min_ns,
                          reorder_window_ns, holes_m, holes, sent, retx_m, retx, rq_m, rq,
                          seg_class, trigger, silence_ns, peer_dupacks, recovery_point,
                          hole_opened)
            st[fw, LAST_SEND] = now
            if tsval[i] > st[fw, LAST_TSVAL]:
                st[fw, LAST_TSVAL] = tsval[i]
        _inflight(i, fw, rv, st, inflight, peer_inflight)
        if seg_class[i] == NEW and inflight[i] > st[fw, FL_PEAK]:
            st[fw, FL_PEAK] = inflight[i]
