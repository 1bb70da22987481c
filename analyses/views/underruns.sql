-- The `tracekit underruns` view: each playback underrun and the stage charged for it, times in ms.
-- Parameters: $run (NULL for all).
-- Sources: underruns.
SELECT run, stream, underrun,
    round((onset_ns - first_value(onset_ns) OVER (PARTITION BY stream ORDER BY onset_ns)) / 1e6, 1) AS after_first_ms,
    callbacks, round(silence_ns / 1e6, 1) AS silence_ms, next_seq AS next_chunk, cause, cause_basis AS basis, detail,
    round(initial_buffer_ns / 1e6, 1) AS buffer_ms, round(initial_buffer_to_avoid_ns / 1e6, 1) AS buffer_to_avoid_ms
FROM underruns
WHERE $run IS NULL OR run = $run
ORDER BY run, stream, underrun
