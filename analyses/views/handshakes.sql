-- The `tracekit handshakes` view: one row per connection setup, times in ms.
-- Parameters: $capture_id, $flow_id (NULL for all).
-- Sources: handshakes.
SELECT capture_id AS capture, flow_id AS flow, protocol, version, sni, alpn,
    round(duration_ns / 1e6, 3) AS setup_ms,
    round((first_data_c2s_ns - start_ns) / 1e6, 3) AS first_c2s_ms,
    round((first_data_s2c_ns - start_ns) / 1e6, 3) AS first_s2c_ms,
    timing_source AS timing, retries, resumed, early_data, fast_open, round_trips, measured_round_trips
FROM handshakes
WHERE ($capture_id IS NULL OR capture_id = $capture_id) AND ($flow_id IS NULL OR flow_id = $flow_id)
ORDER BY capture, flow, start_ns
