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
- application_limited: nothing in flight, the sender had nothing to send
  (RFC 4898 SndLimTimeSnd); also the tail: data in flight, but no new data
  sent until 1 ms after it drained (a sender held back by its windows sends
  at once when they open);
- rto_wait: in flight, and the next packet this direction sends is a
  retransmission by timeout (segments.py): the sender waits for its timer;
- loss_recovery: inside a recovery episode (retransmissions.sql);
- zero_window: the receiver advertises a zero window;
- receive_window_limited: in flight + 1 MSS exceeds the receiver's window
  (TCP_CHRONO_RWND_LIMITED, SndLimTimeRwin);
- pacing_idle: the sender's next packet is new data after a gap >= 1 ms with
  no packet from the peer in between: it held back by itself;
- slow_start: congestion limited (below) during a flight that grew >= 1.5x
  over the previous one (flights.sql), before the first loss episode;
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
"""

import numpy as np

from ..jit import PYTHON_COST, kernel, use_jit
from ..store.arrow import numpy_table
from ..store.schema import STALLS

STATES = ("handshake", "closed", "application_limited", "rto_wait", "loss_recovery",
          "zero_window", "receive_window_limited", "pacing_idle", "slow_start",
          "congestion_limited")
(HANDSHAKE, CLOSED, APP, RTO_WAIT, RECOVERY, ZERO_WINDOW, RWND, PACING, SLOW_START,
 CONGESTION) = range(10)
NEVER = np.iinfo(np.int64).max
OUT = ("flow", "client", "state", "busy", "start", "end", "duration", "packets", "max_inflight")
FLOW, CLIENT, STATE, BUSY, START, END, DURATION, PACKETS, MAX_INFLIGHT = range(len(OUT))
DRAIN_SLACK_NS = 1_000_000
PACING_GAP_NS = 1_000_000

READ_SQL = """
SELECT t.frame, t.ts_ns, t.flow_id, t.from_client,
       coalesce(t.segment = 'new' AND t.payload_bytes > 0, false) AS new_data,
       coalesce(t.retransmission_trigger = 'rto', false) AS rto,
       t.payload_bytes, t.inflight_bytes, coalesce(t.peer_inflight_bytes, 0) AS peer_inflight,
       CASE WHEN p.tcp_flags & 16 = 16 THEN coalesce(p.tcp_window_bytes, -1) ELSE -1 END AS window,
       coalesce(g.growth >= 1.5, false) AS growing
FROM tcp_analysis t
JOIN packets p USING (capture_id, frame)
LEFT JOIN flights g ON g.capture_id = t.capture_id AND g.flow_id = t.flow_id
     AND g.direction = CASE WHEN t.from_client THEN 'c2s' ELSE 's2c' END AND g.flight = t.flight
WHERE t.capture_id = $capture_id
ORDER BY t.frame
"""

EPISODES_SQL = """
SELECT DISTINCT flow_id, direction = 'c2s' AS d_client, episode_start_ns,
       coalesce(episode_end_ns, 9223372036854775807) AS episode_end_ns
FROM retransmissions WHERE capture_id = $capture_id AND kind = 'retransmission'
ORDER BY flow_id, d_client DESC, episode_start_ns
"""

FLOWS_SQL = """
SELECT flow_id, coalesce(ack_ts_ns, -1) AS ack, coalesce(fin_c2s_ts_ns, 9223372036854775807) AS fin_c,
       coalesce(fin_s2c_ts_ns, 9223372036854775807) AS fin_s,
       coalesce(rst_ts_ns, 9223372036854775807) AS rst
FROM flows WHERE capture_id = $capture_id AND protocol = 'tcp'
"""


@kernel
def limitation_runs(ts, flow, from_client, new_data, rto, payload, inflight, peer_inflight,
                    window, growing, nflows, ack_ts, fin_ts, rst_ts, ep_ptr, ep_start, ep_end,
                    out):
    """Write runs as rows of `out` (columns OUT); return how many."""
    n = len(ts)
    # backward pass: for each packet, what comes next in its flow
    next_i = np.full(n, -1, np.int64)
    next_new = np.full((n, 2), NEVER, np.int64)  # next new-data send per direction (0 client)
    next_drain = np.full((n, 2), NEVER, np.int64)  # next time that direction had 0 in flight
    last_i = np.full(nflows, -1, np.int64)
    nn = np.full((nflows, 2), NEVER, np.int64)
    nd = np.full((nflows, 2), NEVER, np.int64)
    for i in range(n - 1, -1, -1):
        fl = flow[i]
        next_i[i] = last_i[fl]
        for d in range(2):
            next_new[i, d] = nn[fl, d]
            next_drain[i, d] = nd[fl, d]
        last_i[fl] = i
        own = 0 if from_client[i] else 1
        if new_data[i]:
            nn[fl, own] = ts[i]
        if inflight[i] == 0:
            nd[fl, own] = ts[i]
        if peer_inflight[i] == 0:
            nd[fl, 1 - own] = ts[i]
    # forward pass: the state after each packet, per direction; runs merged
    peer_win = np.full((nflows, 2), -1, np.int64)  # the receiver's window for data of d
    mss = np.zeros((nflows, 2), np.int64)
    growth = np.zeros((nflows, 2), np.bool_)
    first_loss = np.full((nflows, 2), NEVER, np.int64)
    ep_next = np.zeros((nflows, 2), np.int64)  # next episode index to consider
    run = np.zeros((2 * nflows, len(OUT)), np.int64)  # the open run of each (flow, d)
    run[:, STATE] = -1
    for fl in range(nflows):
        for d in range(2):
            k = 2 * fl + d
            ep_next[fl, d] = ep_ptr[k]
            if ep_ptr[k] < ep_ptr[k + 1]:
                first_loss[fl, d] = ep_start[ep_ptr[k]]
    m = 0
    for i in range(n):
        fl = flow[i]
        own = 0 if from_client[i] else 1
        if window[i] >= 0:
            peer_win[fl, 1 - own] = window[i]  # this side's window bounds the other's data
        if payload[i] > mss[fl, own]:
            mss[fl, own] = payload[i]
        if new_data[i]:
            growth[fl, own] = growing[i]
        j = next_i[i]
        if j < 0:
            continue
        now = ts[i]
        for d in range(2):
            infl = inflight[i] if d == own else peer_inflight[i]
            k = 2 * fl + d
            # the latest episode of d that started at or before now
            e = ep_next[fl, d]
            while e < ep_ptr[k + 1] and ep_start[e] <= now:
                e += 1
            ep_next[fl, d] = e
            recovering = e > ep_ptr[k] and ep_end[e - 1] > now
            next_own = (0 if from_client[j] else 1) == d
            fin = fin_ts[fl, d]
            if ack_ts[fl] >= 0 and now < ack_ts[fl]:
                state = HANDSHAKE
            elif now >= rst_ts[fl] or (now >= fin and infl == 0):
                state = CLOSED
            elif infl == 0:
                state = APP
            elif next_own and rto[j]:
                state = RTO_WAIT
            elif recovering:
                state = RECOVERY
            elif next_new[i, d] == NEVER or (next_drain[i, d] != NEVER
                                             and next_new[i, d] > next_drain[i, d] + DRAIN_SLACK_NS):
                state = APP
            elif peer_win[fl, d] == 0:
                state = ZERO_WINDOW
            elif peer_win[fl, d] >= 0 and infl + mss[fl, d] > peer_win[fl, d]:
                state = RWND
            elif next_own and new_data[j] and ts[j] - now >= PACING_GAP_NS:
                state = PACING
            elif growth[fl, d] and now < first_loss[fl, d]:
                state = SLOW_START
            else:
                state = CONGESTION
            busy = infl > 0 and state != HANDSHAKE and state != CLOSED
            r = run[k]
            if r[STATE] != state or r[BUSY] != busy:
                if r[STATE] >= 0:
                    out[m] = r
                    m += 1
                r[FLOW] = fl
                r[CLIENT] = d == 0
                r[STATE] = state
                r[BUSY] = busy
                r[START] = now
                r[DURATION] = 0
                r[PACKETS] = 0
                r[MAX_INFLIGHT] = 0
            r[END] = ts[j]
            r[DURATION] += ts[j] - now
            r[PACKETS] += 1
            if infl > r[MAX_INFLIGHT]:
                r[MAX_INFLIGHT] = infl
    for k in range(2 * nflows):
        if run[k, STATE] >= 0:
            out[m] = run[k]
            m += 1
    return m


def build(con, capture_id):
    p = {k: np.asarray(v) for k, v in
         con.execute(READ_SQL, {"capture_id": capture_id}).fetchnumpy().items()}
    n = len(p["frame"])
    f = {k: np.asarray(v).astype(np.int64) for k, v in
         con.execute(FLOWS_SQL, {"capture_id": capture_id}).fetchnumpy().items()}
    nflows = int(p["flow_id"].max()) + 1 if n else 0
    ack_ts = np.full(nflows, -1, np.int64)
    fin_ts = np.full((nflows, 2), NEVER, np.int64)
    rst_ts = np.full(nflows, NEVER, np.int64)
    ok = f["flow_id"] < nflows
    fid = f["flow_id"][ok]
    ack_ts[fid], fin_ts[fid, 0], fin_ts[fid, 1], rst_ts[fid] = (
        f["ack"][ok], f["fin_c"][ok], f["fin_s"][ok], f["rst"][ok])
    e = {k: np.asarray(v) for k, v in
         con.execute(EPISODES_SQL, {"capture_id": capture_id}).fetchnumpy().items()}
    keys = 2 * e["flow_id"].astype(np.int64) + np.where(e["d_client"].astype(bool), 0, 1)
    order = np.argsort(keys, kind="stable")
    ep_start = e["episode_start_ns"].astype(np.int64)[order]
    ep_end = e["episode_end_ns"].astype(np.int64)[order]
    ep_ptr = np.searchsorted(keys[order], np.arange(2 * nflows + 1)).astype(np.int64)
    rows = np.zeros((2 * n + 2 * nflows + 1, len(OUT)), np.int64)
    m = limitation_runs(
        use_jit(n * PYTHON_COST), p["ts_ns"].astype(np.int64), p["flow_id"].astype(np.int64),
        p["from_client"].astype(bool), p["new_data"].astype(bool), p["rto"].astype(bool),
        p["payload_bytes"].astype(np.int64), p["inflight_bytes"].astype(np.int64),
        p["peer_inflight"].astype(np.int64), p["window"].astype(np.int64),
        p["growing"].astype(bool), nflows, ack_ts, fin_ts, rst_ts, ep_ptr, ep_start, ep_end,
        rows)
    o = {name: rows[:m, col] for col, name in enumerate(OUT)}
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
    return numpy_table(STALLS, values)
