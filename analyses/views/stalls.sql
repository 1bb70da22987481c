-- The `tracekit stalls` view: per flow direction, the share of its life in each
-- limitation state (the states add up to the flow's duration).
-- Parameters: $capture_id, $flow_id.
-- Sources: stalls.
WITH s AS (
    SELECT * FROM stalls
    WHERE ($capture_id IS NULL OR capture_id = $capture_id) AND ($flow_id IS NULL OR flow_id = $flow_id)
)
SELECT capture_id AS capture, flow_id AS flow, direction, state,
    round(sum(duration_ns) / 1e6, 3) AS ms,
    round(100.0 * sum(duration_ns) / nullif(sum(sum(duration_ns)) OVER (PARTITION BY capture_id, flow_id, direction), 0), 1) AS pct,
    round(sum(duration_ns) FILTER (busy) / 1e6, 3) AS busy_ms
FROM s GROUP BY capture_id, flow_id, direction, state
ORDER BY capture, flow, direction, ms DESC
