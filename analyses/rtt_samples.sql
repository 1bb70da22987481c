-- rtt_samples: every round-trip time measurement the capture offers.
--
-- Step: view.
-- Sources: flows, packets, tcp_analysis.
--
-- A view over every capture (nothing stored: each sample is a projection of
-- tcp_analysis, read when asked for).
-- Where the inputs come from: tcp_analysis (ACK and timestamp samples), flows (handshake).
-- Definitions (the vantage point matters: see rtt_summary.sql and the README):
--   ack         data -> the ACK that newly covers it, from the newest segment
--               the ACK covers; no sample when a covered segment was sent
--               more than once (Karn's rule, RFC 6298 sec. 3). Seen from the
--               capture point, so it is the round trip between the capture
--               point and the receiver of the data.
--   timestamp   an ACK advancing the cumulative ACK whose TSecr echoes a
--               TSval: time since that TSval was first seen leaving
--               (RFC 7323 sec. 4.1), same leg as `ack`.
--   handshake   the SYN -> SYN-ACK interval (the server's leg, direction c2s)
--               and SYN-ACK -> first ACK (the client's leg, direction s2c).
-- Columns:
--   capture_id, flow_id
--   direction   of the data measured: c2s samples time the server's leg
--               (client data, server ACKs); s2c the client's leg
--   frame       the packet that closed the sample (ACK or SYN-ACK)
--   ts_ns       its time
--   kind        ack | timestamp | handshake
--   rtt_ns      the sample
WITH samples AS (
    SELECT capture_id, flow_id, CASE WHEN from_client THEN 's2c' ELSE 'c2s' END AS direction,
           frame, ts_ns, 'ack' AS kind, rtt_ns
    FROM tcp_analysis WHERE rtt_ns IS NOT NULL
    UNION ALL
    SELECT capture_id, flow_id, CASE WHEN from_client THEN 's2c' ELSE 'c2s' END,
           frame, ts_ns, 'timestamp', ts_rtt_ns
    FROM tcp_analysis WHERE ts_rtt_ns IS NOT NULL
),

hs AS (  -- the last SYN before the first SYN-ACK, the last SYN-ACK before the first ACK
    SELECT f.capture_id, f.flow_id, f.synack_ts_ns, f.ack_ts_ns,
        max(p.ts_ns) FILTER (p.tcp_flags & 18 = 2 AND p.ts_ns <= f.synack_ts_ns) AS syn_ns,
        max(p.ts_ns) FILTER (p.tcp_flags & 18 = 18 AND p.ts_ns <= f.ack_ts_ns) AS synack_ns,
        min(p.frame) FILTER (p.tcp_flags & 18 = 18 AND p.ts_ns = f.synack_ts_ns) AS synack_frame,
        min(p.frame) FILTER (p.ts_ns = f.ack_ts_ns AND p.tcp_flags & 18 = 16) AS ack_frame
    FROM flows f JOIN packets p ON p.capture_id = f.capture_id AND p.flow_id = f.flow_id
    WHERE f.protocol = 'tcp' AND f.synack_ts_ns IS NOT NULL AND p.protocol = 6
      AND (p.tcp_flags & 2 = 2 OR p.ts_ns = f.ack_ts_ns)
    GROUP BY ALL
),

handshake AS (
    SELECT capture_id, flow_id, 'c2s' AS direction, synack_frame AS frame,
           synack_ts_ns AS ts_ns, 'handshake' AS kind, synack_ts_ns - syn_ns AS rtt_ns
    FROM hs WHERE syn_ns IS NOT NULL
    UNION ALL
    SELECT capture_id, flow_id, 's2c', ack_frame, ack_ts_ns, 'handshake', ack_ts_ns - synack_ns
    FROM hs WHERE synack_ns IS NOT NULL AND ack_frame IS NOT NULL
),

final AS (
    SELECT * FROM samples
    UNION ALL
    SELECT * FROM handshake
)

SELECT * FROM final ORDER BY capture_id, flow_id, frame, kind
