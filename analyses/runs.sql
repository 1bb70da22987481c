-- runs: one row per experiment run, from the labels its captures and logs carry.
--
-- Step: store.
-- Sources: captures, event_logs.
--
-- Built over the whole store.
-- Definitions: a run is the `run` label (`tracekit lab run` sets it; give it
-- with --label run=ID otherwise); files without one are a run each, named
-- after the file. `factors` are the run's labels other than run, trial,
-- order, experiment and the path settings tracekit reads (rtt_ms,
-- bottleneck_mbps, processing_ms); `design` is the sorted list of factor
-- names: runs of the same design belong to one experiment and can be
-- compared (tracekit ablation groups by it through the labels).
-- Columns: run, experiment, design, factors, trial, run_order, captures, logs,
--   first_ts_ns, last_ts_ns
WITH files AS (
    SELECT coalesce(labels['run'], 'capture:' || file_name) AS run, labels, 'capture' AS kind,
        capture_id AS id, first_ts_ns, last_ts_ns
    FROM captures
    UNION ALL
    SELECT coalesce(labels['run'], 'log:' || file_name), labels, 'log', log_id, first_ts_ns, last_ts_ns
    FROM event_logs
),

per_run AS (
    SELECT run, any_value(labels) AS labels,
        list(id ORDER BY id) FILTER (kind = 'capture') AS captures,
        list(id ORDER BY id) FILTER (kind = 'log') AS logs,
        min(first_ts_ns) AS first_ts_ns, max(last_ts_ns) AS last_ts_ns
    FROM files GROUP BY run
),

final AS (
    SELECT run, labels['experiment'] AS experiment,
        list_sort(list_filter(map_keys(labels), lambda k: k NOT IN
            ('run', 'trial', 'order', 'experiment', 'rtt_ms', 'bottleneck_mbps', 'processing_ms', 'source'))) AS design,
        map_from_entries(list_filter(map_entries(labels), lambda e: e.key NOT IN
            ('run', 'trial', 'order', 'experiment', 'rtt_ms', 'bottleneck_mbps', 'processing_ms', 'source'))) AS factors,
        TRY_CAST(labels['trial'] AS INTEGER) AS trial, TRY_CAST(labels['order'] AS INTEGER) AS run_order,
        coalesce(captures, []) AS captures, coalesce(logs, []) AS logs, first_ts_ns, last_ts_ns
    FROM per_run
)
SELECT * FROM final ORDER BY experiment, run_order, run
