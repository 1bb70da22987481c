-- requests: the unit of measurement -- one request/response exchange.
--
-- Step: store.
-- Sources: captures, event_logs, events, exchanges, flows, handshakes, packets, rtt_summary, tcp_analysis.
--
-- Built over the whole store (events and every capture).
-- Where the inputs come from: exchanges (segmented by tracekit/kernels/segments.py), tcp_analysis (TLS connections, linked flows), handshakes.
-- Definitions:
--   From events (source = 'events'): a request id with a request_start and
--   a request_end event in one log, or a Queqiao flow record
--   (queqiao_flow_complete/_error, request session_id/flow_id) that logs
--   its end and duration_ns: it began duration_ns before its time, and its
--   bytes are bytes_up/bytes_down (client) or bytes_from_client/
--   bytes_to_client (server); start/end are those events' times on
--   the captures' clock (event_logs.clock_offset_ns). first_byte_ns is its
--   first_byte event. Bytes each way are the request_end (else
--   request_start) fields bytes_up/bytes_down (`bytes` for the response when a
--   log says no more) when logged, else the unique
--   stream bytes of the linked flow inside [start, end].
--   Linked flow: a TCP or UDP (QUIC) flow of any capture whose client port is the
--   request's local_port hint (any of its events; remote_port too when
--   given) and whose lifetime overlaps [start, end] (bytes from packets are
--   counted for TCP only); without a local_port, the one TCP connection
--   (by its ports, in any capture) to the request's remote_addr (any, when
--   not logged) that began an exchange inside [start, end], in captures of
--   the log's `run` label when it has one -- two or more candidates are
--   ambiguous and link nothing; `flows_matched` counts
--   them (a client- and a server-side capture of one run give 2), and
--   capture_id/flow_id name the one of the lowest capture id.
--   From flows (source = 'flows'), for TCP flows no event request links to,
--   in captures of runs (the `run` label) whose logs give no requests:
--   an exchange begins at a client data segment that follows server data
--   (or is the flow's first data) and runs until the next such segment;
--   server data before the first client data is not a request. On TLS
--   flows only what follows the handshake counts (handshakes.first_data_c2s_ns:
--   session tickets are not exchanges). start_ns is the SYN for the first
--   exchange of a connection whose SYN was captured (setup is part of that
--   request), else the exchange's first request byte; end_ns its last
--   response byte as the capture saw it. Bytes are unique stream bytes
--   (retransmitted bytes counted once: max rel_end - min rel_seq).
--   connection: 'fresh' when the request's connection was opened for it
--   (flows: first exchange with its SYN captured; events: a connect_start
--   event for the request, or the linked flow's SYN inside [start, end]),
--   else 'reused'; an event's `connection` field overrides (or its `mode`:
--   fresh, reused; persistent and warm read as reused).
--   request_first_byte_ns .. response_last_byte_ns: first and last payload
--   packet each way inside [start, end] on the linked flow as captured, from
--   the first application data on (after a TLS handshake); for QUIC, whose
--   payload is encrypted, the client's first packet after the handshake and
--   the server's datagrams of >= 1000 bytes (for an event request without
--   packets, response_first_byte_ns is its first_byte event)
-- Columns: request_key, source, log_id, request, run, capture_id, flow_id,
--   flows_matched, exchange, protocol, connection, start_ns, request_first_byte_ns,
--   request_last_byte_ns, response_first_byte_ns, response_last_byte_ns, end_ns, duration_ns, bytes_up, bytes_down,
--   packets_up, packets_down, proxy_start_ns, proxy_done_ns (a SOCKS5
--   negotiation's proxy_start/proxy_done events; the request's bytes start
--   after it), cut_by_capture_end, labels (the log's --label factors, else the
--   capture's), vantage (rtt_summary of the linked flow: client, server,
--   between, unknown)
--   cut_by_capture_end: the capture may have ended before the exchange did --
--   the last exchange of a flow that neither closed (FIN either way) nor was
--   reset, whose last packet is within max(3 handshake RTTs, 10 ms) of the
--   capture's last packet: its times and bytes are what the capture saw, not
--   the request's (whatif leaves it out and says so under --explain; ablation
--   counts it as not completed). False for event requests (their end is
--   logged) and for other exchanges
WITH logged AS (
    SELECT log_id, request, run, kind, ts_ns, local_port, remote_port, remote_addr, fields
    FROM events WHERE request IS NOT NULL
    UNION ALL
    SELECT log_id, request, run, k.kind,
        CASE k.kind WHEN 'request_start' THEN ts_ns - TRY_CAST(fields->>'duration_ns' AS BIGINT)
                    ELSE ts_ns END,
        local_port, remote_port, remote_addr,
        json_object('bytes_up', coalesce(fields->'bytes_up', fields->'bytes_from_client'),
                    'bytes_down', coalesce(fields->'bytes_down', fields->'bytes_to_client'))
    FROM events, (VALUES ('request_start'), ('request_end')) k(kind)
    WHERE events.kind IN ('queqiao_flow_complete', 'queqiao_flow_error') AND request IS NOT NULL
      AND TRY_CAST(fields->>'duration_ns' AS BIGINT) >= 0
),

ev AS (
    SELECT log_id, request, any_value(run) AS run,
        min(ts_ns) FILTER (kind = 'request_start') AS start_ns,
        max(ts_ns) FILTER (kind = 'request_end') AS end_ns,
        min(ts_ns) FILTER (kind = 'first_byte') AS first_byte_ns,
        min(ts_ns) FILTER (kind = 'connect_start') AS connect_ns,
        min(ts_ns) FILTER (kind = 'proxy_start') AS proxy_start_ns,
        max(ts_ns) FILTER (kind = 'proxy_done') AS proxy_done_ns,
        any_value(local_port) FILTER (local_port IS NOT NULL) AS local_port,
        any_value(remote_port) FILTER (remote_port IS NOT NULL) AS remote_port,
        coalesce(any_value(TRY_CAST(fields->>'bytes_up' AS BIGINT)) FILTER (kind = 'request_end'),
                 any_value(TRY_CAST(fields->>'bytes_up' AS BIGINT)) FILTER (kind = 'request_start')) AS bytes_up,
        -- `bytes` is a response's size where a log says no more
        coalesce(any_value(TRY_CAST(coalesce(fields->>'bytes_down', fields->>'bytes') AS BIGINT))
                     FILTER (kind = 'request_end'),
                 any_value(TRY_CAST(coalesce(fields->>'bytes_down', fields->>'bytes') AS BIGINT))
                     FILTER (kind = 'request_start')) AS bytes_down,
        any_value(CASE WHEN fields->>'connection' IS NOT NULL THEN fields->>'connection'
                       WHEN fields->>'mode' IN ('fresh', 'reused') THEN fields->>'mode'
                       WHEN fields->>'mode' IN ('persistent', 'warm') THEN 'reused' END)
            FILTER (fields->>'connection' IS NOT NULL OR fields->>'mode' IS NOT NULL) AS connection,
        any_value(remote_addr) FILTER (remote_addr IS NOT NULL) AS remote_addr,
        any_value(labels['run']) AS run_label
    FROM logged JOIN event_logs USING (log_id)
    GROUP BY log_id, request
    HAVING start_ns IS NOT NULL AND end_ns IS NOT NULL
),

by_port AS (  -- the request's own port hints
    SELECT e.log_id, e.request, f.capture_id, f.flow_id, f.syn_ts_ns, f.protocol,
        f.client_port, f.server_port
    FROM ev e JOIN flows f
      ON f.protocol IN ('tcp', 'udp') AND f.client_port = e.local_port
     AND (e.remote_port IS NULL OR f.server_port = e.remote_port)
     AND f.first_ts_ns <= e.end_ns AND f.last_ts_ns >= e.start_ns - 1000000000
),

by_time AS (  -- without a port: the one connection (its ports, seen in any capture) to the
              -- request's server address (any when not logged) that began an exchange
              -- inside [start, end], in captures of the log's run when it has one
    SELECT e.log_id, e.request, f.capture_id, f.flow_id, f.syn_ts_ns, f.protocol,
        f.client_port, f.server_port
    FROM (SELECT * FROM ev WHERE local_port IS NULL) e
    JOIN exchanges x ON x.request_first_byte_ns BETWEEN e.start_ns AND e.end_ns
    JOIN flows f ON f.capture_id = x.capture_id AND f.flow_id = x.flow_id
    JOIN captures c ON c.capture_id = f.capture_id
    WHERE (e.remote_addr IS NULL OR f.server_addr = e.remote_addr)
      AND (e.run_label IS NULL OR c.labels['run'] = e.run_label)
      AND (e.remote_port IS NULL OR f.server_port = e.remote_port)
),

unique_by_time AS (
    SELECT * FROM by_time
    WHERE (log_id, request) IN (SELECT (log_id, request) FROM by_time GROUP BY ALL
                                HAVING count(DISTINCT (client_port, server_port)) = 1)
),

links AS (
    SELECT log_id, request, capture_id, flow_id, syn_ts_ns, protocol,
        row_number() OVER (PARTITION BY log_id, request ORDER BY capture_id, flow_id) AS pick,
        count(*) OVER (PARTITION BY log_id, request) AS flows_matched
    FROM (SELECT DISTINCT * FROM (SELECT * FROM by_port UNION ALL SELECT * FROM unique_by_time))
),

app_start AS (  -- where application data begins on a flow: after a TLS or QUIC handshake
    SELECT capture_id, flow_id, max(first_data_c2s_ns) AS first_data_c2s_ns
    FROM handshakes WHERE protocol IN ('tls', 'quic') GROUP BY ALL
),

linked_bytes AS (
    SELECT l.log_id, l.request,
        max(a.rel_end) FILTER (a.from_client) - min(a.rel_seq) FILTER (a.from_client) AS up,
        max(a.rel_end) FILTER (NOT a.from_client) - min(a.rel_seq) FILTER (NOT a.from_client) AS down,
        count(*) FILTER (a.from_client) AS packets_up,
        count(*) FILTER (NOT a.from_client) AS packets_down,
        min(a.ts_ns) FILTER (a.from_client) AS req_first, max(a.ts_ns) FILTER (a.from_client) AS req_last,
        min(a.ts_ns) FILTER (NOT a.from_client) AS resp_first, max(a.ts_ns) FILTER (NOT a.from_client) AS resp_last
    FROM links l JOIN ev e USING (log_id, request)
    JOIN tcp_analysis a ON a.capture_id = l.capture_id AND a.flow_id = l.flow_id
     AND a.ts_ns BETWEEN e.start_ns AND e.end_ns AND a.payload_bytes > 0
    LEFT JOIN app_start h ON h.capture_id = l.capture_id AND h.flow_id = l.flow_id
    WHERE l.pick = 1 AND (h.first_data_c2s_ns IS NULL OR a.ts_ns >= h.first_data_c2s_ns)
      AND (e.proxy_done_ns IS NULL OR a.ts_ns > e.proxy_done_ns)  -- not the SOCKS5 negotiation
    GROUP BY ALL
),

tls_response AS (  -- on TLS the first response byte is the first data-sized record after
                  -- the request (a TLS 1.3 server's session tickets come first)
    SELECT b.log_id, b.request, min(a.ts_ns) AS resp_first
    FROM linked_bytes b
    JOIN links l ON l.log_id = b.log_id AND l.request = b.request AND l.pick = 1
    JOIN app_start h ON h.capture_id = l.capture_id AND h.flow_id = l.flow_id
    JOIN tcp_analysis a ON a.capture_id = l.capture_id AND a.flow_id = l.flow_id
     AND NOT a.from_client AND a.ts_ns > b.req_last AND a.ts_ns <= b.resp_last
     AND a.payload_bytes >= 1000
    GROUP BY ALL
),

linked_quic AS (  -- QUIC: the request is the client's first packet after the handshake;
                  -- the response, the server's data-sized datagrams (>= 1000 bytes)
    SELECT l.log_id, l.request,
        min(p.ts_ns) FILTER (p.from_client) AS req_first,
        min(p.ts_ns) FILTER (p.from_client) AS req_last,
        min(p.ts_ns) FILTER (NOT p.from_client AND p.payload_bytes >= 1000) AS resp_first,
        max(p.ts_ns) FILTER (NOT p.from_client AND p.payload_bytes >= 1000) AS resp_last,
        count(*) FILTER (p.from_client) AS packets_up,
        count(*) FILTER (NOT p.from_client) AS packets_down
    FROM links l JOIN ev e USING (log_id, request)
    JOIN packets p ON p.capture_id = l.capture_id AND p.flow_id = l.flow_id
     AND p.ts_ns BETWEEN e.start_ns AND e.end_ns AND p.payload_bytes > 0
    LEFT JOIN app_start h ON h.capture_id = l.capture_id AND h.flow_id = l.flow_id
    WHERE l.pick = 1 AND l.protocol = 'udp'
      AND (h.first_data_c2s_ns IS NULL OR p.ts_ns >= h.first_data_c2s_ns)
    GROUP BY ALL
),

from_events AS (
    SELECT 'log' || e.log_id || ':' || e.request AS request_key, 'events' AS source,
        e.log_id, e.request, e.run, l.capture_id, l.flow_id,
        coalesce(l.flows_matched, 0) AS flows_matched, NULL::BIGINT AS exchange,
        l.protocol,
        coalesce(e.connection,
                 CASE WHEN e.connect_ns IS NOT NULL THEN 'fresh'
                      WHEN l.syn_ts_ns BETWEEN e.start_ns - 1000000 AND e.end_ns THEN 'fresh'
                      WHEN l.flow_id IS NOT NULL THEN 'reused' END) AS connection,
        e.start_ns, coalesce(b.req_first, qb.req_first) AS request_first_byte_ns,
        coalesce(b.req_last, qb.req_last) AS request_last_byte_ns,
        coalesce(tr.resp_first, b.resp_first, qb.resp_first, e.first_byte_ns) AS response_first_byte_ns,
        coalesce(b.resp_last, qb.resp_last) AS response_last_byte_ns,
        e.end_ns, e.end_ns - e.start_ns AS duration_ns,
        coalesce(e.bytes_up, b.up) AS bytes_up, coalesce(e.bytes_down, b.down) AS bytes_down,
        coalesce(b.packets_up, qb.packets_up) AS packets_up,
        coalesce(b.packets_down, qb.packets_down) AS packets_down,
        e.proxy_start_ns, e.proxy_done_ns, false AS cut_by_capture_end
    FROM ev e
    LEFT JOIN links l ON l.log_id = e.log_id AND l.request = e.request AND l.pick = 1
    LEFT JOIN linked_bytes b ON b.log_id = e.log_id AND b.request = e.request
    LEFT JOIN linked_quic qb ON qb.log_id = e.log_id AND qb.request = e.request
    LEFT JOIN tls_response tr ON tr.log_id = e.log_id AND tr.request = e.request
),

tls_start AS (
    SELECT capture_id, flow_id, first_data_c2s_ns FROM handshakes WHERE protocol = 'tls'
),

excluded AS (  -- flows an event request links to, and captures of runs whose logs give
               -- their requests (their other flows are legs of those: a proxy's)
    SELECT capture_id, flow_id FROM links
    UNION
    SELECT f.capture_id, f.flow_id FROM flows f
    WHERE f.capture_id IN (SELECT c.capture_id FROM captures c JOIN event_logs g
                           ON c.labels['run'] = g.labels['run']
                           WHERE g.log_id IN (SELECT log_id FROM ev))
),

plain AS (  -- exchanges of TCP connections without TLS: segmented by the kernel
    SELECT x.capture_id, x.flow_id, x.exchange, x.request_first_byte_ns,
        x.request_last_byte_ns, x.response_first_byte_ns, x.response_last_byte_ns, x.end_ns,
        x.bytes_up, x.bytes_down, x.packets_up, x.packets_down
    FROM exchanges x
    ANTI JOIN tls_start t USING (capture_id, flow_id)
    ANTI JOIN excluded e USING (capture_id, flow_id)
),

data AS (  -- TLS connections: only what follows the handshake counts
    SELECT a.capture_id, a.flow_id, a.frame, a.ts_ns, a.from_client, a.rel_seq,
        a.rel_seq + a.payload_bytes AS rel_end,
        CASE WHEN a.from_client AND coalesce(NOT lag(a.from_client) OVER w, true) THEN 1 ELSE 0 END AS opens
    FROM tcp_analysis a
    JOIN tls_start t USING (capture_id, flow_id)
    ANTI JOIN excluded e USING (capture_id, flow_id)
    WHERE a.payload_bytes > 0 AND (t.first_data_c2s_ns IS NULL OR a.ts_ns >= t.first_data_c2s_ns)
    WINDOW w AS (PARTITION BY a.capture_id, a.flow_id ORDER BY a.frame)
),

numbered AS (
    SELECT *, sum(opens) OVER (PARTITION BY capture_id, flow_id ORDER BY frame) AS exchange FROM data
),

tls_exchanges AS (
    SELECT capture_id, flow_id, exchange,
        min(ts_ns) FILTER (from_client) AS request_first_byte_ns,
        max(ts_ns) FILTER (from_client) AS request_last_byte_ns,
        min(ts_ns) FILTER (NOT from_client) AS response_first_byte_ns,
        max(ts_ns) FILTER (NOT from_client) AS response_last_byte_ns,
        max(ts_ns) AS end_ns,
        max(rel_end) FILTER (from_client) - min(rel_seq) FILTER (from_client) AS bytes_up,
        coalesce(max(rel_end) FILTER (NOT from_client) - min(rel_seq) FILTER (NOT from_client), 0) AS bytes_down,
        count(*) FILTER (from_client) AS packets_up,
        count(*) FILTER (NOT from_client) AS packets_down
    FROM numbered WHERE exchange > 0
    GROUP BY ALL
),

exchanges_all AS (
    SELECT * FROM plain UNION ALL SELECT * FROM tls_exchanges
),

from_flows AS (
    SELECT 'cap' || x.capture_id || ':' || x.flow_id || ':' || x.exchange AS request_key,
        'flows' AS source, NULL::INTEGER AS log_id, NULL AS request,
        c.labels['run'] AS run, x.capture_id, x.flow_id, 1 AS flows_matched, x.exchange,
        CASE WHEN t.flow_id IS NOT NULL THEN 'tls' ELSE 'tcp' END AS protocol,
        CASE WHEN x.exchange = 1 AND f.syn_ts_ns IS NOT NULL THEN 'fresh' ELSE 'reused' END AS connection,
        CASE WHEN x.exchange = 1 AND f.syn_ts_ns IS NOT NULL THEN f.syn_ts_ns
             ELSE x.request_first_byte_ns END AS start_ns,
        x.request_first_byte_ns, x.request_last_byte_ns, x.response_first_byte_ns,
        x.response_last_byte_ns, x.end_ns,
        x.end_ns - (CASE WHEN x.exchange = 1 AND f.syn_ts_ns IS NOT NULL THEN f.syn_ts_ns
                         ELSE x.request_first_byte_ns END) AS duration_ns,
        x.bytes_up, x.bytes_down, x.packets_up, x.packets_down,
        x.exchange = max(x.exchange) OVER (PARTITION BY x.capture_id, x.flow_id)
            AND f.fin_c2s_ts_ns IS NULL AND f.fin_s2c_ts_ns IS NULL AND f.rst_ts_ns IS NULL
            AND c.last_ts_ns - f.last_ts_ns
                <= greatest(3 * coalesce(f.handshake_rtt_ns, 0), 10000000) AS cut_by_capture_end
    FROM exchanges_all x
    JOIN flows f USING (capture_id, flow_id)
    JOIN captures c USING (capture_id)
    LEFT JOIN tls_start t USING (capture_id, flow_id)
),

unioned AS (
    SELECT * FROM from_events
    UNION ALL BY NAME
    SELECT * FROM from_flows
),

final AS (
    SELECT u.*,
        CASE WHEN cardinality(coalesce(lg.labels, MAP {})) > 0 THEN lg.labels ELSE c.labels END AS labels,
        coalesce(v.vantage, 'unknown') AS vantage
    FROM unioned u
    LEFT JOIN event_logs lg USING (log_id)
    LEFT JOIN captures c USING (capture_id)
    LEFT JOIN (SELECT capture_id, flow_id, any_value(vantage) AS vantage FROM rtt_summary
               GROUP BY ALL) v USING (capture_id, flow_id)
)
SELECT * FROM final ORDER BY source, log_id, capture_id, flow_id, exchange, start_ns
