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
                   single segments, as BBR below 1.2 Mbit/s) -- unless 3 or
                   more pairs of those ten came at the mode's rate (within
                   10 %): the head came through a token bucket's burst, the
                   rest at its rate (tbf). Otherwise the
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
(bottleneck_sql.py), run by DuckDB over those relations, so that its semantics are
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
the candidate pairs of the flows open at once (30 bytes each, at most one
per data segment and one per ACK) plus less than REDUCE_ROWS of ended
flows, not with the number of flows or captures: on the 2.86 M-packet mixed
capture, whose bulk flows last the whole capture, 2,213,002 pairs (66 MB)
at the end, reduced at once (analyze's peak memory, set elsewhere, did not
grow); its tiled copies (benchmarks/scaling.py) hold one copy's. Beyond
SPILL_ROWS (~120 MB; one flow of N packets has up to ~N pairs) the held
pairs move into a temporary table of DuckDB's, which analyze's memory limit
keeps in bounds by spilling to disk, as the SQL's sorts did.
"""

import numpy as np
import pyarrow as pa

from ...core.jit import PYTHON_COST, kernel, use_jit
from ...kernels.pools import FlowSlots
from ...store.arrow import among, chunk_reads, fetch_numpy as _numpy, frame_rows
from ...store.schema import DERIVED
from . import bottleneck_sql
from .bottleneck_sql import REDUCE_SQL  # noqa: F401 (what it reads is declared in READS)

TABLES = ("bottleneck",)
READS = ("flows", "packets", "rtt_summary", "tcp_analysis", "tcp_events")
SCOPE = "capture"  # built per capture (tracekit.pipeline.dag)
SOURCES = (bottleneck_sql,)  # code whose change rebuilds the table
CHUNK_FRAMES = 122_880
REDUCE_ROWS = 1 << 20  # pairs of ended flows held before they are reduced
SPILL_ROWS = 1 << 22  # pairs held in memory before they move into DuckDB (~120 MB)
EARLY = 10  # the direction's first full-sized segments the `early` test reads
# A mode needs at least 30 pairs (bottleneck_sql.REDUCE_SQL's `modes`: change both
# together): a flow direction's side with fewer candidates has no row, so it is
# not handed to DuckDB, and a capture whose flows all have fewer than 31
# packets each way is not read at all (the reduction's query costs ~20 ms).
MIN_PAIRS = 30

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
SELECT flow_id, last_frame, greatest(packets_c2s, packets_s2c) AS most,
       server_mss IS NOT NULL AS has_c2s, coalesce(server_mss - 60, 0) AS full_c2s,
       client_mss IS NOT NULL AS has_s2c, coalesce(client_mss - 60, 0) AS full_s2c
FROM flows WHERE capture_id = $capture_id AND protocol = 'tcp'
"""

# a chunk's TCP packets and, apart (matched by frame in numpy: cheaper than the
# join), the packets' IP sizes and SACK options; from the dense tcp_analysis
# (the view joins every row to its event row; the capture's tcp_analysis is
# complete when this step runs), its duplicate ACKs from the event rows apart
READ_SQL = """
SELECT frame, ts_ns, flow_id, from_client, payload_bytes, coalesce(acked_bytes, 0) AS acked
FROM store.tcp_analysis WHERE capture_id = $capture_id AND frame >= $lo AND frame < $hi
"""
DUPACKS_SQL = """
SELECT frame FROM store.tcp_events
WHERE capture_id = $capture_id AND ws_duplicate_ack ORDER BY frame
"""
PACKETS_SQL = """
SELECT frame, coalesce(ip_total_bytes, -1) AS ip_bytes, tcp_sack_left IS NOT NULL AS sack
FROM packets WHERE capture_id = $capture_id AND frame >= $lo AND frame < $hi
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




class _Held:
    """Candidate pairs and per-direction state of flows, until their flow is reduced."""

    def __init__(self, nflows):
        self.pairs = []  # per chunk: (flow, direction, side, bytes, smaller, gap)
        self.rows = 0  # pairs in self.pairs
        self.spilled = False  # some were moved into DuckDB (bottleneck_sql.spill)
        self.directions = []  # per batch of ended flows: (flow ids, their rows of `st`)
        self.ended = np.zeros(nflows, bool)
        self.ended_pairs = 0

    def add_pairs(self, out):
        if len(out):
            self.pairs.append((out[:, 0].copy(), out[:, 1].astype(np.int8), out[:, 2].astype(np.int8),
                               out[:, 3].copy(), out[:, 4].astype(np.int32), out[:, 5].copy()))
            self.rows += len(out)

    def spill(self, con, capture_id):
        bottleneck_sql.spill(con, capture_id, self.pairs)
        self.pairs, self.rows, self.spilled = [], 0, True

    def end(self, slots, fs, st):
        """The flows in `slots` ended: keep their state (their slots are reused)."""
        if not len(slots):
            return
        self.ended[fs[slots, FLOW_ID]] = True
        self.ended_pairs += int(fs[slots, NPAIRS].sum())
        rows = np.stack([2 * slots, 2 * slots + 1], axis=1).ravel()
        self.directions.append((fs[slots, FLOW_ID].copy(), st[rows].copy()))

    def reduce(self, con, capture_id):
        """The rows of the flows that ended (bottleneck_sql.reduce); they are no longer held."""
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
        self.pairs, self.rows = kept, sum(len(c[0]) for c in kept)
        self.ended_pairs = 0
        if not self.spilled:
            taken = _enough(taken, len(self.ended))
        if not self.directions:
            return None
        ended = np.concatenate([d[0] for d in self.directions])
        st = np.concatenate([d[1] for d in self.directions])
        self.directions = []
        flow, direction = np.repeat(ended, 2), np.tile(np.arange(2), len(ended))
        data = st[:, NDATA] > 0  # a direction without data has no full size, no pairs
        st = st[data]
        d = {"flow": flow[data], "direction": direction[data], "max_payload": st[:, RMAX],
             "sum_ip": np.where(st[:, CNT_IP] > 0, st[:, SUM_IP], -1),
             "sum_payload": st[:, SUM_PAY], "early_n": st[:, E_N],
             "early_ts": st[:, E_TS:E_TS + EARLY], "early_ip": st[:, E_IP:E_IP + EARLY]}
        return bottleneck_sql.reduce(con, capture_id, taken, d, self.spilled, ended)


def build(con, writer, capture_id, chunk_frames=CHUNK_FRAMES, reduce_rows=REDUCE_ROWS,
          spill_rows=SPILL_ROWS):
    """Write the `bottleneck` rows of one capture through `writer`; {table: rows}."""
    f = _numpy(con, FLOWS_SQL, {"capture_id": capture_id})
    if not (f["most"] > MIN_PAIRS).any():  # no flow direction can have MIN_PAIRS pairs
        return {"bottleneck": 0}
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
    held = _Held(nflows)
    results = []
    try:
        _pass(con, capture_id, frames, chunk_frames, reduce_rows, spill_rows, jit, slots, full,
              held, results)
    finally:
        if held.spilled:
            bottleneck_sql.drop_spilled(con)
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


def _joined(p, q, dupacks):
    """A chunk's TCP packets (READ_SQL's) in frame order, with their IP bytes and
    `sacky` from its packets (PACKETS_SQL's) and the capture's duplicate ACKs."""
    p, q = _frame_order(p), _frame_order(q)
    at, _ = frame_rows(q["frame"], p["frame"])  # (every TCP packet is a packet)
    p["ip_bytes"] = q["ip_bytes"][at]
    p["sacky"] = among(dupacks, p["frame"]) | q["sack"].astype(bool)[at]
    return p


def _frame_order(p):
    f = p["frame"]
    if len(f) < 2 or (f[1:] > f[:-1]).all():
        return p
    order = np.argsort(f, kind="stable")
    return {k: v[order] for k, v in p.items()}


def _pass(con, capture_id, frames, chunk_frames, reduce_rows, spill_rows, jit, slots, full, held,
          results):
    """The capture's chunks through the kernel; each batch of ended flows reduced into `results`."""
    fs = np.zeros((0, 2), np.int64)
    st = np.zeros((0, NSTATE), np.int64)
    dupacks = _numpy(con, DUPACKS_SQL, {"capture_id": capture_id})["frame"].astype(np.int64)
    for hi, (p, q) in chunk_reads(con, capture_id, frames, chunk_frames, READ_SQL, PACKETS_SQL):
        p = _joined(p, q, dupacks)
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
            results.append(held.reduce(con, capture_id))
        if held.rows > spill_rows:
            held.spill(con, capture_id)
    held.end(slots.slot_of[slots.active], fs, st)
    results.append(held.reduce(con, capture_id))


def _enough(chunks, nflows):
    """The pairs of the flow directions' sides with at least MIN_PAIRS of them."""
    if not chunks:
        return chunks
    counts = np.zeros(4 * nflows, np.int64)
    for flow, direction, side, *_ in chunks:
        counts += np.bincount(4 * flow + 2 * direction + side, minlength=4 * nflows)
    out = []
    for cols in chunks:
        keep = counts[4 * cols[0] + 2 * cols[1] + cols[2]] >= MIN_PAIRS
        if keep.all():
            out.append(cols)
        elif keep.any():
            out.append(tuple(c[keep] for c in cols))
    return out
