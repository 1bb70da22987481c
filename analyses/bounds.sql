-- bounds: each request's serial lower bound (docs/timing-model.md) and how far above it it was.
--
-- Step: store.
-- Sources: bottleneck, captures, events, exchanges, flows, packets, requests, rtt_summary.
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
--                    departure) unless the client's own log times the request
--                    (its connect_start, connect_end or first_byte events): then
--                    the request's trip here and the response's trip back lie
--                    inside its time, and R is the path's and for a request that got no response
--                    (`no_response`, T_c too)
--   B_u = B_d        the bottleneck rate: the `bottleneck_mbps` label (the lab's) or
--                    the what-if factor's `rate_mbps` if given,
--                    else the request's own flow's, measured from the dispersion
--                    of its segments or ACKs (steps/bottleneck.py, `known`
--                    only; rate_source `trains`), else the median of the known
--                    rates of the other flows of the same capture and path
--                    (`capture_trains`): one run's evidence, never the store's,
--                    so a run's bound does not depend on what else was ingested.
--                    Unknown when none is known: a sender that never sent two
--                    full segments back to back, a handful of segments. A
--                    measured B is refuted (`refuted`, unknown) for a request
--                    whose own bytes crossed faster: S / B longer than its
--                    first to last segment of a direction captured past the
--                    bottleneck (the response away from the server, the
--                    request at it; the sender's side shows them leave into
--                    the queue faster than B) (a sender that
--                    spaced single segments wider than the path does, e.g. BBR
--                    below 1.2 Mbit/s, shows its pacing rate, not the path's).
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
--   headers_up_ns, headers_down_ns   not in the bound: the time the headers of
--                    the request's and the response's packets take at B, which
--                    is measured in IP bytes while S counts payload
--                    (docs/timing-model.md: headers add bytes): S / the flow
--                    direction's segment (its largest payload, at most the
--                    peer's MSS option, else its most common payload; at
--                    least 536 bytes) x the smallest IP and TCP header of a
--                    packet of the direction / B; NULL when B is unknown, the
--                    direction carried no data, or the flow is not TCP (QUIC's
--                    own framing and AEAD tag are inside the UDP payload: the
--                    IP and UDP headers alone would undercount them).
--                    The attribution's `headers` spans are this time where the
--                    phase's states or gaps hold it
--   partial          true when R, B or T_c is unknown
--   gap_ns           measured (duration_ns) - bound_ns; ratio measured / bound
--   refused          an impossible input, and the bound (gap, ratio) NULL: `negative
--                    duration`; `clock: ...` when the request's events contradict
--                    its flow's packets by more than 1 ms (connect_start after the
--                    SYN, connect_end before the SYN-ACK, first_byte before the
--                    flow's first response byte -- the causality of
--                    clock_offset.sql -- or a linked flow with data, none of it
--                    inside the request), naming the offset's least size and the
--                    `tracekit clock` command that estimates and applies it; `bound
--                    above the measured time` (a given label the run contradicts)
-- Columns: request_key, path, bytes_up, bytes_down, rtt_ns, rtt_source, rate_bps,
--   rate_source, processing_ns, processing_source, upload_ns, download_ns,
--   bound_ns, partial, duration_ns, gap_ns, ratio, vantage, refused, headers_up_ns,
--   headers_down_ns
WITH req AS (
    SELECT r.*, coalesce(r.labels['path'], f.server_addr) AS path,
        TRY_CAST(coalesce(r.labels['bottleneck_mbps'], r.labels['rate_mbps']) AS DOUBLE) AS given_mbps
    FROM requests r LEFT JOIN flows f USING (capture_id, flow_id)
),

path_rtt AS (
    SELECT coalesce(c.labels['path'], f.server_addr) AS path, min(s.path_rtt_ns) AS rtt_ns
    FROM rtt_summary s JOIN flows f USING (capture_id, flow_id) JOIN captures c USING (capture_id)
    WHERE s.path_rtt_ns > 0 GROUP BY ALL
),

own_rate AS (  -- the bottleneck of the request's own flow (steps/bottleneck.py): the
               -- response's direction, else the request's
    SELECT capture_id, flow_id, arg_min(rate_bps, direction <> 's2c') / 8.0 AS rate_Bps
    FROM bottleneck WHERE known GROUP BY ALL
),

capture_rate AS (  -- else the median of the capture's other flows on the same path
    SELECT b.capture_id, coalesce(c.labels['path'], f.server_addr) AS path,
        median(b.rate_bps) / 8.0 AS rate_Bps
    FROM bottleneck b JOIN flows f USING (capture_id, flow_id) JOIN captures c USING (capture_id)
    WHERE b.known AND b.direction = 's2c' GROUP BY ALL
),

overhead AS (  -- per TCP flow and direction: a data packet's header bytes, a full segment's
               -- payload: the largest, no more than the peer's MSS option (else the most
               -- common payload: a capture of TSO/GRO packets has no MSS-sized ones) nor
               -- less than 536 bytes (RFC 9293's default; an MSS option of 1 is no segment)
    SELECT o.capture_id, o.flow_id,
        any_value(o.header_bytes) FILTER (o.from_client) AS header_up,
        any_value(least(o.largest, greatest(coalesce(f.server_mss, o.common), 536)))
            FILTER (o.from_client) AS segment_up,
        any_value(o.header_bytes) FILTER (NOT o.from_client) AS header_down,
        any_value(least(o.largest, greatest(coalesce(f.client_mss, o.common), 536)))
            FILTER (NOT o.from_client) AS segment_down
    FROM (SELECT capture_id, flow_id, from_client,
              min(ip_total_bytes - payload_bytes) AS header_bytes, max(payload_bytes) AS largest,
              mode(payload_bytes) AS common
          FROM packets WHERE protocol = 6 AND payload_bytes > 0 AND ip_total_bytes > payload_bytes
          GROUP BY ALL) o
    JOIN flows f USING (capture_id, flow_id)
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
        coalesce(q.given_mbps * 1e6 / 8, o.rate_Bps, b.rate_Bps) AS rate_Bps,
        CASE WHEN q.given_mbps IS NOT NULL THEN 'given'
             WHEN o.rate_Bps IS NOT NULL THEN 'trains'
             WHEN b.rate_Bps IS NOT NULL THEN 'capture_trains' END AS rate_source,
        m.ns AS model_ns, h.header_up, h.segment_up, h.header_down, h.segment_down,
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
        q.start_ns < coalesce(q.request_first_byte_ns, q.start_ns) AS started_before,
        -- timed by the client's own log (its connect or first-byte events): a capture at
        -- the server then lies one way from each end of the measured time
        q.source = 'events' AND EXISTS (SELECT 1 FROM events e WHERE e.log_id = q.log_id
            AND e.request = q.request AND e.kind IN ('connect_start', 'connect_end', 'first_byte'))
            AS client_timed
    FROM req q
    LEFT JOIN path_rtt p USING (path)
    LEFT JOIN own_rate o USING (capture_id, flow_id)
    LEFT JOIN capture_rate b USING (capture_id, path)
    LEFT JOIN overhead h USING (capture_id, flow_id)
    LEFT JOIN model_time m ON m.request = q.request AND m.run IS NOT DISTINCT FROM q.run
),

checked AS (  -- a measured B the request's own bytes crossed faster than is refuted: unknown
    SELECT * REPLACE (CASE WHEN refuted THEN NULL ELSE rate_Bps END AS rate_Bps,
                      CASE WHEN refuted THEN 'refuted' ELSE rate_source END AS rate_source)
    FROM (SELECT *, coalesce(rate_source IN ('trains', 'capture_trains')
                     AND (vantage <> 'server' AND timed_down * 1e9 / rate_Bps
                              > coalesce(response_last_byte_ns - response_first_byte_ns, 0)
                          OR vantage = 'server' AND timed_up * 1e9 / rate_Bps
                              > coalesce(request_last_byte_ns - request_first_byte_ns, 0)), FALSE)
                     AS refuted
          FROM inputs)
),

shaped AS (
    SELECT request_key, path, bytes_up, bytes_down,
        CASE WHEN NOT answered OR vantage = 'server' AND NOT client_timed THEN 0
             WHEN vantage = 'server' THEN rtt_ns
             ELSE least(rtt_ns, coalesce(own_wait_ns, rtt_ns)) END AS r_ns,
        CASE WHEN NOT answered THEN 'no_response'
             WHEN vantage = 'server' AND NOT client_timed THEN 'server_vantage'
             WHEN vantage = 'server' THEN rtt_source
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
        tk_transfer_ns(up_bytes, rate_Bps) AS upload_ns,
        tk_transfer_ns(timed_down, rate_Bps) AS download_ns,
        tk_transfer_ns(up_bytes * header_up / segment_up, rate_Bps) AS headers_up_ns,
        tk_transfer_ns(timed_down * header_down / segment_down, rate_Bps) AS headers_down_ns,
        duration_ns, vantage
    FROM (SELECT *, CASE WHEN started_before THEN coalesce(bytes_up, 0) ELSE timed_up END AS up_bytes
          FROM checked)
),

summed AS (
    SELECT * EXCLUDE (r_ns, r_source), r_ns AS rtt_ns, r_source AS rtt_source,
        tk_serial_ns(upload_ns, r_ns, processing_ns, download_ns) AS bound_ns,
        rate_bps IS NULL OR r_ns IS NULL OR processing_ns IS NULL AS partial
    FROM shaped
),

first_response AS (  -- each TCP flow's first response byte at the capture point
    SELECT capture_id, flow_id, min(response_first_byte_ns) AS first_s2c_ns
    FROM exchanges GROUP BY ALL
),

clock AS (  -- causality between a request's events and its flow's packets (as clock_offset.sql)
    SELECT q.request_key, any_value(q.log_id) AS log_id, any_value(q.capture_id) AS capture_id,
        -- connect_start precedes the SYN: a log that runs late must be moved back
        least(min(f.syn_ts_ns - e.ts_ns) FILTER (e.kind = 'connect_start'), 0) AS late_ns,
        -- connect_end follows the SYN-ACK, first_byte the flow's first response byte
        greatest(max(f.synack_ts_ns - e.ts_ns) FILTER (e.kind = 'connect_end'),
                 max(fr.first_s2c_ns - e.ts_ns) FILTER (e.kind = 'first_byte'), 0) AS early_ns,
        -- linked to a flow that carried data, yet none of it inside the request's time
        any_value(q.request_first_byte_ns IS NULL AND q.response_first_byte_ns IS NULL
                  AND f.payload_bytes_c2s + f.payload_bytes_s2c > 0) AS outside
    FROM requests q JOIN flows f USING (capture_id, flow_id)
    LEFT JOIN events e ON e.log_id = q.log_id AND e.request = q.request
        AND e.kind IN ('connect_start', 'connect_end', 'first_byte')
    LEFT JOIN first_response fr USING (capture_id, flow_id)
    WHERE q.source = 'events' AND f.protocol = 'tcp'
    GROUP BY q.request_key
),

checked_bound AS (  -- impossible inputs: the bound is refused, with the reason
    SELECT s.*, c.log_id, c.capture_id,
        CASE WHEN s.duration_ns < 0 THEN 'negative duration'
             WHEN c.late_ns < -1000000 OR c.early_ns > 1000000 OR c.outside
                 THEN 'clock: log ' || c.log_id
                      || CASE WHEN c.early_ns > 1000000
                              THEN ' runs at least ' || round(c.early_ns / 1e6, 1) || ' ms early'
                              WHEN c.late_ns < -1000000
                              THEN ' runs at least ' || round(-c.late_ns / 1e6, 1) || ' ms late'
                              ELSE ' puts the request outside its flow''s packets' END
                      || ' against capture ' || c.capture_id
                      || ' (tracekit clock ' || c.log_id || ' --capture ' || c.capture_id || ')'
             WHEN s.bound_ns > s.duration_ns THEN 'bound above the measured time' END AS refused
    FROM summed s LEFT JOIN clock c USING (request_key)
),

final AS (
    SELECT request_key, path, bytes_up, bytes_down, rtt_ns, rtt_source, rate_bps, rate_source,
        processing_ns, processing_source, upload_ns, download_ns,
        CASE WHEN refused IS NULL THEN bound_ns END AS bound_ns, partial OR refused IS NOT NULL AS partial,
        duration_ns, CASE WHEN refused IS NULL THEN duration_ns - bound_ns END AS gap_ns,
        CASE WHEN refused IS NULL THEN round(duration_ns / nullif(bound_ns, 0), 3) END AS ratio,
        vantage, refused, headers_up_ns, headers_down_ns
    FROM checked_bound
)
SELECT * FROM final ORDER BY request_key
