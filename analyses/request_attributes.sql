-- request_attributes: what a request can be selected and grouped by.
--
-- Step: view.
-- Sources: captures, event_logs, events, requests.
--
-- A view over the whole store (nothing stored). `tracekit ablation`'s
-- --compare, --by and --where and `tracekit whatif`'s --where, --from and
-- --by read it, so both name a request's attributes the same way.
-- Definitions: a request's attributes are its labels (the log's, else the
-- capture's: requests.labels), else the scalar fields its own events carry
-- (e.g. `mode` fresh/persistent on its request_start; the first value when
-- its events disagree), else its own columns `connection`, `protocol`,
-- `vantage`, `source` (fresh vs reused connections need no label) and
-- `capture` and `log`: the file name of the capture its flow is in (of a
-- request an event log names, the first capture its flow was linked in)
-- and of that log -- the whole path where two files in the store have the
-- same name (runs made by hand compare by file, unlabelled): where two
-- say the same name, the first in that order is the attribute.
-- Columns:
--   request_key   the request (requests.request_key)
--   attrs         MAP(VARCHAR, VARCHAR): name -> value
WITH ev_fields AS (  -- the request's own events' fields (e.g. mode), first value of each
    SELECT log_id, request, key, min(fields ->> key) AS value
    FROM (SELECT log_id, request, fields, unnest(json_keys(fields)) AS key
          FROM events WHERE request IS NOT NULL)
    WHERE key NOT IN ('ts', 'kind', 'request') AND json_type(fields, key) NOT IN ('OBJECT', 'ARRAY')
    GROUP BY ALL
),

files AS (  -- a file's name, or its path where another file of its kind has that name
    SELECT kind, id,
           CASE WHEN count(*) OVER (PARTITION BY kind, file_name) = 1 THEN file_name ELSE path END
               AS name
    FROM (SELECT 'capture' AS kind, capture_id AS id, file_name, path FROM captures
          UNION ALL SELECT 'log', log_id, file_name, path FROM event_logs)
),

ev_attrs AS (
    SELECT log_id, request, map(list(key ORDER BY key), list(value ORDER BY key)) AS attrs
    FROM ev_fields WHERE value IS NOT NULL GROUP BY ALL
),

final AS (  -- the columns first, then the events' fields, then the labels: the last one wins
    SELECT q.request_key, map_concat(
            map_from_entries(list_filter([{'key': 'connection', 'value': q.connection},
                                          {'key': 'protocol', 'value': q.protocol},
                                          {'key': 'vantage', 'value': q.vantage},
                                          {'key': 'source', 'value': q.source},
                                          {'key': 'capture', 'value': c.name},
                                          {'key': 'log', 'value': l.name}],
                                         lambda e: e.value IS NOT NULL)),
            coalesce(e.attrs, MAP {}), coalesce(q.labels, MAP {})) AS attrs
    FROM requests q LEFT JOIN ev_attrs e ON e.log_id = q.log_id AND e.request = q.request
        LEFT JOIN files c ON c.kind = 'capture' AND c.id = q.capture_id
        LEFT JOIN files l ON l.kind = 'log' AND l.id = q.log_id
)
SELECT * FROM final
