-- serving_batches: per static batch: its size, length, throughput and the
-- slots its finished members left idle.
--
-- Step: store.
-- Sources: events, serving.
--
-- Built over the whole store.
-- Definitions (docs/timing-model.md):
--   start_ns       batch_start, else the members' earliest arrival
--   end_ns         the members' latest last token
--   tokens_needed  sum of the members' tokens
--   max_tokens     the longest member's tokens: a static batch runs until
--                  its slowest member is done
--   slot_waste     1 - tokens_needed / (batch_size x max_tokens)
--                  (tracekit.model.static_batch_waste; SQL: the macro tk_slot_waste)
--   throughput_tps tokens_needed / (end_ns - start_ns) in tokens per second
--   ttft_ns, tpot_ns  the members' medians
-- Columns: run, log_id, batch, batch_size, members, start_ns, end_ns,
--   tokens_needed, max_tokens, slot_waste, throughput_tps, ttft_ns, tpot_ns
WITH starts AS (
    SELECT log_id, fields->>'batch' AS batch, min(ts_ns) AS start_ns
    FROM events WHERE kind = 'batch_start' GROUP BY ALL
),

final AS (
    SELECT any_value(s.run) AS run, s.log_id, s.batch, any_value(s.batch_size) AS batch_size,
        count(*) AS members,
        coalesce(any_value(b.start_ns), min(s.arrival_ns)) AS start_ns,
        max(s.last_token_ns) AS end_ns,
        sum(s.tokens) AS tokens_needed, max(s.tokens) AS max_tokens,
        tk_slot_waste(sum(s.tokens), any_value(s.batch_size), max(s.tokens)) AS slot_waste,
        sum(s.tokens) * 1e9 / (max(s.last_token_ns) - coalesce(any_value(b.start_ns), min(s.arrival_ns))) AS throughput_tps,
        median(s.ttft_ns) AS ttft_ns, median(s.tpot_ns) AS tpot_ns
    FROM serving s LEFT JOIN starts b USING (log_id, batch)
    WHERE s.batch IS NOT NULL
    GROUP BY s.log_id, s.batch
)
SELECT * FROM final ORDER BY log_id, start_ns
