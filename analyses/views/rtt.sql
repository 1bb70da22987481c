-- The `tracekit rtt` view: RTT per flow and direction, and the capture's vantage point.
-- Parameters: $capture_id, $flow_id.
-- Sources: rtt_summary.
SELECT capture_id AS capture, flow_id AS flow, direction, vantage, samples,
    round(min_rtt_ns / 1e6, 3) AS min_ms, round(median_rtt_ns / 1e6, 3) AS median_ms,
    round(p90_rtt_ns / 1e6, 3) AS p90_ms, round(max_rtt_ns / 1e6, 3) AS max_ms,
    round(handshake_rtt_ns / 1e6, 3) AS handshake_ms, round(path_rtt_ns / 1e6, 3) AS path_rtt_ms,
    client_leg_fraction
FROM rtt_summary
WHERE ($capture_id IS NULL OR capture_id = $capture_id) AND ($flow_id IS NULL OR flow_id = $flow_id)
ORDER BY capture, flow, direction
