-- bottleneck, as plain SQL: the reference tests/test_bottleneck_pass.py checks
-- tracekit/pipeline/steps/bottleneck.py against (the step was this query until
-- #31; now a compiled pass finds the pairs and DuckDB reduces them). Not a step.
--
-- Reads: flows, packets, rtt_summary, tcp_analysis.
--
-- Parameters: $first, $last (the captures capture_id BETWEEN them).
-- Definitions. Two segments that queue behind each other at the bottleneck
-- leave it spaced by the second's size / its rate, and keep that spacing to
-- the receiver; the receiver's ACKs, sent as they arrive, carry it back to
-- the sender (the ACK clock). So pairs that crossed the bottleneck back to
-- back show its rate at either end: near the receiver in the data's
-- arrivals, near the sender in its ACKs'. One flow and direction is read
-- alone (a run's rate does not depend on what else shares the store).
--   pair             two consecutive packets of one kind, in frame order: near
--                    the receiver, data segments of the direction, both
--                    full-sized (payload >= the receiver's MSS option - 60, or
--                    the largest payload seen when no SYN was captured); near
--                    the sender, ACKs that newly acknowledge its data, neither
--                    a duplicate ACK nor carrying a SACK block, nor following
--                    one (a hole's repair acknowledges at once bytes that
--                    arrived over many round trips)
--   its rate         the second's IP bytes / the gap (ACKs: bytes acknowledged
--                    x the direction's IP bytes per payload byte); bit/s at the
--                    IP level, the rate a shaper such as tbf or the lab's path
--                    is set to, less the link header
--   mode             pairs are binned by rate (bins 5 % wide); a bin's support
--                    is the pairs within 10 % (two bins) of it. The mode is the
--                    fastest local peak supported by at least 30 pairs and a
--                    tenth of the direction's: the bottleneck's spacing. Slower
--                    modes are the sender's own spacing between its bursts
--                    (pacing, ACK clocking of a window that does not fill the
--                    path); faster pairs without such support, compression
--                    after the bottleneck (a handful of segments delivered
--                    together), are left out
--   side             `arrivals` at a capture near the receiver (rtt_summary's
--                    vantage), `acks` near the sender; elsewhere both, and the
--                    lower is kept (at the sender data leave at the host's own
--                    rate, which is no bound)
--   pairs            the direction's pairs; modal_pairs, those within 10 % of the mode
--   rate_bps         the median rate of the modal pairs; p25_bps, p75_bps their quartiles
--   confidence       modal_pairs / pairs
--   known            at least 30 modal pairs and confidence >= 0.25, and, read from
--                    arrivals, no 5 consecutive of the direction's first 10
--                    full-sized segments (a fresh connection's initial window,
--                    sent back to back) arrived more than 4 x faster than the
--                    mode over their span: the path carried them that fast, so a slower
--                    mode is the sender's own spacing (a sender that paces
--                    single segments, as BBR below 1.2 Mbit/s). Otherwise the
--                    rate is no measurement (a handful of segments, a sender
--                    that never sent two full segments back to back). A flow
--                    direction without a supported mode has no row
-- Columns: capture_id, flow_id, direction, side, pairs, modal_pairs, rate_bps,
--   p25_bps, p75_bps, confidence, known
WITH ta AS (
    SELECT t.capture_id, t.flow_id, t.frame, t.ts_ns, t.payload_bytes, t.acked_bytes,
        CASE WHEN t.from_client THEN 'c2s' ELSE 's2c' END AS sender,
        p.ip_total_bytes AS ip_bytes, t.ws_duplicate_ack OR p.tcp_sack_left IS NOT NULL AS sacky
    FROM tcp_analysis t JOIN packets p USING (capture_id, frame)
    WHERE t.capture_id BETWEEN $first AND $last AND p.capture_id BETWEEN $first AND $last
),

mss AS (  -- the direction's full size: the receiver's MSS option, else the largest payload
    SELECT d.capture_id, d.flow_id, d.sender AS direction,
        coalesce(CASE d.sender WHEN 's2c' THEN any_value(f.client_mss) ELSE any_value(f.server_mss) END
                 - 60, max(d.payload_bytes)) AS full_bytes,
        sum(d.ip_bytes) / sum(d.payload_bytes) AS ip_per_payload
    FROM ta d JOIN flows f USING (capture_id, flow_id)
    WHERE d.payload_bytes > 0 GROUP BY d.capture_id, d.flow_id, d.sender
),

arrivals AS (  -- data segments of the direction, each with the gap since the one before
    SELECT ta.capture_id, ta.flow_id, ta.sender AS direction, 'arrivals' AS side, ip_bytes,
        payload_bytes >= m.full_bytes AND lag(payload_bytes) OVER w >= m.full_bytes AS whole,
        ts_ns - lag(ts_ns) OVER w AS gap_ns
    FROM ta JOIN mss m ON m.capture_id = ta.capture_id AND m.flow_id = ta.flow_id
        AND m.direction = ta.sender
    WHERE payload_bytes > 0
    WINDOW w AS (PARTITION BY ta.capture_id, ta.flow_id, ta.sender ORDER BY frame)
),

acks AS (  -- the other side's ACKs that newly acknowledge the direction's data
    SELECT a.capture_id, a.flow_id, CASE a.sender WHEN 'c2s' THEN 's2c' ELSE 'c2s' END AS direction,
        'acks' AS side, round(coalesce(a.acked_bytes, 0) * m.ip_per_payload) AS ip_bytes,
        a.acked_bytes > 0 AND NOT a.sacky AND NOT lag(a.sacky) OVER w AS whole,
        ts_ns - lag(ts_ns) OVER w AS gap_ns
    FROM ta a JOIN mss m ON m.capture_id = a.capture_id AND m.flow_id = a.flow_id
        AND m.direction <> a.sender
    WHERE a.acked_bytes > 0 OR a.sacky
    WINDOW w AS (PARTITION BY a.capture_id, a.flow_id, a.sender ORDER BY frame)
),

ten AS (  -- the direction's first 10 full-sized segments, k = 1..10
    SELECT * FROM (
        SELECT ta.capture_id, ta.flow_id, ta.sender AS direction, ta.ts_ns, ta.ip_bytes,
            row_number() OVER (PARTITION BY ta.capture_id, ta.flow_id, ta.sender
                               ORDER BY frame) AS k
        FROM ta JOIN mss m ON m.capture_id = ta.capture_id AND m.flow_id = ta.flow_id
            AND m.direction = ta.sender
        WHERE ta.payload_bytes >= m.full_bytes)
    WHERE k <= 10
),

early AS (  -- the fastest 5 consecutive of them (a fresh connection's initial window,
            -- sent back to back), over their span
    SELECT capture_id, flow_id, direction, max(early_bps) AS early_bps
    FROM (SELECT capture_id, flow_id, direction, k,
              (sum(ip_bytes) OVER w - ip_bytes) * 8e9
                  / nullif(ts_ns - first_value(ts_ns) OVER w, 0) AS early_bps,
              count(*) OVER w AS n
          FROM ten
          WINDOW w AS (PARTITION BY capture_id, flow_id, direction ORDER BY k
                       ROWS BETWEEN 4 PRECEDING AND CURRENT ROW))
    WHERE n = 5 GROUP BY ALL
),

first_ten AS (  -- each of them with its gap to the one before
    SELECT capture_id, flow_id, direction, ip_bytes,
        ts_ns - lag(ts_ns) OVER (PARTITION BY capture_id, flow_id, direction ORDER BY k) AS gap_ns
    FROM ten
),

pairs AS (  -- a pair's rate: the second's bytes / its gap, in bins of 5 %
    SELECT capture_id, flow_id, direction, side, ip_bytes * 8e9 / gap_ns AS rate_bps,
        round(ln(ip_bytes * 8e9 / gap_ns) / ln(1.05))::BIGINT AS bin
    FROM (SELECT * FROM arrivals UNION ALL SELECT * FROM acks)
    WHERE whole AND gap_ns > 0 AND ip_bytes > 0
),

bins AS (  -- pairs within 10 % (two bins) of each bin
    SELECT capture_id, flow_id, direction, side, bin,
        sum(n) OVER w AS near, max(n) OVER w AS peak, n,
        sum(n) OVER (PARTITION BY capture_id, flow_id, direction, side) AS total
    FROM (SELECT capture_id, flow_id, direction, side, bin, count(*) AS n FROM pairs GROUP BY ALL)
    WINDOW w AS (PARTITION BY capture_id, flow_id, direction, side ORDER BY bin
                 RANGE BETWEEN 2 PRECEDING AND 2 FOLLOWING)
),

modes AS (  -- the fastest well-supported mode: the bottleneck's spacing (slower modes are
            -- the sender's own spacing between its bursts)
    SELECT capture_id, flow_id, direction, side, max(bin) AS bin
    FROM bins WHERE n = peak AND near >= greatest(30, 0.1 * total) GROUP BY ALL
),

per_side AS (
    SELECT p.capture_id, p.flow_id, p.direction, p.side, count(*) AS pairs,
        count(*) FILTER (abs(p.bin - m.bin) <= 2) AS modal_pairs,
        median(p.rate_bps) FILTER (abs(p.bin - m.bin) <= 2) AS rate_bps,
        quantile_cont(p.rate_bps, 0.25) FILTER (abs(p.bin - m.bin) <= 2) AS p25_bps,
        quantile_cont(p.rate_bps, 0.75) FILTER (abs(p.bin - m.bin) <= 2) AS p75_bps
    FROM pairs p JOIN modes m USING (capture_id, flow_id, direction, side)
    GROUP BY ALL
),

chosen AS (  -- the side the capture point can read (rtt_summary's vantage)
    SELECT s.*, modal_pairs / pairs AS confidence,
        CASE WHEN coalesce(v.vantage, 'unknown') NOT IN ('client', 'server') THEN TRUE
             WHEN (v.vantage = 'client') = (s.direction = 's2c') THEN s.side = 'arrivals'
             ELSE s.side = 'acks' END AS readable
    FROM per_side s
    LEFT JOIN (SELECT capture_id, flow_id, any_value(vantage) AS vantage FROM rtt_summary
               WHERE capture_id BETWEEN $first AND $last GROUP BY ALL) v USING (capture_id, flow_id)
),

estimate AS (  -- the slowest well-supported side of each flow direction (of two
                -- alike, the ACKs': `key` orders them, not the order they are read in)
    SELECT capture_id, flow_id, direction, arg_min(side, key) AS side,
        arg_min(pairs, key) AS pairs, arg_min(modal_pairs, key) AS modal_pairs,
        round(min(rate_bps))::BIGINT AS rate_bps, round(arg_min(p25_bps, key))::BIGINT AS p25_bps,
        round(arg_min(p75_bps, key))::BIGINT AS p75_bps,
        round(arg_min(confidence, key), 3) AS confidence
    FROM (SELECT *, (rate_bps, side) AS key FROM chosen WHERE readable) GROUP BY ALL
),

bucket AS (  -- 3 or more of those gaps at the mode's rate: a token bucket's burst, then its rate
    SELECT t.capture_id, t.flow_id, t.direction
    FROM first_ten t JOIN estimate f USING (capture_id, flow_id, direction)
    WHERE t.gap_ns > 0 AND t.ip_bytes * 8e9 / t.gap_ns BETWEEN 0.9 * f.rate_bps AND 1.1 * f.rate_bps
    GROUP BY ALL HAVING count(*) >= 3
),

final AS (  -- known: enough agreeing pairs, and not slower than the sender's pacing allows
    SELECT f.*, f.modal_pairs >= 30 AND f.confidence >= 0.25
            AND NOT coalesce(f.side = 'arrivals' AND e.early_bps > 4 * f.rate_bps
                             AND b.flow_id IS NULL, false) AS known
    FROM estimate f LEFT JOIN early e USING (capture_id, flow_id, direction)
    LEFT JOIN bucket b USING (capture_id, flow_id, direction)
    ORDER BY capture_id, flow_id, direction
)
SELECT * FROM final
