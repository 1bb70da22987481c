-- The `tracekit streams` view: each stream of a connection, times in ms from the
-- connection's first stream byte (ready, sent or arrived; frames of no stream, such as
-- HTTP/2's SETTINGS, not counted), head-of-line time and on-time media.
-- Parameters: $run (NULL for all).
-- Sources: streams.
SELECT run, connection, direction, stream_id AS stream, delivery, bytes, ended,
    round((first_sent_ns - t0) / 1e6, 3) AS first_sent_ms, round((last_sent_ns - t0) / 1e6, 3) AS last_sent_ms,
    round((complete_ns - t0) / 1e6, 3) AS complete_ms, round((deliverable_ns - t0) / 1e6, 3) AS deliverable_ms,
    round((read_ns - t0) / 1e6, 3) AS read_ms, round(hol_blocking_ns / 1e6, 3) AS hol_blocking_ms, held_by,
    round(stream_queueing_ns / 1e6, 3) AS queueing_ms, bytes_ahead, on_time_s
FROM (SELECT *, min(least(ready_ns, first_sent_ns, first_arrived_ns)) OVER (PARTITION BY run, connection) AS t0
      FROM streams)
WHERE $run IS NULL OR run = $run
ORDER BY run, connection, direction, first_sent_ms NULLS LAST, stream
