-- The `tracekit attribute` view: per request, its time, its bound and where the gap went (ms).
-- Parameters: $run (NULL for all).
WITH spans AS (
    SELECT request_key, span, sum(ns) AS ns, bool_or(irreducible) AS irreducible
    FROM attribution GROUP BY ALL
),
top AS (
    SELECT request_key,
        string_agg(span || ' ' || round(ns / 1e6, 1), ', ' ORDER BY ns DESC)
            FILTER (NOT irreducible AND span <> 'residual' AND ns > 0) AS gap_spans,
        sum(ns) FILTER (span = 'residual') AS residual_ns
    FROM spans GROUP BY request_key
)
SELECT r.request_key AS request, coalesce(r.labels['run'], r.run) AS run, r.connection,
    round(b.duration_ns / 1e6, 1) AS measured_ms, round(b.bound_ns / 1e6, 1) AS bound_ms,
    round(b.gap_ns / 1e6, 1) AS gap_ms, b.ratio, t.gap_spans,
    round(100.0 * t.residual_ns / b.duration_ns, 2) AS residual_pct,
    CASE WHEN abs(t.residual_ns) > 0.1 * b.duration_ns THEN 'residual > 10%' END AS flag,
    b.processing_source, b.vantage
FROM requests r JOIN bounds b USING (request_key) JOIN top t USING (request_key)
WHERE $run IS NULL OR coalesce(r.labels['run'], r.run) = $run
ORDER BY r.start_ns, r.request_key
