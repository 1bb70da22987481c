-- playback_buffer: unplayed audio in the client's buffer over time.
-- Frame counts and sample rates outside 32 bits are unusable (NULL): no
-- field of a log can overflow the nanosecond arithmetic.
--
-- Step: store.
-- Sources: events.
--
-- Built over the whole store.
-- Definitions (docs/timing-model.md): the level rises by a chunk's duration when the
-- application has it (chunk_arrived: frames / sample_rate) and falls by what
-- each playback_callback delivered (delivered_frames / sample_rate). A
-- callback with a shortfall is an underrun (shortfall_ns > 0). Jitter shows as
-- dips; a sustained rate deficit as a steady downward slope.
-- Columns: run, stream, ts_ns, event, change_ns, level_ns, shortfall_ns
WITH changes AS (
    SELECT run, stream, ts_ns, line, log_id, 'arrived' AS event,
        TRY_CAST(TRY_CAST(fields->>'frames' AS INTEGER) AS BIGINT) * 1000000000 // TRY_CAST(TRY_CAST(fields->>'sample_rate' AS INTEGER) AS BIGINT) AS change_ns,
        0::BIGINT AS shortfall_ns
    FROM events WHERE kind = 'chunk_arrived' AND stream IS NOT NULL
    UNION ALL
    SELECT run, stream, ts_ns, line, log_id, 'played',
        -(TRY_CAST(TRY_CAST(fields->>'delivered_frames' AS INTEGER) AS BIGINT) * 1000000000 // TRY_CAST(TRY_CAST(fields->>'sample_rate' AS INTEGER) AS BIGINT)),
        (TRY_CAST(TRY_CAST(fields->>'requested_frames' AS INTEGER) AS BIGINT) - TRY_CAST(TRY_CAST(fields->>'delivered_frames' AS INTEGER) AS BIGINT))
            * 1000000000 // TRY_CAST(TRY_CAST(fields->>'sample_rate' AS INTEGER) AS BIGINT)
    FROM events WHERE kind = 'playback_callback' AND stream IS NOT NULL
),

final AS (
    SELECT run, stream, ts_ns, event, change_ns,
        sum(change_ns) OVER (PARTITION BY stream ORDER BY ts_ns, log_id, line) AS level_ns,
        shortfall_ns
    FROM changes
)
SELECT * FROM final ORDER BY stream, ts_ns
