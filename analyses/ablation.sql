-- ablation: the requests of a single-factor experiment, one row each, with
-- the factor levels they ran under and their attributed spans.
--
-- Step: none.
-- Sources: attribution, bounds, events, requests.
--
-- Parameters: $compare (the factor compared), $by (list of factors that
-- split the table), $where_keys / $where_values (labels a request must
-- carry, e.g. experiment = counterfactual). Not a stored table: `tracekit
-- ablation` runs it.
-- Definitions: a request's attributes -- what $compare, $by and $where name --
-- are its labels (the log's, else the capture's: requests.labels), else the
-- scalar fields its own events carry (e.g. `mode` fresh/persistent on its
-- request_start; the first value when events disagree), else its own columns
-- `connection`, `protocol`, `vantage`, `source` (fresh vs reused connections
-- need no label). A request belongs to the experiment when $compare names one
-- of its attributes and every $where pair matches.
-- `run_order` is the `order` label (the interleaving position), else the
-- request's start time rank; `trial` the `trial` label. Spans are pivoted
-- from attribution (ns per span, summed over rounds).
-- Columns: request_key, level, by_levels, run, trial, run_order, start_ns,
--   duration_ns, bytes_down, rtt_ns, spans
WITH ev_fields AS (  -- the request's own events' fields (e.g. mode), first value of each
    SELECT log_id, request, key, min(fields ->> key) AS value
    FROM (SELECT log_id, request, fields, unnest(json_keys(fields)) AS key
          FROM events WHERE request IS NOT NULL)
    WHERE key NOT IN ('ts', 'kind', 'request') AND json_type(fields, key) NOT IN ('OBJECT', 'ARRAY')
    GROUP BY ALL
),

ev_attrs AS (
    SELECT log_id, request, map(list(key ORDER BY key), list(value ORDER BY key)) AS attrs
    FROM ev_fields WHERE value IS NOT NULL GROUP BY ALL
),

attributed AS (  -- labels first, then the events' fields, then the request's own columns
    SELECT q.*, map_concat(
            map_from_entries(list_filter([{'key': 'connection', 'value': q.connection},
                                          {'key': 'protocol', 'value': q.protocol},
                                          {'key': 'vantage', 'value': q.vantage},
                                          {'key': 'source', 'value': q.source}],
                                         lambda e: e.value IS NOT NULL)),
            coalesce(e.attrs, MAP {}), coalesce(q.labels, MAP {})) AS attrs
    FROM requests q LEFT JOIN ev_attrs e ON e.log_id = q.log_id AND e.request = q.request
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
