-- flights: what each flow direction sent per round trip: the effective window.
--
-- Parameters: $capture_id.
-- Source: tcp_analysis (flight numbers, see tracekit/transport/segments.py).
-- Definitions: a flight begins with the first new segment sent after the ACK
-- of the previous flight's first segment arrived. Its size (new bytes sent
-- in it) and the peak of bytes in flight during it are the window the
-- sender used that round: growth by about 2x per flight is slow start
-- (RFC 5681), by one MSS congestion avoidance; a flight held at the
-- receiver's advertised window is receive-window limited.
-- Columns:
--   capture_id, flow_id, direction, flight
--   start_ns, end_ns       first and last new segment of the flight
--   duration_ns            until the next flight began (NULL for the last)
--   segments, bytes        new data sent in the flight
--   peak_inflight_bytes    largest bytes in flight while it was sent
--   growth                 bytes / the previous flight's bytes
--   retransmissions        retransmitted segments sent during the flight
--   peer_window_bytes      the receive window the peer last advertised before it began
WITH t AS (SELECT * FROM tcp_analysis WHERE capture_id = $capture_id),

new_data AS (
    SELECT flow_id, from_client, flight, ts_ns, payload_bytes, inflight_bytes
    FROM t WHERE segment = 'new' AND flight IS NOT NULL
),

per_flight AS (
    SELECT flow_id, from_client, flight,
        min(ts_ns) AS start_ns, max(ts_ns) AS end_ns,
        count(*) AS segments, sum(payload_bytes) AS bytes,
        max(inflight_bytes) AS peak_inflight_bytes
    FROM new_data GROUP BY ALL
),

bounded AS (
    SELECT *, lead(start_ns) OVER (PARTITION BY flow_id, from_client ORDER BY flight) AS next_ns
    FROM per_flight
),

resent AS (  -- retransmissions, each counted in the latest flight begun before it
    SELECT b.flow_id, b.from_client, b.flight, count(*) AS n
    FROM (SELECT flow_id, from_client, ts_ns FROM t WHERE segment IN ('repeat', 'hole_fill')) r
    ASOF JOIN bounded b
        ON b.flow_id = r.flow_id AND b.from_client = r.from_client AND b.start_ns <= r.ts_ns
    GROUP BY ALL
),

peer_window AS (  -- the window the peer last advertised when the flight began
    SELECT b.flow_id, b.from_client, b.flight, w.tcp_window_bytes AS w
    FROM bounded b
    ASOF LEFT JOIN (
        SELECT flow_id, NOT from_client AS data_from_client, ts_ns, tcp_window_bytes
        FROM packets WHERE capture_id = $capture_id AND tcp_flags & 18 = 16
    ) w ON w.flow_id = b.flow_id AND w.data_from_client = b.from_client AND w.ts_ns <= b.start_ns
),

final AS (
    SELECT $capture_id AS capture_id, b.flow_id,
        CASE WHEN b.from_client THEN 'c2s' ELSE 's2c' END AS direction,
        b.flight, b.start_ns, b.end_ns, b.next_ns - b.start_ns AS duration_ns,
        b.segments, b.bytes, b.peak_inflight_bytes,
        round(b.bytes / nullif(lag(b.bytes) OVER (PARTITION BY b.flow_id, b.from_client ORDER BY b.flight), 0), 3)
            AS growth,
        coalesce(r.n, 0) AS retransmissions,
        w.w AS peer_window_bytes
    FROM bounded b
    LEFT JOIN resent r USING (flow_id, from_client, flight)
    LEFT JOIN peer_window w USING (flow_id, from_client, flight)
)

SELECT * FROM final ORDER BY flow_id, direction, flight
