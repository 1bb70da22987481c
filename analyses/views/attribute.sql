-- The `tracekit attribute` view: per request, its time, its bound and where the gap went (ms).
-- Parameters: $run (NULL for all).
-- flag: the bound refused (bounds.refused: an event clock that contradicts the
-- packets, a negative duration); unexplained time above 10 % of the request and
-- above the noise floor, or above 20 ms; or no flow linked (the whole request
-- unattributed).
-- The noise floor of a request's unexplained time: the larger of two clock ticks
-- of its capture (captures.ts_resolution: each instant is rounded to one) and the
-- RTT spread of its path in its capture -- p90 - p10 of the ACK and timestamp
-- RTT samples of the server's leg (direction c2s: the leg a request's wait
-- crosses) of the capture's flows on the same path (bounds.path). Unexplained
-- time within that spread is the queueing every round trip on that path saw at
-- the time, not something amiss with this request: on a long-lived connection of
-- sub-millisecond rounds 10 % is a few microseconds (docs/attribution.md).
-- Sources: attribution, bounds, captures, flows, requests, rtt_samples.
WITH spread AS (
    SELECT s.capture_id, coalesce(c.labels['path'], f.server_addr) AS path,
        quantile_cont(s.rtt_ns, 0.9) - quantile_cont(s.rtt_ns, 0.1) AS rtt_spread_ns
    FROM rtt_samples s JOIN flows f USING (capture_id, flow_id) JOIN captures c USING (capture_id)
    WHERE s.direction = 'c2s' AND s.kind <> 'handshake'
    GROUP BY ALL
),
floors AS (
    SELECT r.request_key,
        greatest(2e9 * coalesce(list_max(list_transform(string_split(c.ts_resolution, ','),
            lambda x: CASE WHEN trim(x) LIKE '2^%' THEN pow(2, TRY_CAST(substr(trim(x), 3) AS DOUBLE))
                      ELSE TRY_CAST(trim(x) AS DOUBLE) END)), 1e-9),  -- the coarsest, in seconds
            coalesce(sp.rtt_spread_ns, 0)) AS floor_ns
    FROM requests r JOIN bounds b USING (request_key)
    LEFT JOIN captures c ON c.capture_id = r.capture_id
    LEFT JOIN spread sp ON sp.capture_id = r.capture_id AND sp.path = b.path
),
spans AS (
    SELECT request_key, span, sum(ns) AS ns, bool_or(irreducible) AS irreducible
    FROM attribution GROUP BY ALL
),
top AS (
    SELECT request_key,
        string_agg(span || ' ' || round(ns / 1e6, 1), ', ' ORDER BY ns DESC)
            FILTER (NOT irreducible AND span NOT IN ('unexplained', 'unattributed') AND ns > 0)
            AS gap_spans,
        coalesce(sum(ns) FILTER (span = 'unexplained'), 0) AS unexplained_ns,
        coalesce(sum(ns) FILTER (span = 'unattributed'), 0) AS unattributed_ns
    FROM spans GROUP BY request_key
)
SELECT r.request_key AS request, coalesce(r.labels['run'], r.run) AS run, r.connection,
    round(b.duration_ns / 1e6, 1) AS measured_ms, round(b.bound_ns / 1e6, 1) AS bound_ms,
    CASE WHEN b.partial THEN 'partial' END AS bound, round(b.gap_ns / 1e6, 1) AS gap_ms, b.ratio,
    t.gap_spans, round(t.unexplained_ns / 1e6, 1) AS unexplained_ms,
    round(100.0 * t.unexplained_ns / nullif(b.duration_ns, 0), 1) AS unexplained_pct,
    CASE WHEN b.refused IS NOT NULL THEN 'bound refused: ' || b.refused
         WHEN t.unattributed_ns > 0 THEN 'no flow linked'
         WHEN t.unexplained_ns > 0.1 * b.duration_ns AND t.unexplained_ns > fl.floor_ns
             THEN 'unexplained > 10%'
         WHEN t.unexplained_ns > 20000000 THEN 'unexplained > 20 ms' END AS flag,
    b.processing_source, b.vantage
FROM requests r JOIN bounds b USING (request_key) JOIN top t USING (request_key)
    JOIN floors fl USING (request_key)
WHERE $run IS NULL OR coalesce(r.labels['run'], r.run) = $run
ORDER BY r.start_ns, r.request_key
