"""The first form of steps/stalls_held.py's held frames, as staged SQL
(ASOF joins through temporary tables): the oracle the array pass is checked
against (tests/test_stalls_held_pass.py). Same rule, written another way."""

import duckdb
import numpy as np

from tracekit.pipeline.steps.stalls_held import LEGS_CTE
from tracekit.store.arrow import fetch_numpy

# In stages through temporary tables: as one query of CTEs, DuckDB (2.0)
# planned the ASOF join by time so that it did not end in 5 minutes on a
# 2.9 M-packet capture; staged, it takes seconds.
STAGES = (
    ("_rw_pk", LEGS_CTE + """,
-- (the legs as the pass reads them: which flows, whose round trip, is not what this checks)
legs_dir AS (
    SELECT flow_id, CASE WHEN client_data THEN 'c2s' ELSE 's2c' END AS data_dir, lag_ns
    FROM legs
),

pk AS (  -- the packets of those flows, each as the data's sender (from_sender) or its receiver
    SELECT t.frame, t.ts_ns, t.flow_id, l.lag_ns, l.data_dir,
           t.from_client = (l.data_dir = 'c2s') AS from_sender,
           t.segment = 'new' AND t.payload_bytes > 0 AS new_data, t.payload_bytes, t.rel_end,
           t.rel_ack + p.tcp_window_bytes AS edge, p.tcp_flags & 18 = 16 AS acks,
           sum(CASE WHEN t.from_client <> (l.data_dir = 'c2s') AND t.payload_bytes > 0
                    THEN 1 ELSE 0 END) OVER (PARTITION BY t.flow_id ORDER BY t.frame
                                             ROWS UNBOUNDED PRECEDING) AS receiver_data
    FROM tcp_analysis t JOIN legs_dir l USING (flow_id)
    JOIN (SELECT frame, tcp_flags, tcp_window_bytes FROM packets WHERE capture_id = $capture_id) p
        USING (frame)
    WHERE t.capture_id = $capture_id
)
SELECT * FROM pk"""),
    ("_rw_edges", """
WITH edges AS (  -- the receiver's right edge, highest so far, at each instant it sent one
    SELECT flow_id, ts_ns, max(edge) AS edge FROM (
        SELECT flow_id, ts_ns, max(edge) OVER (PARTITION BY flow_id ORDER BY frame
                                               ROWS UNBOUNDED PRECEDING) AS edge
        FROM _rw_pk WHERE NOT from_sender AND acks AND edge IS NOT NULL)
    GROUP BY ALL
)
SELECT * FROM edges"""),
    ("_rw_opened", """
WITH opened AS (  -- the first instant each edge was reached
    SELECT flow_id, edge, min(ts_ns) AS ts_ns FROM _rw_edges GROUP BY ALL
)
SELECT * FROM opened"""),
    ("_rw_news", """
WITH segment AS (  -- the data's full size: the receiver's MSS option, else the largest payload
    SELECT pk.flow_id,
           least(coalesce(CASE pk.data_dir WHEN 's2c' THEN f.client_mss ELSE f.server_mss END,
                          max(pk.payload_bytes)), max(pk.payload_bytes)) AS mss
    FROM _rw_pk pk JOIN flows f ON f.capture_id = $capture_id AND f.flow_id = pk.flow_id
    WHERE pk.from_sender AND pk.new_data
    GROUP BY pk.flow_id, pk.data_dir, f.client_mss, f.server_mss
),

news0 AS (
    SELECT pk.frame, pk.flow_id, pk.ts_ns, pk.lag_ns, pk.rel_end, s.mss,
           lead(pk.ts_ns) OVER w AS next_ns,
           lead(pk.receiver_data) OVER w - pk.receiver_data AS receiver_data_between
    FROM _rw_pk pk JOIN segment s USING (flow_id)
    WHERE pk.from_sender AND pk.new_data
    WINDOW w AS (PARTITION BY pk.flow_id ORDER BY pk.frame)
),

covered AS (  -- when the receiver's edge first let each segment out
    SELECT n.*, o.ts_ns AS cover_ns
    FROM news0 n ASOF LEFT JOIN _rw_opened o ON n.flow_id = o.flow_id AND n.rel_end <= o.edge
),

turn AS (  -- the shortest turnaround: edge past the capture point -> a segment it let out
    SELECT flow_id, min(ts_ns - cover_ns) FILTER (ts_ns > cover_ns) AS turn_ns
    FROM covered GROUP BY ALL
),

news AS (
    SELECT c.*, least(c.lag_ns, t.turn_ns) AS rt_ns,
           c.ts_ns - least(c.lag_ns, t.turn_ns) AS seen_ns, c.rel_end + c.mss AS need
    FROM covered c JOIN turn t USING (flow_id)
)
SELECT * FROM news"""),
)

HELD_SQL = """
WITH seen AS (
    SELECT n.*, e.edge AS seen_edge
    FROM _rw_news n ASOF JOIN _rw_edges e ON n.flow_id = e.flow_id AND n.seen_ns >= e.ts_ns
)

SELECT s.frame
FROM seen s ASOF JOIN _rw_opened o ON s.flow_id = o.flow_id AND s.need <= o.edge
WHERE s.seen_edge >= s.rel_end AND s.seen_edge - s.rel_end < s.mss
  AND s.next_ns IS NOT NULL AND s.receiver_data_between = 0
  AND s.next_ns <= o.ts_ns + 2 * s.rt_ns
ORDER BY s.frame
"""


def held_frames_sql(con, capture_id):
    """Sorted frames of the new data segments the receiver's window held."""
    try:
        for name, sql in STAGES:
            params = {"capture_id": capture_id} if "$capture_id" in sql else {}
            con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {sql}", params)
        r = fetch_numpy(con, HELD_SQL, {})
    finally:
        for name, _ in STAGES:
            try:
                con.execute(f"DROP TABLE IF EXISTS {name}")
            except duckdb.Error:
                pass
    return np.sort(r["frame"].astype(np.int64))
