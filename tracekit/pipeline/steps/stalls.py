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
  at once when they open) -- unless a loss episode or a timeout began
  before it drained: then the sender waited for its loss to show
  (loss_recovery; a response's last flight with a drop in it read as the
  server idle at a server capture). Where the capture is at the receiver "nothing in
  flight" is only what has passed it (the next segments may be on their
  way), so both wait for the sender's next new data and the slack is a
  turnaround longer (the sender's leg, stalls_held.receiver_side): data that
  came sooner after the drain was sent before the sender saw the ACK that
  drained it -- the interval takes the state below (busy) -- unless it came
  a round trip or more after the receiver's first data since the drain (an
  answer to it). Before the sender's first payload nothing is read as on its
  way (tests/test_stalls_busy_receiver.py: the kernel's tcpi_busy_time;
  test_stalls_turnaround.py: each branch). Not seen from there: a tail
  segment lost before the receiver, whose sender waits busy for its timer;
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

`busy` marks time with data in flight at the sender (a run is split where it
changes; at the receiver, the time the turnaround rule or a held window gives it):
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
new data, passes 1 ms (at the receiver, 1 ms and a turnaround) after
draining, or the flow ends; at the receiver so do the intervals with
nothing in flight (stalls_pass.py).
"""

import numpy as np

from ...core.jit import PYTHON_COST, use_jit
from ...kernels.pools import FlowSlots, Pool
from ...store.arrow import among, chunk_reads, fetch_numpy as _numpy, numpy_table, values_at
from ...store.schema import STALL_STATES, STALLS
from ...store.writer import AppendWriter
from . import stalls_held, stalls_pass, stalls_sql
from .stalls_pass import LISTS, NEVER, NSTATE, OUT, PENDING_FIELDS, finish_flows, limitation_runs
from .stalls_sql import EPISODES_SQL, FLOWS_SQL, READ_SQL, RTO_SQL, WINDOWS_SQL

TABLES = ("stalls",)
READS = ("captures", "flows", "packets", "retransmissions", "rtt_summary", "tcp_analysis",
         "tcp_events")
SCOPE = "capture"  # built per capture (tracekit.pipeline.dag)
STATES = STALL_STATES
SOURCES = (stalls_held, stalls_pass, stalls_sql)  # code whose change rebuilds the table
CHUNK_FRAMES = 122_880





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
