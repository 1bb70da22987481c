-- playback: every audio chunk's timeline -- generated, sent, arrived, played --
-- with the waiting-player recurrence beside what the callbacks measured.
-- Frame counts and sample rates outside 32 bits are unusable (NULL): no
-- field of a log can overflow the nanosecond arithmetic.
--
-- Step: store.
-- Sources: events, flows, rtt_summary, tcp_analysis.
--
-- Built over the whole store.
-- Definitions (docs/timing-model.md), per stream (the `stream` field; chunks by `seq`):
--   generated_ns   chunk_generated event (the model produced it)
--   sent_ns        chunk_sent event (the server's write returned)
--   host_arrived_ns  when the chunk's last byte was in order at the client
--                  host: from a client-side capture (rtt_summary.vantage =
--                  'client') of the stream's flow (client port = the
--                  connect_end local_port), the latest first-arrival time of
--                  the segments up to the chunk's last byte (its bytes are
--                  chunk_sent.stream_offset .. + bytes, relative sequence
--                  numbers from 1); NULL without such a capture
--   arrived_ns     chunk_arrived event (the application read it: r_i)
--   played_ns      the playback_callback that delivered the chunk's first frame
--                  (frames are played in arrival order; delivered_frames summed)
--   tau_ns         the chunk's duration: frames / sample_rate
--   J              initial buffer: playback_start.initial_buffer_ms, else the
--                  first callback that delivered audio minus r_0
--   predicted_play_ns  p_0 = r_0 + J, p_i = max(r_i, p_{i-1} + tau), computed
--                  in closed form: p_i = T_i + max(r_0 + J, max_{k<=i}(r_k - T_k))
--                  with T_i the audio before chunk i (tracekit.model.playback_schedule;
--                  its SQL form is the macro tk_play_ns)
--   predicted_gap_ns   p_i - (p_{i-1} + tau_{i-1}) when r_i wins (a new gap), else 0
-- Columns: run, stream, request, seq, frames, sample_rate, tau_ns, frame_offset,
--   stream_offset, generated_ns, sent_ns, host_arrived_ns, arrived_ns, played_ns,
--   initial_buffer_ns, predicted_play_ns, predicted_gap_ns, play_error_ns
WITH arrived AS (
    SELECT stream, any_value(run) AS run, any_value(request) AS request,
        TRY_CAST(fields->>'seq' AS BIGINT) AS seq, min(ts_ns) AS arrived_ns,
        any_value(TRY_CAST(TRY_CAST(fields->>'frames' AS INTEGER) AS BIGINT)) AS frames,
        any_value(TRY_CAST(TRY_CAST(fields->>'sample_rate' AS INTEGER) AS BIGINT)) AS sample_rate
    FROM events WHERE kind = 'chunk_arrived' AND stream IS NOT NULL
    GROUP BY stream, seq
),

server AS (
    SELECT stream, TRY_CAST(fields->>'seq' AS BIGINT) AS seq,
        min(ts_ns) FILTER (kind = 'chunk_generated') AS generated_ns,
        min(ts_ns) FILTER (kind = 'chunk_sent') AS sent_ns,
        any_value(TRY_CAST(fields->>'stream_offset' AS BIGINT)) FILTER (kind = 'chunk_sent') AS stream_offset,
        any_value(TRY_CAST(fields->>'bytes' AS BIGINT)) FILTER (kind = 'chunk_sent') AS sent_bytes
    FROM events WHERE kind IN ('chunk_generated', 'chunk_sent') AND stream IS NOT NULL
    GROUP BY stream, seq
),

chunks AS (
    SELECT a.*, s.generated_ns, s.sent_ns, s.stream_offset, s.sent_bytes,
        frames * 1000000000 // sample_rate AS tau_ns,
        coalesce(sum(frames) OVER w, 0) AS frame_offset,
        coalesce(sum(frames * 1000000000 // sample_rate) OVER w, 0) AS audio_before_ns
    FROM arrived a LEFT JOIN server s USING (stream, seq)
    WINDOW w AS (PARTITION BY a.stream ORDER BY a.arrived_ns, a.seq
                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),

-- the stream's flow in a client-side capture
conn AS (
    SELECT stream, any_value(local_port) AS local_port, min(ts_ns) AS t0, max(ts_ns) AS t1
    FROM events WHERE stream IS NOT NULL AND kind IN ('connect_end', 'chunk_arrived', 'request_end')
    GROUP BY stream
),
client_flow AS (
    SELECT c.stream, f.capture_id, f.flow_id
    FROM conn c
    JOIN flows f ON f.protocol = 'tcp' AND f.client_port = c.local_port
                AND f.first_ts_ns <= c.t1 AND f.last_ts_ns >= c.t0 - 1000000000
    JOIN (SELECT capture_id, flow_id FROM rtt_summary WHERE vantage = 'client'
          GROUP BY ALL) v USING (capture_id, flow_id)
    QUALIFY row_number() OVER (PARTITION BY c.stream ORDER BY f.capture_id, f.flow_id) = 1
),
first_arrivals AS (  -- earliest copy of each segment start, in sequence order
    SELECT cf.stream, a.rel_seq, max(a.rel_end) AS rel_end, min(a.ts_ns) AS ts_ns
    FROM client_flow cf
    JOIN tcp_analysis a ON a.capture_id = cf.capture_id AND a.flow_id = cf.flow_id
    WHERE NOT a.from_client AND a.payload_bytes > 0
    GROUP BY ALL
),
in_order AS (
    SELECT stream, rel_seq, rel_end,
        max(ts_ns) OVER (PARTITION BY stream ORDER BY rel_seq ROWS UNBOUNDED PRECEDING) AS in_order_ns
    FROM first_arrivals
),
host AS (
    SELECT c.stream, c.seq, o.in_order_ns AS host_arrived_ns
    FROM chunks c ASOF JOIN in_order o
      ON o.stream = c.stream AND o.rel_seq <= c.stream_offset + c.sent_bytes  -- last byte: offset + bytes - 1, from 1
    WHERE c.stream_offset IS NOT NULL
),

callbacks AS (
    SELECT stream, ts_ns,
        TRY_CAST(TRY_CAST(fields->>'delivered_frames' AS INTEGER) AS BIGINT) AS delivered,
        sum(TRY_CAST(TRY_CAST(fields->>'delivered_frames' AS INTEGER) AS BIGINT)) OVER (PARTITION BY stream ORDER BY ts_ns, line) AS cum_after
    FROM events WHERE kind = 'playback_callback' AND stream IS NOT NULL
),
played AS (
    SELECT c.stream, c.seq, cb.ts_ns AS played_ns
    FROM chunks c ASOF JOIN callbacks cb ON cb.stream = c.stream AND c.frame_offset < cb.cum_after
),

start AS (
    SELECT stream, min(ts_ns) FILTER (kind = 'playback_start') AS start_ns,
        any_value(TRY_CAST(fields->>'initial_buffer_ms' AS DOUBLE)) FILTER (kind = 'playback_start') AS j_ms,
        min(ts_ns) FILTER (kind = 'playback_callback' AND TRY_CAST(TRY_CAST(fields->>'delivered_frames' AS INTEGER) AS BIGINT) > 0) AS first_sound_ns
    FROM events WHERE kind IN ('playback_start', 'playback_callback') AND stream IS NOT NULL
    GROUP BY stream
),

timeline AS (
    SELECT c.*, h.host_arrived_ns, p.played_ns,
        coalesce(round(s.j_ms * 1e6)::BIGINT,
                 s.first_sound_ns - first_value(c.arrived_ns) OVER (PARTITION BY c.stream ORDER BY c.arrived_ns, c.seq)) AS initial_buffer_ns,
        first_value(c.arrived_ns) OVER (PARTITION BY c.stream ORDER BY c.arrived_ns, c.seq) AS r0,
        max(c.arrived_ns - c.audio_before_ns) OVER (PARTITION BY c.stream ORDER BY c.arrived_ns, c.seq
                                                  ROWS UNBOUNDED PRECEDING) AS late_max
    FROM chunks c
    LEFT JOIN host h USING (stream, seq)
    LEFT JOIN played p USING (stream, seq)
    LEFT JOIN start s USING (stream)
),

predicted AS (
    SELECT *, tk_play_ns(audio_before_ns, r0, initial_buffer_ns, late_max) AS predicted_play_ns
    FROM timeline
),

final AS (
    SELECT run, stream, request, seq, frames, sample_rate, tau_ns, frame_offset, stream_offset,
        generated_ns, sent_ns, host_arrived_ns, arrived_ns, played_ns, initial_buffer_ns,
        predicted_play_ns,
        coalesce(predicted_play_ns - (lag(predicted_play_ns) OVER w + lag(tau_ns) OVER w), 0) AS predicted_gap_ns,
        played_ns - predicted_play_ns AS play_error_ns
    FROM predicted
    WINDOW w AS (PARTITION BY stream ORDER BY arrived_ns, seq)
)
SELECT * FROM final ORDER BY stream, seq
