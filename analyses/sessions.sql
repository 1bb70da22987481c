-- sessions: what talked to what, one row per flow (the `tracekit sessions` view).
--
-- Step: none.
-- Sources: flows.
--
-- Parameters: $capture_id (NULL for every capture).
-- Definitions:
--   handshake_rtt_ms  flows.handshake_rtt_ns in milliseconds (SYN -> first ACK)
--   duration_s        last packet - first packet of the flow, seconds
--   bytes             transport payload bytes, retransmissions included
-- Reference: Wireshark's Statistics > Conversations > TCP/UDP
-- (`tshark -z conv,tcp`) counts frames and frame bytes per direction; the
-- frame counts here equal its; the byte columns here are payload bytes.
WITH f AS (
    SELECT * FROM flows
    WHERE $capture_id IS NULL OR capture_id = $capture_id
),

final AS (
    SELECT
        f.capture_id AS capture,
        f.flow_id AS flow,
        f.protocol,
        f.client_addr || ':' || f.client_port AS client,
        f.server_addr || ':' || f.server_port AS server,
        round(f.handshake_rtt_ns / 1e6, 3) AS handshake_rtt_ms,
        round((f.last_ts_ns - f.first_ts_ns) / 1e9, 6) AS duration_s,
        f.packets_c2s,
        f.packets_s2c,
        f.payload_bytes_c2s AS bytes_c2s,
        f.payload_bytes_s2c AS bytes_s2c
    FROM f
)

SELECT * FROM final ORDER BY capture, flow
