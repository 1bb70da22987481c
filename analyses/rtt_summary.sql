-- rtt_summary: per flow and direction, the RTT and where the capture was taken.
--
-- Step: capture.
-- Sources: rtt_samples.
--
-- Parameters: $first, $last (the captures capture_id BETWEEN them).
-- Definitions. Vantage point: an ACK-based RTT measured in a capture is the round trip
-- between the capture point and the data's receiver. Each flow has two legs:
-- the client's (s2c samples: server data out past the capture point, the
-- client's ACK back) and the server's (c2s samples). Their sum is the end-to-
-- end RTT; their ratio places the capture point. The legs come from the
-- handshake when it was captured (its single samples are undelayed), else
-- from the smallest ACK or timestamp sample (delayed ACKs only add).
--   client   client leg < 10 % of the sum: captured on or near the client
--   server   server leg < 10 % of the sum
--   between  otherwise; `client_leg_fraction` says where
--   unknown  a leg has no sample
-- Near the client, a sender's in-flight and ACK-RTT are what the client
-- sees of the server's data only after a full round trip; near the server,
-- s2c in-flight is the server's own.
-- Columns:
--   capture_id, flow_id, direction
--   samples, ack_samples, timestamp_samples
--   min_rtt_ns, median_rtt_ns, p90_rtt_ns, max_rtt_ns   over ack and timestamp samples
--   handshake_rtt_ns    this direction's handshake leg
--   client_leg_ns, server_leg_ns, path_rtt_ns (their sum)
--   client_leg_fraction client_leg / path_rtt
--   vantage             client | server | between | unknown
-- read twice (counts, ranks) straight from the view: materialised once, its
-- rows (every sample, with text columns) spilled under analyze's memory limit
-- (29 M packets: 19.4 s as a materialised CTE, 15.4 s so; same rows)
WITH s AS NOT MATERIALIZED (SELECT * FROM rtt_samples WHERE capture_id BETWEEN $first AND $last),

-- median and p90 by rank (linear interpolation between the two nearest ranks,
-- as quantile_cont): a sort, which spills to disk, where quantile_cont would
-- hold every sample of the batch in memory; sorted by a boolean direction,
-- not its text (29 M packets, 26 M samples: 3.6 -> 2.5 GB spilled, 9.3 -> 8.9 s)
ranked AS (
    SELECT capture_id, flow_id, CASE WHEN s2c THEN 's2c' ELSE 'c2s' END AS direction, rtt_ns, k, n
    FROM (SELECT capture_id, flow_id, s2c, rtt_ns,
              row_number() OVER w - 1 AS k, count(*) OVER (PARTITION BY capture_id, flow_id, s2c) AS n
          FROM (SELECT capture_id, flow_id, direction = 's2c' AS s2c, rtt_ns FROM s WHERE kind <> 'handshake')
          WINDOW w AS (PARTITION BY capture_id, flow_id, s2c ORDER BY rtt_ns))
),

ranks AS (  -- the (up to) two samples around each quantile's rank
    SELECT capture_id, flow_id, direction, n,
        min(rtt_ns) FILTER (k = floor(0.5::DOUBLE * (n - 1))) AS m_lo,
        min(rtt_ns) FILTER (k = ceil(0.5::DOUBLE * (n - 1))) AS m_hi,
        min(rtt_ns) FILTER (k = floor(0.9::DOUBLE * (n - 1))) AS p_lo,
        min(rtt_ns) FILTER (k = ceil(0.9::DOUBLE * (n - 1))) AS p_hi
    FROM ranked
    WHERE k IN (floor(0.5::DOUBLE * (n - 1)), ceil(0.5::DOUBLE * (n - 1)),
                floor(0.9::DOUBLE * (n - 1)), ceil(0.9::DOUBLE * (n - 1)))
    GROUP BY capture_id, flow_id, direction, n
),

quantiles AS (
    SELECT capture_id, flow_id, direction,
        CAST(m_lo + (0.5::DOUBLE * (n - 1) - floor(0.5::DOUBLE * (n - 1))) * (m_hi - m_lo)
             AS BIGINT) AS median_rtt_ns,
        CAST(p_lo + (0.9::DOUBLE * (n - 1) - floor(0.9::DOUBLE * (n - 1))) * (p_hi - p_lo)
             AS BIGINT) AS p90_rtt_ns
    FROM ranks
),

per_dir AS (
    SELECT s.capture_id, s.flow_id, s.direction,
        count(*) FILTER (kind <> 'handshake') AS samples,
        count(*) FILTER (kind = 'ack') AS ack_samples,
        count(*) FILTER (kind = 'timestamp') AS timestamp_samples,
        min(rtt_ns) FILTER (kind <> 'handshake') AS min_rtt_ns,
        any_value(q.median_rtt_ns) AS median_rtt_ns,
        any_value(q.p90_rtt_ns) AS p90_rtt_ns,
        max(rtt_ns) FILTER (kind <> 'handshake') AS max_rtt_ns,
        min(rtt_ns) FILTER (kind = 'handshake') AS handshake_rtt_ns
    FROM s LEFT JOIN quantiles q USING (capture_id, flow_id, direction)
    GROUP BY ALL
),

legs AS (
    SELECT capture_id, flow_id,
        any_value(coalesce(handshake_rtt_ns, min_rtt_ns)) FILTER (direction = 's2c') AS client_leg_ns,
        any_value(coalesce(handshake_rtt_ns, min_rtt_ns)) FILTER (direction = 'c2s') AS server_leg_ns
    FROM per_dir GROUP BY ALL
),

final AS (
    SELECT d.*, l.client_leg_ns, l.server_leg_ns,
        l.client_leg_ns + l.server_leg_ns AS path_rtt_ns,
        round(l.client_leg_ns / nullif(l.client_leg_ns + l.server_leg_ns, 0), 3) AS client_leg_fraction,
        CASE WHEN l.client_leg_ns IS NULL OR l.server_leg_ns IS NULL
                  OR l.client_leg_ns + l.server_leg_ns = 0 THEN 'unknown'
             WHEN l.client_leg_ns < 0.1 * (l.client_leg_ns + l.server_leg_ns) THEN 'client'
             WHEN l.server_leg_ns < 0.1 * (l.client_leg_ns + l.server_leg_ns) THEN 'server'
             ELSE 'between' END AS vantage
    FROM per_dir d JOIN legs l USING (capture_id, flow_id)
)

SELECT * FROM final ORDER BY capture_id, flow_id, direction
