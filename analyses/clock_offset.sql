-- clock_offset: bounds on the offset between an event log's clock and a
-- capture's, from events that must precede or follow packets.
--
-- Step: none.
-- Sources: events, flows, packets.
--
-- Parameters: $log_id, $capture_id. Not a stored table: `tracekit clock` runs it.
-- Definitions: theta is what must be added to the log's timestamps (log_ts_ns)
-- to put them on the capture's clock. Causality gives, per connection (a TCP
-- flow of the capture whose client port is the event's local_port hint):
--   connect_start at s happens before the SYN at S:         theta <= S - s
--   connect_end at e happens after the SYN-ACK reached the client, which is
--   after the capture saw it at A (any vantage point):      theta >= A - e
--   first_byte at b happens after the first server payload seen at F:
--                                                           theta >= F - b
-- When a client port was used by several flows, the flow whose bound is
-- nearest the median of the unambiguous bounds is taken.
-- Columns: local_port, flow_id, bound, bound_ns, event_kind
WITH ev AS (
    SELECT kind, log_ts_ns, coalesce(local_port,
        any_value(local_port) FILTER (local_port IS NOT NULL) OVER (PARTITION BY request)) AS local_port
    FROM events
    WHERE log_id = $log_id AND kind IN ('connect_start', 'connect_end', 'first_byte')
),

candidates AS (
    SELECT e.kind, e.log_ts_ns, e.local_port, f.flow_id,
        CASE e.kind WHEN 'connect_start' THEN f.syn_ts_ns - e.log_ts_ns
                    WHEN 'connect_end' THEN f.synack_ts_ns - e.log_ts_ns
                    ELSE fd.first_s2c_ns - e.log_ts_ns END AS bound_ns,
        count(*) OVER (PARTITION BY e.kind, e.log_ts_ns) AS choices
    FROM ev e
    JOIN flows f ON f.capture_id = $capture_id AND f.protocol = 'tcp' AND f.client_port = e.local_port
    LEFT JOIN (SELECT flow_id, min(ts_ns) AS first_s2c_ns FROM packets
               WHERE capture_id = $capture_id AND NOT from_client AND payload_bytes > 0
               GROUP BY flow_id) fd USING (flow_id)
),

centre AS (
    SELECT median(bound_ns) AS m FROM candidates WHERE choices = 1
),

final AS (
    SELECT c.local_port, c.flow_id,
        CASE c.kind WHEN 'connect_start' THEN 'upper' ELSE 'lower' END AS bound,
        c.bound_ns, c.kind AS event_kind
    FROM candidates c, centre
    WHERE c.bound_ns IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY c.kind, c.log_ts_ns
                               ORDER BY abs(c.bound_ns - coalesce(centre.m, c.bound_ns))) = 1
)
SELECT * FROM final ORDER BY local_port, bound
