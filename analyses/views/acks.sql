-- The `tracekit acks` view: ACK behaviour per flow direction (of the data acknowledged).
-- Parameters: $capture_id, $flow_id.
-- Sources: ack_gaps.
SELECT capture_id AS capture, flow_id AS flow, direction, count(*) AS acks,
    round(avg(acked_segments) FILTER (acked_segments > 0), 2) AS segments_per_ack,
    count(*) FILTER (stretch) AS stretch,
    count(*) FILTER (delayed) AS delayed,
    round(median(ack_delay_ns) FILTER (delayed) / 1e6, 3) AS median_delay_ms,
    round(max(ack_delay_ns) FILTER (delayed) / 1e6, 3) AS max_delay_ms,
    count(*) FILTER (duplicate_ack) AS dup_acks,
    max(duplicate_ack_num) AS max_dup_run,
    count(*) FILTER (sack_blocks > 0) AS with_sack,
    count(*) FILTER (dsack) AS dsack,
    count(*) FILTER (window_update) AS window_updates,
    count(*) FILTER (zero_window) AS zero_window,
    sum(window_full_segments) AS window_full,
    round(median(gap_ns) / 1e6, 3) AS median_gap_ms
FROM ack_gaps
WHERE ($capture_id IS NULL OR capture_id = $capture_id) AND ($flow_id IS NULL OR flow_id = $flow_id)
GROUP BY ALL
ORDER BY capture, flow, direction
