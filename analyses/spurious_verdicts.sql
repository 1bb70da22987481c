-- spurious_verdicts: one spurious verdict per retransmission, from the evidence
-- of every capture the store holds of its connection.
--
-- Step: store.
-- Sources: flows, packets, retransmissions, rtt_summary.
--
-- Built over the whole store.
-- Definitions: a retransmission (kind `retransmission`) was spurious -- the
-- original had arrived -- when a capture shows it:
--   dsack_or_eifel   the capture's own evidence: the peer reported the bytes
--                    twice (D-SACK) or the ACK that covered them echoed the
--                    original's TSval (retransmissions.spurious)
--   receiver_copies  the capture was taken at the receiving end (its
--                    rtt_summary.vantage is the receiver's side of this
--                    direction) and saw the original before this copy
--                    (seen_before): the receiver had it. A SYN or FIN has no
--                    D-SACK, so a sender-side capture may have no evidence
--                    where the receiver's has it.
-- The same retransmission in several captures (the client's and the server's
-- capture of one run): flows with the same addresses and ports whose
-- lifetimes overlap, the same direction, rel_seq and length, and the same
-- datagram -- IP id and TSval, or, where a packet has neither, the same round.
-- Columns:
--   capture_id, flow_id, frame, direction, rel_seq, payload_bytes, round
--   spurious_here        this capture's own evidence says spurious
--   spurious             any capture of the connection says so
--   basis                dsack_or_eifel | receiver_copies (this capture's
--                        own evidence) | other_capture | NULL (not spurious)
--   evidence_capture_id  the capture whose evidence it is (the lowest id
--                        when several others have it)
--   captures             how many captures hold this retransmission
-- Copies within one capture (a retransmission sent many times with one IP id)
-- are not paired with each other: each capture's evidence is summed per
-- datagram first, then held against the retransmissions of the others.
WITH r AS (
    SELECT r.capture_id, r.flow_id, r.frame, r.direction, r.rel_seq, r.payload_bytes, r.round,
        r.spurious AS spurious_here, r.seen_before,
        f.client_addr, f.client_port, f.server_addr, f.server_port, f.first_ts_ns, f.last_ts_ns,
        p.ip_id, p.tcp_tsval AS tsval,
        -- where a packet has neither IP id nor TSval, its round tells copies apart
        CASE WHEN p.ip_id IS NULL AND p.tcp_tsval IS NULL THEN r.round END AS k_round,
        CASE WHEN r.spurious THEN 'dsack_or_eifel'
             WHEN r.seen_before AND v.vantage = CASE r.direction WHEN 'c2s' THEN 'server'
                                                                  ELSE 'client' END
             THEN 'receiver_copies' END AS own_basis
    FROM retransmissions r
    JOIN flows f USING (capture_id, flow_id)
    JOIN packets p USING (capture_id, frame)
    LEFT JOIN (SELECT capture_id, flow_id, any_value(vantage) AS vantage FROM rtt_summary
               GROUP BY ALL) v USING (capture_id, flow_id)
    WHERE r.kind = 'retransmission'
),

evidence AS (  -- per capture, flow and datagram: does that capture prove it spurious?
    SELECT capture_id AS other, client_addr, client_port, server_addr, server_port,
        direction, rel_seq, payload_bytes, ip_id, tsval, k_round,
        any_value(first_ts_ns) AS first_ts_ns, any_value(last_ts_ns) AS last_ts_ns,
        bool_or(own_basis IS NOT NULL) AS proves
    FROM r GROUP BY ALL
),

copies AS (  -- each retransmission with its copies in the other captures
    SELECT a.capture_id, a.flow_id, a.frame, e.other, e.proves
    FROM r a JOIN evidence e
      ON a.client_addr = e.client_addr AND a.client_port = e.client_port
     AND a.server_addr = e.server_addr AND a.server_port = e.server_port
     AND a.direction = e.direction AND a.rel_seq = e.rel_seq
     AND a.payload_bytes = e.payload_bytes
     AND a.ip_id IS NOT DISTINCT FROM e.ip_id AND a.tsval IS NOT DISTINCT FROM e.tsval
     AND a.k_round IS NOT DISTINCT FROM e.k_round
     AND e.other <> a.capture_id
     AND a.first_ts_ns <= e.last_ts_ns AND e.first_ts_ns <= a.last_ts_ns
),

final AS (
    SELECT r.capture_id, r.flow_id, r.frame, r.direction, r.rel_seq, r.payload_bytes, r.round,
        r.spurious_here,
        r.own_basis IS NOT NULL OR coalesce(bool_or(c.proves), false) AS spurious,
        coalesce(r.own_basis, CASE WHEN bool_or(c.proves) THEN 'other_capture' END) AS basis,
        CASE WHEN r.own_basis IS NOT NULL THEN r.capture_id
             ELSE min(c.other) FILTER (c.proves) END AS evidence_capture_id,
        1 + count(DISTINCT c.other) AS captures
    FROM r LEFT JOIN copies c USING (capture_id, flow_id, frame)
    GROUP BY r.capture_id, r.flow_id, r.frame, r.direction, r.rel_seq, r.payload_bytes, r.round,
        r.spurious_here, r.own_basis
)

SELECT * FROM final ORDER BY capture_id, flow_id, frame
