-- inflight: bytes in flight of each flow direction after every packet that changes it.
--
-- Step: view.
-- Sources: tcp_analysis.
--
-- A view over every capture (nothing stored: a projection of tcp_analysis).
-- Definitions:
--   inflight_bytes      SACK-aware: highest byte sent - cumulative ACK - bytes
--                       the receiver SACKed above it; 0 when all is acknowledged
--                       (tracekit's, tcp_analysis.inflight_bytes)
--   wireshark_bytes     Wireshark 4.0's tcp.analysis.bytes_in_flight, on data
--                       segments only: the span of unacknowledged segments less
--                       the latest three SACK blocks (NULL elsewhere)
--   event               send (a packet of this direction) or ack (a packet of
--                       the other direction, which may lower it)
--   flight              on new segments: the flight it belongs to (see
--                       flights.sql); NULL on other rows
-- A step function: the value holds from ts_ns until the next row of the
-- same flow and direction. At a capture point away from the sender the
-- values are the sender's as seen from there (see rtt_summary.sql).
-- Columns: capture_id, flow_id, direction, frame, ts_ns, event, inflight_bytes,
--   wireshark_bytes, flight
WITH t AS (SELECT * FROM tcp_analysis),

sends AS (
    SELECT capture_id, flow_id, CASE WHEN from_client THEN 'c2s' ELSE 's2c' END AS direction,
        frame, ts_ns, 'send' AS event, inflight_bytes, ws_bytes_in_flight AS wireshark_bytes,
        flight
    FROM t
    WHERE segment IS NOT NULL OR inflight_bytes > 0
),

acks AS (
    SELECT capture_id, flow_id, CASE WHEN from_client THEN 's2c' ELSE 'c2s' END AS direction,
        frame, ts_ns, 'ack' AS event, peer_inflight_bytes, NULL::BIGINT, NULL::BIGINT
    FROM t
    WHERE peer_inflight_bytes IS NOT NULL AND (acked_bytes > 0 OR dsack
          OR ws_duplicate_ack OR peer_inflight_bytes > 0)
),

series AS (
    SELECT * FROM sends UNION ALL SELECT * FROM acks
),

final AS (
    SELECT capture_id, flow_id, direction, frame, ts_ns, event, inflight_bytes,
        wireshark_bytes, flight
    FROM series
)

SELECT * FROM final ORDER BY capture_id, flow_id, direction, frame
