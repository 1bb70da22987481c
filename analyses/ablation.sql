-- ablation: the requests of a single-factor experiment, one row each, with
-- the factor levels they ran under and their attributed spans.
--
-- Step: none.
-- Sources: attribution, bounds, request_attributes, requests.
--
-- Parameters: $compare (the factor compared), $by (list of factors that
-- split the table), $where_keys / $where_values (labels a request must
-- carry, e.g. experiment = counterfactual). Not a stored table: `tracekit
-- ablation` runs it.
-- Definitions: a request's attributes -- what $compare, $by and $where name --
-- are request_attributes.sql's: its labels, else the fields its own events
-- carry (e.g. `mode`), else its columns `connection`, `protocol`, `vantage`,
-- `source`. A request belongs to the experiment when $compare names one
-- of its attributes and every $where pair matches.
-- `run_order` is the `order` label (the interleaving position), else the
-- request's start time rank; `trial` the `trial` label. Spans are pivoted
-- from attribution (ns per span, summed over rounds).
-- Columns: request_key, level, by_levels, run, trial, run_order, start_ns,
--   duration_ns, bytes_down, rtt_ns, spans
WITH attributed AS (
    SELECT q.*, a.attrs FROM requests q JOIN request_attributes a USING (request_key)
),

r AS (
    SELECT q.request_key, q.attrs[$compare] AS level,
        list_transform($by, lambda x: coalesce(q.attrs[x], '-')) AS by_levels,
        coalesce(q.labels['run'], q.run) AS run, TRY_CAST(q.labels['trial'] AS INTEGER) AS trial,
        TRY_CAST(q.labels['order'] AS INTEGER) AS label_order,
        q.start_ns, q.duration_ns, q.bytes_down
    FROM attributed q
    WHERE len(list_filter(list_zip($where_keys, $where_values),
                          lambda kv: q.attrs[kv[1]] IS DISTINCT FROM kv[2])) = 0
),

spans AS (
    SELECT request_key, map(list(span ORDER BY span), list(ns ORDER BY span)) AS spans
    FROM (SELECT request_key, span, sum(ns) AS ns FROM attribution GROUP BY ALL)
    GROUP BY request_key
),

final AS (
    SELECT r.request_key, r.level, r.by_levels, r.run, r.trial,
        coalesce(r.label_order, dense_rank() OVER (ORDER BY r.start_ns)) AS run_order,
        r.start_ns, r.duration_ns, r.bytes_down, b.rtt_ns, s.spans
    FROM r LEFT JOIN spans s USING (request_key) LEFT JOIN bounds b USING (request_key)
    WHERE r.level IS NOT NULL
)
SELECT * FROM final ORDER BY by_levels, level, run_order, start_ns
