"""The data side of tracekit's segment pass (segments.py): what a segment that
carries payload, SYN or FIN was.

New data opens a flight when the previous one's first segment was
acknowledged, leaves a hole when it skips bytes, and is remembered (for
Karn's rule, the delivery rate, the TSecr samples) until the peer
acknowledges it. A segment that is not new is cut out of the holes it fills
(a hole fill, or the original arriving late) or is a repeat; a
retransmission gets its trigger, marks the originals it resends, and waits
for the ACK of its recovery point.

Helpers of the `classify` kernel: plain functions over arrays that numba
inlines into it (tracekit/core/jit.py); no I/O.
"""

from .segments_state import (ADV_WIN, DELIVERED, DELIVERED_TS, DSACK_MEMORY, DUPACKS, FIRST_TX,
                             FL_BYTES, FL_END, FL_PEAK, FL_PREV, FL_QUEUED, FL_RATE, FL_RETX,
                             FL_SEGS, FL_START, FL_WIN, FLIGHT, FLIGHT_DONE, FLIGHT_MARK,
                             HIGH_SACK, HOLE_FILL, HOLES, LAST_ADVANCE, LAST_SEND, LAST_TSVAL, MSS,
                             NEW, REORDERED, REPEAT, RETX_HEAD, RETX_N, RQ_HEAD, RQ_TAIL, RTTVAR,
                             SACKED, SENT_HEAD, SENT_TAIL, SND_MAX, SRTT, T_FAST, T_OTHER, T_RACK,
                             T_RTO, T_TLP, TS_HEAD, TS_TAIL, _clear_list, _emit_flight)
from .wireshark import alloc, release


def _open_flight(fw, rv, now, end, st, fo, fo_m):
    """The first new segment after the ACK of the open flight's first segment:
    that flight is written to `fo` and the next one begins."""
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


def _remember_sent(i, s, end, ln, fw, now, st, tsval, sent_m, sent, ts_m, tsv):
    """Remember when new data and new TSvals went out (until they are ACKed)."""
    s_lo, s_end, s_ts, s_len, s_retx_row, s_retx_tsval, s_retx_frame, s_dlv, s_dlv_ts, s_first_tx, s_next = sent
    t_val, t_ts, t_next = tsv
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


def _new_data(i, s, end, ln, fw, rv, now, st, tsval, holes_m, holes, sent_m, sent, ts_m, tsv, fo,
              fo_m, seg_class, gap_bytes, flight):
    """A segment that starts at or beyond snd_max: NEW, in the open flight or
    the next; bytes it skips become a hole."""
    h_lo, h_hi, h_tsval, h_ts, h_next = holes
    smax = st[fw, SND_MAX]
    seg_class[i] = NEW
    if st[fw, FLIGHT] == 0 or st[fw, FLIGHT_DONE]:
        _open_flight(fw, rv, now, end, st, fo, fo_m)
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
    _remember_sent(i, s, end, ln, fw, now, st, tsval, sent_m, sent, ts_m, tsv)
    st[fw, SND_MAX] = end


def _cut_holes(i, s, end, fw, now, st, tsval, reorder_window_ns, holes_m, holes):
    """Cut [s, end) out of the direction's holes (bytes never seen here).
    Returns (bytes that were in holes, whether it is the late original rather
    than a retransmission, when the segment beyond its hole was seen)."""
    h_lo, h_hi, h_tsval, h_ts, h_next = holes
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
    return in_hole, reordered, opened


def _trigger(end, smax, fw, rv, quiet, st, dupthresh, rto_min_ns):
    """What made the sender retransmit: FAST, RTO, RACK, TLP or OTHER."""
    srtt = st[fw, SRTT]
    rto = rto_min_ns
    if srtt < 0:
        rto = max(rto, 1_000_000_000)
    else:
        rto = max(rto, srtt + 4 * st[fw, RTTVAR])
    mss = max(st[fw, MSS], 1)
    if st[rv, DUPACKS] >= dupthresh or st[fw, SACKED] >= dupthresh * mss:
        return T_FAST
    if quiet >= rto * 9 // 10:
        return T_RTO
    if st[fw, HIGH_SACK] > end:
        return T_RACK
    if end >= smax and srtt > 0 and quiet >= srtt * 3 // 2:
        return T_TLP
    return T_OTHER


def _remember_retx(row, fr, s, end, smax, now, fw, st, sent, tv, retx_m, retx, rq_m, rq):
    """A retransmission (capture row `row`, frame `fr`, TSval `tv`): it marks
    the queued originals it resends (Karn), is remembered for D-SACK matching
    (the newest DSACK_MEMORY) and waits for the peer's ACK of its recovery
    point `smax`."""
    s_lo, s_end, s_ts, s_len, s_retx_row, s_retx_tsval, s_retx_frame, s_dlv, s_dlv_ts, s_first_tx, s_next = sent
    r_lo, r_hi, r_row, r_frame, r_next = retx
    q_point, q_row, q_frame, q_after, q_next = rq
    u = st[fw, SENT_HEAD]
    while u != -1:
        if s_lo[u] < end and s < s_end[u]:
            s_retx_row[u] = row
            s_retx_tsval[u] = tv
            s_retx_frame[u] = fr
        u = s_next[u]
    r = alloc(retx_m, r_next)
    r_lo[r] = s
    r_hi[r] = end
    r_row[r] = row
    r_frame[r] = fr
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
    q = alloc(rq_m, q_next)
    q_point[q] = smax
    q_row[q] = row
    q_frame[q] = fr
    q_after[q] = now
    q_next[q] = -1
    if st[fw, RQ_TAIL] == -1:
        st[fw, RQ_HEAD] = q
    else:
        q_next[st[fw, RQ_TAIL]] = q
    st[fw, RQ_TAIL] = q


def _old_data(i, s, end, fw, rv, now, row0, st, frame, tsval, dupthresh, rto_min_ns,
              reorder_window_ns, holes_m, holes, sent, retx_m, retx, rq_m, rq, seg_class, trigger,
              silence_ns, peer_dupacks, recovery_point, hole_opened):
    """A segment below snd_max: HOLE_FILL or REORDERED when all its bytes were
    in holes, else REPEAT; a retransmission (REPEAT, HOLE_FILL) gets its
    trigger."""
    smax = st[fw, SND_MAX]
    in_hole, reordered, opened = _cut_holes(i, s, end, fw, now, st, tsval, reorder_window_ns,
                                            holes_m, holes)
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
        trigger[i] = _trigger(end, smax, fw, rv, quiet, st, dupthresh, rto_min_ns)
        _remember_retx(row0 + i, frame[i], s, end, smax, now, fw, st, sent, tsval[i], retx_m,
                       retx, rq_m, rq)
