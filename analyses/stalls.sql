-- stalls: what limited each flow direction at every instant of its life.
--
-- Parameters: $capture_id.
-- Sources: tcp_analysis, packets (windows), flows, retransmissions, flights.
-- Every interval between two consecutive packets of a flow gets exactly one
-- state per direction, so per direction the state durations add up to the
-- flow's duration (last packet - first packet) exactly. Runs of one state
-- are merged into one row. The state holds after packet k until packet k+1,
-- decided in this order (the names follow Linux tcp_info's chrono stats and
-- RFC 4898's SndLimTime* where they exist):
--   handshake               before the TCP handshake completed
--   closed                  after this direction's FIN was acknowledged, or a RST
--   application_limited     nothing in flight: the sender had nothing to send
--                           (RFC 4898 SndLimTimeSnd); also the tail: data in
--                           flight, and no new data sent until 1 ms after it
--                           drained (a sender held by its windows sends at once)
--   rto_wait                in flight, and the next packet this direction sends
--                           is a retransmission by timeout: waiting for the timer
--   loss_recovery           inside a recovery episode (retransmissions.sql)
--   zero_window             the receiver advertises a zero window
--   receive_window_limited  in flight + 1 MSS exceeds the receiver's window
--                           (TCP_CHRONO_RWND_LIMITED, SndLimTimeRwin)
--   pacing_idle             the sender's next packet is new data after a gap
--                           >= 1 ms with no ACK in between: it held back by itself
--   slow_start              congestion limited (below) during a flight that grew
--                           >= 1.5x over the previous one, before any loss
--   congestion_limited      in flight, waiting for ACKs to send more
--                           (TCP_CHRONO_BUSY, SndLimTimeCwnd)
-- `busy` marks intervals with data in flight (a run of one state is split
-- where it changes): their sum is what the sender's tcp_info reports as
-- tcpi_busy_time, which includes its rwnd- and sndbuf-limited time. Linux
-- counts one chrono state at a time and ranks "the application is blocked on
-- a full send buffer" (tcpi_sndbuf_limited) above "the receive window is
-- full" (tcpi_rwnd_limited); from the wire the two are one state here,
-- receive_window_limited, so it compares with their sum.
-- Columns: capture_id, flow_id, direction, state, start_ns, end_ns,
--   duration_ns, busy, packets (in the run), max_inflight_bytes
WITH t AS (
    SELECT t.*, p.tcp_window_bytes, p.tcp_flags
    FROM tcp_analysis t JOIN packets p USING (capture_id, frame)
    WHERE t.capture_id = $capture_id
),

dirs AS (SELECT unnest([true, false]) AS d_client),

f AS (SELECT * FROM flows WHERE capture_id = $capture_id AND protocol = 'tcp'),

ev AS (  -- each packet, seen from each direction d
    SELECT t.flow_id, d.d_client, t.frame, t.ts_ns,
        t.from_client = d.d_client AS own,
        CASE WHEN t.from_client = d.d_client THEN t.inflight_bytes
             ELSE coalesce(t.peer_inflight_bytes, 0) END AS inflight,
        CASE WHEN t.from_client <> d.d_client AND t.tcp_flags & 16 = 16
             THEN t.tcp_window_bytes END AS window_here,
        t.from_client = d.d_client AND t.segment = 'new' AND t.payload_bytes > 0 AS new_data,
        t.from_client = d.d_client AND t.retransmission_trigger = 'rto' AS rto_resend,
        CASE WHEN t.from_client = d.d_client THEN t.payload_bytes END AS payload,
        CASE WHEN t.from_client = d.d_client THEN t.flight END AS flight_here,
        t.tcp_flags
    FROM t CROSS JOIN dirs d
),

ctx AS (
    SELECT *,
        last_value(window_here IGNORE NULLS) OVER w AS peer_window,
        max(payload) OVER w AS mss,
        last_value(flight_here IGNORE NULLS) OVER w AS flight,
        lead(ts_ns) OVER w AS next_ns,
        lead(own) OVER w AS next_own,
        lead(new_data) OVER w AS next_new,
        lead(rto_resend) OVER w AS next_rto,
        min(CASE WHEN new_data THEN ts_ns END) OVER later AS next_new_ns,
        min(CASE WHEN inflight = 0 THEN ts_ns END) OVER later AS next_drain_ns
    FROM ev
    WINDOW w AS (PARTITION BY flow_id, d_client ORDER BY frame),
           later AS (PARTITION BY flow_id, d_client ORDER BY frame
                     ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING)
),

episodes AS (
    SELECT DISTINCT flow_id, direction = 'c2s' AS d_client, episode_start_ns, episode_end_ns
    FROM retransmissions WHERE capture_id = $capture_id AND kind = 'retransmission'
),

first_loss AS (
    SELECT flow_id, d_client, min(episode_start_ns) AS first_loss_ns FROM episodes GROUP BY ALL
),

growth AS (
    SELECT flow_id, direction = 'c2s' AS d_client, flight, growth
    FROM flights WHERE capture_id = $capture_id
),

stated AS (
    SELECT c.flow_id, c.d_client, c.frame, c.ts_ns, c.next_ns, c.inflight,
        CASE
            WHEN f.ack_ts_ns IS NOT NULL AND c.ts_ns < f.ack_ts_ns THEN 'handshake'
            WHEN (c.ts_ns >= f.rst_ts_ns)
                 OR (c.ts_ns >= CASE WHEN c.d_client THEN f.fin_c2s_ts_ns ELSE f.fin_s2c_ts_ns END
                     AND c.inflight = 0) THEN 'closed'
            WHEN c.inflight = 0 THEN 'application_limited'
            WHEN c.next_rto THEN 'rto_wait'
            WHEN EXISTS (SELECT 1 FROM episodes e WHERE e.flow_id = c.flow_id
                         AND e.d_client = c.d_client AND c.ts_ns >= e.episode_start_ns
                         AND c.ts_ns < coalesce(e.episode_end_ns, 9223372036854775807))
                 THEN 'loss_recovery'
            WHEN c.next_new_ns IS NULL
                 OR (c.next_drain_ns IS NOT NULL AND c.next_new_ns > c.next_drain_ns + 1000000)
                 THEN 'application_limited'
            WHEN c.peer_window = 0 THEN 'zero_window'
            WHEN c.inflight + coalesce(c.mss, 0) > c.peer_window THEN 'receive_window_limited'
            WHEN c.next_own AND c.next_new AND c.next_ns - c.ts_ns >= 1000000 THEN 'pacing_idle'
            WHEN g.growth >= 1.5 AND (fl.first_loss_ns IS NULL OR c.ts_ns < fl.first_loss_ns)
                 THEN 'slow_start'
            ELSE 'congestion_limited'
        END AS state
    FROM ctx c
    JOIN f USING (flow_id)
    LEFT JOIN first_loss fl USING (flow_id, d_client)
    LEFT JOIN growth g USING (flow_id, d_client, flight)
    WHERE c.next_ns IS NOT NULL
),

busy_marked AS (
    SELECT *, inflight > 0 AND state NOT IN ('handshake', 'closed') AS busy FROM stated
),

runs AS (
    SELECT *,
        row_number() OVER (PARTITION BY flow_id, d_client ORDER BY frame)
        - row_number() OVER (PARTITION BY flow_id, d_client, state, busy ORDER BY frame) AS run
    FROM busy_marked
),

final AS (
    SELECT $capture_id AS capture_id, flow_id,
        CASE WHEN d_client THEN 'c2s' ELSE 's2c' END AS direction,
        state, min(ts_ns) AS start_ns, max(next_ns) AS end_ns,
        sum(next_ns - ts_ns) AS duration_ns,
        busy,
        count(*) AS packets,
        max(inflight) AS max_inflight_bytes
    FROM runs
    GROUP BY flow_id, d_client, state, busy, run
)

SELECT * FROM final ORDER BY flow_id, direction, start_ns
