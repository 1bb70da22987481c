-- stream_repairs: the holes of each stream at its receiver and when each
-- hole's repair arrived (issue #27): the loss-recovery times tracekit.model's
-- delivery_times takes as input, measured (presentation/stream_ablation.py
-- feeds them to the model for the lossy cells).
--
-- Step: none.
-- Sources: events, streams.
--
-- Not a stored table: `tracekit stream-ablation` runs it. A piece is one
-- arrival of a stream's bytes at the receiver, as streams.sql reads them:
-- the client's qlog STREAM frames (quic_packet_received, per-stream order)
-- or tracekit's stream_arrived events (HTTP/2 frames placed in the TCP byte
-- stream from the receiver's capture by `tracekit h2-events`, connection
-- order). Only a piece's first arrival at its offset counts (a duplicate is
-- no repair), only data (length > 0, not conn_only) of streams the sender's
-- application made ready (streams.ready_ns).
-- Definitions: a piece is a repair when, before it arrived, a byte after it
-- in its delivery order had arrived -- a later connection offset
-- (conn_offset: one byte stream) else a later offset of its own stream: the
-- bytes it carries had been missing below bytes already received, a hole,
-- and repaired_ns is when the hole was filled.
-- Columns: connection, direction, stream_id, offset, length, repaired_ns,
--   ready_ns, bytes
WITH arrived AS (
    SELECT 'qlog:' || coalesce(fields->>'odcid', log_id || ':' || coalesce(fields->>'qlog_trace', '0'))
            AS connection,
        CASE fields->'vantage_point'->>'type' WHEN 'client' THEN 's2c' WHEN 'server' THEN 'c2s' END
            AS direction,
        ts_ns, unnest(CAST(fields->'data'->'frames' AS JSON[])) AS frame
    FROM events
    WHERE kind = 'quic_packet_received' AND json_type(fields->'data'->'frames') = 'ARRAY'
),
pieces AS (
    SELECT connection, direction, coalesce(frame->>'stream_id', frame->>'id') AS stream_id, ts_ns,
        coalesce(TRY_CAST(frame->>'offset' AS BIGINT), 0) AS off,
        TRY_CAST(frame->>'length' AS BIGINT) AS len, NULL::BIGINT AS conn_off
    FROM arrived WHERE frame->>'frame_type' = 'stream'
    UNION ALL
    SELECT fields->>'connection', coalesce(fields->>'direction', 's2c'), fields->>'stream_id', ts_ns,
        TRY_CAST(fields->>'offset' AS BIGINT), TRY_CAST(fields->>'length' AS BIGINT),
        TRY_CAST(fields->>'conn_offset' AS BIGINT)
    FROM events
    WHERE kind = 'stream_arrived' AND NOT coalesce(TRY_CAST(fields->>'conn_only' AS BOOLEAN), false)
),
firsts AS (
    SELECT connection, direction, stream_id, off, len, any_value(conn_off) AS conn_off,
        min(ts_ns) AS ts_ns
    FROM pieces WHERE len > 0 AND off >= 0 GROUP BY ALL
),
ordered AS (
    SELECT *,
        CASE WHEN conn_off IS NOT NULL
             THEN max(conn_off + len) OVER (PARTITION BY connection, direction ORDER BY ts_ns
                      RANGE BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) > conn_off + len
             ELSE max(off + len) OVER (PARTITION BY connection, direction, stream_id ORDER BY ts_ns
                      RANGE BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) > off + len
        END AS repair
    FROM firsts
),
final AS (
    SELECT o.connection, o.direction, o.stream_id, o.off AS "offset", o.len AS length,
        o.ts_ns AS repaired_ns, s.ready_ns, s.bytes
    FROM ordered o JOIN streams s USING (connection, direction, stream_id)
    WHERE o.repair AND s.ready_ns IS NOT NULL
)
SELECT * FROM final ORDER BY connection, repaired_ns, stream_id, "offset"
