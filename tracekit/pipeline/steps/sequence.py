"""Build `tcp_analysis` and `flights` for one capture: two readings of every TCP packet.

Strategy: the capture's TCP packets are read in chunks of frames (a frame
range at a time, so DuckDB's zone maps skip everything else and memory stays
bounded whatever the capture's size); the kernel of wireshark.py
(Wireshark's verdicts, for comparison) and then the kernel of segments.py
(tracekit's own, which the analyses use) run over each chunk, compiled when
the capture is large, with their state carried from chunk to chunk in flow
slots and pools (pools.py). Each chunk's rows go to a writer thread
(store/writer.py) that appends them while the kernels run over the next
chunk, so the two cores overlap. Verdicts found later about an earlier chunk's packet (a spurious
retransmission proven by a later D-SACK, the ACK that ended a recovery) are
applied as updates at the end.

`tcp_analysis` is written in two parts: every packet's dense columns
(`store.tcp_analysis`) and, for the few packets with an event (a Wireshark
flag, a retransmission's trigger, recovery and verdicts...), the event
columns (`tcp_events`, schema.EVENT_COLUMNS); the view `tcp_analysis` joins
them back. The sparse columns no longer cost an append of every packet.
Narrower was measured and not taken (#31, mixed capture, step 5.8 CPU s,
benchmarks/tcp_analysis_step.py): leaving out the 5 columns that copy
`packets` saves 0.5 s, the 7 ACK facts (set on 45 % of packets) 1.0 s
before writing them elsewhere (0.45 s), but a view that joins `packets`
and those facts back costs 0.35-0.5 s on every full read of it, and
analyze reads it many times.
"""

import numpy as np
import pyarrow as pa

from ...core.jit import PYTHON_COST, use_jit
from ...kernels import segments as sg
from ...kernels import wireshark as ws
from ...kernels.pools import FlowSlots, Pool
from ...store.arrow import frame_rows, numpy_array, numpy_table
from ...store.schema import EVENT_COLUMNS, EXCHANGES, FLIGHTS, TCP_ANALYSIS, TCP_EVENTS
from ...store.writer import AppendWriter

SOURCES = (ws, sg)  # code whose change rebuilds the table
DUPTHRESH = 3
RTO_MIN_NS = 200_000_000  # Linux's TCP_RTO_MIN
REORDER_WINDOW_NS = 3_000_000
CHUNK_FRAMES = 122_880  # a DuckDB row group
TH_ACK = 0x10
M32 = 0xFFFFFFFF
NONE = np.iinfo(np.int64).min  # "no value" where any int64 is a value
# what store.tcp_analysis holds of every packet (the rest: tcp_events, packets with an event)
DENSE = tuple(c for c in TCP_ANALYSIS if c.name not in EVENT_COLUMNS)

# TCP packets that carry a full header and belong to a flow, one frame range
TCP_PACKETS = """
FROM packets
WHERE capture_id = $capture_id AND frame >= $lo AND frame < $hi
  AND protocol = 6 AND flow_id IS NOT NULL AND tcp_flags IS NOT NULL"""
PACKETS_SQL = """
SELECT frame, ts_ns, flow_id, from_client, tcp_seq, tcp_ack, tcp_flags,
       payload_bytes, tcp_window, tcp_window_shift, coalesce(tcp_window_bytes, -1) AS window_bytes,
       coalesce(tcp_tsval, -1) AS tsval, coalesce(tcp_tsecr, -1) AS tsecr,
       coalesce(ip_id, -1) AS ip_id""" + TCP_PACKETS
# their SACK edges, read apart: only the few packets with SACK blocks (a list
# read of every packet cost half of the read: 0.4 of 0.8 CPU s on 2.9 M packets)
SACK_SQL = """
SELECT frame, coalesce(len(tcp_sack_left), 0) AS sack_n,
       coalesce(tcp_sack_left[1], 0) AS sl1, coalesce(tcp_sack_left[2], 0) AS sl2,
       coalesce(tcp_sack_left[3], 0) AS sl3, coalesce(tcp_sack_left[4], 0) AS sl4,
       coalesce(tcp_sack_right[1], 0) AS sr1, coalesce(tcp_sack_right[2], 0) AS sr2,
       coalesce(tcp_sack_right[3], 0) AS sr3, coalesce(tcp_sack_right[4], 0) AS sr4""" + TCP_PACKETS + """
  AND (tcp_sack_left IS NOT NULL OR tcp_sack_right IS NOT NULL)
"""

FLOWS_SQL = """
SELECT flow_id, last_frame FROM flows WHERE capture_id = $capture_id AND protocol = 'tcp'
"""

FRAMES_SQL = "SELECT packets FROM captures WHERE capture_id = $capture_id"


def read_chunk(con, capture_id, lo, hi):
    """The TCP packets of frames [lo, hi) as int64 numpy columns in frame order
    (SACK edges as (n, 4), up to the 4 blocks a TCP header holds; 0 where a
    packet has fewer: `sack_n` says how many). Read with fetchnumpy: pyarrow's
    to_numpy() imports pandas (half a second)."""
    args = {"capture_id": capture_id, "lo": lo, "hi": hi}
    cols = con.execute(PACKETS_SQL, args).fetchnumpy()
    frame = np.asarray(cols["frame"])
    order = None
    if len(frame) > 1 and (np.diff(frame) < 0).any():
        order = np.argsort(frame, kind="stable")
    out = {}
    for name, col in cols.items():
        col = np.asarray(col).astype(bool if name == "from_client" else np.int64, copy=False)
        out[name] = col if order is None else col[order]
    n = len(frame)
    out["sack_n"] = np.zeros(n, np.int64)
    out["sack_l"] = np.zeros((n, 4), np.int64)
    out["sack_r"] = np.zeros((n, 4), np.int64)
    sack = con.execute(SACK_SQL, args).fetchnumpy()
    if len(sack["frame"]):  # (frames are unique in a capture: each is found)
        at, _ = frame_rows(out["frame"], sack["frame"])
        out["sack_n"][at] = sack["sack_n"]
        for k in range(4):
            out["sack_l"][at, k] = sack[f"sl{k + 1}"]
            out["sack_r"][at, k] = sack[f"sr{k + 1}"]
    return out


def relative_sack(p, w):
    """SACK edges in the acknowledged side's relative (64-bit) sequence space:
    each edge is the number nearest to the packet's relative ACK with the
    edge's low 32 bits (RFC 1982), so blocks that straddle 2^32 stay whole.
    Only packets with SACK blocks (the kernels read no others' edges)."""
    rows = np.flatnonzero(p["sack_n"])
    ack32 = p["tcp_ack"][rows, None] & M32
    rel_ack = w["rel_ack"][rows, None]
    out = []
    for raw in (p["sack_l"], p["sack_r"]):
        d = (raw[rows] - ack32) & M32
        edges = np.zeros_like(raw)
        edges[rows] = rel_ack + np.where(d >= 1 << 31, d - (1 << 32), d)
        out.append(edges)
    return out


class CaptureState:
    """Everything the kernels carry from one chunk of a capture to the next."""

    def __init__(self, flow_last_frame, jit):
        self.jit = jit
        self.slots = FlowSlots(flow_last_frame)
        self.ws_st = np.zeros((0, ws.NSTATE), np.int64)
        self.ws_fs = np.zeros((0, 2), np.int64)
        self.ws_pool = Pool(("seq", "next_seq", "frame", "ts"))
        self.sg_st = np.zeros((0, sg.NSTATE), np.int64)
        self.sg_pools = {
            "hole": Pool(sg.HOLE_FIELDS), "sent": Pool(sg.SENT_FIELDS),
            "tsval": Pool(sg.TSVAL_FIELDS), "retx": Pool(sg.RETX_FIELDS),
            "rq": Pool(sg.RQ_FIELDS)}
        self.rows = 0  # rows of the capture done so far
        self.late = []  # (frame, kind, value) arrays to apply at the end

    def grow(self, n_packets):
        """Room for the slots and the pool entries of a chunk of n packets."""
        need = self.slots.size
        if len(self.ws_fs) < need:
            extra = max(need, 2 * len(self.ws_fs)) - len(self.ws_fs)
            self.ws_st = np.concatenate([self.ws_st, _empty(2 * extra, ws.NSTATE, ws.LISTS)])
            self.ws_fs = np.concatenate([self.ws_fs, np.zeros((extra, 2), np.int64)])
            self.sg_st = np.concatenate([self.sg_st, _empty(2 * extra, sg.NSTATE, sg.LISTS)])
        self.ws_pool.ensure(n_packets)
        for pool in self.sg_pools.values():
            pool.ensure(n_packets)

    def nbytes(self):
        return (self.ws_st.nbytes + self.ws_fs.nbytes + self.sg_st.nbytes + self.ws_pool.nbytes()
                + sum(p.nbytes() for p in self.sg_pools.values()))


def _empty(rows, columns, lists):
    """State rows of slots never used: their lists (the `lists` columns) empty."""
    st = np.zeros((rows, columns), np.int64)
    st[:, list(lists)] = -1
    return st


def wireshark_chunk(state, p, slot, first):
    """Run the Wireshark state machine over one chunk; dict of outputs."""
    n = len(p["frame"])
    out = {"ws_flags": np.zeros(n, np.int64)}
    for name in ("bif", "acks_frame", "ack_rtt", "dupack_num", "dupack_frame", "rto", "rto_frame",
                 "rel_seq", "rel_ack"):
        out[name] = np.full(n, -1, np.int64)
    ws.analyze(state.jit, p["frame"], p["ts_ns"], slot, first, p["from_client"],
               p["tcp_seq"], p["tcp_ack"], p["tcp_flags"], p["payload_bytes"], p["tcp_window"],
               p["tcp_window_shift"], p["sack_n"], p["sack_l"], p["sack_r"], state.ws_st,
               state.ws_fs, *state.ws_pool.args(), out["ws_flags"], out["bif"],
               out["acks_frame"], out["ack_rtt"], out["dupack_num"], out["dupack_frame"],
               out["rto"], out["rto_frame"], out["rel_seq"], out["rel_ack"])
    return out


def copies(p, rto_min_ns):
    """Which packets of the chunk copy an earlier one of their flow and direction:
    the same seq, ACK, length, flags, IP id and TSval, at the same instant, or
    with a non-zero IP id sooner than any retransmission timer. A capture (or
    the network) duplicated them, or the capture saw them twice one hop apart
    (TTL one lower, other packets between). The chunk is sorted by a 64-bit
    hash of those fields (frame order within a hash), and each packet held
    against the one before it in that order, field by field -- only where
    the two hashes are equal (packets with equal fields have equal hashes),
    so the fields are gathered for the few candidates, not the chunk."""
    fields = [p["flow_id"], p["from_client"], p["tcp_seq"], p["tcp_ack"], p["tcp_flags"],
              p["payload_bytes"], p["ip_id"], p["tsval"]]
    n = len(p["frame"])
    h = np.zeros(n, np.uint64)
    with np.errstate(over="ignore"):
        for x in fields:
            x = np.asarray(x)
            h ^= x.view(np.uint64) if x.dtype == np.int64 else x.astype(np.uint64)
            h *= np.uint64(0x9E3779B97F4A7C15)
            h ^= h >> np.uint64(29)
    order = _stable_argsort(h)
    hs = h[order]
    cand = np.flatnonzero(hs[1:] == hs[:-1])  # pairs (order[k], order[k + 1])
    out = np.zeros(n, bool)
    if not len(cand):
        return out
    a, b = order[cand], order[cand + 1]
    same = np.ones(len(cand), bool)
    for x in fields:
        x = np.asarray(x)
        same &= x[a] == x[b]
    dt = p["ts_ns"][b] - p["ts_ns"][a]
    ipid = np.asarray(p["ip_id"])[b]
    out[b[same & ((dt == 0) | ((ipid > 0) & (dt < rto_min_ns)))]] = True
    return out


def _stable_argsort(h):
    """np.argsort(h, kind="stable") of uint64 keys: numpy's default sort (much
    faster on 64-bit keys) and then, within each run of equal keys (copies,
    collisions: few), the positions put back in ascending order."""
    order = np.argsort(h)
    hs = h[order]
    tie = hs[1:] == hs[:-1]
    if tie.any():
        idx = np.flatnonzero(np.concatenate(([False], tie)) | np.concatenate((tie, [False])))
        order[idx] = order[idx][np.lexsort((order[idx], hs[idx]))]
    return order


def tracekit_chunk(state, p, w, slot, first, params):
    """Run segments.classify over one chunk; (dict of outputs, flight rows, exchange rows)."""
    n = len(p["frame"])
    sack_l, sack_r = relative_sack(p, w)
    out = {}
    for name in ("seg_class", "gap_bytes", "trigger", "spurious", "inflight", "dsack", "flight"):
        out[name] = np.zeros(n, np.int64)
    for name in ("silence", "peer_dupacks", "peer_inflight", "acked", "rtt", "ts_rtt",
                 "acked_segments", "ack_delay", "window_full"):
        out[name] = np.full(n, -1, np.int64)
    for name in ("ack_gap", "recovery_point", "hole_opened", "recovered"):  # may be < 0
        out[name] = np.full(n, NONE, np.int64)
    late = np.zeros((2 * n + 1, 3), np.int64)
    late_m = np.zeros(1, np.int64)
    fo = np.zeros((n + 1, len(sg.FLIGHT_OUT)), np.int64)
    fo_m = np.zeros(1, np.int64)
    xo = np.zeros((n + 1, len(sg.EXCHANGE_OUT)), np.int64)
    xo_m = np.zeros(1, np.int64)
    pools = state.sg_pools
    sg.classify(state.jit, state.rows, p["frame"], p["ts_ns"], p["flow_id"], slot, first,
                p["from_client"], w["rel_seq"], w["rel_ack"], p["tcp_flags"],
                p["payload_bytes"], p["tsval"], p["tsecr"], copies(p, params["rto_min_ns"]),
                p["window_bytes"],
                w["ws_flags"], p["sack_n"], sack_l, sack_r, params["dupthresh"],
                params["rto_min_ns"], params["reorder_window_ns"], state.sg_st,
                *pools["hole"].args(), *pools["sent"].args(), *pools["tsval"].args(),
                *pools["retx"].args(), *pools["rq"].args(), late, late_m, fo, fo_m, xo, xo_m,
                out["seg_class"], out["gap_bytes"], out["trigger"], out["silence"],
                out["peer_dupacks"], out["spurious"], out["inflight"], out["peer_inflight"],
                out["acked"], out["rtt"], out["ts_rtt"], out["dsack"], out["flight"],
                out["acked_segments"], out["ack_delay"], out["ack_gap"], out["window_full"],
                out["recovery_point"], out["hole_opened"], out["recovered"])
    if late_m[0]:
        state.late.append(late[:late_m[0]].copy())
    return out, fo[:fo_m[0]], xo[:xo_m[0]]


def tcp_analysis_tables(capture_id, p, w, t):
    """The `tcp_analysis` rows of one chunk as two Arrow tables: every packet's
    dense columns (store.tcp_analysis) and the event columns of the packets
    that have one, a flag set or a value (tcp_events): the view `tcp_analysis`
    joins them, a packet without an event row reading false and NULL there."""
    values = tcp_analysis_values(capture_id, p, w, t)
    event = np.zeros(len(p["frame"]), bool)
    for name in EVENT_COLUMNS:
        v = values[name]
        event |= v[0] >= 0 if len(v) == 3 else (v[0] != 0) if v[1] is None else ~v[1]
    rows = np.flatnonzero(event)
    sparse = {k: (v[0][rows], None if v[1] is None else v[1][rows], *v[2:])
              for k, v in values.items() if k in EVENT_COLUMNS or k in ("capture_id", "frame")}
    return numpy_table(DENSE, values), numpy_table(TCP_EVENTS, sparse)


def tcp_analysis_values(capture_id, p, w, t):
    """The `tcp_analysis` columns of one chunk: {name: (values, null mask[, names])}."""
    n = len(p["frame"])
    flags = w["ws_flags"]
    retrans = ws.RETRANSMISSION | ws.FAST_RETRANSMISSION | ws.SPURIOUS_RETRANSMISSION

    def bit(mask):
        return ((flags & mask) != 0, None)

    def opt(name, src=w):
        return (src[name], src[name] < 0)

    values = {
        "capture_id": (np.full(n, capture_id, np.int32), None),
        "frame": (p["frame"], None),
        "flow_id": (p["flow_id"], None),
        "from_client": (p["from_client"], None),
        "ts_ns": (p["ts_ns"], None),
        "rel_seq": (w["rel_seq"], None),
        "rel_ack": (w["rel_ack"], (p["tcp_flags"] & TH_ACK) == 0),
        "payload_bytes": (p["payload_bytes"].astype(np.int32), None),
        "rel_end": (w["rel_seq"] + p["payload_bytes"] + ((p["tcp_flags"] & 0x03) != 0), None),
        "ws_retransmission": bit(retrans),
        "ws_duplicate_ack_num": (w["dupack_num"].astype(np.int32), w["dupack_num"] < 0),
        "ws_duplicate_ack_frame": opt("dupack_frame"),
        "ws_bytes_in_flight": opt("bif"),
        "ws_acks_frame": opt("acks_frame"),
        "ws_ack_rtt_ns": opt("ack_rtt"),
        "ws_rto_ns": opt("rto"),
        "ws_rto_frame": opt("rto_frame"),
    }
    for mask, name in ws.FLAG_NAMES.items():
        if mask != ws.RETRANSMISSION:
            values[f"ws_{name}"] = bit(mask)
    cls = t["seg_class"]
    resent = (cls == sg.REPEAT) | (cls == sg.HOLE_FILL)
    values.update({
        "segment": (cls - 1, None, sg.SEG_CLASS[1:]),
        "gap_bytes": (t["gap_bytes"], cls != sg.NEW),
        "retransmission_trigger": (np.where(resent, t["trigger"] - 1, -1), None, sg.TRIGGER[1:]),
        "silence_before_ns": (t["silence"], ~resent),
        "peer_dupacks": (t["peer_dupacks"].astype(np.int32), ~resent),
        "spurious": (t["spurious"] != 0, ~resent),
        "recovery_point": (t["recovery_point"], t["recovery_point"] == NONE),
        "recovered_ns": (t["recovered"], t["recovered"] == NONE),
        "hole_opened_ns": (t["hole_opened"], t["hole_opened"] == NONE),
        "dsack": (t["dsack"] != 0, None),
        "inflight_bytes": (t["inflight"], None),
        "peer_inflight_bytes": (t["peer_inflight"], t["peer_inflight"] < 0),
        "acked_bytes": (t["acked"], t["acked"] < 0),
        "rtt_ns": (t["rtt"], t["rtt"] < 0),
        "ts_rtt_ns": (t["ts_rtt"], t["ts_rtt"] < 0),
        "flight": (t["flight"], t["flight"] == 0),
        "acked_segments": (t["acked_segments"], t["acked_segments"] < 0),
        "ack_delay_ns": (t["ack_delay"], t["ack_delay"] < 0),
        "ack_gap_ns": (t["ack_gap"], t["ack_gap"] == NONE),
        "window_full_segments": opt("window_full", t),
    })
    return values


def flights_table(capture_id, rows):
    """`flights` rows (FLIGHT_OUT columns from the kernel) as an Arrow table."""
    o = {name: rows[:, k] for k, name in enumerate(sg.FLIGHT_OUT)}
    n = len(rows)
    prev = o["prev_bytes"]
    ratio = o["bytes"] / np.where(prev > 0, prev, 1)
    growth = np.floor(ratio * 1000 + 0.5) / 1000  # to 3 decimals, halves up (as SQL's round)
    values = {
        "capture_id": (np.full(n, capture_id, np.int32), None),
        "flow_id": (o["flow"], None),
        "direction": (np.where(o["from_client"] != 0, 0, 1), None, ("c2s", "s2c")),
        "flight": (o["flight"], None),
        "start_ns": (o["start"], None),
        "end_ns": (o["end"], None),
        "duration_ns": (o["duration"], o["duration"] < 0),
        "segments": (o["segments"], None),
        "bytes": (o["bytes"], None),
        "peak_inflight_bytes": (o["peak_inflight"], None),
        "growth": (growth, prev <= 0),
        "retransmissions": (o["retransmissions"], None),
        "peer_window_bytes": (o["peer_window"], o["peer_window"] < 0),
        "delivery_rate_bps": (o["delivery_rate"] * 8, o["delivery_rate"] <= 0),
        "queued": (o["queued"] != 0, None),
    }
    return numpy_table(FLIGHTS, values)


PARAMETERS = {"dupthresh": DUPTHRESH, "rto_min_ns": RTO_MIN_NS,
              "reorder_window_ns": REORDER_WINDOW_NS}
TABLES = ("tcp_analysis", "flights", "exchanges", "tcp_events")
READS = ("captures", "flows", "packets")
SCOPE = "capture"  # built per capture (tracekit.pipeline.dag)

# (on retransmissions: each has its row of tcp_events)
LATE_SQL = {
    sg.LATE_SPURIOUS: "UPDATE store.tcp_events t SET spurious = true FROM _tracekit_late l "
                      "WHERE t.capture_id = $capture_id AND t.frame = l.frame",
    sg.LATE_RECOVERED: "UPDATE store.tcp_events t SET recovered_ns = l.value FROM _tracekit_late l "
                       "WHERE t.capture_id = $capture_id AND t.frame = l.frame",
}


def build(con, writer_con, capture_id, chunk_frames=CHUNK_FRAMES, **params):
    """Write `tcp_analysis`, `flights` and `exchanges` of one capture through
    `writer_con` (a cursor of the same database); return {table: rows}."""
    params = {**PARAMETERS, **params}
    flows = con.execute(FLOWS_SQL, {"capture_id": capture_id}).fetchnumpy()
    (frames,), = con.execute(FRAMES_SQL, {"capture_id": capture_id}).fetchall()
    last = np.full(int(flows["flow_id"].max()) + 1 if len(flows["flow_id"]) else 0, -1, np.int64)
    last[flows["flow_id"].astype(np.int64)] = flows["last_frame"]
    state = CaptureState(last, use_jit(min(frames, chunk_frames) * PYTHON_COST))
    writer = AppendWriter(writer_con, lanes=3)  # two appends at once (store/writer.py)
    writer.start()
    rows = {"tcp_analysis": 0, "flights": 0, "exchanges": 0, "tcp_events": 0}

    def side_tables(flight_rows, exchange_rows):
        if len(flight_rows):
            writer.put("flights", flights_table(capture_id, flight_rows))
            rows["flights"] += len(flight_rows)
        if len(exchange_rows):
            writer.put("exchanges", exchanges_table(capture_id, exchange_rows))
            rows["exchanges"] += len(exchange_rows)
    try:
        for lo in range(1, frames + 1, chunk_frames):
            hi = lo + chunk_frames
            p = read_chunk(con, capture_id, lo, hi)
            n = len(p["frame"])
            if n:
                slot, first = state.slots.assign(p["flow_id"])
                state.grow(n)
                w = wireshark_chunk(state, p, slot, first)
                t, flight_rows, exchange_rows = tracekit_chunk(state, p, w, slot, first, params)
                dense, events = tcp_analysis_tables(capture_id, p, w, t)
                writer.put("tcp_analysis", dense)
                writer.put("tcp_events", events)
                rows["tcp_analysis"] += n
                rows["tcp_events"] += events.num_rows
                state.rows += n
                side_tables(flight_rows, exchange_rows)
            side_tables(*_flushed(state, state.slots.release_through(hi - 1)))
        side_tables(*_flushed(state, state.slots.slot_of[state.slots.active]))
    finally:
        writer.finish()
    _apply_late(writer_con, capture_id, state.late)
    return rows


def _flushed(state, slots):
    """The open flights and exchanges of the flows in `slots` (they ended)."""
    slots = np.asarray(slots, np.int64)
    fo = np.zeros((2 * len(slots) + 1, len(sg.FLIGHT_OUT)), np.int64)
    fo_m = np.zeros(1, np.int64)
    xo = np.zeros((len(slots) + 1, len(sg.EXCHANGE_OUT)), np.int64)
    xo_m = np.zeros(1, np.int64)
    if len(slots):
        sg.flush_flights(state.jit, slots, state.sg_st, fo, fo_m, xo, xo_m)
    return fo[:fo_m[0]], xo[:xo_m[0]]


def exchanges_table(capture_id, rows):
    """`exchanges` rows (EXCHANGE_OUT columns from the kernel) as an Arrow table."""
    o = {name: rows[:, k] for k, name in enumerate(sg.EXCHANGE_OUT)}
    n = len(rows)
    values = {
        "capture_id": (np.full(n, capture_id, np.int32), None),
        "flow_id": (o["flow"], None),
        "exchange": (o["exchange"], None),
        "request_first_byte_ns": (o["request_first"], None),
        "request_last_byte_ns": (o["request_last"], None),
        "response_first_byte_ns": (o["response_first"], o["response_first"] == NONE),
        "response_last_byte_ns": (o["response_last"], o["response_last"] == NONE),
        "end_ns": (o["end"], None),
        "bytes_up": (o["bytes_up"], None),
        "bytes_down": (o["bytes_down"], None),
        "packets_up": (o["packets_up"], None),
        "packets_down": (o["packets_down"], None),
    }
    return numpy_table(EXCHANGES, values)


def _apply_late(con, capture_id, late):
    if not late:
        return
    late = np.concatenate(late)
    for kind, sql in LATE_SQL.items():
        sel = late[late[:, 1] == kind]
        if not len(sel):
            continue
        _, first = np.unique(sel[:, 0], return_index=True)  # one update per packet
        sel = sel[np.sort(first)]
        table = pa.table({"frame": numpy_array(sel[:, 0]), "value": numpy_array(sel[:, 2])})
        con.register("_tracekit_late", table)
        try:
            (updated,), = con.execute(sql, {"capture_id": capture_id}).fetchall()
        finally:
            con.unregister("_tracekit_late")
        if updated != len(sel):  # a late verdict on a packet with no event row: a bug
            raise ValueError(f"tcp_analysis: {len(sel) - updated} late verdicts found no "
                             f"retransmission in tcp_events")
