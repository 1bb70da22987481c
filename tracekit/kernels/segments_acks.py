"""The ACK side of tracekit's segment pass (segments.py): what a packet's
acknowledgment tells about the peer's data.

In the order `classify` applies them: the SACK scoreboard above the
cumulative ACK and the D-SACK that names a spurious retransmission; an ACK
that advances the cumulative ACK releases the segments it covers (the Eifel
test on those sent twice), gives Karn's RTT sample, the delivery rate and
RFC 7323's TSecr sample; the retransmissions whose recovery point is now
acknowledged are recovered.

Helpers of the `classify` kernel: plain functions over arrays that numba
inlines into it (tracekit/core/jit.py); no I/O.
"""

from .segments_state import (DELIVERED, DELIVERED_TS, DSACK_MEMORY, FIRST_TX, FL_QUEUED,
                             FL_RATE, FLIGHT, FLIGHT_DONE, FLIGHT_MARK, HIGH_SACK, LAST_ADVANCE,
                             LATE_RECOVERED, LATE_SPURIOUS, MIN_RTT, RETX_HEAD, RQ_HEAD, RQ_TAIL,
                             RTTVAR, SACKED, SENT_HEAD, SENT_TAIL, SND_UNA, SRTT, TS_HEAD,
                             TS_TAIL, DUPACKS, _late)
from .wireshark import release


def _sack_blocks(i, a, rv, row0, st, sack_n, sack_l, sack_r, retx, late, late_m, dsack,
                 spurious):
    """SACK blocks: the scoreboard's size above the cumulative ACK `a` and its
    highest edge; a D-SACK first block marks the retransmission it reports
    (among the newest DSACK_MEMORY) spurious."""
    r_lo, r_hi, r_row, r_frame, r_next = retx
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


def _covered(i, a, rv, row0, st, tsecr, sent_m, sent, late, late_m, spurious):
    """Release the sent segments the cumulative ACK `a` covers; one sent twice
    whose original this ACK answers (its TSecr is older than the resend's
    TSval: Eifel) was resent spuriously. Returns (data segments covered, any
    resent, the newest's send time, delivered bytes and time when it was
    sent, its flight's first send, the newest data segment's send time)."""
    s_lo, s_end, s_ts, s_len, s_retx_row, s_retx_tsval, s_retx_frame, s_dlv, s_dlv_ts, s_first_tx, s_next = sent
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
    return (covered, resent, newest_ts, dlv_of_newest, dlv_ts_of_newest, first_tx_of_newest,
            newest_data_ts)


def _rtt_sample(i, rv, now, newest_ts, dlv_of_newest, dlv_ts_of_newest, first_tx_of_newest, st,
                rtt_ns):
    """Karn's sample from the newest covered segment (none was resent): the
    flight's delivery rate and queueing, RFC 6298's SRTT and RTTVAR."""
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


def _ts_sample(i, rv, now, st, tsecr, ts_m, tsv, ts_rtt_ns):
    """RFC 7323: the TSecr of an ACK that advances the left edge, against when
    the peer first sent that TSval."""
    t_val, t_ts, t_next = tsv
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


def _advance(i, a, fw, rv, now, row0, st, tsecr, sent_m, sent, ts_m, tsv, late, late_m, spurious,
             acked_bytes, acked_segments, ack_delay, rtt_ns, ts_rtt_ns):
    """An ACK that advances the peer's cumulative ACK to `a`."""
    if a >= st[rv, FLIGHT_MARK]:  # the flight's first segment is acknowledged
        st[rv, FLIGHT_DONE] = 1
    acked_bytes[i] = a - st[rv, SND_UNA]
    st[rv, SND_UNA] = a
    st[rv, LAST_ADVANCE] = now
    st[fw, DUPACKS] = 0
    # Karn: a sample from the newest newly covered segment, unless one was resent
    (covered, resent, newest_ts, dlv_of_newest, dlv_ts_of_newest, first_tx_of_newest,
     newest_data_ts) = _covered(i, a, rv, row0, st, tsecr, sent_m, sent, late, late_m, spurious)
    acked_segments[i] = covered
    if newest_data_ts != -1:
        ack_delay[i] = now - newest_data_ts
    st[rv, DELIVERED] += acked_bytes[i]
    st[rv, DELIVERED_TS] = now
    if newest_ts != -1:
        st[rv, FIRST_TX] = newest_ts
    if newest_ts != -1 and not resent:
        _rtt_sample(i, rv, now, newest_ts, dlv_of_newest, dlv_ts_of_newest, first_tx_of_newest,
                    st, rtt_ns)
    _ts_sample(i, rv, now, st, tsecr, ts_m, tsv, ts_rtt_ns)


def _recovered(rv, now, row0, st, rq_m, rq, late, late_m, recovered):
    """Retransmissions whose recovery point this ACK (or an earlier one) covers:
    recovered now, if the ACK came after them."""
    q_point, q_row, q_frame, q_after, q_next = rq
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
