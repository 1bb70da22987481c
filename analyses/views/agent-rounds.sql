-- The `tracekit agent-rounds` view: each execution of an agent round and the spans that add up to it, times in ms.
-- Parameters: $run (NULL for all).
-- Sources: agent_rounds.
SELECT run, task, round, attempt, status, superseded, round(round_ns / 1e6, 3) AS round_ms,
    round(edge_ns / 1e6, 3) AS edge_ms, round(upload_ns / 1e6, 3) AS upload_ms,
    round(model_ns / 1e6, 3) AS model_ms, round(network_ns / 1e6, 3) AS network_ms,
    round(action_ns / 1e6, 3) AS action_ms, round(unexplained_ns / 1e6, 3) AS unexplained_ms,
    action_id, request_key, capture_id AS capture, flow_id AS flow
FROM agent_rounds
WHERE $run IS NULL OR run = $run
ORDER BY run, task, start_ns
