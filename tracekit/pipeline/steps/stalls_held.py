"""Which new data segments the receiver's window held, read where the
capture is at the receiver (steps/stalls.py, receive_window_limited).

At the receiver the window a sender obeyed is not the latest one on the
wire: an ACK passing the capture point reaches the sender, and the data it
lets out comes back past the capture point, a turnaround later. The
turnaround is the least of two readings of the flow's own evidence: the
least round trip of the sender's leg (rtt_summary: its handshake, ACK or
timestamp samples), and the shortest time from the receiver's edge first
covering a new segment's end to that segment's arrival (a sender cannot
pass an edge it has not seen, so each such time is at least a turnaround;
a tight window's segments, sent as their ACK arrives, reach it -- and come
back sooner than a sample that includes the peer's ACK processing).

For each new data segment arriving at time t, the edge the sender could
have seen is the highest right edge (cumulative ACK + advertised window)
the receiver had sent by t - turnaround. The segment was sent at that edge
when it left room for less than one more segment (the receiver's MSS
option, else the largest payload) and did not pass it (a segment beyond it
shows the sender had seen a later edge: no evidence either way); the
sender was then held from t until its next new segment, provided that

- a next new segment came (else it had nothing more to send);
- the receiver sent no data in between (a new request: what follows
  answers it);
- it came within two turnarounds of the receiver's first ACK whose edge
  let it out (a held sender sends as soon as that ACK reaches it; later
  than one more turnaround it had nothing to send when the window opened).

Held segments are returned by frame; the pass (stalls.py) marks the
intervals from a held segment to the direction's next new segment.

Computed from one read of the flows' packets: each flow's running max of the
receiver's edge (frame order), kept per instant, and per new segment binary
searches in those by time (the edge seen a turnaround back) and by edge (the
first instant an edge covered a segment's end, or one segment more). A
compiled pass does it flow by flow (held_segments); a flow whose time goes
back between the receiver's edges (23 packets of the 2.9 M-packet mixed
capture, two flows) is done by the same rule as whole-array numpy
(held_of), which sorts. The numpy replaced staged SQL with ASOF joins (3.0
CPU s on that capture -> ~0.7; 17 -> 6 ms per small capture), kept as the
oracle of tests/test_stalls_held_pass.py, which both match frame for frame;
the compiled pass took the step's part from 0.80 to 0.63 s (main thread:
held_of 0.60-0.74 CPU s -> held_segments 0.11 and held_of 0.06 for the two
flows).
Checked against the sending kernel's tcpi_rwnd_limited on the lab's runs
(tests/test_stalls_receiver.py, docs/whatif.md).
"""

import numpy as np

from ...core.jit import PYTHON_COST, kernel, use_jit
from ...store.arrow import fetch_numpy, read_ahead, values_at

# Flow directions whose capture point is at the receiver (vantage `client`
# for the server's data, `server` for the client's), with their sender's
# leg: rtt_summary's row of the other direction measures it.
# (the handshake's time only where one SYN and one SYN-ACK make it one round
# trip: after a SYN's retransmission it may pair the SYN-ACK with the wrong one)
LEGS_CTE = """
WITH legs AS (
    SELECT * FROM (
        SELECT r.flow_id, r.direction = 's2c' AS client_data,
               least(r.min_rtt_ns, CASE WHEN f.syn_count = 1 AND f.synack_count = 1
                                        THEN r.handshake_rtt_ns END) AS lag_ns
        FROM rtt_summary r JOIN flows f ON f.capture_id = r.capture_id AND f.flow_id = r.flow_id
        WHERE r.capture_id = $capture_id
          AND r.vantage = CASE r.direction WHEN 's2c' THEN 'server' ELSE 'client' END)
    WHERE lag_ns > 0
)
"""

RECEIVER_SIDE_SQL = LEGS_CTE + "SELECT flow_id, client_data, lag_ns FROM legs"

# Those flow directions: their sender's leg, the receiver's MSS option (-1: none).
LEGS_SQL = LEGS_CTE + """
SELECT l.flow_id, l.lag_ns,
       coalesce(CASE WHEN l.client_data THEN f.server_mss ELSE f.client_mss END, -1) AS mss_option,
       f.packets_c2s + f.packets_s2c AS packets
FROM legs l JOIN flows f ON f.capture_id = $capture_id AND f.flow_id = l.flow_id
ORDER BY l.flow_id
"""
# Flows are read in groups of about this many packets (a larger flow alone):
# the arrays of a group, not of the capture, are in memory at once (mixed
# capture, 1.9 M packets in these flows: one group lifted analyze's peak RSS
# 811-819 -> 912 MB; groups of 2^19 cost the same CPU, 1.06 against 1.25 s).
GROUP_PACKETS = 1 << 19

# What the pass reads of their packets: the sender's new data, the receiver's
# data and its packets with an ACK number (in any order: sorted here) ...
# from `store.tcp_analysis`, every packet's dense columns: the view would join
# each to its event row (none of whose columns is read) and filter out captures
# still being analysed, and this capture's tcp_analysis is complete before the
# stalls step runs (the mixed capture, 2.3 M packets in these flows: 0.35-0.43 s
# of reads -> 0.25-0.26).
NEW, RECEIVER_DATA, RECEIVER_ACK, HAS_END = 1, 2, 4, 8
READ_SQL = LEGS_CTE + f"""
SELECT * FROM (
    SELECT t.flow_id, t.frame, t.ts_ns,
           CASE WHEN t.from_client = l.client_data AND t.segment = 'new'
                     AND t.payload_bytes > 0 THEN {NEW} ELSE 0 END
           + CASE WHEN t.from_client <> l.client_data AND t.payload_bytes > 0
                  THEN {RECEIVER_DATA} ELSE 0 END
           + CASE WHEN t.from_client <> l.client_data AND t.rel_ack IS NOT NULL
                  THEN {RECEIVER_ACK} ELSE 0 END
           + CASE WHEN t.rel_end IS NOT NULL THEN {HAS_END} ELSE 0 END AS kind,
           coalesce(t.payload_bytes, 0) AS payload_bytes, coalesce(t.rel_end, 0) AS rel_end,
           coalesce(t.rel_ack, 0) AS rel_ack
    FROM store.tcp_analysis t JOIN legs l USING (flow_id)
    WHERE t.capture_id = $capture_id AND t.flow_id BETWEEN $first AND $last)
WHERE kind & {NEW | RECEIVER_DATA | RECEIVER_ACK} <> 0
"""

# ... and, by frame, the window of each packet that ACKs (not a SYN; -1: none),
# read apart: joined by frame in the query, the read took 3x as long.
WINDOWS_SQL = LEGS_CTE + """
SELECT frame, coalesce(CASE WHEN tcp_flags & 18 = 16 THEN tcp_window_bytes END, -1) AS window
FROM packets WHERE capture_id = $capture_id AND flow_id BETWEEN $first AND $last
  AND flow_id IN (SELECT flow_id FROM legs)
ORDER BY frame
"""


def receiver_side(con, capture_id, nflows):
    """[flow, direction (0 the client's data, 1 the server's)] -> the sender's
    leg (ns, > 0) where the capture point is at that data's receiver, else 0."""
    out = np.zeros((nflows, 2), np.int64)
    r = fetch_numpy(con, RECEIVER_SIDE_SQL, {"capture_id": capture_id})
    if len(r["flow_id"]):
        out[r["flow_id"].astype(np.int64), np.where(r["client_data"].astype(bool), 0, 1)] = \
            r["lag_ns"].astype(np.int64)
    return out


def held_frames(con, capture_id):
    """Sorted frames of the new data segments the receiver's window held."""
    legs = fetch_numpy(con, LEGS_SQL, {"capture_id": capture_id})
    flows = legs["flow_id"].astype(np.int64)
    held = []
    spans = ({"capture_id": capture_id, "first": first, "last": last}
             for first, last in _groups(flows, legs["packets"].astype(np.int64)))
    for p, w in read_ahead(con, ([(READ_SQL, span), (WINDOWS_SQL, span)] for span in spans)):
        if not len(p["flow_id"]):
            continue
        order = np.lexsort((p["frame"], p["flow_id"]))  # (w: by frame)
        p = {k: v[order] for k, v in p.items()}
        frames = p["frame"].astype(np.int64)
        window = values_at(w["frame"], w["window"], frames)
        p["edge_sent"] = ((p["kind"] & RECEIVER_ACK) > 0) & (window >= 0)
        p["edge"] = p["rel_ack"].astype(np.int64) + window
        held.append(held_by_flow(legs, p))
    return np.sort(np.concatenate(held)) if held else np.zeros(0, np.int64)


def _groups(flows, packets):
    """(first, last) flow ids of consecutive flows of about GROUP_PACKETS packets."""
    out, start, total = [], 0, 0
    for i, n in enumerate(packets):
        if total and total + n > GROUP_PACKETS:
            out.append((int(flows[start]), int(flows[i - 1])))
            start, total = i, 0
        total += n
    if len(flows):
        out.append((int(flows[start]), int(flows[-1])))
    return out


def held_by_flow(legs, p):
    """held_of's frames, found by the compiled pass flow by flow (one walk over
    each flow's packets and binary searches in its edges); a flow whose
    receiver's time goes back between two of its edges is left to held_of,
    which sorts them."""
    g = np.searchsorted(legs["flow_id"].astype(np.int64), p["flow_id"].astype(np.int64))
    n = len(g)
    held = np.zeros(n, bool)
    unordered = np.zeros(len(legs["flow_id"]), bool)
    scratch = [np.empty(n, np.int64) for _ in range(4)]
    held_segments(use_jit(n * PYTHON_COST), g, p["ts_ns"].astype(np.int64),
                  p["kind"].astype(np.int64), np.asarray(p["edge_sent"], bool),
                  p["edge"].astype(np.int64), p["rel_end"].astype(np.int64),
                  p["payload_bytes"].astype(np.int64), legs["lag_ns"].astype(np.int64),
                  legs["mss_option"].astype(np.int64), *scratch, held, unordered)
    frames = p["frame"].astype(np.int64)[held]
    if unordered.any():
        rows = unordered[g]
        frames = np.concatenate([frames, held_of(legs, {k: v[rows] for k, v in p.items()})])
    return np.sort(frames)


def _first_at_least(values, lo, hi, v):
    """The first index in [lo, hi) of ascending `values` whose value >= v (hi: none)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if values[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _last_at_most(values, lo, hi, v):
    """The last index in [lo, hi) of ascending `values` whose value <= v (lo - 1: none)."""
    first = lo
    while lo < hi:
        mid = (lo + hi) // 2
        if values[mid] <= v:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1 if lo > first else first - 1


@kernel(helpers=(_first_at_least, _last_at_most))
def held_segments(g, ts, kind, edge_sent, edge, rel_end, payload, lag, option,
                  e_ts, e_edge, o_ts, o_edge, out_held, out_unordered):
    """held_of's rule, one flow at a time. Rows sorted by (flow, frame), `g` the
    flow's row in legs (lag, option: its turnaround and MSS option). The
    flow's receiver's edges go in e_ts/e_edge (the running max at each
    instant) and o_ts/o_edge (the first instant each edge was reached), at the
    flow's own rows of these scratch arrays. A flow whose edges' times go back
    is marked in out_unordered and left alone."""
    n = len(g)
    a = 0
    while a < n:
        f = g[a]
        b = a
        while b < n and g[b] == f:
            b += 1
        # the receiver's right edge, highest so far, at each instant it sent one
        ne = 0
        top = 0
        biggest = -1  # (and the data's full size: the largest new segment)
        ordered = True
        for k in range(a, b):
            if kind[k] & NEW:
                biggest = max(biggest, payload[k])
            if not edge_sent[k]:
                continue
            if ne == 0 or edge[k] > top:
                top = edge[k]
            if ne > 0 and ts[k] < e_ts[a + ne - 1]:
                ordered = False
                break
            if ne > 0 and ts[k] == e_ts[a + ne - 1]:
                e_edge[a + ne - 1] = top
            else:
                e_ts[a + ne] = ts[k]
                e_edge[a + ne] = top
                ne += 1
        if not ordered:
            out_unordered[f] = True
            a = b
            continue
        # the first instant each edge was reached (the edges only grow here)
        no = 0
        for k in range(a, a + ne):
            if no == 0 or e_edge[k] != o_edge[a + no - 1]:
                o_edge[a + no] = e_edge[k]
                o_ts[a + no] = e_ts[k]
                no += 1
        # the shortest time from an edge covering a segment's end to the segment
        if ne == 0 or biggest < 0:
            a = b
            continue
        mss = min(option[f], biggest) if option[f] >= 0 else biggest
        turn = lag[f]
        for k in range(a, b):
            if kind[k] & NEW and kind[k] & HAS_END:
                c = _first_at_least(o_edge, a, a + no, rel_end[k])
                if c < a + no and ts[k] > o_ts[c]:
                    turn = min(turn, ts[k] - o_ts[c])
        # each new segment against the next one of the flow
        prev = -1
        between = 0
        for k in range(a, b):
            if kind[k] & RECEIVER_DATA:
                between += 1
            if not kind[k] & NEW:
                continue
            i = prev
            prev = k
            if i < 0 or between > 0 or not kind[i] & HAS_END:
                between = 0
                continue
            between = 0
            s = _last_at_most(e_ts, a, a + ne, ts[i] - turn)
            if s < a or e_edge[s] < rel_end[i] or e_edge[s] - rel_end[i] >= mss:
                continue
            c = _first_at_least(o_edge, a, a + no, rel_end[i] + mss)
            if c < a + no and ts[k] <= o_ts[c] + 2 * turn:
                out_held[i] = True
        a = b


def held_of(legs, p):
    """held_frames of the flows `legs` (LEGS_SQL) and their packets `p` (READ_SQL's,
    in each flow's frame order, with the receiver's edges: edge_sent, edge)."""
    # a flow's row in legs (both ordered by flow)
    g = np.searchsorted(legs["flow_id"].astype(np.int64), p["flow_id"].astype(np.int64))
    ts = p["ts_ns"].astype(np.int64)
    kind = p["kind"].astype(np.int64)
    lag = legs["lag_ns"].astype(np.int64)
    # the receiver's right edge, highest so far (frame order), at each instant it sent one
    r = np.flatnonzero(p["edge_sent"])
    if not len(r):  # (no edge sent: nothing held at one)
        return np.zeros(0, np.int64)
    e_g, e_ts = g[r], ts[r]
    e_edge = _running_max(e_g, p["edge"].astype(np.int64)[r])
    # (time seldom goes back within a flow: then both orders below are frame order)
    in_order = _ordered(e_g, e_ts)
    if not in_order:
        order = np.lexsort((e_edge, e_ts, e_g))
        e_g, e_ts, e_edge = e_g[order], e_ts[order], e_edge[order]
    last = np.concatenate([(e_g[1:] != e_g[:-1]) | (e_ts[1:] != e_ts[:-1]), [True]])
    e_g, e_ts, e_edge = e_g[last], e_ts[last], e_edge[last]  # max edge per instant
    # the first instant each edge was reached
    o_g, o_edge, o_ts = e_g, e_edge, e_ts
    if not in_order:
        order = np.lexsort((e_ts, e_edge, e_g))
        o_g, o_edge, o_ts = e_g[order], e_edge[order], e_ts[order]
    first = np.concatenate([[True], (o_g[1:] != o_g[:-1]) | (o_edge[1:] != o_edge[:-1])])
    o_g, o_edge, o_ts = o_g[first], o_edge[first], o_ts[first]
    # the new data segments, with the next one's time and the receiver's data between
    nd = np.flatnonzero(kind & NEW)
    if not len(nd):
        return np.zeros(0, np.int64)
    rdata = np.cumsum((kind & RECEIVER_DATA) > 0)
    n_g, n_ts, n_end = g[nd], ts[nd], p["rel_end"].astype(np.int64)[nd]
    has_end = (kind[nd] & HAS_END) > 0
    payload = p["payload_bytes"].astype(np.int64)[nd]
    same = np.concatenate([n_g[1:] == n_g[:-1], [False]])
    nxt = np.minimum(np.arange(len(nd)) + 1, len(nd) - 1)
    next_ts, between = n_ts[nxt], rdata[nd[nxt]] - rdata[nd]
    # the data's full size: the receiver's MSS option, else the largest payload
    biggest = np.full(len(lag), -1, np.int64)
    np.maximum.at(biggest, n_g, payload)
    option = legs["mss_option"].astype(np.int64)
    mss = np.where(option >= 0, np.minimum(option, biggest), biggest)[n_g]
    # when the receiver's edge first let each segment out; the shortest turnaround
    cov, cov_ok = _at_least(o_g, o_edge, n_g, n_end)
    cover_ts = o_ts[cov]
    early = cov_ok & has_end & (n_ts > cover_ts)
    turn = np.full(len(lag), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(turn, n_g[early], (n_ts - cover_ts)[early])
    rt = np.minimum(lag, turn)[n_g]
    # the edge seen one turnaround earlier; the first ACK to let out one segment more
    seen, seen_ok = _at_most(e_g, e_ts, n_g, n_ts - rt)
    seen_edge = e_edge[seen]
    opened, opened_ok = _at_least(o_g, o_edge, n_g, n_end + mss)
    held = (seen_ok & opened_ok & has_end & (seen_edge >= n_end) & (seen_edge - n_end < mss)
            & same & (between == 0) & (next_ts <= o_ts[opened] + 2 * rt))
    return np.sort(p["frame"].astype(np.int64)[nd[held]])


def _ordered(groups, values):
    """Whether `values` never decrease within each run of equal (ascending) `groups`."""
    return bool(np.all((groups[1:] != groups[:-1]) | (values[1:] >= values[:-1])))


def _running_max(groups, values):
    """The running max of `values` within each run of equal (ascending) `groups`."""
    out = values.copy()
    for a, b in _runs(groups):
        np.maximum.accumulate(out[a:b], out=out[a:b])
    return out


def _runs(groups):
    """(begin, end) of each run of equal values in `groups`."""
    starts = np.flatnonzero(np.concatenate([[True], groups[1:] != groups[:-1]]))
    bounds = np.append(starts, len(groups))
    return zip(bounds[:-1], bounds[1:])


def _search(t_g, t_v, q_g, q_v, side):
    """Per query, searchsorted(`side`) of q_v among the t_v of its group q_g
    (t sorted by (group, value), q by group), as an index into t; with the
    first and past-last rows of the query's group."""
    bounds = np.searchsorted(t_g, np.arange(max(t_g.max(initial=0), q_g.max()) + 2))
    lo, hi = bounds[q_g], bounds[q_g + 1]
    if not len(t_g):
        return lo, lo, hi
    least = int(min(t_v.min(), q_v.min()))
    span = int(max(t_v.max(), q_v.max())) - least + 1
    if (int(max(t_g.max(), q_g.max())) + 1) * span < 1 << 62:  # one search, on (group, value)
        return np.searchsorted(t_g * span + (t_v - least), q_g * span + (q_v - least),
                               side), lo, hi
    out = np.empty(len(q_g), np.int64)
    for a, b in _runs(q_g):
        out[a:b] = lo[a] + np.searchsorted(t_v[lo[a]:hi[a]], q_v[a:b], side)
    return out, lo, hi


def _at_least(t_g, t_v, q_g, q_v):
    """The row of the least t_v >= q_v in the query's group, and whether there is one."""
    i, lo, hi = _search(t_g, t_v, q_g, q_v, "left")
    ok = i < hi
    return np.where(ok, i, 0), ok


def _at_most(t_g, t_v, q_g, q_v):
    """The row of the greatest t_v <= q_v in the query's group, and whether there is one."""
    i, lo, hi = _search(t_g, t_v, q_g, q_v, "right")
    ok = i > lo
    return np.where(ok, i - 1, 0), ok
