-- serving: per request of a model server: time to first token, time per
-- output token, end-to-end time, and its slowdown against running alone.
--
-- Step: store.
-- Sources: events.
--
-- Built over the whole store.
-- Definitions (docs/timing-model.md), from a server's events with a request id:
--   arrival_ns     request_start (the request reached the server), else model_start
--   first_token_ns, last_token_ns   the request's first and last `token` event
--   finished_ns    request_finished (when the caller got the result: with
--                  whole-batch return, when the batch ended), else last token
--   tokens         request_finished.tokens, else the number of token events
--   ttft_ns        first_token_ns - arrival_ns
--   tpot_ns        (last_token_ns - first_token_ns) / (tokens - 1)
--   e2e_ns         finished_ns - arrival_ns
--   batch, batch_size   the batch the request ran in (`batch` field of its
--                  events; batch_start.batch_size, else the batch's requests)
--   alone_ns       what the request would have taken in a batch of one in
--                  the same log: median TTFT + (tokens - 1) x median TPOT of
--                  its batch-size-1 requests; NULL when there were none
--   slowdown       e2e_ns / alone_ns
-- Columns: run, log_id, request, batch, batch_size, arrival_ns, first_token_ns,
--   last_token_ns, finished_ns, tokens, ttft_ns, tpot_ns, e2e_ns, alone_ns, slowdown
WITH per_request AS (
    SELECT log_id, request, any_value(run) AS run,
        any_value(fields->>'batch') FILTER (fields->>'batch' IS NOT NULL) AS batch,
        coalesce(min(ts_ns) FILTER (kind = 'request_start'), min(ts_ns) FILTER (kind = 'model_start')) AS arrival_ns,
        min(ts_ns) FILTER (kind = 'token') AS first_token_ns,
        max(ts_ns) FILTER (kind = 'token') AS last_token_ns,
        coalesce(max(ts_ns) FILTER (kind = 'request_finished'), max(ts_ns) FILTER (kind = 'token')) AS finished_ns,
        coalesce(any_value(TRY_CAST(fields->>'tokens' AS BIGINT)) FILTER (kind = 'request_finished'),
                 count(*) FILTER (kind = 'token')) AS tokens
    FROM events
    WHERE request IS NOT NULL AND kind IN ('request_start', 'model_start', 'token', 'request_finished')
    GROUP BY log_id, request
    HAVING count(*) FILTER (kind = 'token') > 0
),

batches AS (
    SELECT log_id, fields->>'batch' AS batch,
        any_value(TRY_CAST(fields->>'batch_size' AS BIGINT)) AS declared_size
    FROM events WHERE kind = 'batch_start' GROUP BY ALL
),

sized AS (
    SELECT r.*,
        coalesce(b.declared_size, count(*) OVER (PARTITION BY r.log_id, r.batch)) AS batch_size,
        r.first_token_ns - r.arrival_ns AS ttft_ns,
        CASE WHEN r.tokens > 1 THEN (r.last_token_ns - r.first_token_ns) // (r.tokens - 1) END AS tpot_ns,
        r.finished_ns - r.arrival_ns AS e2e_ns
    FROM per_request r LEFT JOIN batches b USING (log_id, batch)
),

alone AS (
    SELECT log_id, median(ttft_ns) AS ttft_1, median(tpot_ns) AS tpot_1
    FROM sized WHERE batch_size = 1 GROUP BY log_id
),

final AS (
    SELECT s.run, s.log_id, s.request, s.batch, s.batch_size, s.arrival_ns, s.first_token_ns,
        s.last_token_ns, s.finished_ns, s.tokens, s.ttft_ns, s.tpot_ns, s.e2e_ns,
        round(a.ttft_1 + (s.tokens - 1) * a.tpot_1)::BIGINT AS alone_ns,
        round(s.e2e_ns / (a.ttft_1 + (s.tokens - 1) * a.tpot_1), 3) AS slowdown
    FROM sized s LEFT JOIN alone a USING (log_id)
)
SELECT * FROM final ORDER BY log_id, arrival_ns, request
