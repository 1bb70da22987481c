-- streams: per stream of a connection (one direction of it), when its bytes
-- left the sender, arrived, were complete and could be handed to the
-- application; head-of-line time and on-time media (issue #27,
-- docs/timing-model.md "Multiplexed streams").
--
-- Step: store.
-- Sources: events.
--
-- Built over the whole store. A piece is a contiguous run of one stream's
-- bytes at one instant, seen at one side (sent or arrived):
--   qlog        quic_packet_sent / quic_packet_received events' STREAM frames
--               (stream_id or id, offset, length); the trace's vantage point
--               gives the direction (a client's sent frames are c2s; a
--               'network' trace of flow 'client' counts as the client; no
--               vantage: 'out'/'in'); the connection is `qlog:<ODCID>` (so a
--               client's and a server's trace of it meet), else
--               `qlog:<log>:<trace>`. Per-stream delivery (QUIC).
--   tracekit    events stream_sent / stream_arrived with `connection`,
--               `stream_id`, `offset`, `length`, optional `direction`
--               (default s2c) and `conn_offset`: the piece's place in one
--               connection-wide byte stream (HTTP/2 over TCP: `tracekit
--               h2-events` writes these from a capture), `conn_length` (the
--               bytes it holds there, default `length`) and `conn_only` (a piece
--               of the connection's byte stream that is no stream's data: HTTP/2
--               HEADERS, SETTINGS...). With conn_offset the stream is delivered
--               in connection order, without it per stream. `first_ts`: when
--               the piece's first byte was seen (default: its time).
--               stream_ready (the sender's application queued the stream),
--               stream_read (the receiver's application read all of it) and
--               stream_chunk (`end_offset`, `play_ns`, `duration_ns`, optional
--               `ready_ns`: a timed media chunk ending at that stream offset)
--               are read as they say. `fin` (END_STREAM: tracekit h2-events
--               sets it) marks a stream's last piece, `reset` (RST_STREAM) a
--               stream abandoned.
--   A connection is one of its run: the same name in two runs (a reused
--   client port, a name given twice) is two connections; a stream_ready,
--   stream_read or stream_chunk without a run belongs to the one run whose
--   pieces use that name.
-- Definitions (each NULL where no piece of that side was seen):
--   bytes            max(offset + length) over the stream's pieces
--   first/last_sent  the stream's first byte sent (the earliest first_ts) / the
--                    latest first send of a byte
--   first/last_arrived  the same at the receiver
--   complete_ns      every byte [0, bytes) arrived: the latest first arrival of
--                    a byte; NULL while a byte never arrived, and, where the
--                    connection's source marks streams' ends (h2-events; a
--                    qlog whose STREAM frames carry fin), while the
--                    direction's end was not seen
--   ended            the direction's end was seen (END_STREAM, fin); false where
--                    the source marks ends and this one's was not (the capture
--                    or log stopped before it, or the stream was reset first);
--                    NULL where it marks none
--   reset            a reset of the stream was seen (RST_STREAM; either side,
--                    before or after its end: a server may reset a request it no
--                    longer reads after a whole response, RFC 9113 8.1)
--   deliverable_ns   per-stream order: complete_ns. Connection order: the
--                    in-order point of the connection's byte stream at the
--                    stream's last byte (every byte before it on the
--                    connection arrived)
--   hol_ns           deliverable_ns - complete_ns
--   held_by          the stream whose byte arrived last before the stream's
--                    end on the connection (the hole), when hol_ns > 0
--   hol_blocking_ns  span hol_blocking (tracekit/core/spans.py STREAM_SPANS):
--                    hol_ns when held_by names another stream; 0 when hol_ns
--                    is 0; NULL otherwise (nothing explains it)
--   stream_queueing_ns  span stream_queueing: while the stream waited -- each
--                    chunk from its ready_ns to its last byte's send, else from
--                    ready (else first_sent) to last_sent -- the time between
--                    consecutive sends on the connection (same direction) that
--                    ended with another stream's piece: the sender sent other
--                    streams' bytes while this one had bytes ready
--   bytes_ahead      other streams' bytes sent in that window
--   run              the events' run (NULL from a qlog)
--   read_ns          the receiver application's stream_read
--   on_time_s        seconds of the stream's chunks whose bytes were
--                    deliverable by their play_ns; chunks: how many
-- Columns: run, source, connection, direction, stream_id, delivery, bytes, ready_ns,
--   first_sent_ns, last_sent_ns, first_arrived_ns, last_arrived_ns, complete_ns,
--   deliverable_ns, hol_ns, held_by, hol_blocking_ns, stream_queueing_ns,
--   bytes_ahead, read_ns, chunks, on_time_s, ended, reset
WITH qlog_frames AS (
    SELECT ts_ns, kind, run, 'qlog:' || coalesce(fields->>'odcid', log_id || ':' || coalesce(fields->>'qlog_trace', '0'))
            AS connection,
        CASE WHEN fields->'vantage_point'->>'type' = 'client'
                  OR (fields->'vantage_point'->>'type' = 'network'
                      AND fields->'vantage_point'->>'flow' = 'client') THEN 'client'
             WHEN fields->'vantage_point'->>'type' = 'server' THEN 'server' END AS role,
        unnest(CAST(fields->'data'->'frames' AS JSON[])) AS frame
    FROM events
    WHERE kind IN ('quic_packet_sent', 'quic_packet_received')
      AND json_type(fields->'data'->'frames') = 'ARRAY'
),
pieces AS (
    SELECT 'qlog' AS source, connection,
        CASE WHEN kind = 'quic_packet_sent' THEN 'sent' ELSE 'arrived' END AS side,
        CASE role WHEN 'client' THEN (CASE WHEN kind = 'quic_packet_sent' THEN 'c2s' ELSE 's2c' END)
                  WHEN 'server' THEN (CASE WHEN kind = 'quic_packet_sent' THEN 's2c' ELSE 'c2s' END)
                  ELSE (CASE WHEN kind = 'quic_packet_sent' THEN 'out' ELSE 'in' END) END AS direction,
        coalesce(frame->>'stream_id', frame->>'id') AS stream_id, ts_ns,
        coalesce(TRY_CAST(frame->>'offset' AS BIGINT), 0) AS off,
        TRY_CAST(frame->>'length' AS BIGINT) AS len, ts_ns AS first_ts_ns, NULL::BIGINT AS conn_off,
        NULL::BIGINT AS conn_len, false AS conn_only, run,
        coalesce(TRY_CAST(frame->>'fin' AS BOOLEAN), false) AS fin, false AS reset,
        (frame->'fin') IS NOT NULL AS tells_ends  -- the trace writes a STREAM frame's fin
    FROM qlog_frames WHERE frame->>'frame_type' = 'stream'
    UNION ALL
    SELECT 'tracekit', fields->>'connection',
        CASE kind WHEN 'stream_sent' THEN 'sent' ELSE 'arrived' END,
        coalesce(fields->>'direction', 's2c'), fields->>'stream_id', ts_ns,
        TRY_CAST(fields->>'offset' AS BIGINT), TRY_CAST(fields->>'length' AS BIGINT),
        least(ts_ns, coalesce(TRY_CAST(fields->>'first_ts' AS BIGINT), ts_ns)),
        TRY_CAST(fields->>'conn_offset' AS BIGINT),
        coalesce(TRY_CAST(fields->>'conn_length' AS BIGINT), TRY_CAST(fields->>'length' AS BIGINT)),
        coalesce(TRY_CAST(fields->>'conn_only' AS BOOLEAN), false), run,
        coalesce(TRY_CAST(fields->>'fin' AS BOOLEAN), false),
        coalesce(TRY_CAST(fields->>'reset' AS BOOLEAN), false),
        -- a log that marks streams' ends (h2-events' `ends`), or writes fin at all
        (fields->'ends') IS NOT NULL OR (fields->'fin') IS NOT NULL
    FROM events WHERE kind IN ('stream_sent', 'stream_arrived')
),
p AS (  -- a connection is named within its run: the key is run, chr(1), name
    SELECT * REPLACE (coalesce(run, '') || chr(1) || connection AS connection) FROM pieces
    WHERE stream_id IS NOT NULL AND connection IS NOT NULL AND off >= 0 AND len >= 0
),
stream_ends AS (  -- per stream: its end seen (either side), a reset of it (either direction)
    SELECT connection, direction, stream_id, fin,
        bool_or(reset) OVER (PARTITION BY connection, stream_id) AS reset,
        bool_or(tells_ends) OVER (PARTITION BY connection) AS marks_ends
    FROM (SELECT connection, direction, stream_id, bool_or(fin) AS fin, bool_or(reset) AS reset,
              bool_or(tells_ends) AS tells_ends
          FROM p GROUP BY connection, direction, stream_id)
),

-- elementary byte intervals of each stream (axis 'stream') and of each
-- connection's byte stream (axis 'conn'), with the first time any piece held them
axis AS (
    SELECT connection, direction, stream_id AS axis_key, side, off AS lo, off + len AS hi, ts_ns
    FROM p WHERE NOT conn_only
    UNION ALL
    SELECT connection, direction, NULL, side, conn_off, conn_off + conn_len, ts_ns FROM p
    WHERE conn_off IS NOT NULL
),
bounds AS (
    SELECT DISTINCT connection, direction, axis_key, side, b
    FROM (SELECT connection, direction, axis_key, side, lo AS b FROM axis
          UNION ALL SELECT connection, direction, axis_key, side, hi FROM axis)
),
cells AS (
    SELECT connection, direction, axis_key, side, b AS lo,
        lead(b) OVER (PARTITION BY connection, direction, axis_key, side ORDER BY b) AS hi
    FROM bounds
),
firsts AS (
    SELECT c.connection, c.direction, c.axis_key, c.side, c.lo, c.hi, min(a.ts_ns) AS first_ns
    FROM cells c LEFT JOIN axis a
      ON a.connection = c.connection AND a.direction = c.direction AND a.side = c.side
     AND a.axis_key IS NOT DISTINCT FROM c.axis_key AND a.lo <= c.lo AND a.hi >= c.hi
    WHERE c.hi IS NOT NULL
    GROUP BY ALL
),
in_order AS (  -- the time every byte up to hi had been held (NULL after a byte never seen)
    SELECT *, CASE WHEN bool_and(first_ns IS NOT NULL) OVER w
                        AND min(lo) OVER w = (CASE WHEN axis_key IS NULL THEN min(lo) OVER w ELSE 0 END)
                   THEN max(first_ns) OVER w END AS point_ns,
        max(first_ns) OVER w AS latest_ns
    FROM firsts
    WINDOW w AS (PARTITION BY connection, direction, axis_key, side ORDER BY lo
                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
per_stream AS (
    SELECT source, connection, direction, stream_id, any_value(run) AS run,
        max(off + len) AS bytes, max(conn_off + conn_len) AS conn_end,
        CASE WHEN count(conn_off) > 0 THEN 'connection' ELSE 'stream' END AS delivery,
        min(first_ts_ns) FILTER (side = 'sent') AS first_sent_ns,
        min(first_ts_ns) FILTER (side = 'arrived') AS first_arrived_ns
    FROM p WHERE NOT conn_only GROUP BY ALL
),
ends AS (
    SELECT s.*, st.latest_ns AS last_sent_ns, ar.latest_ns AS last_arrived_ns,
        CASE WHEN ar.hi = s.bytes AND NOT (se.marks_ends AND NOT se.fin)
             THEN ar.point_ns END AS complete_ns,
        CASE WHEN se.marks_ends THEN se.fin END AS ended, se.reset
    FROM per_stream s
    JOIN stream_ends se USING (connection, direction, stream_id)
    LEFT JOIN in_order st ON st.connection = s.connection AND st.direction = s.direction
        AND st.axis_key = s.stream_id AND st.side = 'sent' AND st.hi = s.bytes
    LEFT JOIN in_order ar ON ar.connection = s.connection AND ar.direction = s.direction
        AND ar.axis_key = s.stream_id AND ar.side = 'arrived' AND ar.hi = s.bytes
),
delivered AS (
    SELECT e.*, CASE WHEN e.delivery = 'stream' THEN e.complete_ns
                     WHEN e.complete_ns IS NOT NULL THEN c.point_ns END AS deliverable_ns
    FROM ends e LEFT JOIN in_order c ON e.delivery = 'connection' AND c.connection = e.connection
        AND c.direction = e.direction AND c.axis_key IS NULL AND c.side = 'arrived' AND c.hi = e.conn_end
),
hole AS (  -- which stream's bytes, before the stream's end on the connection, arrived last
    SELECT d.connection, d.direction, d.stream_id, arg_max(o.stream_id, o.ts_ns) AS held_by
    FROM delivered d JOIN p o ON o.connection = d.connection AND o.direction = d.direction
        AND o.side = 'arrived' AND o.conn_off IS NOT NULL AND o.conn_off < d.conn_end
        AND o.ts_ns = d.deliverable_ns
    WHERE d.deliverable_ns > d.complete_ns
    GROUP BY ALL
),
one_run AS (  -- a connection name used by one run only: a mark without a run (an
              -- application's log beside h2-events' --run) is that run's
    SELECT connection AS name, any_value(run) AS run FROM pieces
    GROUP BY connection HAVING count(DISTINCT run) = 1 AND count(run) = count(*)
),
mark_events AS (
    SELECT e.*, coalesce(e.run, o.run, '') || chr(1) || (e.fields->>'connection') AS key
    FROM events e LEFT JOIN one_run o ON o.name = (e.fields->>'connection')
    WHERE e.kind IN ('stream_ready', 'stream_read', 'stream_chunk')
),
marks AS (
    SELECT key AS connection, coalesce(fields->>'direction', 's2c') AS direction,
        fields->>'stream_id' AS stream_id,
        min(ts_ns) FILTER (kind = 'stream_ready') AS ready_ns,
        min(ts_ns) FILTER (kind = 'stream_read') AS read_ns
    FROM mark_events WHERE kind IN ('stream_ready', 'stream_read') GROUP BY ALL
),
sends AS (  -- each send on a connection's direction owns the time since the one before it
    SELECT connection, direction, stream_id, len, ts_ns,
        lag(ts_ns) OVER (PARTITION BY connection, direction ORDER BY ts_ns, off) AS prev_ns
    FROM p WHERE side = 'sent' AND NOT conn_only
),
chunk_events AS (
    SELECT key AS connection, coalesce(fields->>'direction', 's2c') AS direction,
        fields->>'stream_id' AS stream_id, TRY_CAST(fields->>'end_offset' AS BIGINT) AS end_offset,
        TRY_CAST(fields->>'ready_ns' AS BIGINT) AS ready_ns,
        TRY_CAST(fields->>'play_ns' AS BIGINT) AS play_ns,
        TRY_CAST(fields->>'duration_ns' AS BIGINT) AS duration_ns
    FROM mark_events WHERE kind = 'stream_chunk'
),
waits AS (  -- when the stream had bytes ready and not yet sent: each chunk with a ready
            -- time until its last byte was sent, else [ready (else first sent), last sent]
    SELECT c.connection, c.direction, c.stream_id, c.ready_ns AS lo, s.latest_ns AS hi
    FROM chunk_events c JOIN in_order s ON s.connection = c.connection AND s.direction = c.direction
        AND s.axis_key = c.stream_id AND s.side = 'sent' AND c.end_offset - 1 >= s.lo
        AND c.end_offset - 1 < s.hi
    WHERE c.ready_ns IS NOT NULL
    UNION ALL
    SELECT d.connection, d.direction, d.stream_id, coalesce(m.ready_ns, d.first_sent_ns), d.last_sent_ns
    FROM delivered d LEFT JOIN marks m USING (connection, direction, stream_id)
    WHERE NOT EXISTS (SELECT 1 FROM chunk_events c WHERE c.ready_ns IS NOT NULL
                      AND (c.connection, c.direction, c.stream_id) = (d.connection, d.direction, d.stream_id))
),
islands AS (  -- overlapping waits as one
    SELECT connection, direction, stream_id, min(lo) AS lo, max(hi) AS hi
    FROM (SELECT *, sum(CASE WHEN lo <= prev_hi THEN 0 ELSE 1 END) OVER (
                   PARTITION BY connection, direction, stream_id ORDER BY lo, hi) AS island
          FROM (SELECT *, max(hi) OVER (PARTITION BY connection, direction, stream_id ORDER BY lo, hi
                                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_hi
                FROM waits WHERE lo IS NOT NULL AND hi IS NOT NULL))
    GROUP BY connection, direction, stream_id, island
),
queueing AS (
    SELECT w.connection, w.direction, w.stream_id,
        sum(o.ts_ns - greatest(o.prev_ns, w.lo)) FILTER (o.stream_id <> w.stream_id)::BIGINT
            AS stream_queueing_ns,
        sum(o.len) FILTER (o.stream_id <> w.stream_id)::BIGINT AS bytes_ahead
    FROM islands w JOIN sends o ON o.connection = w.connection AND o.direction = w.direction
        AND o.prev_ns IS NOT NULL AND o.ts_ns > w.lo AND o.ts_ns <= w.hi
    GROUP BY ALL
),
chunk_at AS (  -- a chunk's last byte on the delivery axis
    SELECT c.*, d.delivery, coalesce(pc.conn_off + (c.end_offset - 1 - pc.off), c.end_offset - 1) AS at
    FROM chunk_events c
    JOIN delivered d USING (connection, direction, stream_id)
    LEFT JOIN (SELECT DISTINCT connection, direction, stream_id, off, len,
                   conn_off + conn_len - len AS conn_off FROM p
               WHERE conn_off IS NOT NULL AND NOT conn_only) pc
      ON d.delivery = 'connection' AND pc.connection = c.connection AND pc.direction = c.direction
     AND pc.stream_id = c.stream_id AND c.end_offset - 1 >= pc.off AND c.end_offset - 1 < pc.off + pc.len
),
chunks AS (
    SELECT k.connection, k.direction, k.stream_id, count(*) AS chunks,
        coalesce(sum(k.duration_ns) FILTER (i.point_ns <= k.play_ns), 0) / 1e9 AS on_time_s
    FROM chunk_at k LEFT JOIN in_order i ON i.connection = k.connection AND i.direction = k.direction
        AND i.side = 'arrived' AND k.at >= i.lo AND k.at < i.hi
        AND i.axis_key IS NOT DISTINCT FROM (CASE WHEN k.delivery = 'stream' THEN k.stream_id END)
    GROUP BY ALL
),
final AS (
    SELECT d.run, d.source, substr(d.connection, strpos(d.connection, chr(1)) + 1) AS connection,
        d.direction, d.stream_id, d.delivery, d.bytes, m.ready_ns,
        d.first_sent_ns, d.last_sent_ns, d.first_arrived_ns, d.last_arrived_ns, d.complete_ns,
        d.deliverable_ns, d.deliverable_ns - d.complete_ns AS hol_ns, h.held_by,
        CASE WHEN d.deliverable_ns = d.complete_ns THEN 0
             WHEN h.held_by <> d.stream_id THEN d.deliverable_ns - d.complete_ns END AS hol_blocking_ns,
        CASE WHEN d.last_sent_ns IS NOT NULL THEN coalesce(q.stream_queueing_ns, 0) END AS stream_queueing_ns,
        CASE WHEN d.last_sent_ns IS NOT NULL THEN coalesce(q.bytes_ahead, 0) END AS bytes_ahead,
        m.read_ns, k.chunks, k.on_time_s, d.ended, d.reset
    FROM delivered d
    LEFT JOIN marks m USING (connection, direction, stream_id)
    LEFT JOIN hole h USING (connection, direction, stream_id)
    LEFT JOIN queueing q USING (connection, direction, stream_id)
    LEFT JOIN chunks k USING (connection, direction, stream_id)
    ORDER BY substr(d.connection, strpos(d.connection, chr(1)) + 1), d.run NULLS FIRST, d.direction,
        TRY_CAST(d.stream_id AS BIGINT), d.stream_id
)
SELECT * FROM final
