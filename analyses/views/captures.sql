-- The `tracekit captures` view: one row per ingested file, with its flows,
-- first packet time (UTC), duration, size, where reading stopped and labels.
-- Parameters: none.
-- Sources: captures, flows.
SELECT c.capture_id AS capture, c.file_name AS file, c.format,
       array_to_string(c.link_types, ',') AS link_types, c.packets,
       (SELECT count(*) FROM flows f WHERE f.capture_id = c.capture_id) AS flows,
       strftime(make_timestamp(c.first_ts_ns // 1000), '%Y-%m-%d %H:%M:%S') AS first_utc,
       round((c.last_ts_ns - c.first_ts_ns) / 1e9, 6) AS duration_s,
       c.size_bytes, c.read_stop,
       nullif(array_to_string(list_transform(map_entries(c.labels),
              lambda e: e.key || '=' || e.value), ' '), '') AS labels
FROM captures c ORDER BY c.capture_id
