-- The `tracekit requests` view: one row per request/response exchange, times in ms.
-- Parameters: $capture_id, $flow_id (NULL for all).
-- Sources: requests.
SELECT request_key AS request, source, run, capture_id AS capture, flow_id AS flow,
    exchange, protocol, connection,
    epoch_ms(start_ns // 1000000) AS start,
    round(duration_ns / 1e6, 3) AS duration_ms,
    round((response_first_byte_ns - start_ns) / 1e6, 3) AS first_byte_ms,
    bytes_up, bytes_down, cut_by_capture_end AS cut_at_capture_end
FROM requests
WHERE ($capture_id IS NULL OR capture_id = $capture_id) AND ($flow_id IS NULL OR flow_id = $flow_id)
ORDER BY start_ns, request_key
