-- Normalise records of tracekit's event schema (one JSON object per line) into
-- the columns of `events`, and name what is wrong with the rest.
-- Input: table `raw(line BIGINT, text VARCHAR)`. Output: one row per input
-- line, `problem` NULL for a good record.
WITH typed AS (
    SELECT line, text,
           CASE WHEN NOT json_valid(text) THEN 'not JSON'
                WHEN json_type(text) <> 'OBJECT' THEN 'not a JSON object' END AS problem
    FROM raw
),
objects AS (
    SELECT line, problem, CASE WHEN problem IS NULL THEN text::JSON END AS j FROM typed
),
stamped AS (
    SELECT line, problem, j,
           coalesce(j->'ts_ns', j->'ts', j->'time', j->'timestamp') AS ts,
           regexp_extract(coalesce(j->>'ts', j->>'time', j->>'timestamp'),
               '^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})$',
               ['day', 'clock', 'fraction', 'zone']) AS rfc3339
    FROM objects
),
timed AS (
    SELECT *,
           CASE WHEN json_type(ts) IN ('UBIGINT', 'BIGINT') THEN TRY_CAST(ts->>'$' AS BIGINT)
                WHEN json_type(ts) = 'DOUBLE' THEN TRY_CAST(round(TRY_CAST(ts->>'$' AS DOUBLE)) AS BIGINT)
                WHEN rfc3339.day <> '' THEN
                    epoch_ns(TRY_STRPTIME(rfc3339.day || ' ' || rfc3339.clock, '%Y-%m-%d %H:%M:%S'))
                    + CAST(rpad(CASE WHEN rfc3339.fraction = '' THEN '0' ELSE rfc3339.fraction END, 9, '0') AS BIGINT)
                    - CASE WHEN upper(rfc3339.zone) = 'Z' THEN 0
                           ELSE (CASE WHEN rfc3339.zone[1] = '-' THEN -1 ELSE 1 END)
                                * (CAST(rfc3339.zone[2:3] AS BIGINT) * 3600 + CAST(rfc3339.zone[5:6] AS BIGINT) * 60)
                                * 1000000000 END
           END AS ts_ns
    FROM stamped
),
final AS (
    SELECT line,
           coalesce(problem,
               CASE WHEN ts IS NULL THEN 'no timestamp (ts_ns, ts or time)'
                    WHEN ts_ns IS NULL THEN 'timestamp is neither ns since the epoch nor RFC 3339: ' || left(ts->>'$', 40)
                    WHEN ts_ns < 100000000000000000 THEN 'numeric timestamp must be ns since the epoch, got ' || (ts->>'$')
                    WHEN coalesce(j->>'kind', '') = '' THEN 'no kind' END) AS problem,
           ts_ns,
           j->>'kind' AS kind,
           j->>'run' AS run,
           j->>'request' AS request,
           j->>'stream' AS stream,
           coalesce(j->>'local_addr', j->>'$.flow.local_addr') AS local_addr,
           TRY_CAST(coalesce(j->>'local_port', j->>'$.flow.local_port',
                    CASE WHEN json_type(j->'flow') IN ('UBIGINT', 'BIGINT') THEN j->>'flow' END) AS INTEGER) AS local_port,
           coalesce(j->>'remote_addr', j->>'$.flow.remote_addr') AS remote_addr,
           TRY_CAST(coalesce(j->>'remote_port', j->>'$.flow.remote_port') AS INTEGER) AS remote_port,
           j AS fields
    FROM timed
)
SELECT * FROM final
