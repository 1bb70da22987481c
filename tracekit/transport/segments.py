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
- DUPLICATE: a copy of the previous packet of its direction (the same
  seq, ACK, length, flags, IP id and TSval, at the same instant or with a
  non-zero IP id): the capture or the network duplicated it; not a
  retransmission. Copies are otherwise ignored (a copied ACK is not a
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

RTT samples (on packets that advance the cumulative ACK): `rtt_ns` from
the newest segment this ACK newly covers, only if no covered segment was
ever sent twice (Karn's rule, RFC 6298); `ts_rtt_ns` from the TSecr: the
time since the peer first sent a segment with that TSval (RFC 7323 sec. 4).
"""

import numpy as np

from ..jit import kernel

NONE, NEW, REPEAT, HOLE_FILL, REORDERED, DUPLICATE = 0, 1, 2, 3, 4, 5
SEG_CLASS = ("", "new", "repeat", "hole_fill", "reordered", "duplicate")
T_NONE, T_FAST, T_RTO, T_TLP, T_RACK, T_OTHER = 0, 1, 2, 3, 4, 5
TRIGGER = ("", "fast", "rto", "tlp", "rack", "other")

TH_FIN, TH_SYN, TH_RST, TH_ACK = 0x01, 0x02, 0x04, 0x10

# per-direction state (int64 columns)
(SND_MAX, SND_UNA, STARTED, LAST_SEND, LAST_ADVANCE, DUPACKS, LAST_ACK, SACKED, HIGH_SACK,
 SRTT, RTTVAR, HOLES, SENT_HEAD, SENT_TAIL, TS_HEAD, TS_TAIL, RETX_HEAD, MSS, LAST_TSVAL,
 PREV_TS, PREV_SEQ, PREV_ACK, PREV_LEN, PREV_FLAGS, PREV_IPID, PREV_TSVAL, FLIGHT, FLIGHT_MARK,
 FLIGHT_DONE) = range(29)
NSTATE = 29


@kernel
def classify(ts, flow, from_client, seq, ack, flags, seglen, tsval, tsecr, ip_id, sack_n,
             sack_l, sack_r, nflows, dupthresh, rto_min_ns, reorder_window_ns,
             seg_class, gap_bytes, trigger, silence_ns, peer_dupacks, spurious, inflight,
             peer_inflight, acked_bytes, rtt_ns, ts_rtt_ns, dsack, flight, acked_segments,
             ack_delay):
    """One pass over a capture's TCP packets (relative seq/ack, SACK edges relative)."""
    n = len(ts)
    st = np.zeros((2 * nflows, NSTATE), np.int64)
    for d in range(2 * nflows):
        st[d, SRTT] = -1
        st[d, HOLES] = -1
        st[d, SENT_HEAD] = -1
        st[d, SENT_TAIL] = -1
        st[d, TS_HEAD] = -1
        st[d, TS_TAIL] = -1
        st[d, RETX_HEAD] = -1
        st[d, LAST_TSVAL] = -1
        st[d, PREV_TS] = -1
    # holes: [start, end) never seen below snd_max; linked lists in a pool
    cap = 2 * n + 2
    h_lo = np.zeros(cap, np.int64)
    h_hi = np.zeros(cap, np.int64)
    h_tsval = np.zeros(cap, np.int64)
    h_ts = np.zeros(cap, np.int64)
    h_next = np.full(cap, -1, np.int64)
    h_used = 0
    # new data sent, in order: end, send time, ever retransmitted (queue per direction)
    s_lo = np.zeros(n, np.int64)
    s_end = np.zeros(n, np.int64)
    s_ts = np.zeros(n, np.int64)
    s_retx = np.zeros(n, np.int64)  # row of its latest retransmission + 1, 0 = never
    s_next = np.full(n, -1, np.int64)
    # first send time of each new TSval (queue per direction)
    t_val = np.zeros(n, np.int64)
    t_ts = np.zeros(n, np.int64)
    t_next = np.full(n, -1, np.int64)
    # retransmissions (newest first), for D-SACK
    r_lo = np.zeros(n, np.int64)
    r_hi = np.zeros(n, np.int64)
    r_next = np.full(n, -1, np.int64)
    for i in range(n):
        fl = flow[i]
        fw = 2 * fl + (0 if from_client[i] else 1)
        rv = 2 * fl + (1 if from_client[i] else 0)
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
        # a copy of the previous packet of this direction (a capture or network
        # duplicate): the same header, at the same instant or with the same IP id
        copy = (st[fw, PREV_TS] >= 0 and s == st[fw, PREV_SEQ] and ack[i] == st[fw, PREV_ACK]
                and ln == st[fw, PREV_LEN] and f == st[fw, PREV_FLAGS]
                and ip_id[i] == st[fw, PREV_IPID] and tsval[i] == st[fw, PREV_TSVAL]
                and (now == st[fw, PREV_TS] or ip_id[i] > 0))
        st[fw, PREV_TS] = now
        st[fw, PREV_SEQ] = s
        st[fw, PREV_ACK] = ack[i]
        st[fw, PREV_LEN] = ln
        st[fw, PREV_FLAGS] = f
        st[fw, PREV_IPID] = ip_id[i]
        st[fw, PREV_TSVAL] = tsval[i]
        if copy:
            if ln > 0 or f & (TH_SYN | TH_FIN):
                seg_class[i] = DUPLICATE
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
                    while r != -1 and k < 256:
                        if r_lo[r] < hi and lo < r_hi[r]:
                            spurious[r] = 1
                            break
                        r = r_next[r]
                        k += 1
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
                newest = -1
                newest_data = -1
                covered = 0
                u = st[rv, SENT_HEAD]
                while u != -1 and s_end[u] <= a:
                    if seglen[u] > 0:
                        covered += 1
                        newest_data = u
                    if s_retx[u]:
                        resent = True
                        r = s_retx[u] - 1
                        if tsecr[i] >= 0 and tsval[r] >= 0 and tsecr[i] < tsval[r]:
                            spurious[r] = 1  # Eifel: this ACK answers the original
                    newest = u
                    u = s_next[u]
                st[rv, SENT_HEAD] = u
                if u == -1:
                    st[rv, SENT_TAIL] = -1
                acked_segments[i] = covered
                if newest_data != -1:
                    ack_delay[i] = now - s_ts[newest_data]
                if newest != -1 and not resent:
                    sample = now - s_ts[newest]
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
                        u = t_next[u]
                    st[rv, TS_HEAD] = u
                    if u == -1:
                        st[rv, TS_TAIL] = -1
                    elif t_val[u] == tsecr[i]:
                        ts_rtt_ns[i] = now - t_ts[u]
            elif a == st[fw, LAST_ACK] and ln == 0 and not f & (TH_SYN | TH_FIN | TH_RST):
                st[fw, DUPACKS] += 1
            st[fw, LAST_ACK] = a

        # --- the data side
        if ln > 0 or f & (TH_SYN | TH_FIN):
            smax = st[fw, SND_MAX]
            if s >= smax:
                seg_class[i] = NEW
                if st[fw, FLIGHT] == 0 or st[fw, FLIGHT_DONE]:
                    st[fw, FLIGHT] += 1
                    st[fw, FLIGHT_MARK] = end
                    st[fw, FLIGHT_DONE] = 0
                flight[i] = st[fw, FLIGHT]
                if s > smax:
                    gap_bytes[i] = s - smax
                    h_lo[h_used] = smax
                    h_hi[h_used] = s
                    h_tsval[h_used] = tsval[i]
                    h_ts[h_used] = now
                    h_next[h_used] = st[fw, HOLES]
                    st[fw, HOLES] = h_used
                    h_used += 1
                # remember when new data and new TSvals went out
                s_lo[i] = s
                s_end[i] = end
                s_ts[i] = now
                if st[fw, SENT_TAIL] == -1:
                    st[fw, SENT_HEAD] = i
                else:
                    s_next[st[fw, SENT_TAIL]] = i
                st[fw, SENT_TAIL] = i
                if tsval[i] >= 0 and tsval[i] > st[fw, LAST_TSVAL]:
                    t_val[i] = tsval[i]
                    t_ts[i] = now
                    if st[fw, TS_TAIL] == -1:
                        st[fw, TS_HEAD] = i
                    else:
                        t_next[st[fw, TS_TAIL]] = i
                    st[fw, TS_TAIL] = i
                st[fw, SND_MAX] = end
            else:
                # which of its bytes were never seen here (holes)?
                in_hole = 0
                reordered = False
                prev = -1
                h = st[fw, HOLES]
                while h != -1:
                    lo = max(h_lo[h], s)
                    hi = min(h_hi[h], end)
                    nxt_h = h_next[h]
                    if lo < hi:
                        in_hole += hi - lo
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
                            h = nxt_h
                            continue
                        if lo == h_lo[h]:
                            h_lo[h] = hi
                        elif hi == h_hi[h]:
                            h_hi[h] = lo
                        else:  # split in two
                            h_lo[h_used] = hi
                            h_hi[h_used] = h_hi[h]
                            h_tsval[h_used] = h_tsval[h]
                            h_ts[h_used] = h_ts[h]
                            h_next[h_used] = nxt_h
                            h_hi[h] = lo
                            h_next[h] = h_used
                            h_used += 1
                    prev = h
                    h = nxt_h
                seen = (end - s) - in_hole
                if in_hole > 0 and seen <= 0:
                    seg_class[i] = REORDERED if reordered else HOLE_FILL
                else:
                    seg_class[i] = REPEAT
                if seg_class[i] == REPEAT or seg_class[i] == HOLE_FILL:
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
                    # mark the queued originals it resends (Karn), remember it for D-SACK
                    u = st[fw, SENT_HEAD]
                    while u != -1:
                        if s_lo[u] < end and s < s_end[u]:
                            s_retx[u] = i + 1
                        u = s_next[u]
                    r_lo[i] = s
                    r_hi[i] = end
                    r_next[i] = st[fw, RETX_HEAD]
                    st[fw, RETX_HEAD] = i
            st[fw, LAST_SEND] = now
            if tsval[i] > st[fw, LAST_TSVAL]:
                st[fw, LAST_TSVAL] = tsval[i]
        inflight[i] = max(0, st[fw, SND_MAX] - st[fw, SND_UNA] - st[fw, SACKED])
        if st[rv, STARTED]:
            peer_inflight[i] = max(0, st[rv, SND_MAX] - st[rv, SND_UNA] - st[rv, SACKED])
