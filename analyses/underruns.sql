-- underruns: each stretch of playback callbacks that got fewer frames than they
-- asked for, with the stage that held back the next chunk at its onset.
-- Frame counts and sample rates outside 32 bits are unusable (NULL): no
-- field of a log can overflow the nanosecond arithmetic.
--
-- Step: store.
-- Sources: events, playback.
--
-- Built over the whole store.
-- Definitions (docs/timing-model.md):
--   shortfall      requested_frames - delivered_frames of a playback_callback;
--                  its silence is shortfall / sample_rate. Callbacks after the
--                  stream's last frame was delivered (the end) do not count.
--   underrun       a maximal run of consecutive callbacks with a shortfall;
--                  onset_ns is its first callback, end_ns its last
--   next chunk     the chunk holding the first frame not delivered at the onset
--   cause          at onset_ns: the next chunk not yet generated (no
--                  chunk_generated at or before onset) -> 'model'; generated
--                  but not yet at the client host (host_arrived_ns from a
--                  client-side capture, else the application's arrived_ns)
--                  -> 'transport'; at the host but not read/played -> 'local'
--                  (buffering or scheduling in the client). A chunk that
--                  reached the host less than 5 ms before the onset (the read
--                  allowance: a woken reader needs a moment) counts as not
--                  arrived: transport.
--   cause_basis    'capture' when host arrival came from a capture, else
--                  'app_log' (then a throttled reader looks like transport)
--   detail         for 'transport': 'not_sent' when the server had not written
--                  it yet (sender-side), else 'in_network'
--   initial_buffer_to_avoid_ns  the smallest initial buffer J with which the
--                  waiting player would not have had this gap:
--                  r_i - r_0 - T_i for the next chunk i (T_i: audio before it)
-- Columns: run, stream, request, underrun, onset_ns, end_ns, callbacks,
--   missing_frames, silence_ns, next_seq, generated_ns, sent_ns, host_arrived_ns,
--   arrived_ns, cause, cause_basis, detail, initial_buffer_ns,
--   initial_buffer_to_avoid_ns
WITH totals AS (
    SELECT stream, sum(frames) AS total_frames, min(arrived_ns) AS r0 FROM playback GROUP BY stream
),

callbacks AS (
    SELECT e.stream, any_value(e.run) OVER (PARTITION BY e.stream) AS run, e.ts_ns, e.line,
        TRY_CAST(TRY_CAST(e.fields->>'requested_frames' AS INTEGER) AS BIGINT) AS requested,
        TRY_CAST(TRY_CAST(e.fields->>'delivered_frames' AS INTEGER) AS BIGINT) AS delivered,
        TRY_CAST(TRY_CAST(e.fields->>'sample_rate' AS INTEGER) AS BIGINT) AS sample_rate
    FROM events e WHERE e.kind = 'playback_callback' AND e.stream IS NOT NULL
),

counted AS (
    SELECT c.*, t.total_frames,
        coalesce(sum(delivered) OVER w, 0) AS cum_before,
        row_number() OVER (PARTITION BY c.stream ORDER BY c.ts_ns, c.line) AS n
    FROM callbacks c JOIN totals t USING (stream)
    WINDOW w AS (PARTITION BY c.stream ORDER BY c.ts_ns, c.line
                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),

short AS (
    SELECT *, n - row_number() OVER (PARTITION BY stream ORDER BY n) AS island
    FROM counted
    WHERE delivered < requested AND cum_before + delivered < total_frames
),

episodes AS (
    SELECT stream, any_value(run) AS run, island,
        min(ts_ns) AS onset_ns, max(ts_ns) AS end_ns, count(*) AS callbacks,
        sum(requested - delivered) AS missing_frames,
        sum((requested - delivered) * 1000000000 // sample_rate) AS silence_ns,
        arg_min(cum_before + delivered, n) AS first_missing_frame
    FROM short GROUP BY stream, island
),

attributed AS (
    SELECT e.*, p.seq AS next_seq, p.request, p.generated_ns, p.sent_ns, p.host_arrived_ns,
        p.arrived_ns, p.initial_buffer_ns,
        p.arrived_ns - t.r0 - p.frame_offset * 1000000000 // p.sample_rate AS initial_buffer_to_avoid_ns
    FROM episodes e
    JOIN totals t USING (stream)
    ASOF JOIN playback p ON p.stream = e.stream AND p.frame_offset <= e.first_missing_frame
),

final AS (
    SELECT run, stream, request,
        row_number() OVER (PARTITION BY stream ORDER BY onset_ns) AS underrun,
        onset_ns, end_ns, callbacks, missing_frames, silence_ns, next_seq,
        generated_ns, sent_ns, host_arrived_ns, arrived_ns,
        CASE WHEN generated_ns IS NULL OR generated_ns > onset_ns THEN 'model'
             WHEN coalesce(host_arrived_ns + 5000000, arrived_ns) > onset_ns THEN 'transport'
             ELSE 'local' END AS cause,
        CASE WHEN host_arrived_ns IS NOT NULL THEN 'capture' ELSE 'app_log' END AS cause_basis,
        CASE WHEN generated_ns <= onset_ns AND coalesce(host_arrived_ns + 5000000, arrived_ns) > onset_ns
             THEN CASE WHEN sent_ns IS NULL OR sent_ns > onset_ns THEN 'not_sent' ELSE 'in_network' END
        END AS detail,
        initial_buffer_ns, initial_buffer_to_avoid_ns
    FROM attributed
)
SELECT * FROM final ORDER BY stream, underrun
