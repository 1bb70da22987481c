-- handshakes: every connection setup -- TCP, TLS over TCP, QUIC -- in one schema.
--
-- Step: capture.
-- Sources: flows, packets, rtt_summary, tls_decrypted, tls_messages.
--
-- Parameters: $first, $last (the captures capture_id BETWEEN them).
-- Definitions: one row per flow and protocol layer. Times are capture
-- timestamps, so the intervals are as seen from the capture point
-- (rtt_summary.vantage).
--   start_ns            tcp: first SYN; tls: ClientHello; quic: first client Initial
--   server_hello_ns     tcp: the SYN-ACK the connection goes on with (the last
--                       before the client's first segment without SYN; with several
--                       SYN-ACKs of new ISNs, the one the client answered); tls: ServerHello (after any
--                       HelloRetryRequest); quic: first server Initial
--   done_ns             tcp: first ACK; tls: the client's Finished (TLS 1.2: its
--                       encrypted handshake record; TLS 1.3: its first encrypted
--                       record after the ServerHello); quic: the client's first
--                       short-header (1-RTT) packet
--   first_data_c2s_ns, first_data_s2c_ns   first application byte each way:
--                       tcp: first payload; tls 1.2: first application_data
--                       record; tls 1.3: the client's next encrypted record after
--                       its Finished (or 0-RTT data), the server's first
--                       encrypted record completed after the client's first
--                       data (its earlier records after the client's Finished
--                       are session tickets; one sent later can still pass for
--                       data, so this is a lower bound: decrypted timings are
--                       exact; a server that speaks first is timed from the
--                       Finished instead);
--                       quic: first short-header packet each way
--   timing_source       tls: `decrypted` when an SSLKEYLOGFILE was given
--                       (tracekit tls-keys: tshark names the client's Finished
--                       and the application data exactly), else `records` (the
--                       record-level inference above); tcp and quic: `packets`
--   duration_ns         done_ns - start_ns
--   retries             tcp: extra SYNs + extra SYN-ACKs; tls: HelloRetryRequests;
--                       quic: Retry packets
--   version_negotiation quic: a Version Negotiation packet was sent
--   resumed, early_data tls: session resumed; 0-RTT offered; quic: 0-RTT packets
--   fast_open           tcp: TCP Fast Open option
--   round_trips         the round trips the protocol needs for this handshake
--                       before the client may send data: tcp 1; tls 1.3: 1, +1
--                       after a HelloRetryRequest, 0 with 0-RTT data; tls 1.2: 2,
--                       1 when resumed; quic: 1, +1 per Retry or Version Negotiation
--   measured_round_trips  duration_ns / the flow's path RTT (rtt_summary; for
--                       quic the first client Initial -> server Initial interval)
-- Columns: capture_id, flow_id, protocol, version, sni, alpn, start_ns,
--   server_hello_ns, done_ns, first_data_c2s_ns, first_data_s2c_ns, timing_source,
--   duration_ns,
--   retries, version_negotiation, resumed, early_data, fast_open, round_trips,
--   measured_round_trips
WITH f AS (SELECT * FROM flows WHERE capture_id BETWEEN $first AND $last),

path AS (
    SELECT capture_id, flow_id, any_value(path_rtt_ns) AS path_rtt_ns
    FROM rtt_summary WHERE capture_id BETWEEN $first AND $last GROUP BY ALL
),

tcp_data AS (
    SELECT capture_id, flow_id,
        min(ts_ns) FILTER (from_client) AS c2s_ns,
        min(ts_ns) FILTER (NOT from_client) AS s2c_ns
    FROM packets WHERE capture_id BETWEEN $first AND $last AND protocol = 6
      AND payload_bytes > 0
    GROUP BY ALL
),

-- flows with more than one SYN-ACK: the last before the client's first segment
-- without SYN (none such usually: then nothing of packets is read)
many_synacks AS (SELECT capture_id, flow_id FROM f WHERE f.synack_count > 1),

answered AS (
    SELECT capture_id, flow_id,
        min(ts_ns) FILTER (from_client AND tcp_flags & 2 = 0) AS answer_ns
    FROM packets JOIN many_synacks USING (capture_id, flow_id)
    WHERE capture_id BETWEEN $first AND $last AND protocol = 6
    GROUP BY ALL
),

last_synack AS (
    SELECT p.capture_id, p.flow_id, max(p.ts_ns) AS synack_ns
    FROM packets p JOIN answered a USING (capture_id, flow_id)
    WHERE p.capture_id BETWEEN $first AND $last AND p.protocol = 6 AND NOT p.from_client
      AND p.tcp_flags & 18 = 18 AND (a.answer_ns IS NULL OR p.ts_ns <= a.answer_ns)
    GROUP BY ALL
),

tcp AS (
    SELECT f.capture_id, f.flow_id, 'tcp' AS protocol, NULL AS version, NULL AS sni,
        NULL AS alpn, f.syn_ts_ns AS start_ns,
        coalesce(ls.synack_ns, f.synack_ts_ns) AS server_hello_ns,
        f.ack_ts_ns AS done_ns, d.c2s_ns AS first_data_c2s_ns, d.s2c_ns AS first_data_s2c_ns,
        greatest(coalesce(f.syn_count, 1) - 1, 0) + greatest(coalesce(f.synack_count, 1) - 1, 0)
            AS retries,
        NULL::BOOLEAN AS version_negotiation, NULL::BOOLEAN AS resumed,
        NULL::BOOLEAN AS early_data, f.fast_open, 1 AS round_trips
    FROM f LEFT JOIN tcp_data d USING (capture_id, flow_id)
    LEFT JOIN last_synack ls USING (capture_id, flow_id)
    WHERE f.protocol = 'tcp' AND (f.syn_ts_ns IS NOT NULL OR f.synack_ts_ns IS NOT NULL)
),

m AS (SELECT * FROM tls_messages WHERE capture_id BETWEEN $first AND $last),

tls_hello AS (
    SELECT capture_id, flow_id,
        min(ts_ns) FILTER (message = 'client_hello') AS ch_ns,
        max(ts_ns) FILTER (message = 'server_hello') AS sh_ns,
        count(*) FILTER (message = 'hello_retry_request') AS hrr,
        any_value(version) FILTER (message = 'server_hello') AS version,
        any_value(sni) FILTER (message = 'client_hello') AS sni,
        coalesce(any_value(alpn) FILTER (message = 'server_hello'),
                 any_value(alpn) FILTER (message = 'client_hello')) AS alpn,
        bool_or(resumed) AS resumed,
        bool_or(early_data) AS early_data
    FROM m GROUP BY ALL
),

dec AS (  -- decrypted with an SSLKEYLOGFILE (tracekit tls-keys): exact
    SELECT capture_id, flow_id,
        min(ts_ns) FILTER (direction = 'c2s' AND message = 'finished') AS client_finished_ns,
        min(ts_ns) FILTER (direction = 'c2s' AND message = 'application_data') AS app_c2s_ns,
        min(ts_ns) FILTER (direction = 's2c' AND message = 'application_data') AS app_s2c_ns
    FROM tls_decrypted WHERE capture_id BETWEEN $first AND $last GROUP BY ALL
),

tls_guess AS (
    SELECT h.*,
        CASE WHEN h.version = 'TLS 1.3'
             THEN (SELECT min(ts_ns) FROM m WHERE m.capture_id = h.capture_id AND m.flow_id = h.flow_id AND m.direction = 'c2s'
                   AND m.message = 'encrypted' AND m.ts_ns >= h.sh_ns)
             ELSE (SELECT min(ts_ns) FROM m WHERE m.capture_id = h.capture_id AND m.flow_id = h.flow_id AND m.direction = 'c2s'
                   AND m.message = 'encrypted_handshake') END AS guessed_done_ns
    FROM tls_hello h
),

tls_done AS (
    SELECT g.*, coalesce(d.client_finished_ns, g.guessed_done_ns) AS done_ns,
        d.client_finished_ns IS NOT NULL AS decrypted, d.app_c2s_ns, d.app_s2c_ns
    FROM tls_guess g LEFT JOIN dec d USING (capture_id, flow_id)
),

tls AS (
    SELECT d.capture_id, d.flow_id, 'tls' AS protocol, d.version, d.sni, d.alpn,
        d.ch_ns AS start_ns, d.sh_ns AS server_hello_ns, d.done_ns,
        CASE WHEN d.decrypted THEN d.app_c2s_ns
             WHEN d.version = 'TLS 1.3'
             THEN (SELECT min(ts_ns) FROM m WHERE m.capture_id = d.capture_id AND m.flow_id = d.flow_id AND m.direction = 'c2s'
                   AND m.message = 'encrypted' AND (m.ts_ns > d.done_ns OR m.ts_ns < d.sh_ns))
             ELSE (SELECT min(ts_ns) FROM m WHERE m.capture_id = d.capture_id AND m.flow_id = d.flow_id AND m.direction = 'c2s'
                   AND m.message = 'application_data') END AS first_data_c2s_ns,
        CASE WHEN d.decrypted THEN d.app_s2c_ns
             WHEN d.version = 'TLS 1.3'  -- after the client's first data: not a session ticket
             THEN (SELECT min(ts_ns) FROM m WHERE m.capture_id = d.capture_id AND m.flow_id = d.flow_id AND m.direction = 's2c'
                   AND m.message = 'encrypted' AND m.ts_ns > coalesce(
                       (SELECT min(ts_ns) FROM m m2 WHERE m2.capture_id = d.capture_id AND m2.flow_id = d.flow_id
                        AND m2.direction = 'c2s' AND m2.message = 'encrypted'
                        AND m2.ts_ns > d.done_ns), d.done_ns))
             ELSE (SELECT min(ts_ns) FROM m WHERE m.capture_id = d.capture_id AND m.flow_id = d.flow_id AND m.direction = 's2c'
                   AND m.message = 'application_data') END AS first_data_s2c_ns,
        CASE WHEN d.decrypted THEN 'decrypted' ELSE 'records' END AS timing_source,
        d.hrr AS retries, NULL::BOOLEAN AS version_negotiation, d.resumed, d.early_data,
        NULL::BOOLEAN AS fast_open,
        CASE WHEN d.version = 'TLS 1.3' THEN CASE WHEN d.early_data THEN 0 ELSE 1 + d.hrr END
             WHEN d.resumed THEN 1 ELSE 2 END AS round_trips
    FROM tls_done d WHERE d.ch_ns IS NOT NULL
),

q AS (
    SELECT p.capture_id, p.flow_id, p.from_client, p.ts_ns, p.quic_type, p.quic_version
    FROM packets p JOIN f USING (capture_id, flow_id)
    WHERE p.capture_id BETWEEN $first AND $last AND p.protocol = 17 AND f.protocol = 'udp'
      AND p.payload_bytes > 0
),

quic_flows AS (
    SELECT capture_id, flow_id,
        min(ts_ns) FILTER (from_client AND quic_type = 'initial') AS ci_ns,
        min(ts_ns) FILTER (NOT from_client AND quic_type = 'initial') AS si_ns,
        count(*) FILTER (quic_type = 'retry') AS retries,
        count(*) FILTER (quic_type = 'version_negotiation') > 0 AS vn,
        count(*) FILTER (quic_type = '0rtt') > 0 AS zero_rtt,
        any_value(quic_version) FILTER (quic_type = 'initial' AND NOT from_client) AS server_version,
        any_value(quic_version) FILTER (quic_type = 'initial') AS any_version
    FROM q GROUP BY ALL
    HAVING count(*) FILTER (quic_type = 'initial') > 0
),

quic AS (
    SELECT qf.capture_id, qf.flow_id, 'quic' AS protocol,
        CASE coalesce(qf.server_version, qf.any_version)
             WHEN 1 THEN 'QUIC v1' WHEN 1798521807 THEN 'QUIC v2'
             ELSE printf('QUIC 0x%08x', coalesce(qf.server_version, qf.any_version)) END AS version,
        NULL AS sni, NULL AS alpn, qf.ci_ns AS start_ns, qf.si_ns AS server_hello_ns,
        (SELECT min(ts_ns) FROM q WHERE q.capture_id = qf.capture_id AND q.flow_id = qf.flow_id AND q.from_client
         AND q.quic_type IS NULL AND q.ts_ns > qf.si_ns) AS done_ns,
        (SELECT min(ts_ns) FROM q WHERE q.capture_id = qf.capture_id AND q.flow_id = qf.flow_id AND q.from_client
         AND q.quic_type IS NULL AND q.ts_ns > qf.si_ns) AS first_data_c2s_ns,
        (SELECT min(ts_ns) FROM q WHERE q.capture_id = qf.capture_id AND q.flow_id = qf.flow_id AND NOT q.from_client
         AND q.quic_type IS NULL) AS first_data_s2c_ns,
        qf.retries, qf.vn AS version_negotiation, NULL::BOOLEAN AS resumed,
        qf.zero_rtt AS early_data, NULL::BOOLEAN AS fast_open,
        1 + qf.retries + (CASE WHEN qf.vn THEN 1 ELSE 0 END) AS round_trips
    FROM quic_flows qf
),

quic_rtt AS (  -- for QUIC the Initial exchange stands in for the path RTT: the server's
               -- first Initial and the client's last Initial before it (after a Retry
               -- or a Version Negotiation, the Initial it answers)
    SELECT qf.capture_id, qf.flow_id,
        qf.si_ns - (SELECT max(ts_ns) FROM q WHERE q.capture_id = qf.capture_id AND q.flow_id = qf.flow_id
                    AND q.from_client AND q.quic_type = 'initial' AND q.ts_ns < qf.si_ns) AS path_rtt_ns
    FROM quic_flows qf
),

all_layers AS (
    SELECT * FROM tcp UNION ALL BY NAME SELECT * FROM tls UNION ALL BY NAME SELECT * FROM quic
),

final AS (
    SELECT a.capture_id, a.flow_id, a.protocol, a.version, a.sni, a.alpn, a.start_ns,
        a.server_hello_ns, a.done_ns, a.first_data_c2s_ns, a.first_data_s2c_ns,
        coalesce(a.timing_source, 'packets') AS timing_source,
        a.done_ns - a.start_ns AS duration_ns,
        a.retries, a.version_negotiation, a.resumed, a.early_data, a.fast_open, a.round_trips,
        round((a.done_ns - a.start_ns)
              / nullif(CASE WHEN a.protocol = 'quic' THEN qr.path_rtt_ns ELSE p.path_rtt_ns END, 0),
              2) AS measured_round_trips
    FROM all_layers a
    LEFT JOIN path p USING (capture_id, flow_id)
    LEFT JOIN quic_rtt qr USING (capture_id, flow_id)
)

SELECT * FROM final ORDER BY capture_id, flow_id, start_ns, protocol
