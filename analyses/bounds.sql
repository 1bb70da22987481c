-- bounds: each request's serial lower bound (DOMAIN.md §2) and how far above it it was.
--
-- Built over the whole store. Sources: requests, rtt_summary, flights, events, captures.
-- Definitions:
--   T_serial = S_u / B_u + R + T_c + S_d / B_d   (tracekit.model.serial_time)
--   S_u, S_d         the request's bytes up and down (requests)
--   path             the request's path group: its `path` label if it has
--                    one, else the server address of its flow
--   R                propagation round trip: the `rtt_ms` label if given, else
--                    the smallest path RTT (rtt_summary.path_rtt_ns) of any
--                    flow on the same path in the store (rtt_source)
--   B_u = B_d        the bottleneck rate: the `bottleneck_mbps` label if given,
--                    else the rate data arrives at the receiver's side of the
--                    path: over every 10 consecutive new segments of a flow
--                    direction captured at its receiver (vantage client for
--                    server data, server for client data), bytes after the
--                    first / their time; the 90th percentile over the path's
--                    flows (rate_source `arrival_rate`). Back-to-back segments
--                    behind a bottleneck arrive at its rate; a path without
--                    one gives the capture point's own link rate. Without a
--                    capture at a receiver, the same over every capture of
--                    the path (`capture_rate`: an upper estimate, senders
--                    burst faster than the bottleneck)
--   T_c              processing: the `processing_ms` label if given; else the
--                    request's model_start -> model_end events (any log, same
--                    run and request id); else the server time seen from the client
--                    (last request byte -> first response byte - R), an
--                    upper estimate because it includes queueing
--                    (processing_source: given | events | server_time)
--   gap_ns           measured (duration_ns) - bound_ns; ratio measured / bound
-- Columns: request_key, path, bytes_up, bytes_down, rtt_ns, rtt_source, rate_bps,
--   rate_source, processing_ns, processing_source, upload_ns, download_ns,
--   bound_ns, duration_ns, gap_ns, ratio, vantage
WITH req AS (
    SELECT r.*, coalesce(r.labels['path'], f.server_addr) AS path
    FROM requests r LEFT JOIN flows f USING (capture_id, flow_id)
),

path_rtt AS (
    SELECT coalesce(c.labels['path'], f.server_addr) AS path, min(s.path_rtt_ns) AS rtt_ns
    FROM rtt_summary s JOIN flows f USING (capture_id, flow_id) JOIN captures c USING (capture_id)
    WHERE s.path_rtt_ns > 0 GROUP BY ALL
),

path_rate AS (  -- arrival rate of back-to-back data at the receiver's side of the path
    SELECT path,
        coalesce(quantile_cont(rate_Bps, 0.9) FILTER (receiver_side),
                 quantile_cont(rate_Bps, 0.9)) AS rate_Bps,
        bool_or(receiver_side) AS at_receiver
    FROM (
        SELECT coalesce(c.labels['path'], f.server_addr) AS path,
            sum(a.payload_bytes) OVER w9 * 1e9 / (a.ts_ns - lag(a.ts_ns, 9) OVER w) AS rate_Bps,
            (v.vantage = 'client' AND NOT a.from_client) OR (v.vantage = 'server' AND a.from_client)
                AS receiver_side
        FROM tcp_analysis a
        JOIN flows f USING (capture_id, flow_id) JOIN captures c USING (capture_id)
        JOIN (SELECT capture_id, flow_id, any_value(vantage) AS vantage FROM rtt_summary
              GROUP BY ALL) v USING (capture_id, flow_id)
        WHERE a.segment = 'new' AND a.payload_bytes > 0
        WINDOW w AS (PARTITION BY a.capture_id, a.flow_id, a.from_client ORDER BY a.frame),
               w9 AS (PARTITION BY a.capture_id, a.flow_id, a.from_client ORDER BY a.frame
                      ROWS BETWEEN 8 PRECEDING AND CURRENT ROW)
        QUALIFY a.ts_ns > lag(a.ts_ns, 9) OVER w
    )
    GROUP BY path
),

model_time AS (  -- per run and request: ids repeat from run to run
    SELECT run, request,
        max(ts_ns) FILTER (kind = 'model_end') - min(ts_ns) FILTER (kind = 'model_start') AS ns,
        count(DISTINCT log_id) AS logs
    FROM events WHERE kind IN ('model_start', 'model_end') AND request IS NOT NULL
    GROUP BY run, request HAVING ns IS NOT NULL
),

inputs AS (
    SELECT q.*,
        coalesce(round(TRY_CAST(q.labels['rtt_ms'] AS DOUBLE) * 1e6)::BIGINT, p.rtt_ns) AS rtt_ns,
        CASE WHEN q.labels['rtt_ms'] IS NOT NULL THEN 'given'
             WHEN p.rtt_ns IS NOT NULL THEN 'min_path_rtt' END AS rtt_source,
        coalesce(TRY_CAST(q.labels['bottleneck_mbps'] AS DOUBLE) * 1e6 / 8, b.rate_Bps) AS rate_Bps,
        CASE WHEN q.labels['bottleneck_mbps'] IS NOT NULL THEN 'given'
             WHEN b.at_receiver THEN 'arrival_rate'
             WHEN b.rate_Bps IS NOT NULL THEN 'capture_rate' END AS rate_source,
        m.ns AS model_ns,
        q.response_first_byte_ns - q.request_last_byte_ns AS server_wait_ns
    FROM req q
    LEFT JOIN path_rtt p USING (path)
    LEFT JOIN path_rate b USING (path)
    LEFT JOIN model_time m ON m.request = q.request AND m.run IS NOT DISTINCT FROM q.run
),

shaped AS (
    SELECT request_key, path, bytes_up, bytes_down, rtt_ns, rtt_source,
        round(rate_Bps * 8)::BIGINT AS rate_bps, rate_source,
        coalesce(round(TRY_CAST(labels['processing_ms'] AS DOUBLE) * 1e6)::BIGINT, model_ns,
                 greatest(server_wait_ns - rtt_ns, 0)) AS processing_ns,
        CASE WHEN labels['processing_ms'] IS NOT NULL THEN 'given'
             WHEN model_ns IS NOT NULL THEN 'events'
             WHEN server_wait_ns IS NOT NULL THEN 'server_time' END AS processing_source,
        round(coalesce(bytes_up, 0) * 1e9 / rate_Bps)::BIGINT AS upload_ns,
        round(coalesce(bytes_down, 0) * 1e9 / rate_Bps)::BIGINT AS download_ns,
        duration_ns, vantage
    FROM inputs
),

final AS (
    SELECT request_key, path, bytes_up, bytes_down, rtt_ns, rtt_source, rate_bps, rate_source,
        processing_ns, processing_source, upload_ns, download_ns,
        upload_ns + rtt_ns + processing_ns + download_ns AS bound_ns, duration_ns,
        duration_ns - (upload_ns + rtt_ns + processing_ns + download_ns) AS gap_ns,
        round(duration_ns / (upload_ns + rtt_ns + processing_ns + download_ns), 3) AS ratio, vantage
    FROM shaped
)
SELECT * FROM final ORDER BY request_key
