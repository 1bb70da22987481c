-- The `tracekit playback` view: one row per audio stream, then the run's totals
-- (stream `(run total)`), times in ms.
-- Parameters: $run (NULL for all).
-- Sources: playback_sessions.
SELECT run, coalesce(stream, '(run total)') AS stream, sum(chunks) AS chunks,
    round(sum(audio_ns) / 1e6) AS audio_ms, sum(underruns) AS underruns,
    round(sum(silence_ns) / 1e6, 1) AS silence_ms,
    CASE WHEN GROUPING(stream) = 0 THEN any_value(causes) END AS causes,
    CASE WHEN GROUPING(stream) = 0 THEN any_value(receive_ratio) END AS receive_ratio,
    CASE WHEN GROUPING(stream) = 0 THEN any_value(kind) END AS kind,
    round(max(initial_buffer_ns) / 1e6, 1) AS buffer_ms,
    CASE WHEN GROUPING(stream) = 0 THEN round(any_value(drain_time_ns) / 1e6, 1) END AS drain_ms,
    round(max(min_initial_buffer_ns) / 1e6, 1) AS buffer_for_no_gap_ms
FROM playback_sessions
WHERE $run IS NULL OR run = $run
GROUP BY GROUPING SETS ((run, stream), (run))
ORDER BY run, GROUPING(stream), stream
