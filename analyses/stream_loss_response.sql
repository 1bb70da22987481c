-- stream_loss_response: the loss recovery periods of each multiplexed
-- connection's sender and what it sent during them (issue #27): the
-- evidence tracekit.model's loss-reacting schedule takes (presentation/
-- stream_ablation.py gives it to link_schedule's `slowed`).
--
-- Step: none.
-- Sources: captures, event_logs, events, packets, retransmissions, streams.
--
-- Not a stored table: `tracekit stream-ablation` runs it. The sender's
-- vantage only (s2c), periods that end after the connection's first stream
-- was ready (streams.ready_ns, also a column: the model's time 0):
-- - HTTP/2 (tracekit's stream_sent events, `tracekit h2-events` of the
--   server's capture): the sender's capture is the one of the run (the log's
--   and the capture's `run` label) holding a packet at a stream_sent event's
--   first_ts; a period is a recovery episode of its s2c retransmissions
--   (retransmissions.episode_start_ns .. episode_end_ns: from the first
--   retransmission until the cumulative ACK passed the recovery point,
--   RFC 6582's recovery, during which Reno/CUBIC hold the reduced window);
-- - HTTP/3 (the server's qlog): a period starts at a packet_lost that is not
--   inside an earlier one and ends at the first ACK the server received for
--   a packet it sent after that start (RFC 9002 7.3.2's recovery period).
-- Definitions: per period and stream, new_bytes are the stream bytes the
-- sender sent for the first time during the period (HTTP/2: each DATA
-- frame's first copy, its conn_length, frame header included; HTTP/3: the
-- first packet_sent carrying a stream's offset, the frame's length); a
-- stream with none in the period has a row with 0 if the connection sent any
-- of its bytes at all. last_ns: when the sender sent the stream's last new
-- byte (its last first copy), in or out of any period: after it the stream
-- had nothing left to send, recovery or not.
-- Columns: connection, direction, period, ready_ns, start_ns, end_ns,
--   stream_id, new_bytes, last_ns
WITH ready AS (
    SELECT connection, min(ready_ns) AS ready_ns FROM streams
    WHERE direction = 's2c' AND ready_ns IS NOT NULL GROUP BY connection
),
h2_sent AS (
    SELECT e.fields->>'connection' AS connection, l.labels['run'] AS run, e.fields->>'stream_id' AS stream_id,
        TRY_CAST(e.fields->>'first_ts' AS BIGINT) AS first_ns,
        TRY_CAST(e.fields->>'conn_length' AS BIGINT) AS len
    FROM events e JOIN event_logs l USING (log_id)
    WHERE e.kind = 'stream_sent' AND coalesce(e.fields->>'direction', 's2c') = 's2c'
      AND TRY_CAST(e.fields->>'length' AS BIGINT) > 0
),
h2_capture AS (
    SELECT DISTINCT s.connection, c.capture_id
    FROM h2_sent s JOIN captures c ON c.labels['run'] = s.run
    JOIN packets p ON p.capture_id = c.capture_id AND p.ts_ns = s.first_ns
),
h2_periods AS (
    SELECT DISTINCT k.connection, r.episode_start_ns AS start_ns, r.episode_end_ns AS end_ns
    FROM h2_capture k JOIN retransmissions r USING (capture_id)
    WHERE r.direction = 's2c' AND r.episode_end_ns IS NOT NULL
),
qlog AS (
    SELECT 'qlog:' || coalesce(fields->>'odcid', log_id || ':' || coalesce(fields->>'qlog_trace', '0'))
            AS connection, kind, ts_ns, fields
    FROM events
    WHERE kind IN ('quic_packet_lost', 'quic_packet_sent', 'quic_packet_received')
      AND fields->'vantage_point'->>'type' = 'server'
),
h3_pn AS (
    SELECT connection, ts_ns, TRY_CAST(fields->'data'->'header'->>'packet_number' AS BIGINT) AS pn
    FROM qlog WHERE kind = 'quic_packet_sent' AND fields->'data'->'header'->>'packet_type' = '1RTT'
),
h3_acks AS (
    SELECT connection, ts_ns, TRY_CAST(r->>1 AS BIGINT) AS hi
    FROM (SELECT connection, ts_ns, unnest(CAST(frame->'acked_ranges' AS JSON[])) AS r
          FROM (SELECT connection, ts_ns, unnest(CAST(fields->'data'->'frames' AS JSON[])) AS frame
                FROM qlog WHERE kind = 'quic_packet_received'
                  AND json_type(fields->'data'->'frames') = 'ARRAY'
                  AND fields->'data'->'header'->>'packet_type' = '1RTT')
          WHERE frame->>'frame_type' = 'ack')
),
h3_losses AS (
    SELECT q.connection, q.ts_ns AS start_ns,
        (SELECT min(a.ts_ns) FROM h3_acks a
         WHERE a.connection = q.connection AND a.ts_ns > q.ts_ns
           AND a.hi >= (SELECT min(p.pn) FROM h3_pn p
                        WHERE p.connection = q.connection AND p.ts_ns > q.ts_ns)) AS end_ns
    FROM qlog q WHERE q.kind = 'quic_packet_lost'
),
h3_periods AS (
    -- a loss inside an earlier period does not start one (RFC 9002 7.3.2)
    SELECT l.connection, l.start_ns, l.end_ns FROM h3_losses l
    WHERE l.end_ns IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM h3_losses e WHERE e.connection = l.connection AND e.start_ns < l.start_ns
          AND e.end_ns >= l.start_ns)
),
h3_sent AS (
    SELECT connection, coalesce(frame->>'stream_id', frame->>'id') AS stream_id,
        coalesce(TRY_CAST(frame->>'offset' AS BIGINT), 0) AS off,
        any_value(TRY_CAST(frame->>'length' AS BIGINT)) AS len, min(ts_ns) AS first_ns
    FROM (SELECT connection, ts_ns, unnest(CAST(fields->'data'->'frames' AS JSON[])) AS frame
          FROM qlog WHERE kind = 'quic_packet_sent' AND json_type(fields->'data'->'frames') = 'ARRAY')
    WHERE frame->>'frame_type' = 'stream' GROUP BY ALL
),
periods AS (
    SELECT p.*, row_number() OVER (PARTITION BY p.connection ORDER BY p.start_ns) AS period
    FROM (SELECT * FROM h2_periods UNION ALL SELECT * FROM h3_periods) p
    JOIN ready r USING (connection) WHERE p.end_ns > r.ready_ns
),
sent AS (
    SELECT connection, stream_id, first_ns, len FROM h2_sent
    UNION ALL SELECT connection, stream_id, first_ns, len FROM h3_sent WHERE len > 0
),
final AS (
    SELECT p.connection, 's2c' AS direction, p.period, r.ready_ns, p.start_ns, p.end_ns, s.stream_id,
        sum(CASE WHEN s.first_ns >= p.start_ns AND s.first_ns < p.end_ns THEN s.len ELSE 0 END)
            AS new_bytes, max(s.first_ns) AS last_ns
    FROM periods p JOIN ready r USING (connection) JOIN sent s USING (connection)
    GROUP BY ALL
)
SELECT * FROM final ORDER BY connection, period, TRY_CAST(stream_id AS BIGINT)
