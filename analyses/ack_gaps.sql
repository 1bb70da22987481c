-- ack_gaps: every ACK, how long after the previous one, what it acknowledged.
--
-- Step: view.
-- Sources: packets, rtt_summary, tcp_analysis.
--
-- A view over every capture (nothing stored: tcp_analysis holds each ACK's
-- gap and window-full count; the window and SACK option come from packets).
-- Where the inputs come from: tcp_analysis (gap, acked_segments, ack_delay_ns and the window-full count come from its kernel), packets (SACK blocks, window), rtt_summary (vantage).
-- Definitions:
--   an ACK         a packet with the ACK flag that acknowledges the other
--                  direction's data (pure ACKs and data segments alike)
--   gap_ns         time since the previous ACK of the same direction
--   acked_segments data segments newly covered by the cumulative ACK
--                  (ACK frequency: 2 is RFC 5681's "every second segment")
--   stretch        acked_segments > 2 (RFC 2525 sec. 2.13)
--   ack_delay_ns   time from the arrival of the newest segment it covers to the
--                  ACK; a receiver's delay only where the capture is near the
--                  receiver (`receiver_side`), else it includes a path leg
--   delayed        receiver_side and it covers one segment after >= 1 ms
--                  (a delayed-ACK timer fired, RFC 1122 sec. 4.2.3.2; Linux's
--                  minimum is 40 ms, its quick-ack mode acknowledges at once)
--   duplicate_ack, duplicate_ack_num   as Wireshark counts them
--   sack_blocks, sacked_bytes           SACK option of this ACK
--   dsack          its first block reports bytes received twice (RFC 2883)
--   window_bytes   advertised receive window; zero_window; window_update
--   window_full_segments  the other direction's segments that filled this
--                  side's window since its previous ACK (Wireshark's window_full)
-- Columns: capture_id, flow_id, direction (of the data acknowledged), frame,
--   ts_ns, rel_ack, gap_ns, acked_bytes, acked_segments, stretch, ack_delay_ns,
--   receiver_side, delayed, duplicate_ack, duplicate_ack_num, sack_blocks,
--   sacked_bytes, dsack, window_bytes, zero_window, window_update,
--   window_full_segments
WITH acks AS (
    SELECT t.*, p.tcp_window_bytes, p.tcp_sack_left, p.tcp_sack_right,
        CASE WHEN t.from_client THEN 's2c' ELSE 'c2s' END AS direction
    FROM tcp_analysis t JOIN packets p USING (capture_id, frame)
    WHERE p.tcp_flags & 16 = 16 AND p.tcp_flags & 2 = 0
),

vantage AS (
    SELECT capture_id, flow_id, direction, vantage FROM rtt_summary
),

final AS (
    SELECT
        c.capture_id, c.flow_id, c.direction, c.frame, c.ts_ns, c.rel_ack,
        c.ack_gap_ns AS gap_ns,
        coalesce(c.acked_bytes, 0) AS acked_bytes,
        coalesce(c.acked_segments, 0) AS acked_segments,
        coalesce(c.acked_segments, 0) > 2 AS stretch,
        c.ack_delay_ns,
        -- the ACK's sender is the data receiver: near it when the capture is on its side
        coalesce(v.vantage = CASE WHEN c.from_client THEN 'client' ELSE 'server' END, false)
            AS receiver_side,
        coalesce(v.vantage = CASE WHEN c.from_client THEN 'client' ELSE 'server' END, false)
            AND c.acked_segments = 1 AND c.ack_delay_ns >= 1000000 AS delayed,
        c.ws_duplicate_ack AS duplicate_ack,
        c.ws_duplicate_ack_num AS duplicate_ack_num,
        coalesce(len(c.tcp_sack_left), 0) AS sack_blocks,
        coalesce(list_sum(list_transform(list_zip(c.tcp_sack_left, c.tcp_sack_right),
                 lambda b: (b[2]::BIGINT - b[1]::BIGINT + 4294967296) % 4294967296)), 0)
            AS sacked_bytes,  -- serial arithmetic: a block may straddle 2^32
        c.dsack,
        c.tcp_window_bytes AS window_bytes,
        c.ws_zero_window AS zero_window,
        c.ws_window_update AS window_update,
        coalesce(c.window_full_segments, 0) AS window_full_segments
    FROM acks c
    LEFT JOIN vantage v ON v.capture_id = c.capture_id AND v.flow_id = c.flow_id
     AND v.direction = c.direction
)

SELECT * FROM final ORDER BY capture_id, flow_id, frame
