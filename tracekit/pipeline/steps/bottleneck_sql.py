"""The bottleneck step's reduction (steps/bottleneck.py finds the candidate
pairs): DuckDB turns a batch of ended flows' pairs into `bottleneck` rows by
the definitions of bottleneck.py's docstring, written here as SQL so that
modes, quantiles, rounding and `known` have DuckDB's semantics exactly.

Pairs are handed over as Arrow tables; held pairs beyond a bound (a flow
open for a long time) are moved into a temporary table of DuckDB's
(`spill`), which keeps them within its memory limit, spilling to disk.
"""

import numpy as np
import pyarrow as pa

from ...store.arrow import numpy_table
from ...store.schema import Column

DIRECTIONS = ("c2s", "s2c")
SIDES = ("arrivals", "acks")
SPILLED = "_bn_spilled"

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

ten AS (  -- the direction's first 10 full-sized segments, each with its pair's rate
    SELECT e.*, ip_bytes * 8e9 / nullif(ts_ns - lag(ts_ns) OVER (
               PARTITION BY capture_id, flow_id, direction ORDER BY k), 0) AS pair_bps
    FROM _bn_early e JOIN mss m USING (capture_id, flow_id, direction)
    WHERE k <= 10
),

early AS (  -- the fastest 5 consecutive of them (a fresh connection's initial window,
            -- sent back to back), over their span
    SELECT capture_id, flow_id, direction, max(early_bps) AS early_bps
    FROM (SELECT capture_id, flow_id, direction, k,
              (sum(ip_bytes) OVER w - ip_bytes) * 8e9
                  / nullif(ts_ns - first_value(ts_ns) OVER w, 0) AS early_bps,
              count(*) OVER w AS n
          FROM ten
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
    FROM bins WHERE n = peak AND near >= greatest(30, 0.1 * total) GROUP BY ALL  -- 30: MIN_PAIRS
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

estimate AS (  -- the slowest well-supported side of each flow direction (of two
                -- alike, the ACKs': `key` orders them, not the order they are read in)
    SELECT capture_id, flow_id, direction, arg_min(side, key) AS side,
        arg_min(pairs, key) AS pairs, arg_min(modal_pairs, key) AS modal_pairs,
        round(min(rate_bps))::BIGINT AS rate_bps, round(arg_min(p25_bps, key))::BIGINT AS p25_bps,
        round(arg_min(p75_bps, key))::BIGINT AS p75_bps,
        round(arg_min(confidence, key), 3) AS confidence
    FROM (SELECT *, (rate_bps, side) AS key FROM chosen WHERE readable) GROUP BY ALL
),

spaced AS (  -- pairs of those first 10 that the path spaced at the mode (within 10 %)
    SELECT f.capture_id, f.flow_id, f.direction, count(*) AS at_mode
    FROM estimate f JOIN ten h USING (capture_id, flow_id, direction)
    WHERE h.pair_bps BETWEEN 0.9 * f.rate_bps AND 1.1 * f.rate_bps
    GROUP BY ALL
)

-- known: enough agreeing pairs, and not slower than the sender's pacing allows
-- (a head that came faster, its tail spaced at the mode: a token bucket's burst)
SELECT f.*, f.modal_pairs >= 30 AND f.confidence >= 0.25
        AND NOT coalesce(f.side = 'arrivals' AND e.early_bps > 4 * f.rate_bps
                         AND coalesce(s.at_mode, 0) < 3, false) AS known
FROM estimate f LEFT JOIN early e USING (capture_id, flow_id, direction)
LEFT JOIN spaced s USING (capture_id, flow_id, direction)
"""


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


def pairs_table(capture_id, chunks):
    """Candidate pairs, per chunk (flow, direction, side, bytes, smaller, gap), as one Arrow table."""
    return pa.concat_tables([numpy_table(_PAIRS, {
        "capture_id": (np.full(len(flow), capture_id, np.int32), None), "flow_id": (flow, None),
        "direction": (direction.astype(np.int32), None, DIRECTIONS),
        "side": (side.astype(np.int32), None, SIDES), "bytes": (nbytes, None),
        "smaller": (smaller, None), "gap_ns": (gap, None)})
        for flow, direction, side, nbytes, smaller, gap in chunks])


def spill(con, capture_id, chunks):
    """Move held pairs into DuckDB's temporary table."""
    con.register("_bn_moving", pairs_table(capture_id, chunks))
    try:
        con.execute(f"CREATE TEMP TABLE IF NOT EXISTS {SPILLED} AS FROM _bn_moving LIMIT 0")
        con.execute(f"INSERT INTO {SPILLED} FROM _bn_moving")
    finally:
        con.unregister("_bn_moving")


def drop_spilled(con):
    con.execute(f"DROP TABLE IF EXISTS {SPILLED}")


def reduce(con, capture_id, chunks, d, spilled, ended):
    """The `bottleneck` rows (an Arrow table, None if none) of a batch of flows
    that ended (`ended`, their ids): their pairs in `chunks` (and in the
    spilled table if `spilled`), per direction with data `d` (flow,
    direction, max_payload, sum_ip (-1: none), sum_payload, early_n and
    early_ts, early_ip [rows, 10]: its first full-sized segments)."""
    if not (chunks or spilled) or not len(d["flow"]):
        return None
    m = len(d["flow"])
    keep = np.arange(d["early_ts"].shape[1])[None, :] < d["early_n"][:, None]
    ip = d["early_ip"][keep]
    rel = {
        "_bn_directions": numpy_table(_DIRECTIONS, {
            "capture_id": (np.full(m, capture_id, np.int32), None), "flow_id": (d["flow"], None),
            "direction": (d["direction"], None, DIRECTIONS), "max_payload": (d["max_payload"], None),
            "sum_ip": (d["sum_ip"], d["sum_ip"] < 0), "sum_payload": (d["sum_payload"], None)}),
        "_bn_early": numpy_table(_EARLY, {
            "capture_id": (np.full(int(keep.sum()), capture_id, np.int32), None),
            "flow_id": (np.repeat(d["flow"], d["early_n"]), None),
            "direction": (np.repeat(d["direction"], d["early_n"]), None, DIRECTIONS),
            "k": (np.broadcast_to(np.arange(1, keep.shape[1] + 1), keep.shape)[keep], None),
            "ts_ns": (d["early_ts"][keep], None), "ip_bytes": (ip.astype(np.int32), ip < 0)}),
    }
    if chunks:
        rel["_bn_held" if spilled else "_bn_pairs"] = pairs_table(capture_id, chunks)
    if spilled:
        rel["_bn_ended"] = numpy_table((Column("flow_id", "BIGINT", ""),),
                                       {"flow_id": (np.asarray(ended, np.int64), None)})
    for name, table in rel.items():
        con.register(name, table)
    try:
        if spilled:  # the batch's pairs that were moved out, and those still held
            con.execute(f"CREATE OR REPLACE TEMP VIEW _bn_pairs AS SELECT * FROM {SPILLED} "
                        "WHERE flow_id IN (SELECT flow_id FROM _bn_ended)"
                        + (" UNION ALL SELECT * FROM _bn_held" if chunks else ""))
        out = con.sql(REDUCE_SQL, params={"capture_id": capture_id}).to_arrow_table()
        if spilled:
            con.execute(f"DELETE FROM {SPILLED} WHERE flow_id IN (SELECT flow_id FROM _bn_ended)")
        return out
    finally:
        if spilled:
            con.execute("DROP VIEW IF EXISTS _bn_pairs")
        for name in rel:
            con.unregister(name)
