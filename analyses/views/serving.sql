-- The `tracekit serving` view: per batch size, throughput, TTFT/TPOT and slot waste, times in ms.
-- Parameters: $run (NULL for all).
-- Sources: serving, serving_batches.
SELECT b.batch_size, count(*) AS batches, sum(b.members) AS requests,
    round(sum(b.tokens_needed) / (sum(b.end_ns - b.start_ns) / 1e9), 1) AS throughput_tps,
    round(median(s.ttft_ns) / 1e6, 2) AS ttft_ms, round(median(s.tpot_ns) / 1e6, 2) AS tpot_ms,
    round(median(s.e2e_ns) / 1e6, 1) AS e2e_ms,
    round(1 - sum(b.tokens_needed) / sum(b.batch_size * b.max_tokens), 4) AS slot_waste,
    round(max(s.slowdown), 2) AS worst_slowdown
FROM serving_batches b
JOIN serving s USING (log_id, batch)
WHERE $run IS NULL OR b.run = $run
GROUP BY b.batch_size
ORDER BY b.batch_size
