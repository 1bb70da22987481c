-- playback_sessions: one row per audio stream: underrun totals, what kind of
-- starvation it was, and the initial buffer that would have hidden it.
--
-- Step: store.
-- Sources: playback, underruns.
--
-- Built over the whole store.
-- Definitions (docs/timing-model.md):
--   receive_ratio  audio received per second of wall time, from the median
--                  chunk inter-arrival (median tau / median inter-arrival):
--                  robust to a few stalls, below 1 for a steady shortfall
--   kind           'clean' (no underrun); 'rate_deficit' when receive_ratio <
--                  0.98 (the buffer drains at (1 - ratio) s/s whatever its
--                  size: only more bandwidth or a lower bitrate helps);
--                  else 'jitter' (dips a bigger initial buffer hides)
--   drain_time_ns  for a deficit, the buffer-drain time of the initial
--                  buffer: J / (playback rate - receive rate) = J / (1 - ratio)
--   min_initial_buffer_ns  the smallest J with which the waiting player has no
--                  gap at all: max_i (r_i - r_0 - T_i), at least 0
--   on_time_s      seconds of audio whose chunk arrived by its play time in the
--                  schedule without gaps, r_0 + J + T_i (r_i - r_0 - T_i <= J;
--                  issue #27): what a player that never waits would have played
-- Columns: run, stream, request, chunks, audio_ns, first_arrival_ns,
--   last_arrival_ns, underruns, silence_ns, causes, receive_ratio, kind,
--   initial_buffer_ns, drain_time_ns, first_underrun_ns, min_initial_buffer_ns,
--   on_time_s
WITH p AS (
    SELECT *, arrived_ns - lag(arrived_ns) OVER (PARTITION BY stream ORDER BY arrived_ns, seq) AS gap_ns,
        arrived_ns - min(arrived_ns) OVER (PARTITION BY stream) - frame_offset * 1000000000 // sample_rate AS late_ns
    FROM playback
),

streams AS (
    SELECT any_value(run) AS run, stream, any_value(request) AS request, count(*) AS chunks,
        sum(tau_ns) AS audio_ns, min(arrived_ns) AS first_arrival_ns, max(arrived_ns) AS last_arrival_ns,
        quantile_cont(tau_ns, 0.5) / nullif(quantile_cont(gap_ns, 0.5), 0) AS receive_ratio,
        any_value(initial_buffer_ns) AS initial_buffer_ns,
        greatest(max(late_ns), 0) AS min_initial_buffer_ns,
        coalesce(sum(tau_ns) FILTER (late_ns <= initial_buffer_ns), 0) / 1e9 AS on_time_s,
        count(initial_buffer_ns) AS with_buffer
    FROM p GROUP BY stream
),

u AS (
    SELECT stream, sum(n) AS underruns, sum(silence_ns) AS silence_ns, min(onset_ns) AS first_underrun_ns,
        string_agg(cause || ' ' || n, ', ' ORDER BY cause) AS causes
    FROM (SELECT stream, cause, count(*) AS n, sum(silence_ns) AS silence_ns, min(onset_ns) AS onset_ns
          FROM underruns GROUP BY stream, cause)
    GROUP BY stream
),

final AS (
    SELECT s.run, s.stream, s.request, s.chunks, s.audio_ns, s.first_arrival_ns, s.last_arrival_ns,
        coalesce(u.underruns, 0) AS underruns, coalesce(u.silence_ns, 0) AS silence_ns, u.causes,
        round(s.receive_ratio, 4) AS receive_ratio,
        CASE WHEN coalesce(u.underruns, 0) = 0 THEN 'clean'
             WHEN s.receive_ratio < 0.98 THEN 'rate_deficit' ELSE 'jitter' END AS kind,
        s.initial_buffer_ns,
        CASE WHEN s.receive_ratio < 0.98 THEN round(s.initial_buffer_ns / (1 - s.receive_ratio))::BIGINT END AS drain_time_ns,
        u.first_underrun_ns, s.min_initial_buffer_ns,
        CASE WHEN s.with_buffer > 0 THEN s.on_time_s END AS on_time_s
    FROM streams s LEFT JOIN u USING (stream)
)
SELECT * FROM final ORDER BY run, stream
