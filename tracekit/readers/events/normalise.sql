-- Normalise records of tracekit's event schema (one JSON object per line) into
-- the columns of `events`, and name what is wrong with the rest.
-- Input: table `raw(line BIGINT, text VARCHAR, trail TINYINT)`, `trail` the
-- line-end characters the text still carries (0-2). Output: one row per input
-- line, `problem` NULL for a good record. Each record is parsed twice (types,
-- then values), each time for all the paths at once.
WITH typed AS (
    SELECT line, text, trail,
        CASE WHEN strlen(text) - trail <= 8192 THEN  -- larger is not an event (see final)
            try(json_type(text, ['$', '$.flow', '$.ts_ns', '$.ts', '$.time', '$.timestamp',
                                 '$.kind'])) END AS t
    FROM raw
),

extracted AS (
    SELECT line, text, trail, t,
        CASE WHEN t[1] = 'OBJECT' THEN json_extract_string(text, [
            '$.kind', '$.run', '$.request', '$.stream',                      -- 1-4
            '$.local_addr', '$.flow.local_addr', '$.local_port', '$.flow.local_port',  -- 5-8
            '$.remote_addr', '$.flow.remote_addr', '$.remote_port', '$.flow.remote_port',  -- 9-12
            '$.flow', '$.ts_ns', '$.ts', '$.time', '$.timestamp',                  -- 13-17
            '$.clock']) END AS v  -- 18: "trace" when times count from a trace's start (qlog)
    FROM typed
),

stamped AS (
    SELECT *,
        coalesce(v[14], v[15], v[16], v[17]) AS ts_text,
        coalesce(t[3], t[4], t[5], t[6]) AS ts_type
    FROM extracted
),

parsed AS (
    SELECT *,
        regexp_extract(ts_text,
            '^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?([Zz]|[+-](?:[01]\d|2[0-3]):[0-5]\d)$',
            ['day', 'clock', 'fraction', 'zone']) AS rfc3339
    FROM stamped
),

timed AS (
    SELECT *,
        CASE WHEN ts_type IN ('UBIGINT', 'BIGINT') THEN TRY_CAST(ts_text AS BIGINT)
             WHEN ts_type = 'DOUBLE' THEN TRY_CAST(round(TRY_CAST(ts_text AS DOUBLE)) AS BIGINT)
             WHEN ts_type = 'VARCHAR' AND rfc3339.day <> '' THEN try(  -- NULL outside 1677-2262
                 epoch_ns(TRY_STRPTIME(rfc3339.day || ' ' || rfc3339.clock, '%Y-%m-%d %H:%M:%S'))
                 + CAST(rpad(CASE WHEN rfc3339.fraction = '' THEN '0' ELSE rfc3339.fraction END, 9, '0') AS BIGINT)
                 - CASE WHEN upper(rfc3339.zone) = 'Z' THEN 0
                        ELSE (CASE WHEN rfc3339.zone[1] = '-' THEN -1 ELSE 1 END)
                             * (CAST(rfc3339.zone[2:3] AS BIGINT) * 3600 + CAST(rfc3339.zone[5:6] AS BIGINT) * 60)
                             * 1000000000 END)
        END AS ts_ns
    FROM parsed
),

final AS (
    SELECT line,
        CASE WHEN strlen(text) - trail > 8192
                 THEN 'a record of ' || (strlen(text) - trail) || ' bytes (an event is at most 8 KiB)'
             WHEN t IS NULL THEN 'not JSON'
             WHEN t[1] <> 'OBJECT' THEN 'not a JSON object'
             WHEN ts_text IS NULL THEN 'no timestamp (ts_ns, ts or time)'
             WHEN ts_ns IS NULL AND rfc3339.day <> ''
                  AND TRY_STRPTIME(rfc3339.day || ' ' || rfc3339.clock, '%Y-%m-%d %H:%M:%S') IS NOT NULL
                 THEN 'RFC 3339 time outside 1677-09-21 .. 2262-04-11 (int64 ns): ' || left(ts_text, 40)
             WHEN ts_ns IS NULL AND rfc3339.day <> ''
                 THEN 'not a valid RFC 3339 date and time: ' || left(ts_text, 40)
             WHEN ts_ns IS NULL THEN 'timestamp is neither ns since the epoch nor RFC 3339: ' || left(ts_text, 40)
             WHEN ts_type <> 'VARCHAR' AND ts_ns < 100000000000000000 AND v[18] IS DISTINCT FROM 'trace' THEN 'numeric timestamp must be ns since the epoch, got ' || ts_text
             WHEN coalesce(v[1], '') = '' THEN 'no kind'
             WHEN t[7] <> 'VARCHAR' THEN 'kind is not a string (a JSON ' || lower(t[7]) || ')'
             -- JSON has no NaN or Infinity (DuckDB reads them): outside strings, the
             -- minified text has them right after a colon, a comma or a bracket
             WHEN regexp_matches(json(text)::VARCHAR, '[:,\[]-?(NaN|Infinity)[,\]}]')
                 THEN 'a number that is not finite (NaN or Infinity)' END AS problem,
        ts_ns,
        v[1] AS kind, v[2] AS run, v[3] AS request, v[4] AS stream,
        coalesce(v[5], v[6]) AS local_addr,
        TRY_CAST(coalesce(v[7], v[8], CASE WHEN t[2] IN ('UBIGINT', 'BIGINT') THEN v[13] END) AS INTEGER) AS local_port,
        coalesce(v[9], v[10]) AS remote_addr,
        TRY_CAST(coalesce(v[11], v[12]) AS INTEGER) AS remote_port,
        CASE WHEN t[1] = 'OBJECT' THEN (CASE trail WHEN 0 THEN text ELSE left(text, -trail) END)::JSON
        END AS fields
    FROM timed
)
SELECT * FROM final
