-- The `tracekit queqiao` view: what Queqiao's own dashboard
-- (tools/visualizer) draws, per interval between two snapshots of one
-- source, from the counters' deltas the reader stored (events.fields.deltas).
-- Sources: a process's performance snapshots (role, pid), a scrape label,
-- a Prometheus file, or one lane of a lane trace (flow, lane).
-- Parameters: $log (NULL for all).
-- Rates divide a counter's change by the interval; an interval whose
-- counter fell (a QUIC sum over connections that ended, a loss found
-- spurious) has a null delta and so no rate. Loss is lost / sent of the
-- same interval: packets for packet_loss_pct, bytes for byte_loss_pct.
-- Sources: events.
WITH snapshots AS (
    SELECT log_id, line, ts_ns, kind, fields,
        CASE kind WHEN 'queqiao_lane'
            THEN 'lane ' || coalesce(fields->>'flow', fields->>'flow_id', '?') || '/' || coalesce(fields->>'lane', '?')
            ELSE coalesce(fields->>'role', fields->>'label', fields->>'source', 'process') END AS source,
        -- the reader's source key: the same records are compared there
        CASE kind WHEN 'queqiao_lane'
            THEN concat_ws('|', fields->>'role', fields->>'pid', fields->>'flow', fields->>'flow_id', fields->>'lane')
            ELSE concat_ws('|', fields->>'role', fields->>'pid', fields->>'label', fields->>'source') END AS source_key
    FROM events
    WHERE kind IN ('queqiao_metrics', 'queqiao_lane') AND ($log IS NULL OR log_id = $log)
),

intervals AS (
    SELECT *, (ts_ns - lag(ts_ns) OVER w) / 1e9 AS interval_s,
        fields->'deltas' AS d, kind = 'queqiao_lane' AS lane
    FROM snapshots
    WINDOW w AS (PARTITION BY log_id, kind, source_key ORDER BY ts_ns, line)
),

final AS (
    SELECT log_id AS log, source, line, ts_ns, round(interval_s, 3) AS interval_s,
        round(TRY_CAST(d->>'queqiao_quic_bytes_received' AS DOUBLE) * 8 / interval_s / 1e6, 3) AS down_mbps,
        round(TRY_CAST(CASE WHEN lane THEN d->>'sent' ELSE d->>'queqiao_quic_bytes_sent' END AS DOUBLE)
              * 8 / interval_s / 1e6, 3) AS up_mbps,
        round(TRY_CAST(d->>'queqiao_bytes_down_total' AS DOUBLE) * 8 / interval_s / 1e6, 3) AS app_down_mbps,
        round(TRY_CAST(d->>'queqiao_bytes_up_total' AS DOUBLE) * 8 / interval_s / 1e6, 3) AS app_up_mbps,
        round(TRY_CAST(CASE WHEN lane THEN d->>'lost' ELSE d->>'queqiao_quic_packets_lost' END AS DOUBLE)
              / interval_s, 3) AS lost_packets_per_s,
        round(100 * TRY_CAST(CASE WHEN lane THEN d->>'lost' ELSE d->>'queqiao_quic_packets_lost' END AS DOUBLE)
              / nullif(TRY_CAST(CASE WHEN lane THEN d->>'pktsent' ELSE d->>'queqiao_quic_packets_sent' END AS DOUBLE), 0), 3)
            AS packet_loss_pct,
        round(100 * TRY_CAST(CASE WHEN lane THEN d->>'lostbytes' ELSE d->>'queqiao_quic_bytes_lost' END AS DOUBLE)
              / nullif(TRY_CAST(CASE WHEN lane THEN d->>'sent' ELSE d->>'queqiao_quic_bytes_sent' END AS DOUBLE), 0), 3)
            AS byte_loss_pct,
        round(TRY_CAST(d->>'breissued' AS DOUBLE) / interval_s, 1) AS reissued_bytes_per_s,
        round(CASE WHEN lane THEN TRY_CAST(fields->>'srtt' AS DOUBLE)
                   ELSE 1000 * TRY_CAST(fields->>'queqiao_quic_smoothed_rtt_seconds' AS DOUBLE) END, 3) AS srtt_ms,
        TRY_CAST(CASE WHEN lane THEN fields->>'cwnd' ELSE fields->>'queqiao_quic_controller_congestion_window_bytes' END AS BIGINT) AS cwnd_bytes,
        TRY_CAST(CASE WHEN lane THEN fields->>'inflight' ELSE fields->>'queqiao_quic_controller_bytes_in_flight' END AS BIGINT) AS inflight_bytes
    FROM intervals
)
SELECT * FROM final ORDER BY log, source, ts_ns, line
