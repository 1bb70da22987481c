"""`stalls`: what limited each flow direction at every instant of its life.

A state machine with lookahead, so it is code (one backward and one forward
pass over a capture's TCP packets, compiled for large captures) rather than
SQL. Every interval between two consecutive packets of a flow gets exactly
one state per direction, so per direction the state durations add up to the
flow's duration (last packet - first packet) exactly; runs of one state are
stored as one row. The state holds after packet k until packet k+1, decided
in this order (names after Linux tcp_info's chrono stats and RFC 4898's
SndLimTime* where they exist):

- handshake: before the TCP handshake completed (flows.ack_ts_ns);
- closed: after this direction's FIN was acknowledged, or after a RST;
- receive_window_limited where the capture is at the data's receiver
  (rtt_summary.vantage): from a new segment that arrived at the edge the
  sender could have seen (the receiver's highest ACK + window one
  turnaround -- capture point to sender and back -- earlier; less than a
  segment of room) to the sender's next new segment (stalls_held.py: the
  rule, its guards).
  Above application_limited, rto_wait and loss_recovery: at the receiver
  "nothing in flight" is only its own view, and Linux counts a window's
  hold in recovery as rwnd-limited (lab runs against tcpi_rwnd_limited:
  docs/whatif.md, "The reading in `stalls`"). At the receiver it also
  takes a zero window's time while a segment is held;
- application_limited: nothing in flight, the sender had nothing to send
  (RFC 4898 SndLimTimeSnd); also the tail: data in flight, but no new data
  sent until 1 ms after it drained (a sender held back by its windows sends
  at once when they open). Where the capture is at the receiver "nothing in
  flight" is only what has passed it (the next segments may be on their
  way), so both wait for the sender's next new data and the slack is a
  turnaround longer (the sender's leg, stalls_held.receiver_side): data that
  came sooner after the drain was sent before the sender saw the ACK that
  drained it -- the interval takes the state below (busy) -- unless the
  receiver sent data of its own since (what follows answers it)
  (tests/test_stalls_busy_receiver.py: the kernel's tcpi_busy_time);
- rto_wait: in flight, and the next packet this direction sends is a
  retransmission by timeout (segments.py): the sender waits for its timer;
- loss_recovery: inside a recovery episode (retransmissions.sql);
- zero_window: the receiver advertises a zero window;
- receive_window_limited elsewhere (the sender's vantage, or between): in
  flight + 1 MSS exceeds the receiver's latest window
  (TCP_CHRONO_RWND_LIMITED, SndLimTimeRwin);
- pacing_idle: the sender's next packet is new data after a gap >= 1 ms with
  no packet from the peer in between: it held back by itself (not where the
  capture is at the receiver: a bottleneck spaces arrivals alike);
- slow_start: congestion limited (below) while the sender's flights grow
  >= 1.5x a round (the last completed flight did, or the current one has
  already sent 1.5x the one before), before the first loss episode;
- congestion_limited: in flight, waiting for ACKs to send more
  (TCP_CHRONO_BUSY, SndLimTimeCwnd).

`busy` marks time with data in flight (a run is split where it changes):
its sum is what the sender's tcp_info reports as tcpi_busy_time, which
includes rwnd- and sndbuf-limited time. Linux counts one chrono state at a
time, ranks "the writer is blocked on a full send buffer" above "the
receive window is full", and switches back to busy whenever a transmit
attempt stops before its window test (small queues, an empty skb while the
writer sleeps); from the wire these are one state, receive_window_limited,
whose time is therefore at least tcpi_rwnd_limited + tcpi_sndbuf_limited.

Streaming. The pass reads the capture in chunks of frames, carrying each
open flow's state in a slot (pools.py). An interval is decided when the
flow's next packet arrives, except for what only the future tells: whether
a sender with data in flight will send new data before, or only after, it
drains (the tail rule above). Such intervals wait in a per-direction list of
provisional runs (merged while their fallback state is the same, so the
list grows with state changes, not with packets) until the direction sends
new data, passes 1 ms after draining, or the flow ends.
"""

import numpy as np

from ...core.jit import PYTHON_COST, kernel, use_jit
from ...kernels.pools import FlowSlots, Pool
from ...kernels.wireshark import alloc, release
from ...store.arrow import among, chunk_reads, fetch_numpy as _numpy, numpy_table, values_at
from ...store.schema import STALL_STATES, STALLS
from ...store.writer import AppendWriter
from . import stalls_held, stalls_sql
from .stalls_sql import EPISODES_SQL, FLOWS_SQL, READ_SQL, RTO_SQL, WINDOWS_SQL

TABLES = ("stalls",)
READS = ("captures", "flows", "packets", "retransmissions", "rtt_summary", "tcp_analysis",
         "tcp_events")
SCOPE = "capture"  # built per capture (tracekit.pipeline.dag)
STATES = STALL_STATES
SOURCES = (stalls_held, stalls_sql)  # code whose change rebuilds the table
(HANDSHAKE, CLOSED, APP, RTO_WAIT, RECOVERY, ZERO_WINDOW, RWND, PACING, SLOW_START,
 CONGESTION) = range(10)
NEVER = np.iinfo(np.int64).max
OUT = ("flow", "client", "state", "busy", "start", "end", "duration", "packets", "max_inflight")
DRAIN_SLACK_NS = 1_000_000
PACING_GAP_NS = 1_000_000
CHUNK_FRAMES = 122_880

# per-slot state
(FLOW_ID, HAS_PREV, PREV_TS, PREV_OWN) = range(4)
# per slot and direction (row 2 * slot + d, d = 0 client's data, 1 server's)
(INFL, PEER_WIN, MSS, CUR_FLIGHT, CUR_BYTES, PREV_BYTES, PREV_GROWING, EP_NEXT,
 R_STATE, R_BUSY, R_START, R_END, R_DURATION, R_PACKETS, R_MAXINFL,
 P_HEAD, P_TAIL, P_UNDRAINED, HELD, DRAINED_AT, PEER_DATA) = range(21)
NSTATE = 21
# a pending run's kind (`tail`): decided, only waiting in line; data in flight (the tail rule);
# nothing in flight as the receiver sees it (at the receiver: the turnaround rule)
DECIDED, IN_FLIGHT, RECEIVER_EMPTY = range(3)
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
    turnaround longer, and new data after the receiver's own data answers it."""
    slack = DRAIN_SLACK_NS + lag
    q = st[k, P_HEAD]
    while q != -1:
        if tail[q] == DECIDED:  # it only waited in line
            state = fb[q]
        elif next_new == -1:  # time passed: only runs now known to be the tail
            if not (drain[q] != NEVER and upto_drain > drain[q] + slack):
                break
            state = APP
        elif next_new == NEVER or (drain[q] != NEVER and (
                next_new > drain[q] + slack or (lag > 0 and 0 < drain[q] <= st[k, PEER_DATA]))):
            state = APP
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
        st[k, EP_NEXT] = ep_ptr[2 * fid + d]


def _certain_state(k, fid, d, now, next_rto, ack_ts, fin_ts, rst_ts, ep_ptr, ep_start, ep_end,
                   st, rcv_side):
    """The states the interval from `now` has whatever comes next: handshake,
    closed, receive_window_limited at the receiver (held at the edge),
    application limited (nothing in flight), rto_wait, loss_recovery; -1 when
    none holds. Moves direction k past the loss episodes begun by now."""
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
    if payload[j] > 0:
        st[2 * fl + 1 - own_j, PEER_DATA] = now_j
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
        if st[k, INFL] > 0 and now_infl == 0:
            st[k, DRAINED_AT] = now_j
        st[k, INFL] = now_infl
    for d in range(2):
        k = 2 * fl + d
        if st[k, P_HEAD] != -1:
            if st[k, INFL] == 0:
                _drained(st, k, tail, drain, p_next, now_j)
            _resolve(st, k, pm, fb, tail, busy, start, end, duration, packets, max_inf,
                     drain, p_next, -1, now_j, rcv_side[fid, d], fs, fl, out, out_m)


@kernel(helpers=(alloc, release, _emit, _resolve, _pend, _drained, _open_slot, _certain_state,
                 _fallback, _packet))
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
                receiver_empty = state == APP and rcv_side[fid, d] > 0
                if state == -1 or receiver_empty:  # the tail (or turnaround) rule decides, else:
                    fallback = _fallback(k, fid, d, now, now_j - now, next_own and new_data[j],
                                         ep_ptr, ep_start, st, rcv_side)
                    kind, dr = ((RECEIVER_EMPTY, st[k, DRAINED_AT]) if receiver_empty
                                else (IN_FLIGHT, NEVER))
                    _pend(st, k, pm, fb, tail, busy, start, end, duration, packets, max_inf,
                          drain, p_next, fallback, kind, 1, now, now_j, infl, dr)
                    continue
                b = 1 if (infl > 0 and state != HANDSHAKE and state != CLOSED) else 0
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


@kernel(helpers=(alloc, release, _emit, _resolve))
def finish_flows(slots, fs, st, pm, fb, tail, busy, start, end, duration, packets, max_inf,
                 drain, p_next, out, out_m):
    """Flows that ended: decide their pending runs (no new data came) and write
    their open runs."""
    for i in range(len(slots)):
        fl = slots[i]
        for d in range(2):
            k = 2 * fl + d
            _resolve(st, k, pm, fb, tail, busy, start, end, duration, packets, max_inf, drain,
                     p_next, NEVER, 0, 0, fs, fl, out, out_m)
            _emit(st, k, -2, 0, 0, 0, 0, 0, 0, fs, fl, out, out_m)  # flush the open run
            st[k, R_STATE] = -1




def build(con, writer, capture_id, chunk_frames=CHUNK_FRAMES):
    """Write the `stalls` of one capture through `writer`; {table: rows}."""
    f = _numpy(con, FLOWS_SQL, {"capture_id": capture_id})
    nflows = int(f["flow_id"].max()) + 1 if len(f["flow_id"]) else 0
    fid = f["flow_id"].astype(np.int64)
    last = np.full(nflows, -1, np.int64)
    ack_ts = np.full(nflows, -1, np.int64)
    fin_ts = np.full((nflows, 2), NEVER, np.int64)
    rst_ts = np.full(nflows, NEVER, np.int64)
    last[fid], ack_ts[fid], fin_ts[fid, 0], fin_ts[fid, 1], rst_ts[fid] = (
        f["last_frame"], f["ack"], f["fin_c"], f["fin_s"], f["rst"])
    e = _numpy(con, EPISODES_SQL, {"capture_id": capture_id})
    keys = 2 * e["flow_id"].astype(np.int64) + np.where(e["d_client"].astype(bool), 0, 1)
    order = np.argsort(keys, kind="stable")
    ep_start = e["episode_start_ns"].astype(np.int64)[order]
    ep_end = e["episode_end_ns"].astype(np.int64)[order]
    ep_ptr = np.searchsorted(keys[order], np.arange(2 * nflows + 1)).astype(np.int64)
    rcv_side = stalls_held.receiver_side(con, capture_id, nflows)
    receiver = (rcv_side, stalls_held.held_frames(con, capture_id) if rcv_side.any()
                else np.zeros(0, np.int64))
    (frames,), = con.execute("SELECT packets FROM captures WHERE capture_id = ?",
                             [capture_id]).fetchall()
    jit = use_jit(min(frames, chunk_frames) * PYTHON_COST)
    slots = FlowSlots(last)
    fs = np.zeros((0, 4), np.int64)
    st = np.zeros((0, NSTATE), np.int64)
    pending = Pool(PENDING_FIELDS)
    rows = 0
    out_writer = AppendWriter(writer)
    out_writer.start()
    try:
        rows = _runs(con, out_writer, capture_id, chunk_frames, frames, jit, slots, fs, st, pending,
                     ack_ts, fin_ts, rst_ts, receiver, ep_ptr, ep_start, ep_end)
    finally:
        out_writer.finish()
    return {"stalls": rows}


def _runs(con, writer, capture_id, chunk_frames, frames, jit, slots, fs, st, pending, ack_ts,
          fin_ts, rst_ts, receiver, ep_ptr, ep_start, ep_end):
    rcv_side, held_frames = receiver
    rto_frames = _numpy(con, RTO_SQL, {"capture_id": capture_id})["frame"].astype(np.int64)
    rows = 0
    for hi, (p, w) in chunk_reads(con, capture_id, frames, chunk_frames, READ_SQL, WINDOWS_SQL):
        n = len(p["frame"])
        out = np.zeros((0, len(OUT)), np.int64)
        out_m = np.zeros(1, np.int64)
        if n:
            order = np.argsort(p["frame"], kind="stable")
            p = {k: v[order] for k, v in p.items()}
            flow = p["flow_id"].astype(np.int64)
            slot, first = slots.assign(flow)
            if len(fs) < slots.size:
                extra = max(slots.size, 2 * len(fs)) - len(fs)
                fs = np.concatenate([fs, np.zeros((extra, 4), np.int64)])
                grown = np.zeros((2 * extra, NSTATE), np.int64)
                grown[:, list(LISTS)] = -1
                st = np.concatenate([st, grown])
            pending.ensure(2 * n)
            out = np.zeros((4 * n + pending.live() + 8, len(OUT)), np.int64)
            frame = p["frame"].astype(np.int64)
            by_frame = np.argsort(w["frame"], kind="stable")
            window = values_at(w["frame"][by_frame], w["window"][by_frame], frame)
            held = among(held_frames, frame)
            limitation_runs(
                jit, p["ts_ns"].astype(np.int64), flow, slot, first,
                p["from_client"].astype(bool), p["new_data"].astype(bool), held,
                among(rto_frames, frame),
                p["payload_bytes"].astype(np.int64), p["inflight_bytes"].astype(np.int64),
                p["peer_inflight"].astype(np.int64), window,
                p["flight"].astype(np.int64), ack_ts, fin_ts, rst_ts, rcv_side, ep_ptr, ep_start,
                ep_end, fs, st, *pending.args(), out, out_m)
        ended = slots.release_through(hi - 1)
        out = _finish(jit, ended, fs, st, pending, out, out_m)
        rows += _write(writer, capture_id, out)
    rest = slots.slot_of[slots.active]
    out = _finish(jit, rest, fs, st, pending, np.zeros((0, len(OUT)), np.int64),
                  np.zeros(1, np.int64))
    rows += _write(writer, capture_id, out)
    return rows


def _finish(jit, ended, fs, st, pending, out, out_m):
    """`out[:out_m]` plus the runs of the flows in `ended`."""
    ended = np.asarray(ended, np.int64)
    if not len(ended):
        return out[:out_m[0]]
    room = np.zeros((4 * len(ended) + pending.live() + 8, len(OUT)), np.int64)
    room_m = np.zeros(1, np.int64)
    finish_flows(jit, ended, fs, st, *pending.args(), room, room_m)
    return np.concatenate([out[:out_m[0]], room[:room_m[0]]])


def _write(writer, capture_id, rows):
    m = len(rows)
    if not m:
        return 0
    o = {name: rows[:, col] for col, name in enumerate(OUT)}
    values = {
        "capture_id": (np.full(m, capture_id, np.int32), None),
        "flow_id": (o["flow"], None),
        "direction": (np.where(o["client"] != 0, 0, 1), None, ("c2s", "s2c")),
        "state": (o["state"], None, STATES),
        "start_ns": (o["start"], None),
        "end_ns": (o["end"], None),
        "duration_ns": (o["duration"], None),
        "busy": (o["busy"] != 0, None),
        "packets": (o["packets"], None),
        "max_inflight_bytes": (o["max_inflight"], None),
    }
    writer.put("stalls", numpy_table(STALLS, values))
    return m
