-- The `tracekit tasks` view: each agent task, its rounds, slack against its deadline and what disconnects cost, times in s.
-- Parameters: $run (NULL for all).
-- Sources: tasks.
SELECT run, task, rounds, executions, lost_rounds, round(duration_ns / 1e9, 3) AS task_s,
    round(setup_ns / 1e9, 3) AS setup_s, round(rounds_ns / 1e9, 3) AS rounds_s,
    round(reconnect_ns / 1e9, 3) AS reconnect_s, round(redo_ns / 1e9, 3) AS redo_s,
    round(between_ns / 1e9, 3) AS unexplained_s, round(deadline_ns / 1e9, 3) AS deadline_s,
    round(slack_ns / 1e9, 3) AS slack_s, met, committed_round, duplicate_actions, retries,
    reexecuted_retries
FROM tasks
WHERE $run IS NULL OR run = $run
ORDER BY run, start_ns, task
