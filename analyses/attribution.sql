-- attribution: each request's measured time split into spans that add up to it
-- exactly; every span named after a mechanism is backed by evidence, and what
-- no evidence explains is `unexplained`.
--
-- Step: store, in parts.
-- Sources: bounds, captures, events, flows, handshakes, packets, request_phases, requests, tcp_analysis.
--
-- Built over the whole store, in parts of requests (by ranges of request_key:
-- each request's spans depend on its own rows and its run's tunnel packets
-- only), so that memory is bounded by a part, not by the store: the step
-- (tracekit/pipeline/stepkinds.py, PartitionedStoreStep) runs this query once per part
-- with requests, bounds and request_phases holding that part's rows. Sources: requests, bounds, handshakes, events,
-- request_phases (the four instants and what the transport did in each phase:
-- tracekit/pipeline/steps/phases.py, from stalls and recovery_rounds).
-- Definitions (the method). A request [start, end] (requests) is cut at four
-- instants seen on its flow at the capture point: the first and last request
-- byte (a, b) and the first and last response byte (c, d), clamped into order.
-- Each phase is split by what shows it, never by what is left over:
--   setup      [start, a)  connect_tcp (SYN -> the client's ACK of the
--              SYN-ACK), connect_tls (ClientHello -> client Finished),
--              connect_quic (first Initial -> first 1-RTT), connect_proxy
--              (the SOCKS5 negotiation between the proxy_start and proxy_done
--              events), each as far as it falls inside; client_idle: the rest,
--              in which the client, holding a connection, sent no request byte
--   upload     [a, b]      by the client's data direction's limitation states
--              (stalls): upload_transfer = min(S_u / B, the time data was
--              flowing: window states, pacing, recovery) (irreducible);
--              upload_loss_recovery (loss_recovery, rto_wait), upload_waiting
--              (slow_start, congestion_limited, receive window), pacing
--              (pacing_idle), client_idle (application_limited: the client
--              had nothing to send), each less what the transfer took of it;
--              unexplained (handshake, closed, no packets)
--   wait       (b, c)      propagation = min(R, c - b) (irreducible; R as
--              bounds: 0 at the server, where nothing propagates between the
--              request's arrival and the response's departure); processing =
--              min(T_c, what is left) (irreducible; only when T_c is known:
--              labels, the server's events or, at the server, its own
--              packets); download_transfer, when the download phase was
--              shorter than S_d / B (a tunnel or proxy hands the response over
--              in a burst: its bytes crossed the bottleneck before c); the rest
--              unexplained (queueing, or server time nobody logged)
--   download   [c, d]      at the sender (a server-side capture) by the server's
--              data direction's limitation states: download_transfer =
--              min(S_d / B, the time data was flowing) (irreducible), taken
--              from the window states first, then pacing, loss recovery and the
--              receive window; window_waiting (slow_start, congestion_limited:
--              the sender waited for ACKs); pacing (pacing_idle: new data sent
--              after a pause with nothing from the peer between: the sender's
--              pacing released it); loss_recovery, one span per recovery round
--              (recovery_rounds: each stretch goes to the round it began in);
--              receiver_limited (receive window full or zero); server_idle
--              (application_limited: nothing in flight and nothing sent while
--              the window was open, or data in flight and nothing new until
--              after it drained: the application had not written the bytes);
--              unexplained (closed, handshake).
--              Seen from the client or between (or for QUIC, whose ACKs are encrypted)
--              the sender's states are not visible: the download is cut at
--              every gap between the server's data packets (request_phases):
--              gaps that began in loss recovery are loss_recovery, in a full
--              receive window receiver_limited; a gap after a full-sized
--              segment is explained by the ACK clock up to 1.25 R after the
--              client's last packet: download_transfer (up to S_d / B) and
--              window_waiting; the rest -- gaps after a short segment, and
--              beyond the ACK clock -- is sender_wait (the sender waited for
--              something this vantage cannot name: its application, its
--              pacing, its window), except that while the server's events show
--              the model still generating (model_end after c) it is
--              server_idle. Without B the transfer and the window waiting cannot
--              be told apart: the clocked gaps are download_transfer, not
--              irreducible.
--   tunnel     a request carried by a local tunnel (its flow ends on this host,
--              or behind a SOCKS5 proxy, and another capture of its run holds the
--              tunnel's UDP flow of 10 datagrams or more): its wait is cut at the
--              tunnel's first datagram out after b (t_up) and its last datagram in
--              before c (t_down): tunnel_queueing (b -> t_up and t_down -> c: the
--              local tunnel's own time), and across the WAN (t_up -> t_down)
--              propagation, processing and tunnel_transit (the rest of that
--              interval: the tunnel's far end, queueing and repair on the WAN);
--              the download's waits on this host -- the ACK-clocked and the
--              sender's -- are tunnel_transit (the local tunnel, the sender here,
--              waiting for datagrams)
--   tail       (d, end]    client_idle (after the last byte, until the
--              request_end event)
-- A request with no packets (no flow linked) is one `unattributed` span.
-- unexplained_pct and flag (in the view `tracekit attribute`): a request is
-- flagged when its unexplained time exceeds 20 ms, or 10 % of it and the noise
-- floor (two clock ticks, its path's RTT spread: analyses/views/attribute.sql).
-- Columns: request_key, span_order, span, phase, ns, irreducible, detail
WITH model AS (  -- when the server's model finished each request (its events)
    SELECT run, request, max(ts_ns) AS model_end_ns
    FROM events WHERE kind = 'model_end' AND request IS NOT NULL GROUP BY ALL
),

hs AS (  -- each flow's TLS and QUIC handshakes, as one list (a few flows)
    SELECT capture_id, flow_id,
        list(struct_pack(protocol, hs_start := start_ns, hs_end := done_ns)) AS handshakes
    FROM handshakes WHERE protocol IN ('tls', 'quic') GROUP BY ALL
),

inst AS (  -- one row per request, read once by one stream; the joins hold narrow rows (what
           -- the spans need of a request, of its bounds, the sums of its phases' states)
    SELECT q.*, b.* EXCLUDE (request_key), ph.* EXCLUDE (request_key),
        -- at the server, timed by the client (bounds: R > 0 there): a trip each way
        q.at_server AND coalesce(b.rtt_ns, 0) > 0 AND q.tcp AS remote
    FROM (SELECT q.request_key, q.start_ns, q.end_ns,
              q.vantage = 'server' AS at_server, f.syn_ts_ns, f.ack_ts_ns,
              f.protocol = 'udp' AS quic, f.protocol = 'tcp' AS tcp,
              q.proxy_start_ns, q.proxy_done_ns, m.model_end_ns, h.handshakes,
              -- a sender that paces: BBR, or a pacing label (fq, SO_MAX_PACING_RATE)
              coalesce(lower(q.labels['congestion']) LIKE 'bbr%', false)
                  OR coalesce(lower(q.labels['pacing']) NOT IN ('off', '0', 'false', 'no', 'none'),
                              false) AS paces
          FROM requests q
          LEFT JOIN flows f ON f.capture_id = q.capture_id AND f.flow_id = q.flow_id
          LEFT JOIN model m ON m.request = q.request AND m.run IS NOT DISTINCT FROM q.run
          LEFT JOIN hs h ON h.capture_id = q.capture_id AND h.flow_id = q.flow_id
          WHERE q.flow_id IS NOT NULL) q
    JOIN (SELECT request_key, rtt_ns, rtt_source, processing_ns, processing_source, upload_ns,
                 download_ns, headers_up_ns, headers_down_ns, rate_bps IS NOT NULL AS rate_known
          FROM bounds) b
        USING (request_key)
    JOIN (SELECT request_key, a_ns, b_ns, c_ns, d_ns,
              -- upload
              up_loss_recovery_ns + up_rto_wait_ns AS up_loss,
              up_slow_start_ns + up_congestion_limited_ns + up_receive_window_limited_ns
                  + up_zero_window_ns AS up_window,
              up_pacing_idle_ns AS up_pacing,
              up_application_limited_ns AS up_idle,
              -- download at the sender
              down_slow_start_ns + down_congestion_limited_ns AS s_window,
              down_receive_window_limited_ns + down_zero_window_ns AS s_receiver,
              down_loss_recovery_ns + down_rto_wait_ns AS s_loss,
              down_pacing_idle_ns AS s_pacing,
              down_application_limited_ns AS s_idle,
              -- download seen from the client: the gaps
              gap_clocked_ns, gap_loss_ns, gap_receiver_ns, gap_short_ns, gap_beyond_ns,
              CASE WHEN len(loss_rounds) > 0 THEN loss_rounds END AS loss_rounds
          FROM request_phases) ph USING (request_key)
),

server_requests AS MATERIALIZED (  -- requests seen at the server on a TCP flow (few)
    SELECT q.request_key, q.capture_id, q.flow_id
    FROM requests q JOIN flows f ON f.capture_id = q.capture_id AND f.flow_id = q.flow_id
    WHERE q.vantage = 'server' AND f.protocol = 'tcp'
),

remote_requests AS (  -- inst's requests with `remote` (R known): their bounds and phases
                      -- looked up by key, not joined whole
    SELECT q.request_key, q.capture_id, q.flow_id, ph.d_ns
    FROM server_requests q
    JOIN (SELECT request_key, rtt_ns FROM bounds
          WHERE request_key IN (SELECT request_key FROM server_requests)) b USING (request_key)
    JOIN (SELECT request_key, d_ns FROM request_phases
          WHERE request_key IN (SELECT request_key FROM server_requests)) ph USING (request_key)
    WHERE coalesce(b.rtt_ns, 0) > 0
),

response_end AS (  -- at the server: the response's highest byte, and the client's first
                  -- ACK of it (the response reached the client R / 2 before that ACK)
    SELECT i.request_key, max(t.rel_end) AS hi
    FROM remote_requests i JOIN tcp_analysis t ON t.capture_id = i.capture_id
        AND t.flow_id = i.flow_id AND NOT t.from_client AND t.payload_bytes > 0 AND t.ts_ns <= i.d_ns
    GROUP BY ALL
),

arrivals AS (
    SELECT e.request_key, min(t.ts_ns) AS ack_ns
    FROM response_end e JOIN remote_requests i USING (request_key)
    JOIN tcp_analysis t ON t.capture_id = i.capture_id AND t.flow_id = i.flow_id AND t.from_client
        AND t.ts_ns >= i.d_ns AND t.rel_ack >= e.hi
    GROUP BY ALL
),

tunneled AS (  -- requests carried by a local tunnel: their flow ends on this host (loopback)
               -- or behind a SOCKS5 proxy, and a capture of their run holds the
               -- tunnel's own UDP flow across the WAN (by the request and its flow alone:
               -- bounds and request_phases hold a row of every request)
    SELECT q.request_key, q.capture_id, q.labels['run'] AS run_label
    FROM requests q JOIN flows f ON f.capture_id = q.capture_id AND f.flow_id = q.flow_id
    WHERE (f.server_addr IN ('127.0.0.1', '::1') OR q.proxy_done_ns IS NOT NULL)
      AND q.labels['run'] IS NOT NULL
),

tunnel_packets AS (  -- the tunnel's datagrams (UDP flows of 10 packets or more in the run's
                     -- other captures); out: towards the tunnel's far end, the service
                     -- port (the lower of the two: a UDP flow's first sender may be
                     -- either end when a warm session is captured mid-way)
    SELECT c.labels['run'] AS run_label, p.ts_ns,
        CASE WHEN p.src_port <> p.dst_port THEN p.dst_port < p.src_port ELSE p.from_client END
            AS from_client
    FROM packets p JOIN flows f USING (capture_id, flow_id) JOIN captures c USING (capture_id)
    WHERE p.protocol = 17 AND f.protocol = 'udp' AND f.packets_c2s + f.packets_s2c >= 10
      AND c.labels['run'] IN (SELECT DISTINCT run_label FROM tunneled)
      AND c.capture_id NOT IN (SELECT capture_id FROM tunneled)
),

tunnel_marks AS (  -- the request's first datagram out after its last byte, the last
                   -- datagram in before its first response byte
    SELECT t.request_key, up.ts_ns AS t_up, down.ts_ns AS t_down
    FROM (SELECT t.*, ph.b_ns, ph.c_ns FROM tunneled t JOIN request_phases ph USING (request_key)) t
    ASOF LEFT JOIN (SELECT run_label, ts_ns FROM tunnel_packets WHERE from_client) up
      ON up.run_label = t.run_label AND up.ts_ns >= t.b_ns
    ASOF LEFT JOIN (SELECT run_label, ts_ns FROM tunnel_packets WHERE NOT from_client) down
      ON down.run_label = t.run_label AND down.ts_ns <= t.c_ns
),

phased AS (
    SELECT i.*,
        -- setup: what of each connection step falls inside [start, a)
        CASE WHEN i.syn_ts_ns IS NULL OR i.ack_ts_ns IS NULL THEN 0
             ELSE greatest(0, least(i.ack_ts_ns, i.a_ns) - greatest(i.syn_ts_ns, i.start_ns)) END
            AS tcp_ns,
        coalesce(list_max(list_transform(
            list_filter(i.handshakes, lambda x: x.protocol = 'tls'),
            lambda x: greatest(0, least(x.hs_end, i.a_ns) - greatest(x.hs_start, i.start_ns)))), 0)
            AS tls_ns,
        coalesce(list_max(list_transform(
            list_filter(i.handshakes, lambda x: x.protocol = 'quic'),
            lambda x: greatest(0, least(x.hs_end, i.a_ns) - greatest(x.hs_start, i.start_ns)))), 0)
            AS quic_ns,
        CASE WHEN i.proxy_start_ns IS NULL OR i.proxy_done_ns IS NULL THEN 0
             ELSE greatest(0, least(i.proxy_done_ns, i.a_ns) - greatest(i.proxy_start_ns, i.start_ns))
        END AS proxy_ns,
        NOT i.at_server OR i.quic AS from_client_side,
        -- (the model's end reaches the capture point one way, R / 2, later)
        CASE WHEN i.model_end_ns IS NOT NULL
             THEN greatest(i.model_end_ns + coalesce(i.rtt_ns, 0) // 2 - i.c_ns, 0) ELSE 0 END
            AS generating_ns,
        -- through a tunnel: its local part (to the first datagram out, from the
        -- last datagram in) and the WAN part between
        tm.t_up IS NOT NULL AND tm.t_down IS NOT NULL AND tm.t_up <= tm.t_down
            AND tm.t_up <= i.c_ns AS tunnel,
        greatest(least(tm.t_up, i.c_ns) - i.b_ns, 0) + greatest(i.c_ns - greatest(tm.t_down, tm.t_up), 0)
            AS tunnel_local_ns,
        greatest(tm.t_down - tm.t_up, 0) AS tunnel_wan_ns
    FROM inst i LEFT JOIN tunnel_marks tm USING (request_key)
),

upload AS (  -- the transfer comes out of the time data was flowing: window, pacing, recovery
    SELECT *,
        least(coalesce(upload_ns, 0), up_window) AS ut_window,
        least(coalesce(upload_ns, 0) - least(coalesce(upload_ns, 0), up_window), up_pacing) AS ut_pacing
    FROM phased
),
upload2 AS (
    SELECT *,
        least(coalesce(upload_ns, 0) - ut_window - ut_pacing, up_loss) AS ut_loss,
        (b_ns - a_ns) - up_loss - up_window - up_pacing - up_idle AS up_other,
        -- then the request's packet headers at B (bounds.headers_up_ns; not through a
        -- tunnel, whose WAN packets are not these) from what is left of the same
        CASE WHEN tunnel THEN 0 ELSE coalesce(headers_up_ns, 0) END AS uh_total
    FROM upload
),
upload3 AS (
    SELECT *, least(uh_total, up_window - ut_window) AS uh_window,
        least(uh_total - least(uh_total, up_window - ut_window), up_pacing - ut_pacing) AS uh_pacing
    FROM upload2
),
upload4 AS (
    SELECT *, least(uh_total - uh_window - uh_pacing, up_loss - ut_loss) AS uh_loss
    FROM upload3
),

download AS (  -- per vantage: what is data flowing, waiting, lost, idle
    SELECT *,
        CASE WHEN from_client_side THEN gap_clocked_ns ELSE s_window END AS dn_window,
        CASE WHEN from_client_side OR NOT paces THEN 0 ELSE s_pacing END AS dn_pacing,
        CASE WHEN from_client_side THEN gap_loss_ns ELSE s_loss END AS dn_loss,
        CASE WHEN from_client_side THEN gap_receiver_ns ELSE s_receiver END AS dn_receiver,
        CASE WHEN from_client_side THEN 0 ELSE s_idle END AS dn_idle,
        -- (new data after a pause with nothing from the peer, from a sender that does not
        -- pace: it waited for something this vantage cannot name)
        CASE WHEN from_client_side THEN gap_short_ns + gap_beyond_ns WHEN paces THEN 0
             ELSE s_pacing END AS dn_sender
    FROM upload4
),
download2 AS (
    SELECT *,
        (d_ns - c_ns) - dn_window - dn_pacing - dn_loss - dn_receiver - dn_idle - dn_sender
            AS dn_other,
        -- without B, the clocked gaps are the transfer as measured
        CASE WHEN rate_known THEN least(coalesce(download_ns, 0), dn_window)
             ELSE dn_window END AS dt_window
    FROM download
),
download3 AS (
    SELECT *,
        least(greatest(coalesce(download_ns, 0) - dt_window, 0), dn_pacing) AS dt_pacing
    FROM download2
),
download4 AS (
    SELECT *,
        least(greatest(coalesce(download_ns, 0) - dt_window - dt_pacing, 0), dn_loss) AS dt_loss
    FROM download3
),
download5 AS (
    SELECT *,
        least(greatest(coalesce(download_ns, 0) - dt_window - dt_pacing - dt_loss, 0), dn_receiver)
            AS dt_receiver
    FROM download4
),
download6 AS (  -- past the bottleneck, with B known, the gaps beyond the ACK clock hold
                -- the bottleneck's serialisation of the segments that end them too
    SELECT *,
        CASE WHEN rate_known AND from_client_side AND NOT tunnel
             THEN least(greatest(coalesce(download_ns, 0) - dt_window - dt_pacing - dt_loss
                                 - dt_receiver, 0), dn_sender) ELSE 0 END AS dt_sender
    FROM download5
),
download7 AS (
    SELECT *, least(dn_sender - dt_sender, generating_ns) AS dn_generating  -- the model at work
    FROM download6
),

wait AS (  -- through a tunnel, R and T_c lie inside its WAN part
    SELECT *,
        CASE WHEN tunnel THEN coalesce(tunnel_local_ns, 0) ELSE 0 END AS w_tunnel_local,
        CASE WHEN remote THEN 0 ELSE least(coalesce(rtt_ns, 0),
              CASE WHEN tunnel THEN tunnel_wan_ns ELSE c_ns - b_ns END) END AS w_propagation
    FROM download7
),
wait2 AS (
    SELECT *,
        least(coalesce(processing_ns, 0),
              CASE WHEN tunnel THEN tunnel_wan_ns ELSE c_ns - b_ns END - w_propagation)
            AS w_processing,
        -- seen before the bottleneck, the request's last bytes cross it after b
        least(greatest(coalesce(upload_ns, 0) - ut_window - ut_pacing - ut_loss, 0),
              greatest((c_ns - b_ns) - w_tunnel_local - w_propagation
                       - least(coalesce(processing_ns, 0),
                               CASE WHEN tunnel THEN tunnel_wan_ns ELSE c_ns - b_ns END
                               - w_propagation), 0)) AS w_upload,
        -- on this host the local tunnel is the sender: its waits are the WAN's
        CASE WHEN tunnel THEN dn_sender - least(dn_sender, generating_ns)
                 + (dn_window - dt_window) ELSE 0 END AS dn_tunnel
    FROM wait
),
w0 AS (
    SELECT *,
        -- a response handed over faster than B left part of its transfer before c
        CASE WHEN rate_known THEN
            least(greatest(coalesce(download_ns, 0) - dt_window - dt_pacing - dt_loss - dt_receiver
                           - dt_sender, 0),
                  (c_ns - b_ns) - w_tunnel_local - w_propagation - w_processing - w_upload) ELSE 0 END
            AS w_transfer,
        -- the model still generating while the response flowed (its events): the rest of
        -- T_c is processing, whatever else the transport did meanwhile
        least(greatest(coalesce(processing_ns, 0) - w_processing, 0),
              least(generating_ns, d_ns - c_ns)) AS p_total
    FROM wait2
),
w1 AS (  -- taken from the sender's wait first, then loss recovery, window waiting, unexplained
    SELECT *, least(p_total, dn_generating) AS p_idle,
        least(p_total - least(p_total, dn_generating), dn_loss - dt_loss) AS p_loss
    FROM w0
),
w2 AS (
    SELECT *, least(p_total - p_idle - p_loss,
                    CASE WHEN tunnel THEN 0 ELSE dn_window - dt_window END) AS p_window
    FROM w1
),
w3 AS (
    SELECT *, least(p_total - p_idle - p_loss - p_window, greatest(dn_other, 0)) AS p_other
    FROM w2
),
w4 AS (  -- (without B the clocked gaps are no transfer of their own: the model's too)
    SELECT *, least(p_total - p_idle - p_loss - p_window - p_other,
                    CASE WHEN rate_known THEN 0 ELSE dt_window END) AS p_clocked
    FROM w3
),
w AS (  -- one wide row per request: every span's time
    SELECT *,
        -- through a tunnel the rest of S_d / B crossed the WAN while the local tunnel waited
        CASE WHEN tunnel AND rate_known THEN
            least(greatest(coalesce(download_ns, 0) - dt_window - dt_pacing - dt_loss - dt_receiver
                           - dt_sender - w_transfer, 0), dn_tunnel) ELSE 0 END AS dt_tunnel,
        p_idle + p_loss + p_window + p_other + p_clocked AS dn_processing
    FROM w4
),

hd AS (  -- then the response's packet headers at B (bounds.headers_down_ns; not through a
         -- tunnel, whose WAN packets are not these) from what is left of the states or gaps
         -- that held the transfer, in its order, after T_c: B counts IP bytes, S_d payload
    SELECT *, least(h_total, dn_window - dt_window - p_window) AS h_window
    FROM (SELECT *, CASE WHEN rate_known AND NOT tunnel THEN coalesce(headers_down_ns, 0)
                         ELSE 0 END AS h_total FROM w)
),
hd2 AS (
    SELECT *, least(h_total - h_window, dn_pacing - dt_pacing) AS h_pacing FROM hd
),
hd3 AS (
    SELECT *, least(h_total - h_window - h_pacing, dn_loss - dt_loss - p_loss) AS h_loss FROM hd2
),
hd4 AS (
    SELECT *, least(h_total - h_window - h_pacing - h_loss, dn_receiver - dt_receiver) AS h_receiver
    FROM hd3
),
hd5 AS (
    SELECT *, CASE WHEN from_client_side
                   THEN least(h_total - h_window - h_pacing - h_loss - h_receiver,
                              dn_sender - dt_sender - dn_generating) ELSE 0 END AS h_sender
    FROM hd4
),

trips AS (  -- at the server, timed by the client: the request's trip here (R / 2 of the
            -- setup's idle time) and the response's trip back (the rest of R, what is left of
            -- S_d / B, then the queue until the client's ACK shows it arrived, less R / 2)
    SELECT w.*,
        CASE WHEN remote THEN least(rtt_ns // 2, greatest((a_ns - start_ns) - tcp_ns - tls_ns
                                                          - quic_ns - proxy_ns, 0)) ELSE 0 END
            AS up_trip,
        ar.ack_ns
    FROM hd5 w LEFT JOIN arrivals ar USING (request_key)
),
trips2 AS (
    SELECT *, CASE WHEN remote THEN least(rtt_ns - up_trip, end_ns - d_ns) ELSE 0 END AS down_trip,
        CASE WHEN remote AND rate_known THEN least(
            greatest(coalesce(download_ns, 0) - (dt_window - p_clocked + dt_pacing + dt_loss
                                                 + dt_receiver + dt_sender + dt_tunnel) - w_transfer, 0),
            greatest(end_ns - d_ns - least(rtt_ns - up_trip, end_ns - d_ns), 0)) ELSE 0 END
            AS tail_transfer
    FROM trips
),
trips3 AS (  -- the time until the client's ACK shows the response arrived: the headers' time
             -- at B the download did not hold, then queueing
    SELECT * EXCLUDE (q0, h_left), least(h_left, q0) AS tail_headers,
        q0 - least(h_left, q0) AS tail_queueing
    FROM (SELECT *, greatest(h_total - h_window - h_pacing - h_loss - h_receiver - h_sender, 0)
              AS h_left,
              CASE WHEN remote AND ack_ns IS NOT NULL
                   THEN least(greatest(least(ack_ns - rtt_ns // 2, end_ns) - d_ns - down_trip
                                       - tail_transfer, 0), end_ns - d_ns - down_trip - tail_transfer)
                   ELSE 0 END AS q0
          FROM trips2)
),

spans_wide AS (
    SELECT request_key,
        tcp_ns AS connect_tcp, tls_ns AS connect_tls, quic_ns AS connect_quic,
        proxy_ns AS connect_proxy,
        (a_ns - start_ns) - tcp_ns - tls_ns - quic_ns - proxy_ns - up_trip AS setup_client_idle,
        up_trip AS setup_propagation,
        ut_window + ut_pacing + ut_loss AS upload_transfer,
        uh_window + uh_pacing + uh_loss AS upload_headers,
        up_loss - ut_loss - uh_loss AS upload_loss_recovery,
        up_window - ut_window - uh_window AS upload_waiting,
        up_pacing - ut_pacing - uh_pacing AS upload_pacing,
        up_idle AS upload_client_idle,
        up_other AS upload_unexplained,
        w_propagation AS propagation,
        w_processing AS processing,
        dn_processing AS download_processing,
        w_upload AS wait_upload_transfer,
        w_transfer AS wait_download_transfer,
        w_tunnel_local AS tunnel_queueing,
        CASE WHEN tunnel THEN tunnel_wan_ns - w_propagation - w_processing
                 - least(w_upload + w_transfer, tunnel_wan_ns - w_propagation - w_processing) ELSE 0 END
            AS wait_tunnel_transit,
        (c_ns - b_ns) - w_tunnel_local - w_propagation - w_processing - w_upload - w_transfer
            - CASE WHEN tunnel THEN tunnel_wan_ns - w_propagation - w_processing
                   - least(w_upload + w_transfer, tunnel_wan_ns - w_propagation - w_processing) ELSE 0 END
            AS wait_unexplained,
        dt_window - p_clocked + dt_pacing + dt_loss + dt_receiver + dt_sender + dt_tunnel
            AS download_transfer,
        h_window + h_pacing + h_loss + h_receiver + h_sender AS headers,
        CASE WHEN tunnel THEN 0 ELSE dn_window - dt_window - p_window - h_window END AS window_waiting,
        dn_pacing - dt_pacing - h_pacing AS pacing,
        dn_loss - dt_loss - p_loss - h_loss AS loss_recovery,
        dn_receiver - dt_receiver - h_receiver AS receiver_limited,
        dn_idle + dn_generating - p_idle AS server_idle,
        dn_tunnel - dt_tunnel AS download_tunnel_transit,
        dn_sender - dt_sender - dn_generating - h_sender
            - CASE WHEN tunnel THEN dn_sender - least(dn_sender, generating_ns) ELSE 0 END AS sender_wait,
        dn_other - p_other AS download_unexplained,
        down_trip AS tail_propagation,
        tail_transfer AS tail_download_transfer,
        tail_headers,
        tail_queueing,
        CASE WHEN remote AND ack_ns IS NULL THEN 0
             ELSE end_ns - d_ns - down_trip - tail_transfer - tail_headers - tail_queueing END
            AS tail_client_idle,
        CASE WHEN remote AND ack_ns IS NULL
             THEN end_ns - d_ns - down_trip - tail_transfer ELSE 0 END AS tail_unexplained,
        from_client_side, rate_known, processing_source, rtt_source,
        dn_loss - dt_loss - p_loss - h_loss AS loss_total,
        -- the recovery rounds in order, and each one's share of the loss recovery
        -- (its stretches' time, rounded down; the first takes what rounding left)
        list_sort(CASE WHEN dn_loss - dt_loss - p_loss - h_loss > 0 THEN loss_rounds END) AS rounds,
        list_transform(rounds, lambda r: CAST(loss_total::HUGEINT * r.ns
            // nullif(list_sum(list_transform(rounds, lambda x: x.ns)), 0) AS BIGINT)) AS shares
    FROM trips3
),

spans_rows AS (  -- loss recovery's rows: one a recovery round, or one outside them
    SELECT * EXCLUDE (rounds, shares),
        CASE WHEN loss_total <> 0 THEN coalesce(nullif(list_filter(list_transform(rounds,
            lambda r, k: struct_pack(
                ns := CASE WHEN k = 1 THEN loss_total - (list_sum(shares) - shares[1])
                           ELSE shares[k] END::BIGINT,
                detail := 'episode ' || r.episode || ' round ' || r.round)),
            lambda x: x.ns IS NOT NULL), []),
            [struct_pack(ns := loss_total, detail := 'outside a recorded round')]) END
            AS loss_rows,
        [
                connect_tcp, connect_tls, connect_quic, connect_proxy, setup_client_idle,
                setup_propagation, upload_transfer, upload_headers, upload_loss_recovery, upload_waiting,
                upload_pacing, upload_client_idle, upload_unexplained, propagation,
                processing, download_processing, wait_upload_transfer,
                wait_download_transfer, tunnel_queueing, wait_tunnel_transit,
                wait_unexplained, download_transfer, headers, window_waiting, pacing,
                receiver_limited, server_idle, download_tunnel_transit, sender_wait,
                download_unexplained, tail_propagation, tail_download_transfer, tail_headers,
                tail_queueing, tail_client_idle, tail_unexplained] AS span_ns
    FROM spans_wide
),

catalogue AS (  -- every span: order, name, phase, irreducible, the evidence behind it
    SELECT * FROM (VALUES
        ('connect_tcp', 1, 'connect_tcp', 'setup', false, 'SYN to the client''s ACK'),
        ('connect_tls', 2, 'connect_tls', 'setup', false, 'ClientHello to the client''s Finished'),
        ('connect_quic', 3, 'connect_quic', 'setup', false, 'first Initial to first 1-RTT packet'),
        ('connect_proxy', 3, 'connect_proxy', 'setup', false, 'proxy_start to proxy_done events'),
        ('setup_client_idle', 4, 'client_idle', 'setup', false, 'the client held a connection and sent nothing'),
        ('upload_transfer', 5, 'upload_transfer', 'upload', true, 'S_u / B'),
        ('upload_headers', 6, 'headers', 'upload', false,
         'the request''s packet headers at B (bounds.headers_up_ns): B counts IP bytes, S_u payload'),
        ('upload_loss_recovery', 6, 'upload_loss_recovery', 'upload', false, 'loss recovery of the client''s data'),
        ('upload_waiting', 7, 'upload_waiting', 'upload', false, 'the client''s window held it'),
        ('upload_pacing', 7, 'pacing', 'upload', false, 'the client''s pacing released its data'),
        ('upload_client_idle', 7, 'client_idle', 'upload', false, 'the client had nothing to send'),
        ('upload_unexplained', 16, 'unexplained', 'upload', false, 'no limitation state explains it'),
        ('propagation', 8, 'propagation', 'wait', true, 'R'),
        ('processing', 9, 'processing', 'wait', true, 'T_c'),
        ('download_processing', 11, 'processing', 'download', true,
         'T_c beyond the wait: the server''s events show the model still generating while the response flowed'),
        ('wait_upload_transfer', 8, 'upload_transfer', 'wait', true,
         'S_u / B: seen before the bottleneck, the request''s last bytes crossed it after the last byte here'),
        ('wait_download_transfer', 11, 'download_transfer', 'wait', true,
         'handed over faster than B: its bytes crossed the bottleneck before the first byte'),
        ('wait_unexplained', 16, 'unexplained', 'wait', false,
         'the wait beyond R and the known processing time: queueing, or server time nobody logged'),
        ('tunnel_queueing', 10, 'tunnel_queueing', 'wait', false,
         'in the local tunnel: from the last request byte to its first datagram out, and from its last datagram in to the first response byte'),
        ('wait_tunnel_transit', 10, 'tunnel_transit', 'wait', false,
         'across the tunnel, beyond R and T_c: between its first datagram out and its last datagram in'),
        ('download_tunnel_transit', 15, 'tunnel_transit', 'download', false,
         'the local tunnel waited for datagrams still crossing the WAN'),
        ('download_transfer', 11, 'download_transfer', 'download', true, 'S_d / B'),
        ('headers', 12, 'headers', 'download', false,
         'the response''s packet headers at B (bounds.headers_down_ns): B counts IP bytes, S_d payload'),
        ('window_waiting', 12, 'window_waiting', 'download', false, 'the sender waited for ACKs'),
        ('pacing', 12, 'pacing', 'download', false, 'the sender''s pacing released new data after a pause'),
        ('loss_recovery', 13, 'loss_recovery', 'download', false, NULL),
        ('receiver_limited', 14, 'receiver_limited', 'download', false, 'the client''s receive window was full'),
        ('server_idle', 15, 'server_idle', 'download', false, 'the application had not written the bytes'),
        ('sender_wait', 15, 'sender_wait', 'download', false,
         'seen from the client: the sender waited, beyond what the ACK clock explains'),
        ('download_unexplained', 16, 'unexplained', 'download', false, 'no state or gap explains it'),
        ('tail_client_idle', 17, 'client_idle', 'tail', false, 'after the last byte, until request_end'),
        ('setup_propagation', 4, 'propagation', 'setup', true,
         'at the server: the request''s trip here, R / 2 (its client''s log times it)'),
        ('tail_propagation', 17, 'propagation', 'tail', true,
         'at the server: the response''s trip to the client, the rest of R'),
        ('tail_download_transfer', 17, 'download_transfer', 'tail', true,
         'at the server: S_d / B the response still took at the bottleneck after leaving here'),
        ('tail_headers', 17, 'headers', 'tail', false,
         'at the server: the response''s packet headers at B after it left here (bounds.headers_down_ns)'),
        ('tail_queueing', 17, 'queueing', 'tail', false,
         'at the server: the response waited in the path''s queue (the client''s ACK of its last byte, less R / 2)'),
        ('tail_unexplained', 17, 'unexplained', 'tail', false,
         'at the server: no ACK of the last byte shows when the response reached the client')
    ) t(col, span_order, span, phase, irreducible, detail)
),

span_cols AS (  -- the spans' columns, in the order of their times' list (spans_rows), each
                -- named by its position (loss recovery's rows: the one after them)
    SELECT cols, range(1, len(cols) + 1) AS positions, len(cols) + 1 AS loss_position,
        list_position(cols, 'download_transfer') AS transfer_position
    FROM (SELECT [
                'connect_tcp', 'connect_tls', 'connect_quic', 'connect_proxy',
                'setup_client_idle', 'setup_propagation', 'upload_transfer', 'upload_headers',
                'upload_loss_recovery', 'upload_waiting', 'upload_pacing',
                'upload_client_idle', 'upload_unexplained', 'propagation', 'processing',
                'download_processing', 'wait_upload_transfer', 'wait_download_transfer',
                'tunnel_queueing', 'wait_tunnel_transit', 'wait_unexplained',
                'download_transfer', 'headers', 'window_waiting', 'pacing', 'receiver_limited',
                'server_idle', 'download_tunnel_transit', 'sender_wait',
                'download_unexplained', 'tail_propagation', 'tail_download_transfer', 'tail_headers',
                'tail_queueing', 'tail_client_idle', 'tail_unexplained'] AS cols)
),

long AS (  -- a row a span (UNPIVOT by hand: loss recovery's rows, one a round, come in the
           -- same stream, so that nothing reads the wide rows twice), with what each
           -- span's detail needs kept beside it; a span of no time is left out,
           -- download_transfer kept (most requests have no loss recovery: no list to join);
           -- a span is its position in span_cols (a number: no name carried or looked up)
    SELECT * EXCLUDE (loss_position, transfer_position) FROM (
        SELECT r.request_key, r.from_client_side, r.rate_known, r.processing_source, r.rtt_source,
            n.loss_position, n.transfer_position,
            unnest(CASE WHEN r.loss_rows IS NULL THEN n.positions
                ELSE list_concat(list_transform(r.loss_rows, lambda x: n.loss_position), n.positions)
                END) AS position,
            unnest(CASE WHEN r.loss_rows IS NULL THEN r.span_ns
                ELSE list_concat(list_transform(r.loss_rows, lambda x: x.ns), r.span_ns) END) AS ns,
            unnest(list_transform(r.loss_rows, lambda x: x.detail)) AS loss_detail
        FROM spans_rows r, span_cols n)
    WHERE position = loss_position OR ns IS NOT NULL AND (ns <> 0 OR position = transfer_position)
),

lookup AS (  -- the catalogue as one list in the order of span_cols' positions, read by
             -- position: a join on the span's name built its hash table on the many rows,
             -- not the 37 (DuckDB cannot estimate a CTE's rows: 0.6 of 1.3 s per part of
             -- 100 k requests)
    SELECT list(struct_pack(span_order, span, phase, irreducible, detail)
                ORDER BY coalesce(list_position(n.cols, c.col), n.loss_position)) AS entries
    FROM catalogue c, span_cols n
),

spans AS (
    SELECT c.request_key, c.span_order, c.span, c.phase, c.ns,
        c.irreducible AND (c.span NOT IN ('download_transfer', 'upload_transfer') OR c.rate_known)
            AS irreducible,
        CASE WHEN c.span = 'loss_recovery' THEN c.loss_detail
             WHEN c.span = 'download_transfer' AND NOT c.rate_known
                 THEN 'B unknown: the transfer and the window waiting together'
             WHEN c.span = 'download_transfer' AND c.from_client_side AND c.phase = 'download'
                 THEN 'S_d / B, out of the gaps the ACK clock explains'
             WHEN c.span = 'window_waiting' AND c.from_client_side
                 THEN 'the ACK clock: a full-sized segment, then the gap until 1.25 R after the client''s ACK'
             WHEN c.span = 'processing' AND c.phase = 'wait' THEN 'T_c from ' || c.processing_source
             WHEN c.span = 'propagation' THEN 'R from ' || c.rtt_source
             WHEN c.span = 'server_idle' AND c.from_client_side
                 THEN 'the server''s events: the model was still generating'
             WHEN c.span = 'server_idle'
                 THEN 'at the sender: nothing in flight and nothing sent with the window open'
             ELSE c.detail END AS detail
    FROM (SELECT l.request_key, l.ns::HUGEINT AS ns, l.from_client_side, l.rate_known,
                 l.processing_source, l.rtt_source, l.loss_detail,
                 unnest(k.entries[l.position])
          FROM long l, lookup k) c
),

no_packets AS (
    SELECT q.request_key, 0 AS span_order, 'unattributed' AS span, 'request' AS phase,
        q.duration_ns::HUGEINT AS ns, false AS irreducible,
        'no flow of this request was linked: nothing captured shows its time' AS detail
    FROM requests q WHERE q.flow_id IS NULL
),

final AS (  -- (long left out the spans of no time, but loss recovery's and the download's
            -- transfer: a span is a row here when it took time, or is one of those)
    SELECT * FROM spans
    UNION ALL SELECT * FROM no_packets
)
SELECT * FROM final ORDER BY request_key, span_order, detail
