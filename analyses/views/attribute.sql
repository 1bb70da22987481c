-- The `tracekit attribute` view: per request, its time, its bound and where the gap went (ms).
-- Parameters: $run (NULL for all).
-- flag: the bound refused (bounds.refused: an event clock that contradicts the
-- packets, a negative duration); unexplained time above 10 % of the request or
-- above 20 ms; or no flow linked (the whole request unattributed).
-- Sources: attribution, bounds, requests.
WITH spans AS (
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
         WHEN t.unexplained_ns > 0.1 * b.duration_ns THEN 'unexplained > 10%'
         WHEN t.unexplained_ns > 20000000 THEN 'unexplained > 20 ms' END AS flag,
    b.processing_source, b.vantage
FROM requests r JOIN bounds b USING (request_key) JOIN top t USING (request_key)
WHERE $run IS NULL OR coalesce(r.labels['run'], r.run) = $run
ORDER BY r.start_ns, r.request_key
