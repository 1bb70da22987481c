-- stream_repairs: the holes of each stream at its receiver and when each
-- hole's repair arrived (issue #27): the loss-recovery times tracekit.model's
-- delivery_times takes as input, measured (presentation/stream_ablation.py
-- feeds them to the model for the lossy cells).
--
-- Step: none.
-- Sources: captures, event_logs, events, retransmissions, streams, tcp_analysis.
--
-- Not a stored table: `tracekit stream-ablation` runs it. A piece is one
-- arrival of a stream's bytes at the receiver, as streams.sql reads them:
-- the client's qlog STREAM frames (quic_packet_received, per-stream order)
-- or tracekit's stream_arrived events (HTTP/2 frames placed in the TCP byte
-- stream from the receiver's capture by `tracekit h2-events`, connection
-- order). Only a piece's first arrival at its offset counts (a duplicate is
-- no repair), only data (length > 0, not conn_only) of streams the sender's
-- application made ready (streams.ready_ns).
-- Definitions: a piece is a repair when
-- - (found_by 'order', the receiver's evidence) before it arrived, a byte
--   after it in its delivery order had arrived -- a later connection offset
--   (conn_offset: one byte stream) else a later offset of its own stream:
--   the bytes it carries had been missing below bytes already received, a
--   hole; or
-- - (found_by 'resent', the sender's evidence: a tail loss, after which
--   nothing later arrived before the repair, is a repair too) the copy that
--   arrived first was a re-send: HTTP/3, the sender's qlog had sent bytes of
--   the piece's range of its stream in a packet before the one the receiver
--   got them in (quic_packet_sent, same packet number space and number as
--   the arrival); HTTP/2, the receiver's capture packet at the piece's time
--   (tcp_analysis: the capture of the run -- the `run` label of the log and
--   the capture -- holding a packet of the piece's direction at that time)
--   carries TCP sequence numbers the sender's capture (the run's capture
--   holding a packet at a stream_sent event's first_ts) retransmitted
--   (retransmissions, same direction) before that arrival.
-- repaired_ns is when the piece arrived: when the hole was filled.
-- found_by: 'order' when the receiver's order shows it (whatever the
-- sender's record says), else 'resent'; resent: whether the sender's record
-- shows the first copy to arrive was a re-send.
-- Columns: connection, direction, stream_id, offset, length, repaired_ns,
--   ready_ns, bytes, found_by, resent
WITH quic_frames AS (
    -- the STREAM frames of the qlogs' packets, received and sent; the
    -- direction is the bytes': a client receives and a server sends s2c
    SELECT 'qlog:' || coalesce(fields->>'odcid', log_id || ':' || coalesce(fields->>'qlog_trace', '0'))
            AS connection,
        kind = 'quic_packet_sent' AS sent,
        CASE WHEN (fields->'vantage_point'->>'type' = 'client') = (kind = 'quic_packet_received')
             THEN 's2c' ELSE 'c2s' END AS direction,
        fields->'vantage_point'->>'type' IN ('client', 'server') AS known,
        fields->'data'->'header'->>'packet_type' AS space,
        TRY_CAST(fields->'data'->'header'->>'packet_number' AS BIGINT) AS pn,
        ts_ns, unnest(CAST(fields->'data'->'frames' AS JSON[])) AS frame
    FROM events
    WHERE kind IN ('quic_packet_received', 'quic_packet_sent')
        AND json_type(fields->'data'->'frames') = 'ARRAY'
),
quic_data AS (
    SELECT connection, sent, CASE WHEN known THEN direction END AS direction, space, pn, ts_ns,
        coalesce(frame->>'stream_id', frame->>'id') AS stream_id,
        coalesce(TRY_CAST(frame->>'offset' AS BIGINT), 0) AS off,
        TRY_CAST(frame->>'length' AS BIGINT) AS len
    FROM quic_frames WHERE frame->>'frame_type' = 'stream'
),
pieces AS (
    SELECT connection, direction, stream_id, ts_ns, off, len, NULL::BIGINT AS conn_off,
        space, pn, NULL::VARCHAR AS run
    FROM quic_data WHERE NOT sent
    UNION ALL
    SELECT e.fields->>'connection', coalesce(e.fields->>'direction', 's2c'), e.fields->>'stream_id',
        e.ts_ns, TRY_CAST(e.fields->>'offset' AS BIGINT), TRY_CAST(e.fields->>'length' AS BIGINT),
        TRY_CAST(e.fields->>'conn_offset' AS BIGINT), NULL, NULL, l.labels['run']
    FROM events e JOIN event_logs l USING (log_id)
    WHERE e.kind = 'stream_arrived' AND NOT coalesce(TRY_CAST(e.fields->>'conn_only' AS BOOLEAN), false)
),
firsts AS (
    SELECT connection, direction, stream_id, off, len, any_value(conn_off) AS conn_off,
        min(ts_ns) AS ts_ns, arg_min(space, ts_ns) AS space, arg_min(pn, ts_ns) AS pn,
        any_value(run) AS run
    FROM pieces WHERE len > 0 AND off >= 0 GROUP BY connection, direction, stream_id, off, len
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
quic_sent_data AS (
    SELECT * FROM quic_data WHERE sent
),
quic_resent AS (
    -- the arriving packet's own send, and an earlier send of bytes of the piece
    SELECT DISTINCT f.connection, f.direction, f.stream_id, f.off, f.len
    FROM firsts f
    JOIN quic_sent_data a ON a.connection = f.connection AND a.direction = f.direction
        AND a.space = f.space AND a.pn = f.pn AND a.stream_id = f.stream_id
    JOIN quic_sent_data b ON b.connection = f.connection AND b.direction = f.direction
        AND b.stream_id = f.stream_id AND b.ts_ns < a.ts_ns
        AND b.off < f.off + f.len AND f.off < b.off + b.len AND b.len > 0
    WHERE f.conn_off IS NULL AND f.pn IS NOT NULL
),
h2_sender AS (
    SELECT DISTINCT e.fields->>'connection' AS connection, c.capture_id
    FROM events e JOIN event_logs l USING (log_id)
    JOIN captures c ON c.labels['run'] = l.labels['run']
    JOIN tcp_analysis t ON t.capture_id = c.capture_id
        AND t.ts_ns = TRY_CAST(e.fields->>'first_ts' AS BIGINT)
        AND t.from_client = (coalesce(e.fields->>'direction', 's2c') = 'c2s')
    WHERE e.kind = 'stream_sent' AND TRY_CAST(e.fields->>'length' AS BIGINT) > 0
),
h2_arrival AS (
    -- the receiver's capture packet at the piece's time: its sequence numbers
    SELECT f.connection, f.direction, f.stream_id, f.off, f.len, f.ts_ns, t.rel_seq, t.rel_end
    FROM firsts f JOIN captures c ON c.labels['run'] = f.run
    JOIN tcp_analysis t ON t.capture_id = c.capture_id AND t.ts_ns = f.ts_ns
        AND t.from_client = (f.direction = 'c2s') AND t.payload_bytes > 0
    WHERE f.conn_off IS NOT NULL
),
h2_resent AS (
    SELECT DISTINCT a.connection, a.direction, a.stream_id, a.off, a.len
    FROM h2_arrival a JOIN h2_sender k USING (connection)
    JOIN retransmissions r ON r.capture_id = k.capture_id AND r.direction = a.direction
        AND r.ts_ns < a.ts_ns AND r.rel_seq < a.rel_end AND a.rel_seq < r.rel_end
),
resent AS (
    SELECT * FROM quic_resent UNION SELECT * FROM h2_resent
),
final AS (
    SELECT o.connection, o.direction, o.stream_id, o.off AS "offset", o.len AS length,
        o.ts_ns AS repaired_ns, s.ready_ns, s.bytes,
        CASE WHEN o.repair THEN 'order' ELSE 'resent' END AS found_by,
        x.off IS NOT NULL AS resent
    FROM ordered o JOIN streams s USING (connection, direction, stream_id)
    LEFT JOIN resent x USING (connection, direction, stream_id, off, len)
    WHERE (o.repair OR x.off IS NOT NULL) AND s.ready_ns IS NOT NULL
)
SELECT * FROM final ORDER BY connection, repaired_ns, stream_id, "offset"
