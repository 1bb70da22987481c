-- attribution: each request's measured time split into labelled spans that add
-- up to it exactly; the irreducible spans add up to its serial bound.
--
-- Built over the whole store. Sources: requests, bounds, handshakes,
-- request_phases (the four instants and what the transport did in each phase:
-- tracekit/transport/phases.py, from stalls and recovery_rounds).
-- Definitions (the method). A request [start, end] (requests) is cut at four instants seen on
-- its flow at the capture point: the first and last request byte (a, b) and
-- the first and last response byte (c, d), clamped into order:
--   setup      [start, a)  connect_tcp (SYN -> the client's ACK of the
--              SYN-ACK), connect_tls (ClientHello -> client Finished),
--              connect_quic (first Initial -> first 1-RTT), each as far as
--              it falls inside; connect_proxy (the SOCKS5 negotiation between
--              the proxy_start and proxy_done events); the rest client_idle (the client had a
--              connection and did not send: its own think time, proxy
--              negotiation on another flow)
--   upload     [a, b]      upload_transfer = min(S_u / B, b - a) (irreducible);
--              upload_loss_recovery = the client->server direction's
--              loss_recovery and rto_wait time (stalls), capped; the rest
--              upload_waiting (window, slow start, the sender's pauses)
--   wait       (b, c)      propagation = min(R, c - b) (irreducible; 0 at a
--              server-side vantage, where no propagation lies between the
--              request's arrival and the response's departure); processing =
--              min(T_c, what is left) (irreducible); the rest queueing, except
--              that a response whose download phase was shorter than S_d / B
--              (a tunnel hands it over in a burst) has the rest of its
--              download_transfer here, out of the queueing
--   download   [c, d]      download_transfer = min(S_d / B, d - c)
--              (irreducible), taken from the time the server->client
--              direction was slow_start / congestion_limited (stalls), and
--              where that is too short, from the loss_recovery, then the
--              sender's pause, then the receiver-limited time (data flows
--              during recovery too, and a paced or tunnelled sender looks
--              idle between packets);
--              what is left of the window time is window_waiting (slow start and
--              window: the sender waited for ACKs); loss_recovery, one span
--              per recovery round (recovery_rounds: each loss_recovery and
--              rto_wait stretch goes to the round it began in);
--              receiver_limited (receive_window_limited, zero_window);
--              server_idle (application_limited, pacing_idle); the rest of
--              the phase is residual (negative if the transfer did not fit in
--              the time the phase had)
--   tail       (d, end]    client_idle (after the last byte, until the
--              request_end event)
-- At a client-side vantage the sender's window is not visible (what it has
-- in flight is in the pipe, not yet seen), so a pause in the arriving data
-- looks like an idle sender. There, the download's slow_start,
-- congestion_limited, application_limited and pacing_idle time is split by
-- the ACK clock instead: a pause in the server's data that follows a
-- full-sized segment (within 40 option bytes of the MSS the client
-- announced) is window waiting up to 1.25 R after the client's last
-- packet before it ends (the data its ACK released cannot come sooner) and
-- server_idle beyond that; a pause after a shorter segment is server_idle
-- throughout (a sender held by its window sends full segments; one that
-- sends less had no more data). A QUIC request (its ACKs encrypted, no
-- limitation states) is split the same way from its datagrams: the download
-- is window waiting except the pauses the ACK clock does not explain; its
-- loss recovery cannot be told apart and stays inside window_waiting.
-- A request with no packets (an event request without a linked flow) is one
-- `unattributed` span. S, B, R, T_c are the bound's (bounds.sql). The
-- capture point matters: at the client the instants are when the client
-- sent and received; at the server they are shifted by the one-way delays
-- and the request's measured time is about R shorter than the client's.
-- Columns: request_key, span_order, span, phase, ns, irreducible, detail
WITH inst AS (
    SELECT q.request_key, q.capture_id, q.flow_id, q.start_ns, q.end_ns, q.duration_ns,
        b.rtt_ns, b.processing_ns, b.upload_ns, b.download_ns, q.vantage,
        ph.a_ns AS a, ph.b_ns AS b, ph.c_ns AS c, ph.d_ns AS d,
        f.syn_ts_ns, f.ack_ts_ns, f.protocol = 'udp' AS quic, q.proxy_start_ns, q.proxy_done_ns
    FROM requests q JOIN bounds b USING (request_key)
    JOIN request_phases ph USING (request_key)
    LEFT JOIN flows f ON f.capture_id = q.capture_id AND f.flow_id = q.flow_id
    WHERE ph.a_ns IS NOT NULL
),

hs AS (
    SELECT capture_id, flow_id, protocol, start_ns AS hs_start, done_ns AS hs_end
    FROM handshakes WHERE protocol IN ('tls', 'quic')
),

setup AS (
    SELECT i.request_key,
        CASE WHEN i.syn_ts_ns IS NULL OR i.ack_ts_ns IS NULL THEN 0
             ELSE greatest(0, least(i.ack_ts_ns, i.a) - greatest(i.syn_ts_ns, i.start_ns)) END AS tcp_ns,
        coalesce(max(greatest(0, least(h.hs_end, i.a) - greatest(h.hs_start, i.start_ns)))
                 FILTER (h.protocol = 'tls'), 0) AS tls_ns,
        coalesce(max(greatest(0, least(h.hs_end, i.a) - greatest(h.hs_start, i.start_ns)))
                 FILTER (h.protocol = 'quic'), 0) AS quic_ns,
        CASE WHEN i.proxy_start_ns IS NULL OR i.proxy_done_ns IS NULL THEN 0
             ELSE greatest(0, least(i.proxy_done_ns, i.a) - greatest(i.proxy_start_ns, i.start_ns))
        END AS proxy_ns
    FROM inst i LEFT JOIN hs h USING (capture_id, flow_id)
    GROUP BY i.request_key, i.ack_ts_ns, i.a, i.syn_ts_ns, i.start_ns, i.proxy_start_ns, i.proxy_done_ns
),

states AS (  -- the limitation states' time inside the upload and download phases
    SELECT request_key,
        up_loss_recovery_ns + up_rto_wait_ns AS up_loss,
        down_slow_start_ns + down_congestion_limited_ns AS window_time,
        down_receive_window_limited_ns + down_zero_window_ns AS rwnd,
        down_application_limited_ns + down_pacing_idle_ns AS idle,
        down_loss_recovery_ns + down_rto_wait_ns AS down_loss,
        unexplained_pause_ns AS pause_idle
    FROM request_phases
),

rounds AS (  -- each download loss stretch to the round it began in
    SELECT request_key, lr.episode, lr.round, sum(lr.ns) AS ns
    FROM (SELECT request_key, unnest(loss_rounds) AS lr FROM request_phases)
    GROUP BY ALL
),

raw_numbers AS (
    SELECT i.*, st.tcp_ns, st.tls_ns, st.quic_ns, st.proxy_ns,
        coalesce(x.up_loss, 0) AS up_loss, coalesce(x.window_time, 0) AS window_time0,
        coalesce(x.rwnd, 0) AS rwnd, coalesce(x.idle, 0) AS idle0, coalesce(x.down_loss, 0) AS down_loss,
        coalesce(x.pause_idle, 0) AS pause_idle,
        least(coalesce(i.upload_ns, 0), i.b - i.a) AS up_transfer,
        least(coalesce(i.download_ns, 0), i.d - i.c) AS down_transfer,
        CASE WHEN i.vantage = 'server' THEN 0 ELSE least(coalesce(i.rtt_ns, 0), i.c - i.b) END AS propagation
    FROM inst i JOIN setup st USING (request_key) LEFT JOIN states x USING (request_key)
),

numbers AS (
    SELECT *,
        CASE WHEN vantage = 'client' OR quic THEN least(pause_idle, window_time0 + idle0) ELSE idle0 END AS idle,
        CASE WHEN vantage = 'client' OR quic THEN window_time0 + idle0 - least(pause_idle, window_time0 + idle0)
             ELSE window_time0 END AS window_time
    FROM (SELECT * REPLACE (  -- QUIC has no limitation states (its ACKs are encrypted): the
                              -- whole download is sending or waiting, split by the ACK clock
              CASE WHEN quic THEN d - c ELSE window_time0 END AS window_time0) FROM raw_numbers)
),

carved AS (  -- the transfer comes out of the time data was flowing: window first, then
             -- loss recovery, then the sender's pauses, then receiver-limited time
    SELECT *,
        least(down_transfer, window_time) AS t_window,
        least(down_transfer - least(down_transfer, window_time), down_loss) AS t_loss
    FROM numbers
),
carved2 AS (
    SELECT *, least(down_transfer - t_window - t_loss, idle) AS t_idle FROM carved
),
carved3 AS (
    SELECT *, least(down_transfer - t_window - t_loss - t_idle, rwnd) AS t_rwnd FROM carved2
),

loss_rows AS (  -- recovery rounds, less their share of the transfer (rounding to the first)
    SELECT request_key, episode, round, ns,
        ns - CASE WHEN k = 1 THEN t_rounds - coalesce(others, 0) ELSE cut END AS kept
    FROM (
        SELECT rd.request_key, rd.episode, rd.round, rd.ns,
            row_number() OVER w AS k,
            coalesce(c.t_loss * rd.ns // nullif(c.down_loss, 0), 0) AS cut,
            coalesce(c.t_loss * sum(rd.ns) OVER p // nullif(c.down_loss, 0), 0) AS t_rounds,
            sum(coalesce(c.t_loss * rd.ns // nullif(c.down_loss, 0), 0)) OVER p
                - coalesce(first_value(c.t_loss * rd.ns // nullif(c.down_loss, 0)) OVER w, 0) AS others
        FROM rounds rd JOIN carved3 c USING (request_key)
        WINDOW p AS (PARTITION BY rd.request_key),
               w AS (PARTITION BY rd.request_key ORDER BY rd.episode, rd.round
                     ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
    )
),

waits AS (  -- a response the path delivered faster than B (a tunnel hands it over in a
            -- burst) left part of its transfer time before its first byte: in the wait
    SELECT request_key,
        (c - b) - propagation - least(coalesce(processing_ns, 0), (c - b) - propagation) AS queueing_ns,
        least(coalesce(download_ns, 0) - down_transfer,
              (c - b) - propagation - least(coalesce(processing_ns, 0), (c - b) - propagation)) AS early_transfer
    FROM numbers
),

spans AS (
    SELECT request_key, 1 AS span_order, 'connect_tcp' AS span, 'setup' AS phase, tcp_ns AS ns, false AS irreducible, NULL AS detail FROM numbers
    UNION ALL SELECT request_key, 2, 'connect_tls', 'setup', tls_ns, false, NULL FROM numbers
    UNION ALL SELECT request_key, 3, 'connect_quic', 'setup', quic_ns, false, NULL FROM numbers
    UNION ALL SELECT request_key, 3, 'connect_proxy', 'setup', proxy_ns, false, NULL FROM numbers
    UNION ALL SELECT request_key, 4, 'client_idle', 'setup', (a - start_ns) - tcp_ns - tls_ns - quic_ns - proxy_ns, false, NULL FROM numbers
    UNION ALL SELECT request_key, 5, 'upload_transfer', 'upload', up_transfer, true, NULL FROM numbers
    UNION ALL SELECT request_key, 6, 'upload_loss_recovery', 'upload', least(up_loss, (b - a) - up_transfer), false, NULL FROM numbers
    UNION ALL SELECT request_key, 7, 'upload_waiting', 'upload', (b - a) - up_transfer - least(up_loss, (b - a) - up_transfer), false, NULL FROM numbers
    UNION ALL SELECT request_key, 8, 'propagation', 'wait', propagation, true, NULL FROM numbers
    UNION ALL SELECT request_key, 9, 'processing', 'wait', least(coalesce(processing_ns, 0), (c - b) - propagation), true, NULL FROM numbers
    UNION ALL SELECT request_key, 10, 'queueing', 'wait', queueing_ns - early_transfer, false, NULL FROM waits
    UNION ALL SELECT request_key, 11, 'download_transfer', 'wait', early_transfer, true,
        'before the first response byte reached the capture point' FROM waits
    UNION ALL SELECT request_key, 11, 'download_transfer', 'download', down_transfer, true, NULL FROM numbers
    UNION ALL SELECT request_key, 12, 'window_waiting', 'download', window_time - t_window, false, NULL FROM carved3
    UNION ALL SELECT request_key, 13, 'loss_recovery', 'download', kept, false, 'episode ' || episode || ' round ' || round FROM loss_rows
    UNION ALL SELECT c.request_key, 13, 'loss_recovery', 'download',
        (c.down_loss - c.t_loss) - coalesce(sum(lr.kept), 0), false, 'outside a recorded round'
        FROM carved3 c LEFT JOIN loss_rows lr USING (request_key) GROUP BY c.request_key, c.down_loss, c.t_loss
        HAVING (c.down_loss - c.t_loss) - coalesce(sum(lr.kept), 0) <> 0
    UNION ALL SELECT request_key, 14, 'receiver_limited', 'download', rwnd - t_rwnd, false, NULL FROM carved3
    UNION ALL SELECT request_key, 15, 'server_idle', 'download', idle - t_idle, false, NULL FROM carved3
    UNION ALL SELECT request_key, 16, 'residual', 'download',
        (d - c) - down_transfer - (window_time - t_window) - (down_loss - t_loss) - (rwnd - t_rwnd)
        - (idle - t_idle), false, NULL FROM carved3
    UNION ALL SELECT request_key, 17, 'client_idle', 'tail', end_ns - d, false, NULL FROM numbers
),

no_packets AS (
    SELECT q.request_key, 0 AS span_order, 'unattributed' AS span, 'request' AS phase, q.duration_ns AS ns,
        false AS irreducible, 'no packets of this request were captured' AS detail
    FROM requests q LEFT JOIN numbers n USING (request_key)
    WHERE n.request_key IS NULL
),

final AS (
    SELECT * FROM spans WHERE ns <> 0 OR (span IN ('residual', 'download_transfer', 'propagation') AND phase <> 'wait')
    UNION ALL SELECT * FROM no_packets
)
SELECT * FROM final ORDER BY request_key, span_order, detail
