"""Wireshark's TCP sequence analysis (tcp.analysis.*), reproduced for comparison.

Users hold tracekit's numbers against Wireshark's, so tracekit computes
Wireshark's own per-packet verdicts as well as its own (transport/segments.py)
and stores both side by side. This module follows the state machine of
Wireshark 4.0's packet-tcp.c (tcp_analyze_sequence_number), rule for rule, so
that a disagreement with a tshark oracle is a bug here, not a difference of
definition. Where those rules are wrong about the transport (bytes in flight
that forget all but the peer's latest three SACK blocks, out-of-order called
on a fixed clock, hole-filling retransmissions called out-of-order),
tracekit's own columns say otherwise.

Per direction of each flow it keeps: the base sequence number, the highest
next sequence number seen (`nextseq`, 0 = not yet), when and in which frame
that was set, the highest contiguous sequence number to be acknowledged, the
last ACK number, window and time, the duplicate-ACK count, and the list of
unacknowledged segments (seq, nextseq, frame, time) that ACKs remove. The
rules, in Wireshark's order (seglen = TCP payload bytes):

- zero window probe: 1 byte at nextseq while the peer's window is 0;
- zero window: window 0 without SYN/FIN/RST;
- lost segment: seq beyond nextseq (a segment before it was not captured);
  bytes in flight are then not reported until the peer ACKs again;
- keep-alive: 0 or 1 byte at nextseq - 1, no SYN/FIN/RST;
- window update: no payload, same seq/ACK as before, new non-zero window;
- window full: payload reaching exactly the peer's last ACK + window;
- keep-alive ACK / zero window probe ACK: repeats the ACK of one;
- duplicate ACK: no payload, same seq, ACK and non-zero window as before;
- ACKed unseen segment: an ACK beyond the highest contiguous byte seen the
  other way, raised once until the peer moves its own ACK on (it marks the
  peer's duplicate-ACK counter "unseen", which the fast retransmission test
  takes for >= 2: Wireshark's counter is unsigned and the mark is -1);
- retransmission family, for payload or SYN/FIN not beyond nextseq
  (`seq < nextseq`): spurious when all of it was already acknowledged;
  fast retransmission when the peer sent >= 2 duplicate ACKs for this seq
  and the last within 20 ms; out-of-order when within the initial RTT (3 ms
  if unknown) of the segment that set nextseq and not ending at nextseq;
  else retransmission, whose RTO is the time since the oldest segment still
  unacknowledged (tshark prints the retransmission field for the fast and
  spurious kinds too);
- ACK processing: each unacknowledged segment of the peer whose nextseq the
  ACK equals gives acks_frame and ack_rtt; segments at or below the ACK are
  removed, a partly acknowledged one is trimmed;
- bytes in flight, for a segment with payload: the span from the lowest to
  the highest unacknowledged byte of this direction after the above, less
  the bytes of the first three SACK blocks of the peer's latest packet, less
  one for a SYN or FIN.

Every comparison of sequence numbers is serial-number arithmetic modulo
2^32 (RFC 1982), as Wireshark's. The relative numbers it hands on
(`rel_seq`, `rel_ack`) are Wireshark's tcp.seq / tcp.ack while a direction
has sent less than 2 GiB; beyond that they keep counting in 64 bits where
tshark wraps at 2^32, so tracekit's own analyses see one monotonic sequence
space whatever the transfer's size.

Checked against tshark 4.0.17 on every TCP packet of the shared captures
(tests/test_tcp_analysis.py).
"""

from ..core.jit import kernel

# tcp.analysis flags (bit values of `ws_flags`)
RETRANSMISSION = 1
FAST_RETRANSMISSION = 2
SPURIOUS_RETRANSMISSION = 4
DUPLICATE_ACK = 8
LOST_SEGMENT = 16
OUT_OF_ORDER = 32
ZERO_WINDOW = 64
WINDOW_FULL = 128
KEEP_ALIVE = 256
WINDOW_UPDATE = 512
ZERO_WINDOW_PROBE = 1024
ZERO_WINDOW_PROBE_ACK = 2048
KEEP_ALIVE_ACK = 4096
ACK_LOST_SEGMENT = 8192

FLAG_NAMES = {
    RETRANSMISSION: "retransmission", FAST_RETRANSMISSION: "fast_retransmission",
    SPURIOUS_RETRANSMISSION: "spurious_retransmission", DUPLICATE_ACK: "duplicate_ack",
    LOST_SEGMENT: "lost_segment", OUT_OF_ORDER: "out_of_order", ZERO_WINDOW: "zero_window",
    WINDOW_FULL: "window_full", KEEP_ALIVE: "keep_alive", WINDOW_UPDATE: "window_update",
    ZERO_WINDOW_PROBE: "zero_window_probe", ZERO_WINDOW_PROBE_ACK: "zero_window_probe_ack",
    KEEP_ALIVE_ACK: "keep_alive_ack", ACK_LOST_SEGMENT: "ack_lost_segment",
}

MAX_UNACKED = 10000  # Wireshark's TCP_MAX_UNACKED_SEGMENTS
FAST_RETRANSMISSION_WINDOW_NS = 20_000_000
DEFAULT_OOO_NS = 3_000_000
M32 = 0xFFFFFFFF
TH_FIN, TH_SYN, TH_RST, TH_ACK = 0x01, 0x02, 0x04, 0x10

# per-direction state columns (int64), one row per flow slot and direction
(BASE, BASE_SET, NEXTSEQ, NEXTSEQ_FRAME, NEXTSEQ_TS, MAXSEQ_TO_ACK, LASTACK, LASTACK_TS,
 LASTNONDUP, DUPACKS, WINDOW, SCALE, VALID_BIF, LASTFLAGS, HEAD, COUNT, SACKED, LO, HI,
 ACKED_AT, DIRTY, REL_HI) = range(22)
NSTATE = 22
LISTS = (HEAD,)  # state columns that head a pool list (-1: empty)
ACK_UNSEEN = -1  # Wireshark's dupacknum after an ACK of unseen data (unsigned: >= 2)
# per-flow state: the most recent SYN's time, the initial RTT (0 = unset)
MRU_SYN, FIRST_RTT = 0, 1


def gt_seq(a, b):
    d = (a - b) & M32
    return d != 0 and d < 0x80000000


def unwrap(rel32, ref):
    """The 64-bit number nearest to `ref` whose low 32 bits are `rel32`
    (RFC 1982 serial arithmetic: sequence space never jumps 2^31)."""
    d = (rel32 - (ref & M32)) & M32
    if d >= 0x80000000:
        d -= 0x100000000
    return ref + d


def alloc(meta, link):
    """An entry of a pool (free list first, then never used ones)."""
    k = meta[1]
    if k != -1:
        meta[1] = link[k]
        meta[2] -= 1
        return k
    k = meta[0]
    meta[0] += 1
    return k


def release(meta, link, k):
    link[k] = meta[1]
    meta[1] = k
    meta[2] += 1


def reset_direction(st, d, meta, u_link):
    """A flow slot taken by a new flow: free the old flow's list, start afresh."""
    u = st[d, HEAD]
    while u != -1:
        nxt = u_link[u]
        release(meta, u_link, u)
        u = nxt
    for c in range(NSTATE):
        st[d, c] = 0
    st[d, WINDOW] = -1
    st[d, SCALE] = -1
    st[d, VALID_BIF] = 1
    st[d, HEAD] = -1
    st[d, ACKED_AT] = -1


def _handshake(fl, fw, rv, f, s, a, now, shift_i, st, fs):
    """The sender's window scale as Wireshark knows it after the handshake, the
    flow's initial RTT (the first pure ACK after the most recent SYN; 0 =
    unset) and each direction's base sequence number."""
    if shift_i != -1:
        st[fw, SCALE] = shift_i
    if f & TH_SYN and not f & TH_ACK:
        fs[fl, MRU_SYN] = now
    if (f & (TH_SYN | TH_ACK)) == TH_ACK and fs[fl, MRU_SYN] != 0 and fs[fl, FIRST_RTT] == 0:
        fs[fl, FIRST_RTT] = now - fs[fl, MRU_SYN]
    if st[fw, BASE_SET] == 0:
        st[fw, BASE] = s if f & TH_SYN else (s - 1) & M32
        st[fw, BASE_SET] = 1
    elif f & TH_SYN and s != st[fw, BASE] and st[fw, REL_HI] <= 1:
        # another SYN (SYN-ACK) with a new ISN before any data: Wireshark
        # re-bases on it, and the data that follows counts from it
        st[fw, BASE] = s
    if st[rv, BASE_SET] == 0 and f & TH_ACK:
        st[rv, BASE] = (a - 1) & M32
        st[rv, BASE_SET] = 1
    if f & TH_ACK:
        st[rv, VALID_BIF] = 1


def _window_rules(i, fw, rv, f, s, a, ln, win, st, dupack_num, dupack_frame):
    """Zero window probe, zero window, lost segment, keep-alive, window update,
    window full, keep-alive ACK, zero window probe ACK, duplicate ACK: the
    flags they raise."""
    out = 0
    nxt = st[fw, NEXTSEQ]
    no_sfr = (f & (TH_SYN | TH_FIN | TH_RST)) == 0
    same_seq_ack = s == nxt and a == st[fw, LASTACK]
    if ln == 1 and s == nxt and st[rv, WINDOW] == 0:
        return ZERO_WINDOW_PROBE
    if win == 0 and no_sfr:
        out |= ZERO_WINDOW
    if nxt != 0 and gt_seq(s, nxt) and not f & TH_RST:
        out |= LOST_SEGMENT
        st[fw, VALID_BIF] = 0
    if (ln == 0 or ln == 1) and s == ((nxt - 1) & M32) and no_sfr:
        out |= KEEP_ALIVE
    if ln == 0 and win != 0 and win != st[fw, WINDOW] and same_seq_ack and no_sfr:
        out |= WINDOW_UPDATE
    rscale = st[rv, SCALE]
    if ln > 0 and rscale != -1 and no_sfr:
        edge = st[rv, LASTACK] + (st[rv, WINDOW] << (0 if rscale == -2 else rscale))
        if ((s + ln) & M32) == (edge & M32):
            out |= WINDOW_FULL
    repeat = ln == 0 and win == st[fw, WINDOW] and same_seq_ack and no_sfr
    if repeat and win != 0 and st[rv, LASTFLAGS] & KEEP_ALIVE:
        out |= KEEP_ALIVE_ACK
    elif repeat and win == 0 and st[rv, LASTFLAGS] & ZERO_WINDOW_PROBE:
        out |= ZERO_WINDOW_PROBE_ACK
    elif repeat and win != 0:
        st[fw, DUPACKS] = 1 if st[fw, DUPACKS] == ACK_UNSEEN else st[fw, DUPACKS] + 1
        out |= DUPLICATE_ACK
        dupack_num[i] = st[fw, DUPACKS]
        dupack_frame[i] = st[fw, LASTNONDUP]
    return out


def _ack_unseen(fw, rv, f, a, fr, out, st):
    """finished_fwd: a new ACK resets the duplicate count; then an ACK of data
    never seen. The peer's highest contiguous byte jumps to its nextseq only
    when the peer has sent past it; else the warning is raised once per ACK
    number the peer has moved to (its duplicate-ACK count is 0 after each new
    ACK of its own) and the count becomes "unseen" (-1, which Wireshark's
    unsigned counter also takes for >= 2 in the fast retransmission test)."""
    if a != st[fw, LASTACK]:
        st[fw, LASTNONDUP] = fr
        st[fw, DUPACKS] = 0
    if st[rv, MAXSEQ_TO_ACK] != 0 and gt_seq(a, st[rv, MAXSEQ_TO_ACK]) and f & TH_ACK:
        if gt_seq(st[rv, NEXTSEQ], st[rv, MAXSEQ_TO_ACK]):
            st[rv, MAXSEQ_TO_ACK] = st[rv, NEXTSEQ]
            out |= ACK_LOST_SEGMENT
        else:
            if st[rv, DUPACKS] == 0:
                out |= ACK_LOST_SEGMENT
            st[rv, DUPACKS] = ACK_UNSEEN
    return out


def _retransmission_kind(i, fl, fw, rv, f, s, ln, now, nxt, out, st, fs, u_frame, u_ts, u_link,
                         rto, rto_frame):
    """The retransmission family, for payload or SYN/FIN not beyond nextseq:
    spurious, fast, out-of-order or (with its RTO) retransmission."""
    not_advanced = nxt != 0 and gt_seq(nxt, s)
    if ln > 1 and ((nxt - 1) & M32) == s:
        not_advanced = False
    thres = fs[fl, FIRST_RTT] if fs[fl, FIRST_RTT] != 0 else DEFAULT_OOO_NS
    end = (s + ln) & M32
    end_flag = (end + (1 if f & (TH_SYN | TH_FIN) else 0)) & M32
    peer_dups = st[rv, DUPACKS]
    if ln > 0 and st[rv, LASTACK] != 0 and (end == st[rv, LASTACK] or gt_seq(st[rv, LASTACK], end)):
        out |= SPURIOUS_RETRANSMISSION
    elif (not_advanced and (peer_dups >= 2 or peer_dups == ACK_UNSEEN)
          and st[rv, LASTACK] == s
          and now - st[rv, LASTACK_TS] < FAST_RETRANSMISSION_WINDOW_NS):
        out |= FAST_RETRANSMISSION
    elif not_advanced and now - st[fw, NEXTSEQ_TS] < thres and nxt != end_flag:
        out |= OUT_OF_ORDER
    elif not_advanced:
        out |= RETRANSMISSION
        rto[i] = now - st[fw, NEXTSEQ_TS]
        rto_frame[i] = st[fw, NEXTSEQ_FRAME]
        u = st[fw, HEAD]  # better: the eldest unacknowledged segment
        while u != -1:
            rto[i] = now - u_ts[u]
            rto_frame[i] = u_frame[u]
            u = u_link[u]
    return out


def _sent(fw, f, s, a, ln, win, now, fr, out, st, meta, u_seq, u_next, u_frame, u_ts, u_link):
    """finished_checking_retransmission_type: the segment joins the
    unacknowledged list; nextseq, the highest contiguous byte and the last
    ACK, window and flags of its direction move on."""
    new_next = (s + ln) & M32
    if (ln > 0 or f & (TH_SYN | TH_FIN)) and st[fw, COUNT] < MAX_UNACKED:
        if f & (TH_SYN | TH_FIN):
            new_next = (new_next + 1) & M32
        k = alloc(meta, u_link)
        u_seq[k] = s
        u_next[k] = new_next
        u_frame[k] = fr
        u_ts[k] = now
        # the list's lowest seq and highest nextseq (relative), kept as it grows
        vlo = (s - st[fw, BASE]) & M32
        vhi = (new_next - st[fw, BASE]) & M32
        if st[fw, HEAD] == -1:
            st[fw, LO] = vlo
            st[fw, HI] = vhi
        else:
            st[fw, LO] = min(st[fw, LO], vlo)
            st[fw, HI] = max(st[fw, HI], vhi)
        st[fw, DIRTY] = 1
        u_link[k] = st[fw, HEAD]
        st[fw, HEAD] = k
        st[fw, COUNT] += 1
    if (gt_seq(new_next, st[fw, NEXTSEQ]) or st[fw, NEXTSEQ] == 0) and not out & ZERO_WINDOW_PROBE:
        st[fw, NEXTSEQ] = new_next
        st[fw, NEXTSEQ_FRAME] = fr
        st[fw, NEXTSEQ_TS] = now
    if (s == st[fw, MAXSEQ_TO_ACK] or st[fw, MAXSEQ_TO_ACK] == 0) and not out & ZERO_WINDOW_PROBE:
        st[fw, MAXSEQ_TO_ACK] = st[fw, NEXTSEQ]
    st[fw, WINDOW] = win
    st[fw, LASTACK] = a
    st[fw, LASTACK_TS] = now
    st[fw, LASTFLAGS] = out


def _acked(i, rv, a, now, st, meta, u_seq, u_next, u_frame, u_ts, u_link, acks_frame, ack_rtt):
    """The ACK removes the peer's acknowledged segments (nothing to do when it
    repeats the last ACK processed and the peer sent nothing since): the one
    whose nextseq it equals gives acks_frame and ack_rtt, a partly
    acknowledged one is trimmed."""
    if a == st[rv, ACKED_AT] and not st[rv, DIRTY]:
        return
    base = st[rv, BASE]
    lo = M32 + 1
    hi = -1
    prev = -1
    u = st[rv, HEAD]
    while u != -1:
        if a == u_next[u]:
            acks_frame[i] = u_frame[u]
            ack_rtt[i] = now - u_ts[u]
        elif gt_seq(a, u_seq[u]) and (a == u_next[u] or gt_seq(u_next[u], a)):
            u_seq[u] = a
            continue
        elif gt_seq(u_next[u], a):
            lo = min(lo, (u_seq[u] - base) & M32)
            hi = max(hi, (u_next[u] - base) & M32)
            prev = u
            u = u_link[u]
            continue
        nu = u_link[u]
        if prev == -1:
            st[rv, HEAD] = nu
        else:
            u_link[prev] = nu
        st[rv, COUNT] -= 1
        release(meta, u_link, u)
        u = nu
    st[rv, LO] = lo
    st[rv, HI] = hi
    st[rv, ACKED_AT] = a
    st[rv, DIRTY] = 0


def _in_flight_and_relative(i, fw, rv, f, s, a, ln, st, sack_n, sack_l, sack_r, bif, rel_seq,
                            rel_ack):
    """Bytes in flight after this segment was sent (the span of the
    unacknowledged segments less the peer's SACKs), this packet's SACK blocks
    for the peer's (Wireshark counts at most three), and the relative numbers
    counted on past 2^32 (tshark's tcp.seq wraps there): each direction's
    nearest to the highest byte seen of it so far."""
    if ln != 0 and st[fw, HEAD] != -1 and st[fw, VALID_BIF]:
        inflight = (st[fw, HI] - st[fw, LO] - st[rv, SACKED]) & M32
        if 0 < inflight < 2000000000:
            bif[i] = inflight - (1 if f & (TH_SYN | TH_FIN) else 0)
    sacked = 0
    for b in range(min(sack_n[i], 3)):
        sacked += (sack_r[i, b] - sack_l[i, b]) & M32
    st[fw, SACKED] = sacked
    r = unwrap((s - st[fw, BASE]) & M32, st[fw, REL_HI])
    rel_seq[i] = r
    r += ln + (1 if f & (TH_SYN | TH_FIN) else 0)
    if r > st[fw, REL_HI]:
        st[fw, REL_HI] = r
    r = unwrap((a - st[rv, BASE]) & M32, st[rv, REL_HI])
    rel_ack[i] = r
    if f & TH_ACK and r > st[rv, REL_HI]:  # data this capture never saw
        st[rv, REL_HI] = r


@kernel(helpers=(gt_seq, unwrap, alloc, release, reset_direction, _handshake, _window_rules,
                 _ack_unseen, _retransmission_kind, _sent, _acked, _in_flight_and_relative))
def analyze(frame, ts, slot, first, from_client, seq, ack, flags, seglen, window, shift,
            sack_n, sack_l, sack_r, st, fs, meta, u_seq, u_next, u_frame, u_ts, u_link,
            ws_flags, bif, acks_frame, ack_rtt, dupack_num, dupack_frame, rto, rto_frame,
            rel_seq, rel_ack):
    """Run Wireshark's rules over one chunk of a capture's TCP packets in frame
    order, in its order (the helpers above, one per step of
    tcp_analyze_sequence_number).

    State carries from chunk to chunk: `st` (per flow slot and direction),
    `fs` (per flow slot) and the pool of unacknowledged segments (`u_*`,
    `meta`: next never used entry, free list head, free entries), which
    must have room for one entry per packet of the chunk.
    """
    for i in range(len(frame)):
        fl = slot[i]
        fw = 2 * fl + (0 if from_client[i] else 1)
        rv = 2 * fl + (1 if from_client[i] else 0)
        if first[i]:
            reset_direction(st, 2 * fl, meta, u_link)
            reset_direction(st, 2 * fl + 1, meta, u_link)
            fs[fl, MRU_SYN] = 0
            fs[fl, FIRST_RTT] = 0
        f = flags[i]
        s = seq[i]
        a = ack[i]
        ln = seglen[i]
        now = ts[i]
        _handshake(fl, fw, rv, f, s, a, now, shift[i], st, fs)
        nxt = st[fw, NEXTSEQ]
        out = _window_rules(i, fw, rv, f, s, a, ln, window[i], st, dupack_num, dupack_frame)
        out = _ack_unseen(fw, rv, f, a, frame[i], out, st)
        if (ln > 0 or f & (TH_SYN | TH_FIN)) and not out & KEEP_ALIVE:
            out = _retransmission_kind(i, fl, fw, rv, f, s, ln, now, nxt, out, st, fs, u_frame,
                                       u_ts, u_link, rto, rto_frame)
        _sent(fw, f, s, a, ln, window[i], now, frame[i], out, st, meta, u_seq, u_next, u_frame,
              u_ts, u_link)
        _acked(i, rv, a, now, st, meta, u_seq, u_next, u_frame, u_ts, u_link, acks_frame, ack_rtt)
        ws_flags[i] = out
        _in_flight_and_relative(i, fw, rv, f, s, a, ln, st, sack_n, sack_l, sack_r, bif, rel_seq,
                                rel_ack)
