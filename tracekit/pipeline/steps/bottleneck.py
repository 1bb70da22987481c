"""`bottleneck`: per flow and direction, the bottleneck's rate from the dispersion of segment pairs.

Definitions. Two segments that queue behind each other at the bottleneck
leave it spaced by the second's size / its rate, and keep that spacing to
the receiver; the receiver's ACKs, sent as they arrive, carry it back to
the sender (the ACK clock). So pairs that crossed the bottleneck back to
back show its rate at either end: near the receiver in the data's
arrivals, near the sender in its ACKs'. One flow and direction is read
alone (a run's rate does not depend on what else shares the store).
  pair             two consecutive packets of one kind, in frame order: near
                   the receiver, data segments of the direction, both
                   full-sized (payload >= the receiver's MSS option - 60, or
                   the largest payload seen when no SYN was captured); near
                   the sender, ACKs that newly acknowledge its data, neither
                   a duplicate ACK nor carrying a SACK block, nor following
                   one (a hole's repair acknowledges at once bytes that
                   arrived over many round trips)
  its rate         the second's IP bytes / the gap (ACKs: bytes acknowledged
                   x the direction's IP bytes per payload byte); bit/s at the
                   IP level, the rate a shaper such as tbf or the lab's path
                   is set to, less the link header
  mode             pairs are binned by rate (bins 5 % wide); a bin's support
                   is the pairs within 10 % (two bins) of it. The mode is the
                   fastest local peak supported by at least 30 pairs and a
                   tenth of the direction's: the bottleneck's spacing. Slower
                   modes are the sender's own spacing between its bursts
                   (pacing, ACK clocking of a window that does not fill the
                   path); faster pairs without such support, compression
                   after the bottleneck (a handful of segments delivered
                   together), are left out
  side             `arrivals` at a capture near the receiver (rtt_summary's
                   vantage), `acks` near the sender; elsewhere both, and the
                   lower is kept (at the sender data leave at the host's own
                   rate, which is no bound)
  pairs            the direction's pairs; modal_pairs, those within 10 % of the mode
  rate_bps         the median rate of the modal pairs; p25_bps, p75_bps their quartiles
  confidence       modal_pairs / pairs
  known            at least 30 modal pairs and confidence >= 0.25, and, read from
                   arrivals, no 5 consecutive of the direction's first 10
                   full-sized segments (a fresh connection's initial window,
                   sent back to back) arrived more than 4 x faster than the
                   mode over their span: the path carried them that fast, so a slower
                   mode is the sender's own spacing (a sender that paces
                   single segments, as BBR below 1.2 Mbit/s). Otherwise the
                   rate is no measurement (a handful of segments, a sender
                   that never sent two full segments back to back). A flow
                   direction without a supported mode has no row
Columns: capture_id, flow_id, direction, side, pairs, modal_pairs, rate_bps,
  p25_bps, p75_bps, confidence, known

Code and SQL. Finding the pairs is "the packet before this one of its flow,
direction and kind": as SQL, two `lag` windows, each a sort of every data
segment / ACK of the capture by (flow, sender, frame), after a join of the
per-packet analysis to `packets` (on the 2.86 M-packet mixed capture 2.9 of
the step's 4.8 s). Here one compiled pass over the capture's TCP packets in
frame order (chunks of frames, like stalls.py) keeps, per open flow slot and
direction, the previous data segment's time and size and the previous ACK's
time and SACK-ness: a few scalars, no sort. It writes the candidate pairs,
the per-direction sums the ACKs' IP bytes per payload byte need, the
largest payload, and the first full-sized segments the `early` test reads.
What is a definition -- modes, quantiles, rounding, `known` -- stays SQL
(REDUCE_SQL), run by DuckDB over those relations, so that its semantics are
DuckDB's exactly (round half away from zero, linearly interpolated
quantiles, arg_min by the unrounded rate, confidence rounded before `known`
tests it) and readable in one place. tests/bottleneck_reference.sql keeps
the plain-SQL form of the whole step; tests/test_bottleneck_pass.py checks
the rows are the same.

A pair's "full-sized" needs the direction's full size, which is known at
the flow's start when the receiver's SYN carried an MSS option, else only at
its end (the largest payload). The pass keeps a pair when both segments are
at least the full size known so far (the MSS option, or the largest payload
up to then: never more than the final one, so no pair is lost) and writes
the smaller of the two sizes; the reduction keeps those at least the final
full size. The first 10 full-sized segments without an MSS option are the
first 10 of the largest size: the list restarts whenever a larger payload
appears.

Memory. Candidate pairs are held until their flow ends (FlowSlots:
`flows.last_frame`), then reduced by DuckDB in batches of ended flows (when
they hold REDUCE_ROWS pairs, and at the end). So what is held grows with
the candidate pairs of the flows open at once (~29 bytes each, at most one
per data segment and one per ACK) plus less than REDUCE_ROWS of ended
flows, not with the capture: a capture of one long flow holds all its
pairs (2.2 M data segments: ~64 MB).
"""

import numpy as np
import pyarrow as pa

from ...core.jit import PYTHON_COST, kernel, use_jit
from ...kernels.pools import FlowSlots
from ...store.arrow import numpy_table
from ...store.schema import DERIVED, Column

TABLES = ("bottleneck",)
READS = ("flows", "packets", "rtt_summary", "tcp_analysis")
SCOPE = "capture"  # built per capture (tracekit.pipeline.dag)
CHUNK_FRAMES = 122_880
REDUCE_ROWS = 1 << 20  # pairs of ended flows held before they are reduced
EARLY = 10  # the direction's first full-sized segments the `early` test reads
DIRECTIONS = ("c2s", "s2c")
SIDES = ("arrivals", "acks")

# per slot and direction (row 2 * slot + d; d = 0 the client sends, 1 the server)
(HAS_FULL, FULL, RMAX, NDATA, SUM_PAY, SUM_IP, CNT_IP, D_PREV, D_TS, D_PAY, A_PREV, A_TS,
 A_SACKY, E_N) = range(14)
E_TS = 14
E_IP = E_TS + EARLY
NSTATE = E_IP + EARLY
# per slot
(FLOW_ID, NPAIRS) = range(2)
# a candidate pair: flow, direction, side, bytes (arrivals: IP bytes, acks: bytes
# acknowledged), the smaller payload of the two (arrivals), gap
NOUT = 6

FLOWS_SQL = """
SELECT flow_id, last_frame, server_mss IS NOT NULL AS has_c2s, coalesce(server_mss - 60, 0) AS full_c2s,
       client_mss IS NOT NULL AS has_s2c, coalesce(client_mss - 60, 0) AS full_s2c
FROM flows WHERE capture_id = $capture_id AND protocol = 'tcp'
"""

# a chunk's TCP packets and, apart (matched by frame in numpy: cheaper than the
# join), the packets' IP sizes and SACK options
READ_SQL = """
SELECT frame, ts_ns, flow_id, from_client, payload_bytes, coalesce(acked_bytes, 0) AS acked,
       ws_duplicate_ack
FROM tcp_analysis WHERE capture_id = $capture_id AND frame >= $lo AND frame < $hi
"""
PACKETS_SQL = """
SELECT frame, coalesce(ip_total_bytes, -1) AS ip_bytes, tcp_sack_left IS NOT NULL AS sack
FROM packets WHERE capture_id = $capture_id AND frame >= $lo AND frame < $hi
"""

# The reduction, over what the pass wrote for a batch of ended flows:
# _bn_pairs (candidate pairs), _bn_directions (per flow direction with data:
# largest payload, IP and payload bytes), _bn_early (its first full-sized
# segments, k = 1..10).
REDUCE_SQL = """
WITH mss AS (  -- the direction's full size: the receiver's MSS option, else the largest payload
    SELECT d.capture_id, d.flow_id, d.direction,
        coalesce(CASE d.direction WHEN 's2c' THEN f.client_mss ELSE f.server_mss END - 60,
                 d.max_payload) AS full_bytes,
        d.sum_ip / d.sum_payload AS ip_per_payload
    FROM _bn_directions d JOIN flows f USING (capture_id, flow_id)
    WHERE f.capture_id = $capture_id
),

arrivals AS (  -- consecutive data segments of the direction, both full-sized
    SELECT p.capture_id, p.flow_id, p.direction, 'arrivals' AS side, p.bytes AS ip_bytes, p.gap_ns
    FROM _bn_pairs p JOIN mss m USING (capture_id, flow_id, direction)
    WHERE p.side = 'arrivals' AND p.smaller >= m.full_bytes
),

acks AS (  -- consecutive ACKs of the direction's data, neither SACK-y
    SELECT p.capture_id, p.flow_id, p.direction, 'acks' AS side,
        round(p.bytes * m.ip_per_payload) AS ip_bytes, p.gap_ns
    FROM _bn_pairs p JOIN mss m USING (capture_id, flow_id, direction)
    WHERE p.side = 'acks'
),

early AS (  -- the fastest 5 consecutive of the direction's first 10 full-sized segments
            -- (a fresh connection's initial window, sent back to back), over their span
    SELECT capture_id, flow_id, direction, max(early_bps) AS early_bps
    FROM (SELECT capture_id, flow_id, direction, k,
              (sum(ip_bytes) OVER w - ip_bytes) * 8e9
                  / nullif(ts_ns - first_value(ts_ns) OVER w, 0) AS early_bps,
              count(*) OVER w AS n
          FROM (SELECT e.* FROM _bn_early e JOIN mss m USING (capture_id, flow_id, direction))
          WHERE k <= 10
          WINDOW w AS (PARTITION BY capture_id, flow_id, direction ORDER BY k
                       ROWS BETWEEN 4 PRECEDING AND CURRENT ROW))
    WHERE n = 5 GROUP BY ALL
),

pairs AS (  -- a pair's rate: the second's bytes / its gap, in bins of 5 %
    SELECT capture_id, flow_id, direction, side, ip_bytes * 8e9 / gap_ns AS rate_bps,
        round(ln(ip_bytes * 8e9 / gap_ns) / ln(1.05))::BIGINT AS bin
    FROM (SELECT * FROM arrivals UNION ALL SELECT * FROM acks)
    WHERE gap_ns > 0 AND ip_bytes > 0
),

bins AS (  -- pairs within 10 % (two bins) of each bin
    SELECT capture_id, flow_id, direction, side, bin,
        sum(n) OVER w AS near, max(n) OVER w AS peak, n,
        sum(n) OVER (PARTITION BY capture_id, flow_id, direction, side) AS total
    FROM (SELECT capture_id, flow_id, direction, side, bin, count(*) AS n FROM pairs GROUP BY ALL)
    WINDOW w AS (PARTITION BY capture_id, flow_id, direction, side ORDER BY bin
                 RANGE BETWEEN 2 PRECEDING AND 2 FOLLOWING)
),

modes AS (  -- the fastest well-supported mode: the bottleneck's spacing (slower modes are
            -- the sender's own spacing between its bursts)
    SELECT capture_id, flow_id, direction, side, max(bin) AS bin
    FROM bins WHERE n = peak AND near >= greatest(30, 0.1 * total) GROUP BY ALL
),

per_side AS (
    SELECT p.capture_id, p.flow_id, p.direction, p.side, count(*) AS pairs,
        count(*) FILTER (abs(p.bin - m.bin) <= 2) AS modal_pairs,
        median(p.rate_bps) FILTER (abs(p.bin - m.bin) <= 2) AS rate_bps,
        quantile_cont(p.rate_bps, 0.25) FILTER (abs(p.bin - m.bin) <= 2) AS p25_bps,
        quantile_cont(p.rate_bps, 0.75) FILTER (abs(p.bin - m.bin) <= 2) AS p75_bps
    FROM pairs p JOIN modes m USING (capture_id, flow_id, direction, side)
    GROUP BY ALL
),

chosen AS (  -- the side the capture point can read (rtt_summary's vantage)
    SELECT s.*, modal_pairs / pairs AS confidence,
        CASE WHEN coalesce(v.vantage, 'unknown') NOT IN ('client', 'server') THEN TRUE
             WHEN (v.vantage = 'client') = (s.direction = 's2c') THEN s.side = 'arrivals'
             ELSE s.side = 'acks' END AS readable
    FROM per_side s
    LEFT JOIN (SELECT capture_id, flow_id, any_value(vantage) AS vantage FROM rtt_summary
               WHERE capture_id = $capture_id GROUP BY ALL) v USING (capture_id, flow_id)
),

estimate AS (  -- the slowest well-supported side of each flow direction
    SELECT capture_id, flow_id, direction, arg_min(side, rate_bps) AS side,
        arg_min(pairs, rate_bps) AS pairs, arg_min(modal_pairs, rate_bps) AS modal_pairs,
        round(min(rate_bps))::BIGINT AS rate_bps, round(arg_min(p25_bps, rate_bps))::BIGINT AS p25_bps,
        round(arg_min(p75_bps, rate_bps))::BIGINT AS p75_bps,
        round(arg_min(confidence, rate_bps), 3) AS confidence
    FROM chosen WHERE readable GROUP BY ALL
)

-- known: enough agreeing pairs, and not slower than the sender's pacing allows
SELECT f.*, f.modal_pairs >= 30 AND f.confidence >= 0.25
        AND NOT coalesce(f.side = 'arrivals' AND e.early_bps > 4 * f.rate_bps, false) AS known
FROM estimate f LEFT JOIN early e USING (capture_id, flow_id, direction)
"""


def _open(k, full, has_full, st):
    """A flow's first packet: direction row k starts afresh."""
    for c in range(NSTATE):
        st[k, c] = 0
    st[k, HAS_FULL] = has_full
    st[k, FULL] = full


def _early(k, ts, ip, payload, st):
    """Keep the packet if it is one of the direction's first full-sized segments
    (without an MSS option: of the largest payload so far, restarting when a
    larger one comes)."""
    if st[k, HAS_FULL]:
        if payload < st[k, FULL]:
            return
    else:
        if payload <= 0 or payload < st[k, RMAX]:
            return
        if payload > st[k, RMAX]:
            st[k, E_N] = 0
    n = st[k, E_N]
    if n < EARLY:
        st[k, E_TS + n] = ts
        st[k, E_IP + n] = ip
        st[k, E_N] = n + 1


@kernel(helpers=(_open, _early))
def candidate_pairs(ts, flow, slot, first, from_client, payload, acked, ip, sacky, full, fs, st,
                    out, out_m):
    """One chunk of a capture's TCP packets in frame order: per flow direction,
    the data segment and the ACK before each one, and the candidate pairs
    written to `out`; the direction's sums and first full-sized segments in `st`."""
    for j in range(len(ts)):
        fl = slot[j]
        fid = flow[j]
        if first[j]:
            fs[fl, FLOW_ID] = fid
            fs[fl, NPAIRS] = 0
            for dd in range(2):
                _open(2 * fl + dd, full[fid, dd], full[fid, 2 + dd], st)
        d = 0 if from_client[j] else 1
        k = 2 * fl + d
        now = ts[j]
        pay = payload[j]
        _early(k, now, ip[j], pay, st)
        if pay > 0:
            st[k, NDATA] += 1
            st[k, SUM_PAY] += pay
            if ip[j] >= 0:
                st[k, SUM_IP] += ip[j]
                st[k, CNT_IP] += 1
            if pay > st[k, RMAX]:
                st[k, RMAX] = pay
            if st[k, D_PREV]:
                gap = now - st[k, D_TS]
                smaller = min(pay, st[k, D_PAY])
                least = st[k, FULL] if st[k, HAS_FULL] else st[k, RMAX]
                if gap > 0 and ip[j] > 0 and smaller >= least:
                    m = out_m[0]
                    out[m, 0] = fid
                    out[m, 1] = d
                    out[m, 2] = 0
                    out[m, 3] = ip[j]
                    out[m, 4] = smaller
                    out[m, 5] = gap
                    out_m[0] = m + 1
                    fs[fl, NPAIRS] += 1
            st[k, D_PREV] = 1
            st[k, D_TS] = now
            st[k, D_PAY] = pay
        if acked[j] > 0 or sacky[j]:  # this side's ACK of the other direction's data
            if st[k, A_PREV] and acked[j] > 0 and not sacky[j] and st[k, A_SACKY] == 0:
                gap = now - st[k, A_TS]
                if gap > 0:
                    m = out_m[0]
                    out[m, 0] = fid
                    out[m, 1] = 1 - d
                    out[m, 2] = 1
                    out[m, 3] = acked[j]
                    out[m, 4] = 0
                    out[m, 5] = gap
                    out_m[0] = m + 1
                    fs[fl, NPAIRS] += 1
            st[k, A_PREV] = 1
            st[k, A_TS] = now
            st[k, A_SACKY] = 1 if sacky[j] else 0


def _numpy(con, sql, params):
    return {k: np.asarray(v) for k, v in con.execute(sql, params).fetchnumpy().items()}


class _Held:
    """Candidate pairs and per-direction state of flows, until their flow is reduced."""

    def __init__(self, nflows):
        self.pairs = []  # per chunk: (flow, direction, side, bytes, smaller, gap)
        self.directions = []  # per batch of ended flows: their rows of `st`
        self.ended = np.zeros(nflows, bool)
        self.ended_pairs = 0

    def add_pairs(self, out):
        if len(out):
            self.pairs.append((out[:, 0].copy(), out[:, 1].astype(np.int8), out[:, 2].astype(np.int8),
                               out[:, 3].copy(), out[:, 4].astype(np.int32), out[:, 5].copy()))

    def end(self, slots, fs, st):
        """The flows in `slots` ended: keep their state (their slots are reused)."""
        if not len(slots):
            return
        self.ended[fs[slots, FLOW_ID]] = True
        self.ended_pairs += int(fs[slots, NPAIRS].sum())
        rows = np.stack([2 * slots, 2 * slots + 1], axis=1).ravel()
        self.directions.append((np.repeat(fs[slots, FLOW_ID], 2), np.tile([0, 1], len(slots)),
                                st[rows].copy()))

    def take(self):
        """(pairs, directions) of the ended flows, which are then no longer held."""
        taken, kept = [], []
        for cols in self.pairs:
            done = self.ended[cols[0]]
            if done.all():
                taken.append(cols)
            elif done.any():
                taken.append(tuple(c[done] for c in cols))
                kept.append(tuple(c[~done] for c in cols))
            else:
                kept.append(cols)
        self.pairs = kept
        directions, self.directions = self.directions, []
        self.ended_pairs = 0
        return taken, directions


def build(con, writer, capture_id, chunk_frames=CHUNK_FRAMES, reduce_rows=REDUCE_ROWS):
    """Write the `bottleneck` rows of one capture through `writer`; {table: rows}."""
    f = _numpy(con, FLOWS_SQL, {"capture_id": capture_id})
    nflows = int(f["flow_id"].max()) + 1 if len(f["flow_id"]) else 0
    fid = f["flow_id"].astype(np.int64)
    last = np.full(nflows, -1, np.int64)
    last[fid] = f["last_frame"]
    full = np.zeros((nflows, 4), np.int64)  # full size c2s, s2c; has it c2s, s2c
    full[fid, 0], full[fid, 1] = f["full_c2s"], f["full_s2c"]
    full[fid, 2], full[fid, 3] = f["has_c2s"], f["has_s2c"]
    (frames,), = con.execute("SELECT packets FROM captures WHERE capture_id = ?",
                             [capture_id]).fetchall()
    jit = use_jit(min(frames, chunk_frames) * PYTHON_COST)
    slots = FlowSlots(last)
    fs = np.zeros((0, 2), np.int64)
    st = np.zeros((0, NSTATE), np.int64)
    held = _Held(nflows)
    results = []
    for lo in range(1, frames + 1, chunk_frames):
        hi = lo + chunk_frames
        p = _read(con, capture_id, lo, hi)
        if len(p["frame"]):
            flow = p["flow_id"].astype(np.int64)
            slot, first = slots.assign(flow)
            if len(fs) < slots.size:
                extra = max(slots.size, 2 * len(fs)) - len(fs)
                fs = np.concatenate([fs, np.zeros((extra, 2), np.int64)])
                st = np.concatenate([st, np.zeros((2 * extra, NSTATE), np.int64)])
            out = np.empty((2 * len(flow), NOUT), np.int64)
            out_m = np.zeros(1, np.int64)
            candidate_pairs(jit, p["ts_ns"].astype(np.int64), flow, slot, first,
                            p["from_client"].astype(bool), p["payload_bytes"].astype(np.int64),
                            p["acked"].astype(np.int64), p["ip_bytes"].astype(np.int64),
                            p["sacky"], full, fs, st, out, out_m)
            held.add_pairs(out[:out_m[0]])
        held.end(slots.release_through(hi - 1), fs, st)
        if held.ended_pairs >= reduce_rows:
            results.append(_reduce(con, capture_id, *held.take()))
    held.end(slots.slot_of[slots.active], fs, st)
    results.append(_reduce(con, capture_id, *held.take()))
    rows = sum(len(r) for r in results if r is not None)
    if rows:
        table = pa.concat_tables([r for r in results if r is not None])
        writer.register("_bn_rows", table)
        try:
            names = ", ".join(c.name for c in DERIVED["bottleneck"])
            writer.execute(f"INSERT INTO bottleneck ({names}) SELECT {names} FROM _bn_rows")
        finally:
            writer.unregister("_bn_rows")
    return {"bottleneck": rows}


_PAIRS = (Column("capture_id", "INTEGER", ""), Column("flow_id", "BIGINT", ""),
          Column("direction", "VARCHAR", ""), Column("side", "VARCHAR", ""),
          Column("bytes", "BIGINT", ""), Column("smaller", "INTEGER", ""),
          Column("gap_ns", "BIGINT", ""))
_DIRECTIONS = (Column("capture_id", "INTEGER", ""), Column("flow_id", "BIGINT", ""),
               Column("direction", "VARCHAR", ""), Column("max_payload", "BIGINT", ""),
               Column("sum_ip", "BIGINT", ""), Column("sum_payload", "BIGINT", ""))
_EARLY = (Column("capture_id", "INTEGER", ""), Column("flow_id", "BIGINT", ""),
          Column("direction", "VARCHAR", ""), Column("k", "BIGINT", ""),
          Column("ts_ns", "BIGINT", ""), Column("ip_bytes", "INTEGER", ""))


def _read(con, capture_id, lo, hi):
    """A chunk's TCP packets in frame order, with their IP bytes and `sacky`."""
    params = {"capture_id": capture_id, "lo": lo, "hi": hi}
    p = _frame_order(_numpy(con, READ_SQL, params))
    q = _frame_order(_numpy(con, PACKETS_SQL, params))
    qf = q["frame"]
    if len(qf) and qf[-1] - qf[0] == len(qf) - 1:  # no gap: frame f's row is f - the first
        at = p["frame"] - qf[0]
    else:
        at = np.searchsorted(qf, p["frame"])
    p["ip_bytes"] = q["ip_bytes"][at]
    p["sacky"] = p["ws_duplicate_ack"].astype(bool) | q["sack"].astype(bool)[at]
    return p


def _frame_order(p):
    f = p["frame"]
    if len(f) < 2 or (f[1:] > f[:-1]).all():
        return p
    order = np.argsort(f, kind="stable")
    return {k: v[order] for k, v in p.items()}


def _pairs_table(capture_id, cols):
    flow, direction, side, nbytes, smaller, gap = cols
    return numpy_table(_PAIRS, {
        "capture_id": (np.full(len(flow), capture_id, np.int32), None), "flow_id": (flow, None),
        "direction": (direction.astype(np.int32), None, DIRECTIONS),
        "side": (side.astype(np.int32), None, SIDES), "bytes": (nbytes, None),
        "smaller": (smaller, None), "gap_ns": (gap, None)})


def _reduce(con, capture_id, pairs, directions):
    """The `bottleneck` rows (an Arrow table, None if none) of a batch of ended flows."""
    if not pairs or not directions:
        return None
    flow = np.concatenate([d[0] for d in directions])
    direction = np.concatenate([d[1] for d in directions])
    st = np.concatenate([d[2] for d in directions])
    data = st[:, NDATA] > 0  # a direction without data has no full size, no pairs
    flow, direction, st = flow[data], direction[data], st[data]
    m = len(flow)
    cid = np.full(m, capture_id, np.int32)
    rel = {
        "_bn_pairs": pa.concat_tables([_pairs_table(capture_id, c) for c in pairs]),
        "_bn_directions": numpy_table(_DIRECTIONS, {
            "capture_id": (cid, None), "flow_id": (flow, None),
            "direction": (direction, None, DIRECTIONS), "max_payload": (st[:, RMAX], None),
            "sum_ip": (st[:, SUM_IP], st[:, CNT_IP] == 0), "sum_payload": (st[:, SUM_PAY], None)}),
    }
    n_early = st[:, E_N]
    keep = np.arange(EARLY)[None, :] < n_early[:, None]
    ip = st[:, E_IP:E_IP + EARLY][keep]
    rel["_bn_early"] = numpy_table(_EARLY, {
        "capture_id": (np.full(int(keep.sum()), capture_id, np.int32), None),
        "flow_id": (np.repeat(flow, n_early), None),
        "direction": (np.repeat(direction, n_early), None, DIRECTIONS),
        "k": (np.broadcast_to(np.arange(1, EARLY + 1), keep.shape)[keep], None),
        "ts_ns": (st[:, E_TS:E_TS + EARLY][keep], None),
        "ip_bytes": (ip.astype(np.int32), ip < 0)})
    for name, table in rel.items():
        con.register(name, table)
    try:
        return con.sql(REDUCE_SQL, params={"capture_id": capture_id}).to_arrow_table()
    finally:
        for name in rel:
            con.unregister(name)
