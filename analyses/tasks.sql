-- tasks: each agent task: its rounds, setup, reconnects, deadline slack,
-- the work a disconnect cost, duplicate actions and retries that acted again.
--
-- Step: store.
-- Sources: agent_rounds, events.
--
-- Built over the whole store.
-- Definitions (docs/agents.md; events joined by `run` and `task`):
--   start_ns       the task_start event, else its first round's start
--   end_ns         the task_end event, else its last round's end
--   duration_ns    end_ns - start_ns
--   rounds         distinct round numbers executed; executions counts every
--                  execution (agent_rounds), lost_rounds the superseded ones
--   rounds_ns      the time of every execution (agent_rounds.round_ns summed)
--   setup_ns       start_ns .. the first round's start
--   reconnect_ns   each disconnect .. the next reconnect, summed;
--                  disconnects counts the disconnect events
--   redo_ns        reconnect_ns + the time of the lost (superseded)
--                  executions: what the disconnects cost
--   between_ns     duration_ns - setup_ns - rounds_ns - reconnect_ns: time in
--                  the task that no round, setup or reconnect covers
--                  (unexplained at the task's level)
--   committed_round  the largest `round` of a commit event before the first
--                  disconnect (NULL when none)
--   deadline_ns    the deadline (`deadline_s` field of a deadline or
--                  task_start event, in seconds from the task's start)
--   slack_ns       deadline_ns - duration_ns; met: slack_ns >= 0
--   duplicate_actions  action ids with more than one action_start (the
--                  same action executed twice)
--   retries        retry events; reexecuted_retries: retries naming an
--                  action_id that an action_start of the same id follows
--                  (the action was done again instead of its result being
--                  asked for with an action_query)
-- Columns: run, task, start_ns, end_ns, duration_ns, rounds, executions,
--   lost_rounds, rounds_ns, setup_ns, reconnect_ns, disconnects, redo_ns,
--   between_ns, committed_round, deadline_ns, slack_ns, met,
--   duplicate_actions, retries, reexecuted_retries
WITH ev AS (
    SELECT run, coalesce(run, '') AS run_key, fields->>'task' AS task, kind, ts_ns,
        TRY_CAST(fields->>'round' AS INTEGER) AS round, fields->>'action_id' AS action_id,
        TRY_CAST(fields->>'deadline_s' AS DOUBLE) AS deadline_s
    FROM events
    WHERE fields->>'task' IS NOT NULL
),

per_round AS (
    SELECT coalesce(run, '') AS run_key, task, any_value(run) AS run,
        min(start_ns) AS first_ns, max(end_ns) AS last_ns,
        count(DISTINCT round) AS rounds, count(*) AS executions,
        count(*) FILTER (superseded) AS lost_rounds, sum(round_ns) AS rounds_ns,
        coalesce(sum(round_ns) FILTER (superseded), 0) AS lost_ns
    FROM agent_rounds GROUP BY ALL
),

marks AS (
    SELECT run_key, task, any_value(run) AS run,
        min(ts_ns) FILTER (kind = 'task_start') AS task_start_ns,
        max(ts_ns) FILTER (kind = 'task_end') AS task_end_ns,
        max(deadline_s) FILTER (kind IN ('deadline', 'task_start')) AS deadline_s,
        count(*) FILTER (kind = 'disconnect') AS disconnects,
        count(*) FILTER (kind = 'retry') AS retries,
        min(ts_ns) FILTER (kind = 'disconnect') AS first_cut_ns
    FROM ev GROUP BY run_key, task
),

cuts AS (
    SELECT d.run_key, d.task, sum(r.ts_ns - d.ts_ns) AS reconnect_ns
    FROM (SELECT * FROM ev WHERE kind = 'disconnect') d
    ASOF JOIN (SELECT * FROM ev WHERE kind = 'reconnect') r
        ON d.run_key = r.run_key AND d.task = r.task AND r.ts_ns >= d.ts_ns
    GROUP BY ALL
),

committed AS (
    SELECT c.run_key, c.task, max(c.round) AS committed_round
    FROM ev c JOIN marks m USING (run_key, task)
    WHERE c.kind = 'commit' AND m.first_cut_ns IS NOT NULL AND c.ts_ns <= m.first_cut_ns
    GROUP BY ALL
),

actions AS (
    SELECT run_key, task, count(*) AS duplicate_actions
    FROM (SELECT run_key, task, action_id FROM ev
          WHERE kind = 'action_start' AND action_id IS NOT NULL
          GROUP BY ALL HAVING count(*) > 1)
    GROUP BY ALL
),

reexecuted AS (
    SELECT t.run_key, t.task, count(DISTINCT t.ts_ns) AS reexecuted_retries
    FROM ev t JOIN ev a ON a.run_key = t.run_key AND a.task = t.task
        AND a.action_id = t.action_id AND a.kind = 'action_start' AND a.ts_ns > t.ts_ns
    WHERE t.kind = 'retry'
    GROUP BY ALL
),

joined AS (
    SELECT coalesce(m.run, p.run) AS run, m.task,
        coalesce(m.task_start_ns, p.first_ns) AS start_ns,
        coalesce(m.task_end_ns, p.last_ns) AS end_ns,
        coalesce(p.rounds, 0) AS rounds, coalesce(p.executions, 0) AS executions,
        coalesce(p.lost_rounds, 0) AS lost_rounds, coalesce(p.rounds_ns, 0)::BIGINT AS rounds_ns,
        p.first_ns, coalesce(p.lost_ns, 0) AS lost_ns,
        coalesce(c.reconnect_ns, 0)::BIGINT AS reconnect_ns, m.disconnects,
        k.committed_round,
        round(m.deadline_s * 1e9)::BIGINT AS deadline_ns,
        coalesce(a.duplicate_actions, 0) AS duplicate_actions, m.retries,
        coalesce(r.reexecuted_retries, 0) AS reexecuted_retries
    FROM marks m LEFT JOIN per_round p USING (run_key, task) LEFT JOIN cuts c USING (run_key, task)
    LEFT JOIN committed k USING (run_key, task) LEFT JOIN actions a USING (run_key, task)
    LEFT JOIN reexecuted r USING (run_key, task)
),

final AS (
    SELECT run, task, start_ns, end_ns, end_ns - start_ns AS duration_ns, rounds, executions,
        lost_rounds, rounds_ns, coalesce(first_ns - start_ns, 0) AS setup_ns, reconnect_ns,
        disconnects, (reconnect_ns + lost_ns)::BIGINT AS redo_ns,
        end_ns - start_ns - coalesce(first_ns - start_ns, 0) - rounds_ns - reconnect_ns AS between_ns,
        committed_round, deadline_ns, deadline_ns - (end_ns - start_ns) AS slack_ns,
        deadline_ns - (end_ns - start_ns) >= 0 AS met,
        duplicate_actions, retries, reexecuted_retries
    FROM joined
    WHERE start_ns IS NOT NULL AND end_ns IS NOT NULL
)
SELECT * FROM final ORDER BY run, start_ns, task
