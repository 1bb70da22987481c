-- stream_ablation: the streams of an experiment, one row each, with the
-- factor levels of the run that carried them (issue #27: protocol x
-- scheduling of the multiplexing lab) and their times from when the sender's
-- application had them ready.
--
-- Step: none.
-- Sources: event_logs, events, streams.
--
-- Parameters: $by (list of factors that make a cell), $where_keys /
-- $where_values (labels a stream's run must carry, e.g. loss_down = 0.0).
-- Not a stored table: `tracekit stream-ablation` runs it.
-- Definitions: a stream's labels are those given at ingest to the logs that
-- name it (the receiver's stream_read, the sender's stream_ready and
-- stream_chunk: a lab run's labels), the first non-empty map of them; a
-- stream no log names with labels is left out. Times are ms from the
-- stream's ready_ns (the sender's stream_ready); `media`: the stream has
-- timed chunks (stream_chunk).
-- Columns: connection, direction, stream_id, media, by_levels, labels, run,
--   trial, run_order, bytes, complete_ms, deliverable_ms, read_ms, hol_ms,
--   hol_blocking_ms, stream_queueing_ms, bytes_ahead, chunks, on_time_s
WITH named AS (
    SELECT e.fields->>'connection' AS connection, coalesce(e.fields->>'direction', 's2c') AS direction,
        e.fields->>'stream_id' AS stream_id, l.labels
    FROM events e JOIN event_logs l USING (log_id)
    WHERE e.kind IN ('stream_read', 'stream_ready', 'stream_chunk')
      AND l.labels IS NOT NULL AND cardinality(l.labels) > 0
),
labelled AS (
    SELECT connection, direction, stream_id, any_value(labels) AS labels
    FROM named GROUP BY ALL
),
final AS (
    SELECT s.connection, s.direction, s.stream_id, coalesce(s.chunks, 0) > 0 AS media,
        list_transform($by, lambda x: coalesce(l.labels[x], '-')) AS by_levels, l.labels,
        coalesce(l.labels['run'], s.run) AS run, TRY_CAST(l.labels['trial'] AS INTEGER) AS trial,
        TRY_CAST(l.labels['order'] AS INTEGER) AS run_order, s.bytes,
        (s.complete_ns - s.ready_ns) / 1e6 AS complete_ms,
        (s.deliverable_ns - s.ready_ns) / 1e6 AS deliverable_ms,
        (s.read_ns - s.ready_ns) / 1e6 AS read_ms,
        s.hol_ns / 1e6 AS hol_ms, s.hol_blocking_ns / 1e6 AS hol_blocking_ms,
        s.stream_queueing_ns / 1e6 AS stream_queueing_ms, s.bytes_ahead, s.chunks, s.on_time_s
    FROM streams s JOIN labelled l USING (connection, direction, stream_id)
    WHERE s.ready_ns IS NOT NULL
      AND len(list_filter(list_zip($where_keys, $where_values),
                          lambda kv: l.labels[kv[1]] IS DISTINCT FROM kv[2])) = 0
)
SELECT * FROM final ORDER BY by_levels, run_order, connection, TRY_CAST(stream_id AS BIGINT)
