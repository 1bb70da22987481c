-- agent_rounds: each execution of an agent round, split into spans that add
-- up to it exactly, and linked to the flow that carried its request.
--
-- Step: store.
-- Sources: attribution, events, requests.
--
-- Built over the whole store (a client's and a server's logs together).
-- Definitions (the event vocabulary is docs/agents.md's; every event names
-- its `task` and `round` fields; events of one task are joined across logs
-- by their `run` and `task`):
--   An execution of a round begins at a round_start. It ends at the first
--   round_end of the same round before the task's next round_start
--   (status 'done'), else at the first disconnect in that time
--   ('interrupted'), else at the next round_start or task_end ('open').
--   attempt counts the executions of one round number (1 the first);
--   superseded is true when a later execution of the same round exists (its
--   work was lost and done again).
--   Spans: an X_start event is paired with the first X_end of the same
--   task, round and kind at or after it and before the next X_start (X in
--   edge, upload, model, action, request; a start without one is no span),
--   clipped to the execution. Every instant of the execution is
--   given to the first of model, upload, action, edge, network that covers
--   it (network: inside the round's request, request_start .. request_end,
--   but in no upload or model: the response's transfer and the round
--   trips), else to unexplained; so edge_ns + upload_ns + model_ns +
--   network_ns + action_ns + unexplained_ns = round_ns exactly.
--   action_id: the round's action_start `action_id` field (the first).
--   Flow: the round's request_start events' (log_id, request) give the
--   `requests` row (request_key) and its linked capture_id, flow_id;
--   requests counts the round's request_start events. request_spans: that
--   request's transport attribution (the `attribution` table: span -> ns,
--   largest first, adding up to the request's time), NULL without a capture.
-- Columns: run, task, round, attempt, status, superseded, start_ns, end_ns,
--   round_ns, edge_ns, upload_ns, model_ns, network_ns, action_ns,
--   unexplained_ns, action_id, requests, request_key, capture_id, flow_id,
--   request_spans
WITH ev AS (
    SELECT log_id, run, coalesce(run, '') AS run_key, fields->>'task' AS task,
        TRY_CAST(fields->>'round' AS INTEGER) AS round, kind, ts_ns, request,
        fields->>'action_id' AS action_id
    FROM events
    WHERE fields->>'task' IS NOT NULL
),

starts AS (
    SELECT run_key, any_value(run) AS run, task, round, ts_ns AS start_ns,
        row_number() OVER (PARTITION BY run_key, task, round ORDER BY ts_ns) AS attempt
    FROM ev WHERE kind = 'round_start' AND round IS NOT NULL
    GROUP BY run_key, task, round, ts_ns
),

bounded AS (
    SELECT s.*,
        lead(start_ns) OVER (PARTITION BY run_key, task ORDER BY start_ns) AS next_ns,
        count(*) OVER (PARTITION BY run_key, task, round) AS attempts
    FROM starts s
),

ends AS (
    SELECT b.run_key, b.task, b.round, b.attempt,
        min(e.ts_ns) FILTER (e.kind = 'round_end' AND e.round = b.round) AS end_ns,
        min(e.ts_ns) FILTER (e.kind = 'disconnect') AS cut_ns,
        min(e.ts_ns) FILTER (e.kind = 'task_end') AS task_end_ns
    FROM bounded b JOIN ev e ON e.run_key = b.run_key AND e.task = b.task
        AND e.ts_ns >= b.start_ns AND (b.next_ns IS NULL OR e.ts_ns <= b.next_ns)
        AND e.kind IN ('round_end', 'disconnect', 'task_end')
    GROUP BY ALL
),

execs AS (
    SELECT b.run, b.run_key, b.task, b.round, b.attempt, b.attempt < b.attempts AS superseded,
        b.start_ns,
        CASE WHEN x.end_ns IS NOT NULL THEN 'done'
             WHEN x.cut_ns IS NOT NULL THEN 'interrupted' ELSE 'open' END AS status,
        coalesce(x.end_ns, x.cut_ns, b.next_ns, x.task_end_ns) AS end_ns,
        row_number() OVER (ORDER BY b.run_key, b.task, b.start_ns) AS exec_id
    FROM bounded b LEFT JOIN ends x USING (run_key, task, round, attempt)
),

marks AS (
    SELECT run_key, task, round, ts_ns, split_part(kind, '_', 1) AS span,
        kind LIKE '%_start' AS opens
    FROM ev
    WHERE kind IN ('edge_start', 'edge_end', 'upload_start', 'upload_end', 'model_start',
                   'model_end', 'action_start', 'action_end', 'request_start', 'request_end')
),

intervals AS (
    SELECT a.run_key, a.task, a.round, a.span, a.ts_ns AS from_ns, b.ts_ns AS to_ns
    FROM (SELECT *, lead(ts_ns) OVER (PARTITION BY run_key, task, round, span ORDER BY ts_ns)
              AS next_open_ns
          FROM marks WHERE opens) a
    ASOF JOIN (SELECT * FROM marks WHERE NOT opens) b
        ON a.run_key = b.run_key AND a.task = b.task AND a.round = b.round AND a.span = b.span
        AND b.ts_ns >= a.ts_ns
    WHERE a.next_open_ns IS NULL OR b.ts_ns <= a.next_open_ns  -- an unended start: no span
),

placed AS (
    SELECT x.exec_id, i.span,
        CASE i.span WHEN 'model' THEN 1 WHEN 'upload' THEN 2 WHEN 'action' THEN 3
                    WHEN 'edge' THEN 4 ELSE 5 END AS priority,
        greatest(i.from_ns, x.start_ns) AS from_ns, least(i.to_ns, x.end_ns) AS to_ns
    FROM intervals i JOIN execs x ON x.run_key = i.run_key AND x.task = i.task
        AND x.round = i.round AND i.from_ns >= x.start_ns AND i.from_ns < x.end_ns
),

points AS (
    SELECT exec_id, start_ns AS t FROM execs WHERE end_ns IS NOT NULL
    UNION SELECT exec_id, end_ns FROM execs WHERE end_ns IS NOT NULL
    UNION SELECT exec_id, from_ns FROM placed
    UNION SELECT exec_id, to_ns FROM placed
),

pieces AS (
    SELECT exec_id, t AS from_ns, lead(t) OVER (PARTITION BY exec_id ORDER BY t) AS to_ns
    FROM points
),

covered AS (
    SELECT p.exec_id, p.to_ns - p.from_ns AS ns, coalesce(min(c.priority), 6) AS priority
    FROM pieces p LEFT JOIN placed c ON c.exec_id = p.exec_id
        AND c.from_ns <= p.from_ns AND c.to_ns >= p.to_ns
    WHERE p.to_ns IS NOT NULL AND p.to_ns > p.from_ns
    GROUP BY p.exec_id, p.from_ns, p.to_ns
),

spans AS (
    SELECT exec_id,
        sum(ns) FILTER (priority = 4) AS edge_ns, sum(ns) FILTER (priority = 2) AS upload_ns,
        sum(ns) FILTER (priority = 1) AS model_ns, sum(ns) FILTER (priority = 5) AS network_ns,
        sum(ns) FILTER (priority = 3) AS action_ns, sum(ns) FILTER (priority = 6) AS unexplained_ns
    FROM covered GROUP BY exec_id
),

linked AS (
    SELECT x.exec_id,
        min(e.action_id) FILTER (e.kind = 'action_start') AS action_id,
        count(*) FILTER (e.kind = 'request_start') AS requests,
        min(r.request_key) AS request_key,
        arg_min(r.capture_id, r.request_key) AS capture_id,
        arg_min(r.flow_id, r.request_key) AS flow_id
    FROM execs x JOIN ev e ON e.run_key = x.run_key AND e.task = x.task AND e.round = x.round
        AND e.ts_ns >= x.start_ns AND e.ts_ns < x.end_ns
    LEFT JOIN requests r ON e.kind = 'request_start' AND r.source = 'events'
        AND r.log_id = e.log_id AND r.request = e.request
    GROUP BY x.exec_id
),

attributed AS (
    SELECT request_key, map(list(span ORDER BY ns DESC, span), list(ns ORDER BY ns DESC, span))
        AS request_spans
    FROM (SELECT request_key, span, sum(ns)::BIGINT AS ns FROM attribution
          -- only the rounds' requests: the whole table is millions of rows of
          -- requests no round made (3 s of CPU for none on a 2.9 M-packet capture)
          WHERE request_key IN (SELECT request_key FROM linked) GROUP BY ALL)
    GROUP BY request_key
),

final AS (
    SELECT x.run, x.task, x.round, x.attempt, x.status, x.superseded, x.start_ns, x.end_ns,
        x.end_ns - x.start_ns AS round_ns,
        coalesce(s.edge_ns, 0)::BIGINT AS edge_ns, coalesce(s.upload_ns, 0)::BIGINT AS upload_ns,
        coalesce(s.model_ns, 0)::BIGINT AS model_ns, coalesce(s.network_ns, 0)::BIGINT AS network_ns,
        coalesce(s.action_ns, 0)::BIGINT AS action_ns,
        coalesce(s.unexplained_ns, 0)::BIGINT AS unexplained_ns,
        l.action_id, coalesce(l.requests, 0) AS requests, l.request_key, l.capture_id, l.flow_id,
        a.request_spans
    FROM execs x LEFT JOIN spans s USING (exec_id) LEFT JOIN linked l USING (exec_id)
    LEFT JOIN attributed a ON a.request_key = l.request_key
    WHERE x.end_ns IS NOT NULL
)
SELECT * FROM final ORDER BY run, task, start_ns
