-- The `tracekit playback` view: one row per audio stream, underrun totals and kind, times in ms.
-- Parameters: $run (NULL for all).
SELECT run, stream, chunks, round(audio_ns / 1e6) AS audio_ms, underruns,
    round(silence_ns / 1e6, 1) AS silence_ms, causes, receive_ratio, kind,
    round(initial_buffer_ns / 1e6, 1) AS buffer_ms, round(drain_time_ns / 1e6, 1) AS drain_ms,
    round(min_initial_buffer_ns / 1e6, 1) AS buffer_for_no_gap_ms
FROM playback_sessions
WHERE $run IS NULL OR run = $run
ORDER BY run, stream
