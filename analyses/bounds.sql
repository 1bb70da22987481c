-- bounds: each request's serial lower bound (docs/timing-model.md) and how far above it it was.
--
-- Step: store.
-- Sources: captures, events, flights, flows, requests, rtt_summary.
--
-- Built over the whole store.
-- Definitions:
--   T_serial = S_u / B_u + R + T_c + S_d / B_d   (tracekit.model.serial_time; the
--                    macros tk_transfer_ns and tk_serial_ns are its SQL form)
--   A lower bound: no input is estimated upward. An input the data cannot
--   give is unknown (NULL, its source NULL) and left out of the sum, which
--   is then marked `partial` (still a lower bound, a looser one).
--   S_u, S_d         the request's bytes up and down (requests)
--   path             the request's path group: its `path` label if it has
--                    one, else the server address of its flow
--   R                propagation round trip: the `rtt_ms` label if given, else
--                    the smallest path RTT (rtt_summary.path_rtt_ns) of any
--                    flow on the same path in the store (rtt_source
--                    `min_path_rtt`: nothing on the path was faster); at a
--                    capture point away from the server no more than the
--                    request's own wait for its first response byte (`own_wait`:
--                    a mid-path capture sees only its own leg to the server);
--                    0 at the server (`server_vantage`: no propagation lies
--                    between the request's arrival and the response's
--                    departure) and for a request that got no response
--                    (`no_response`, T_c too)
--   B_u = B_d        the bottleneck rate: the `bottleneck_mbps` label if given,
--                    else, only when some flow on the path shows it was full,
--                    its delivery rate (rate_source `full_path`). Each flight
--                    (flights: one round trip of sending, seen at the sender)
--                    carries the largest delivery rate its ACKs measured (as
--                    tcpi_delivery_rate) and whether an RTT sample showed a
--                    queue (>= 1.25 x the smallest); a flow was full when for 2
--                    flights it delivered within 10 % of its best while a queue
--                    stood or segments were lost: the bottleneck was busy, so
--                    the delivery rate was its rate. B is the best delivery of
--                    the path's full flows. A
--                    sender that never fills the path (paced, window- or
--                    application-limited) shows no such flight, and a capture
--                    near the receiver none at all: B unknown.
--   T_c              processing: the `processing_ms` label if given; else the
--                    request's model_start -> model_end events (any log, same
--                    run and request id); else, at a server-side capture, the
--                    server's own turnaround (last request byte in -> first
--                    response byte out: processing_source `server_packets`);
--                    else unknown (from the client's side the wait for the
--                    first byte holds queueing and the path too)
--   upload_ns, download_ns   S / B; NULL when B is unknown. The measured time
--                    starts at the request's first byte at the capture point
--                    (unless a connection or proxy setup starts it earlier) and
--                    ends at the last response byte: the first segment of each
--                    direction has crossed the bottleneck before it is seen,
--                    so S counts the bytes after it (bytes / packets less)
--   partial          true when R, B or T_c is unknown
--   gap_ns           measured (duration_ns) - bound_ns; ratio measured / bound
-- Columns: request_key, path, bytes_up, bytes_down, rtt_ns, rtt_source, rate_bps,
--   rate_source, processing_ns, processing_source, upload_ns, download_ns,
--   bound_ns, partial, duration_ns, gap_ns, ratio, vantage
WITH req AS (
    SELECT r.*, coalesce(r.labels['path'], f.server_addr) AS path
    FROM requests r LEFT JOIN flows f USING (capture_id, flow_id)
),

path_rtt AS (
    SELECT coalesce(c.labels['path'], f.server_addr) AS path, min(s.path_rtt_ns) AS rtt_ns
    FROM rtt_summary s JOIN flows f USING (capture_id, flow_id) JOIN captures c USING (capture_id)
    WHERE s.path_rtt_ns > 0 GROUP BY ALL
),

rounds AS (  -- each flight (one round trip of sending, at least 4 segments) with its
             -- delivery rate
    SELECT capture_id, flow_id, direction, delivery_rate_bps / 8.0 AS rate_Bps, queued,
        retransmissions
    FROM flights WHERE delivery_rate_bps > 0 AND segments >= 4
),

per_flow AS (
    SELECT capture_id, flow_id, direction, max(rate_Bps) AS best_Bps FROM rounds GROUP BY ALL
),

full_flows AS (  -- a flow direction that stayed full for 2 flights: delivering within
                 -- 10 % of its best while a queue stood on the path or segments were lost
    SELECT r.capture_id, r.flow_id, r.direction, any_value(p.best_Bps) AS best_Bps
    FROM rounds r JOIN per_flow p USING (capture_id, flow_id, direction)
    WHERE r.rate_Bps >= 0.9 * p.best_Bps AND (r.queued OR r.retransmissions > 0)
    GROUP BY ALL HAVING count(*) >= 2
),

path_rate AS (  -- the best delivery of the path's full flows: the bottleneck's rate
    SELECT coalesce(c.labels['path'], fl.server_addr) AS path, max(x.best_Bps) AS rate_Bps
    FROM full_flows x JOIN flows fl USING (capture_id, flow_id) JOIN captures c USING (capture_id)
    GROUP BY ALL
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
             WHEN b.rate_Bps IS NOT NULL THEN 'full_path' END AS rate_source,
        m.ns AS model_ns,
        CASE WHEN q.vantage = 'server'
             THEN q.response_first_byte_ns - q.request_last_byte_ns END AS server_turnaround_ns,
        -- this request's own wait for its first response byte at the capture point:
        -- the round trip between there and the server cannot be longer
        q.response_first_byte_ns - q.request_last_byte_ns AS own_wait_ns,
        q.response_first_byte_ns IS NOT NULL AS answered,
        -- a transfer is timed from its first segment on: the first is not in it
        coalesce(q.bytes_up, 0) - coalesce(q.bytes_up // nullif(q.packets_up, 0), 0) AS timed_up,
        coalesce(q.bytes_down, 0) - coalesce(q.bytes_down // nullif(q.packets_down, 0), 0)
            AS timed_down,
        q.start_ns < coalesce(q.request_first_byte_ns, q.start_ns) AS started_before
    FROM req q
    LEFT JOIN path_rtt p USING (path)
    LEFT JOIN path_rate b USING (path)
    LEFT JOIN model_time m ON m.request = q.request AND m.run IS NOT DISTINCT FROM q.run
),

shaped AS (
    SELECT request_key, path, bytes_up, bytes_down,
        CASE WHEN NOT answered OR vantage = 'server' THEN 0
             ELSE least(rtt_ns, coalesce(own_wait_ns, rtt_ns)) END AS r_ns,
        CASE WHEN NOT answered THEN 'no_response'
             WHEN vantage = 'server' THEN 'server_vantage'
             WHEN own_wait_ns < rtt_ns THEN 'own_wait' ELSE rtt_source END AS r_source,
        round(rate_Bps * 8)::BIGINT AS rate_bps, rate_source,
        CASE WHEN answered THEN
            coalesce(round(TRY_CAST(labels['processing_ms'] AS DOUBLE) * 1e6)::BIGINT, model_ns,
                     CASE WHEN server_turnaround_ns IS NOT NULL
                          THEN greatest(server_turnaround_ns, 0) END) ELSE 0 END AS processing_ns,
        CASE WHEN NOT answered THEN 'no_response'
             WHEN labels['processing_ms'] IS NOT NULL THEN 'given'
             WHEN model_ns IS NOT NULL THEN 'events'
             WHEN server_turnaround_ns IS NOT NULL THEN 'server_packets' END AS processing_source,
        tk_transfer_ns(CASE WHEN started_before THEN coalesce(bytes_up, 0) ELSE timed_up END,
                       rate_Bps) AS upload_ns,
        tk_transfer_ns(timed_down, rate_Bps) AS download_ns,
        duration_ns, vantage
    FROM inputs
),

summed AS (
    SELECT * EXCLUDE (r_ns, r_source), r_ns AS rtt_ns, r_source AS rtt_source,
        tk_serial_ns(upload_ns, r_ns, processing_ns, download_ns) AS bound_ns,
        rate_bps IS NULL OR r_ns IS NULL OR processing_ns IS NULL AS partial
    FROM shaped
),

final AS (
    SELECT request_key, path, bytes_up, bytes_down, rtt_ns, rtt_source, rate_bps, rate_source,
        processing_ns, processing_source, upload_ns, download_ns, bound_ns, partial, duration_ns,
        duration_ns - bound_ns AS gap_ns,
        round(duration_ns / nullif(bound_ns, 0), 3) AS ratio, vantage
    FROM summed
)
SELECT * FROM final ORDER BY request_key
