"""The `stalls` step's state machine (steps/stalls.py: the rules, in its
docstring): one compiled pass over a capture's TCP packets in frame order,
carrying each open flow's state in a slot and each direction's undecided
runs in a pending list, writing runs of one state as rows of `OUT`."""

import numpy as np

from ...core.jit import kernel
from ...kernels.wireshark import alloc, release

(HANDSHAKE, CLOSED, APP, RTO_WAIT, RECOVERY, ZERO_WINDOW, RWND, PACING, SLOW_START,
 CONGESTION) = range(10)
NEVER = np.iinfo(np.int64).max
OUT = ("flow", "client", "state", "busy", "start", "end", "duration", "packets", "max_inflight")
DRAIN_SLACK_NS = 1_000_000
PACING_GAP_NS = 1_000_000

# per-slot state
(FLOW_ID, HAS_PREV, PREV_TS, PREV_OWN) = range(4)
# per slot and direction (row 2 * slot + d, d = 0 client's data, 1 server's)
(INFL, PEER_WIN, MSS, CUR_FLIGHT, CUR_BYTES, PREV_BYTES, PREV_GROWING, EP_NEXT,
 R_STATE, R_BUSY, R_START, R_END, R_DURATION, R_PACKETS, R_MAXINFL,
 P_HEAD, P_TAIL, P_UNDRAINED, HELD, DRAINED_AT, PEER_FIRST) = range(21)
NSTATE = 21
# a pending run's kind (field `tail`): decided, only waiting in line; data in flight (the
# tail rule); nothing in flight as the receiver sees it (at the receiver: the turnaround rule);
# data in flight that a loss episode or a timeout found before it drained (its lost segment
# held the drain: where the tail rule would say application_limited, it is loss_recovery).
# DRAINED_AT: when the direction's data in flight last reached 0 after it had sent payload
# (-1: never); PEER_FIRST: the receiver's first data since then (-1: none)
DECIDED, IN_FLIGHT, RECEIVER_EMPTY, IN_FLIGHT_LOST = range(4)
LISTS = (P_HEAD, P_TAIL, P_UNDRAINED)
# a pending provisional run
PENDING_FIELDS = ("fallback", "tail", "busy", "start", "end", "duration", "packets",
                  "max_inflight", "drain")


def _emit(st, k, state, busy, start, end, duration, packets, max_infl, fs, fl, out, out_m):
    """Add an interval (or a run of them) to direction k's open run, writing
    the open run to `out` when the state or busy changes."""
    if st[k, R_STATE] == state and st[k, R_BUSY] == busy:
        st[k, R_END] = end
        st[k, R_DURATION] += duration
        st[k, R_PACKETS] += packets
        if max_infl > st[k, R_MAXINFL]:
            st[k, R_MAXINFL] = max_infl
        return
    if st[k, R_STATE] >= 0:
        m = out_m[0]
        out[m, 0] = fs[fl, FLOW_ID]
        out[m, 1] = 1 if k % 2 == 0 else 0
        out[m, 2] = st[k, R_STATE]
        out[m, 3] = st[k, R_BUSY]
        out[m, 4] = st[k, R_START]
        out[m, 5] = st[k, R_END]
        out[m, 6] = st[k, R_DURATION]
        out[m, 7] = st[k, R_PACKETS]
        out[m, 8] = st[k, R_MAXINFL]
        out_m[0] = m + 1
    st[k, R_STATE] = state
    st[k, R_BUSY] = busy
    st[k, R_START] = start
    st[k, R_END] = end
    st[k, R_DURATION] = duration
    st[k, R_PACKETS] = packets
    st[k, R_MAXINFL] = max_infl


def _resolve(st, k, pm, fb, tail, busy, start, end, duration, packets, max_inf, drain, p_next,
             next_new, upto_drain, lag, fs, fl, out, out_m):
    """Decide direction k's pending runs: all of them when the direction sent
    new data at `next_new` (NEVER: the flow ended), else only those whose
    drain is before `upto_drain` - slack (they are application limited).
    `lag` > 0 where the capture is at the data's receiver: the slack is a
    turnaround longer, and new data that can answer the receiver's own data
    (_answers) is the application's."""
    slack = DRAIN_SLACK_NS + lag
    q = st[k, P_HEAD]
    while q != -1:
        if tail[q] == DECIDED:  # it only waited in line
            state = fb[q]
        elif next_new == -1:  # time passed: only runs now known to be the tail
            if not (drain[q] != NEVER and upto_drain > drain[q] + slack):
                break
            state = RECOVERY if tail[q] == IN_FLIGHT_LOST else APP
        elif next_new == NEVER or (drain[q] != NEVER and (
                next_new > drain[q] + slack or _answers(st, k, next_new, lag))):
            state = RECOVERY if tail[q] == IN_FLIGHT_LOST else APP
        else:
            state = fb[q]
        b = 0 if (tail[q] == RECEIVER_EMPTY and state == APP) else busy[q]
        _emit(st, k, state, b, start[q], end[q], duration[q], packets[q], max_inf[q],
              fs, fl, out, out_m)
        nq = p_next[q]
        release(pm, p_next, q)
        q = nq
    st[k, P_HEAD] = q
    if q == -1:
        st[k, P_TAIL] = -1
        st[k, P_UNDRAINED] = -1


def _answers(st, k, next_new, lag):
    """At the receiver: the receiver sent data since the drain, and the new
    data came at least a round trip (less the 1 ms slack) after the first of
    it -- a reply to it, not what was on its way before."""
    p = st[k, PEER_FIRST]
    return lag > 0 and p >= 0 and next_new + DRAIN_SLACK_NS >= p + lag


def _pend(st, k, pm, fb, tail, busy, start, end, duration, packets, max_inf, drain, p_next,
          state, kind, b, t0, t1, infl, dr):
    """Queue an interval behind direction k's pending runs (merged with the last);
    `dr`: its drain when already known (RECEIVER_EMPTY), else NEVER."""
    q = st[k, P_TAIL]
    if q != -1 and fb[q] == state and tail[q] == kind and busy[q] == b and drain[q] == dr:
        end[q] = t1
        duration[q] += t1 - t0
        packets[q] += 1
        if infl > max_inf[q]:
            max_inf[q] = infl
        return
    q = alloc(pm, p_next)
    fb[q] = state
    tail[q] = kind
    busy[q] = b
    start[q] = t0
    end[q] = t1
    duration[q] = t1 - t0
    packets[q] = 1
    max_inf[q] = infl
    drain[q] = dr
    p_next[q] = -1
    if st[k, P_TAIL] == -1:
        st[k, P_HEAD] = q
    else:
        p_next[st[k, P_TAIL]] = q
    st[k, P_TAIL] = q
    if st[k, P_UNDRAINED] == -1 and dr == NEVER:
        st[k, P_UNDRAINED] = q


def _lost(st, k, tail, p_next):
    """A loss episode or a timeout began for direction k: its undrained pending runs with
    data in flight waited for the loss to show, not for the application."""
    q = st[k, P_UNDRAINED]
    while q != -1:
        if tail[q] == IN_FLIGHT:
            tail[q] = IN_FLIGHT_LOST
        q = p_next[q]


def _drained(st, k, tail, drain, p_next, now):
    """Direction k's in-flight reached 0 at `now`: the next drain of the pending
    runs that had none (they are the list's tail from P_UNDRAINED on)."""
    q = st[k, P_UNDRAINED]
    while q != -1:
        if tail[q] != RECEIVER_EMPTY:
            drain[q] = now
        q = p_next[q]
    st[k, P_UNDRAINED] = -1


def _open_slot(fl, fid, fs, st, ep_ptr):
    """A flow's first packet: its slot and both directions start afresh."""
    fs[fl, FLOW_ID] = fid
    fs[fl, HAS_PREV] = 0
    for d in range(2):
        k = 2 * fl + d
        for c in range(NSTATE):
            st[k, c] = 0
        st[k, PEER_WIN] = -1
        st[k, CUR_FLIGHT] = -1
        st[k, R_STATE] = -1
        st[k, P_HEAD] = -1
        st[k, P_TAIL] = -1
        st[k, P_UNDRAINED] = -1
        st[k, DRAINED_AT] = -1
        st[k, PEER_FIRST] = -1
        st[k, EP_NEXT] = ep_ptr[2 * fid + d]


def _certain_state(k, fid, d, now, next_rto, ack_ts, fin_ts, rst_ts, ep_ptr, ep_start, ep_end,
                   st, rcv_side):
    """The states the interval from `now` has whatever comes next: handshake,
    closed, receive_window_limited at the receiver (held at the edge),
    application limited (nothing in flight; at the receiver, after a drain,
    only provisionally: the caller pends it), rto_wait, loss_recovery; -1
    when none holds. Moves direction k past the loss episodes begun by now."""
    infl = st[k, INFL]
    e = st[k, EP_NEXT]
    while e < ep_ptr[2 * fid + d + 1] and ep_start[e] <= now:
        e += 1
    st[k, EP_NEXT] = e
    recovering = e > ep_ptr[2 * fid + d] and ep_end[e - 1] > now
    if ack_ts[fid] >= 0 and now < ack_ts[fid]:
        return HANDSHAKE
    if now >= rst_ts[fid] or (now >= fin_ts[fid, d] and infl == 0):
        return CLOSED
    if rcv_side[fid, d] and st[k, HELD]:
        return RWND
    if infl == 0:
        return APP
    if next_rto:
        return RTO_WAIT
    if recovering:
        return RECOVERY
    return -1


def _fallback(k, fid, d, now, gap, next_new, ep_ptr, ep_start, st, rcv_side):
    """What limited a sender with data in flight, unless the tail rule finds it
    application limited: zero window, receive window, pacing, slow start or
    congestion."""
    first_loss = NEVER
    if ep_ptr[2 * fid + d] < ep_ptr[2 * fid + d + 1]:
        first_loss = ep_start[ep_ptr[2 * fid + d]]
    infl = st[k, INFL]
    pw = st[k, PEER_WIN]
    growing = st[k, PREV_GROWING] or (st[k, PREV_BYTES] > 0 and 2 * st[k, CUR_BYTES]
                                      >= 3 * st[k, PREV_BYTES])
    if pw == 0:
        return ZERO_WINDOW
    if pw >= 0 and infl + st[k, MSS] > pw and not rcv_side[fid, d]:
        return RWND
    if next_new and gap >= PACING_GAP_NS and not rcv_side[fid, d]:
        return PACING
    if growing and now < first_loss:
        return SLOW_START
    return CONGESTION


def _packet(j, fl, own_j, ts, new_data, held, payload, inflight, peer_inflight, window, flight, fs,
            st, pm, pending, rcv_side, out, out_m):
    """What packet j changes: the peer's window, the sender's MSS, flights and
    pending runs (new data decides them), in-flight bytes and drains."""
    fb, tail, busy, start, end, duration, packets, max_inf, drain, p_next = pending
    now_j = ts[j]
    fid = fs[fl, FLOW_ID]
    if window[j] >= 0:
        st[2 * fl + (1 - own_j), PEER_WIN] = window[j]  # this side's window bounds the other's data
    ko = 2 * fl + own_j
    if payload[j] > st[ko, MSS]:
        st[ko, MSS] = payload[j]
    if new_data[j]:
        st[ko, HELD] = held[j]
        if flight[j] != st[ko, CUR_FLIGHT]:  # a new flight: did the last one grow?
            st[ko, PREV_GROWING] = 1 if (st[ko, PREV_BYTES] > 0 and 2 * st[ko, CUR_BYTES]
                                         >= 3 * st[ko, PREV_BYTES]) else 0
            st[ko, PREV_BYTES] = st[ko, CUR_BYTES]
            st[ko, CUR_BYTES] = 0
            st[ko, CUR_FLIGHT] = flight[j]
        st[ko, CUR_BYTES] += payload[j]
        _resolve(st, ko, pm, fb, tail, busy, start, end, duration, packets, max_inf, drain,
                 p_next, now_j, 0, rcv_side[fid, own_j], fs, fl, out, out_m)
    for k, now_infl in ((ko, inflight[j]), (2 * fl + 1 - own_j, peer_inflight[j])):
        if st[k, INFL] > 0 and now_infl == 0 and st[k, MSS] > 0:  # (not the SYN's)
            st[k, DRAINED_AT] = now_j
            st[k, PEER_FIRST] = -1
        st[k, INFL] = now_infl
    if payload[j] > 0 and st[2 * fl + 1 - own_j, PEER_FIRST] == -1:
        st[2 * fl + 1 - own_j, PEER_FIRST] = now_j
    for d in range(2):
        k = 2 * fl + d
        if st[k, P_HEAD] != -1:
            if st[k, INFL] == 0:
                _drained(st, k, tail, drain, p_next, now_j)
            _resolve(st, k, pm, fb, tail, busy, start, end, duration, packets, max_inf,
                     drain, p_next, -1, now_j, rcv_side[fid, d], fs, fl, out, out_m)


@kernel(helpers=(alloc, release, _emit, _answers, _resolve, _pend, _lost, _drained, _open_slot,
                 _certain_state, _fallback, _packet))
def limitation_runs(ts, flow, slot, first, from_client, new_data, held, rto, payload, inflight,
                    peer_inflight, window, flight, ack_ts, fin_ts, rst_ts, rcv_side, ep_ptr,
                    ep_start, ep_end, fs, st, pm, fb, tail, busy, start, end, duration, packets,
                    max_inf, drain, p_next, out, out_m):
    """One chunk of a capture's TCP packets in frame order; runs written to `out`.
    Per packet: the interval since the flow's previous packet gets a state per
    direction (certain, or pending on the tail rule), then the packet's own
    changes."""
    pending = (fb, tail, busy, start, end, duration, packets, max_inf, drain, p_next)
    for j in range(len(ts)):
        fl = slot[j]
        fid = flow[j]
        own_j = 0 if from_client[j] else 1
        if first[j]:
            _open_slot(fl, fid, fs, st, ep_ptr)
        now_j = ts[j]
        if fs[fl, HAS_PREV]:
            now = fs[fl, PREV_TS]
            for d in range(2):
                k = 2 * fl + d
                infl = st[k, INFL]
                next_own = own_j == d
                state = _certain_state(k, fid, d, now, next_own and rto[j], ack_ts, fin_ts,
                                       rst_ts, ep_ptr, ep_start, ep_end, st, rcv_side)
                receiver_empty = (state == APP and rcv_side[fid, d] > 0
                                  and st[k, DRAINED_AT] >= 0)
                if state == -1 or receiver_empty:  # the tail (or turnaround) rule decides, else:
                    fallback = _fallback(k, fid, d, now, now_j - now, next_own and new_data[j],
                                         ep_ptr, ep_start, st, rcv_side)
                    kind, dr = ((RECEIVER_EMPTY, st[k, DRAINED_AT]) if receiver_empty
                                else (IN_FLIGHT, NEVER))
                    _pend(st, k, pm, fb, tail, busy, start, end, duration, packets, max_inf,
                          drain, p_next, fallback, kind, 1, now, now_j, infl, dr)
                    continue
                if (state == RECOVERY or state == RTO_WAIT) and st[k, P_UNDRAINED] != -1:
                    _lost(st, k, tail, p_next)
                # (held by the window at the receiver: the sender's data waits, busy)
                b = 1 if ((infl > 0 or (state == RWND and rcv_side[fid, d] > 0))
                          and state != HANDSHAKE and state != CLOSED) else 0
                if st[k, P_HEAD] != -1:  # behind undecided runs: wait in line
                    _pend(st, k, pm, fb, tail, busy, start, end, duration, packets,
                          max_inf, drain, p_next, state, DECIDED, b, now, now_j, infl, NEVER)
                else:
                    _emit(st, k, state, b, now, now_j, now_j - now, 1, infl, fs, fl, out, out_m)
        _packet(j, fl, own_j, ts, new_data, held, payload, inflight, peer_inflight, window, flight,
                fs, st, pm, pending, rcv_side, out, out_m)
        fs[fl, HAS_PREV] = 1
        fs[fl, PREV_TS] = now_j
        fs[fl, PREV_OWN] = own_j


@kernel(helpers=(alloc, release, _emit, _answers, _resolve))
def finish_flows(slots, fs, st, pm, fb, tail, busy, start, end, duration, packets, max_inf,
                 drain, p_next, out, out_m):
    """Flows that ended: decide their pending runs (no new data came) and write
    their open runs."""
    for i in range(len(slots)):
        fl = slots[i]
        for d in range(2):
            k = 2 * fl + d
            _resolve(st, k, pm, fb, tail, busy, start, end, duration, packets, max_inf, drain,
                     p_next, NEVER, 0, 0, fs, fl, out, out_m)  # (no new data: no lag needed)
            _emit(st, k, -2, 0, 0, 0, 0, 0, 0, fs, fl, out, out_m)  # flush the open run
            st[k, R_STATE] = -1
