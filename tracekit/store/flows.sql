-- flows: one row per transport flow of one capture, from its packets.
--
-- Parameters: $capture_id.
-- Definitions (the flow tracker in tracekit/decode/flows.py assigns flow_id
-- and from_client; this file only summarises):
--   SYN       tcp_flags & 0x12 = 0x02 (SYN without ACK), from the client
--   SYN-ACK   tcp_flags & 0x12 = 0x12, from the server
--   first ACK the first segment after the first SYN with ACK set and SYN
--             clear, either way: normally the client's ACK of the SYN-ACK, for
--             a refused connection the server's RST-ACK. A client segment
--             with acknowledgment number 0 (a RST-ACK after unanswered SYNs)
--             acknowledges nothing and does not count.
--   handshake_rtt_ns = first ACK's time - the time of the last SYN before it
--             (a retransmitted SYN restarts the clock). This is Wireshark's
--             tcp.analysis.initial_rtt, except that Wireshark skips a
--             difference of exactly 0 (it uses 0 as "not yet set") and we keep it.
-- "First" always means first in capture order (frame), never smallest
-- timestamp: real captures have timestamps that step backwards.
WITH p AS (
    SELECT * FROM packets
    WHERE capture_id = $capture_id AND flow_id IS NOT NULL
),

per_flow AS (
    SELECT
        capture_id,
        flow_id,
        CASE any_value(protocol) WHEN 6 THEN 'tcp' ELSE 'udp' END AS protocol,
        any_value(ip_version) AS ip_version,
        coalesce(arg_min(src_addr, frame) FILTER (WHERE from_client),
                 arg_min(dst_addr, frame) FILTER (WHERE NOT from_client)) AS client_addr,
        coalesce(arg_min(src_port, frame) FILTER (WHERE from_client),
                 arg_min(dst_port, frame) FILTER (WHERE NOT from_client)) AS client_port,
        coalesce(arg_min(dst_addr, frame) FILTER (WHERE from_client),
                 arg_min(src_addr, frame) FILTER (WHERE NOT from_client)) AS server_addr,
        coalesce(arg_min(dst_port, frame) FILTER (WHERE from_client),
                 arg_min(src_port, frame) FILTER (WHERE NOT from_client)) AS server_port,
        min(frame) AS first_frame,
        max(frame) AS last_frame,
        arg_min(ts_ns, frame) AS first_ts_ns,
        arg_max(ts_ns, frame) AS last_ts_ns,
        count(*) FILTER (WHERE from_client) AS packets_c2s,
        count(*) FILTER (WHERE NOT from_client) AS packets_s2c,
        coalesce(sum(payload_bytes) FILTER (WHERE from_client), 0) AS payload_bytes_c2s,
        coalesce(sum(payload_bytes) FILTER (WHERE NOT from_client), 0) AS payload_bytes_s2c,
        coalesce(sum(wire_bytes) FILTER (WHERE from_client), 0) AS wire_bytes_c2s,
        coalesce(sum(wire_bytes) FILTER (WHERE NOT from_client), 0) AS wire_bytes_s2c,
        arg_min(ts_ns, frame) FILTER (WHERE from_client AND tcp_flags & 18 = 2) AS syn_ts_ns,
        count(*) FILTER (WHERE from_client AND tcp_flags & 18 = 2) AS syn_count,
        min(frame) FILTER (WHERE from_client AND tcp_flags & 18 = 2) AS syn_frame,
        arg_min(ts_ns, frame) FILTER (WHERE NOT from_client AND tcp_flags & 18 = 18) AS synack_ts_ns,
        min(frame) FILTER (WHERE NOT from_client AND tcp_flags & 18 = 18) AS synack_frame,
        count(*) FILTER (WHERE NOT from_client AND tcp_flags & 18 = 18) AS synack_count,
        arg_min(tcp_mss, frame) FILTER (WHERE from_client AND tcp_flags & 18 = 2) AS client_mss,
        arg_min(tcp_mss, frame) FILTER (WHERE NOT from_client AND tcp_flags & 18 = 18) AS server_mss,
        arg_min(tcp_wscale, frame) FILTER (WHERE from_client AND tcp_flags & 18 = 2) AS client_wscale,
        arg_min(tcp_wscale, frame) FILTER (WHERE NOT from_client AND tcp_flags & 18 = 18) AS server_wscale,
        arg_min(tcp_sack_permitted, frame) FILTER (WHERE from_client AND tcp_flags & 18 = 2) AS client_sack_permitted,
        arg_min(tcp_sack_permitted, frame) FILTER (WHERE NOT from_client AND tcp_flags & 18 = 18) AS server_sack_permitted,
        bool_or(tcp_fast_open) FILTER (WHERE tcp_flags & 2 = 2) AS fast_open,
        arg_min(ts_ns, frame) FILTER (WHERE from_client AND tcp_flags & 1 = 1) AS fin_c2s_ts_ns,
        arg_min(ts_ns, frame) FILTER (WHERE NOT from_client AND tcp_flags & 1 = 1) AS fin_s2c_ts_ns,
        arg_min(ts_ns, frame) FILTER (WHERE tcp_flags & 4 = 4) AS rst_ts_ns
    FROM p
    GROUP BY capture_id, flow_id
),

first_ack AS (
    SELECT f.flow_id, min(p.frame) AS ack_frame, arg_min(p.ts_ns, p.frame) AS ack_ts_ns
    FROM per_flow AS f
    JOIN p ON p.flow_id = f.flow_id
    WHERE p.frame > f.syn_frame
      AND p.tcp_flags & 18 = 16
      AND (NOT p.from_client OR p.tcp_ack <> 0)
    GROUP BY f.flow_id
),

last_syn AS (
    SELECT a.flow_id, arg_max(p.ts_ns, p.frame) AS syn_ts_ns
    FROM first_ack AS a
    JOIN p ON p.flow_id = a.flow_id
    WHERE p.frame < a.ack_frame
      AND p.from_client
      AND p.tcp_flags & 18 = 2
    GROUP BY a.flow_id
),

final AS (
    SELECT
        f.capture_id, f.flow_id, f.protocol, f.ip_version,
        f.client_addr, f.client_port, f.server_addr, f.server_port,
        f.first_frame, f.last_frame, f.first_ts_ns, f.last_ts_ns,
        f.packets_c2s, f.packets_s2c, f.payload_bytes_c2s, f.payload_bytes_s2c,
        f.wire_bytes_c2s, f.wire_bytes_s2c,
        f.syn_ts_ns, CASE WHEN f.protocol = 'tcp' THEN f.syn_count END AS syn_count,
        f.synack_ts_ns, CASE WHEN f.protocol = 'tcp' THEN f.synack_count END AS synack_count,
        a.ack_ts_ns,
        a.ack_ts_ns - s.syn_ts_ns AS handshake_rtt_ns,
        f.client_mss, f.server_mss, f.client_wscale, f.server_wscale,
        f.client_sack_permitted, f.server_sack_permitted, f.fast_open,
        f.fin_c2s_ts_ns, f.fin_s2c_ts_ns, f.rst_ts_ns
    FROM per_flow AS f
    LEFT JOIN first_ack AS a USING (flow_id)
    LEFT JOIN last_syn AS s USING (flow_id)
)

SELECT * FROM final ORDER BY flow_id
