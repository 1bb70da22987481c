-- retransmissions: every segment that carried bytes again, grouped into
-- recovery episodes and rounds, and the segments that only look like one.
--
-- Step: capture.
-- Sources: tcp_analysis.
--
-- Parameters: $first, $last (the captures capture_id BETWEEN them).
-- Where the inputs come from: tcp_analysis (tracekit/kernels/segments.py classifies each segment and gives each retransmission its recovery point, the time the peer acknowledged that point, and for a hole fill when its hole opened).
-- Columns:
--   capture_id, flow_id, frame, ts_ns   the segment
--   direction           c2s (client to server) or s2c
--   rel_seq, rel_end    its bytes, relative to the sender's ISN
--   payload_bytes       its length
--   kind                retransmission | reordered | duplicate
--   seen_before         retransmission whose bytes this capture saw before
--                       (segment `repeat`, the sender's view); false for a
--                       `hole_fill` (the original was lost before the vantage)
--   trigger             fast | rto | tlp | rack | other (see README: Definitions)
--   spurious            proven unnecessary by D-SACK or Eifel timestamps in this
--                       capture (spurious_verdicts adds the other captures'
--                       evidence of the same connection)
--   silence_before_ns   time since the sender last sent or had data acknowledged
--   peer_dupacks        duplicate ACKs the peer had sent for the current ACK number
--   original_frame      the previous transmission of the same rel_seq in this
--                       capture (NULL for a hole fill: never seen)
--   hole_opened_ns      hole fill / reordered: when the segment beyond the gap
--                       arrived, i.e. when the loss became visible here; a
--                       receiver-side episode starts then
--   wireshark           what Wireshark 4.0 calls it: retransmission,
--                       fast_retransmission, spurious_retransmission,
--                       out_of_order or NULL
--   episode             recovery episode of the flow direction, from 1: it starts
--                       at a retransmission (or, near the receiver, at the
--                       opening of the hole it fills) after the previous episode
--                       ended and ends when the peer acknowledges everything
--                       that had been sent when each of its retransmissions
--                       went out (RFC 6675's recovery point); NULL if not a
--                       retransmission
--   recovery_point      the highest rel_end sent before this retransmission
--   recovered_ns        the first ACK from the peer after it that covers its
--                       recovery point (NULL if none was captured)
--   round               transmission round within the episode: 1 for the first
--                       retransmission of these bytes, 2 when they had to be
--                       sent again in the same episode, ... (each round costs
--                       at least one round trip)
--   episode_start_ns, episode_end_ns   the episode (end NULL if never completed)
-- Reference: RFC 5681 / 6675 / 8985 for the kinds of loss recovery; Wireshark's
-- tcp.analysis flags are kept beside for comparison (tcp_analysis.ws_*).
WITH marked AS (  -- the segments to report: a few of the capture's packets
    SELECT *,
        CASE WHEN from_client THEN 'c2s' ELSE 's2c' END AS direction,
        segment IN ('repeat', 'hole_fill') AS is_retransmission
    FROM tcp_analysis
    WHERE capture_id BETWEEN $first AND $last
      AND segment IN ('repeat', 'hole_fill', 'reordered', 'duplicate')
),

previous AS (  -- the last earlier transmission of the same first byte
    SELECT m.capture_id, m.frame, max(t.frame) AS prev_frame
    FROM marked m JOIN tcp_analysis t
      ON t.capture_id = m.capture_id AND t.flow_id = m.flow_id
     AND t.from_client = m.from_client AND t.rel_seq = m.rel_seq AND t.frame < m.frame
    WHERE t.capture_id BETWEEN $first AND $last AND t.segment IS NOT NULL
      AND m.segment <> 'hole_fill'
    GROUP BY ALL
),

islands AS (  -- an episode stays open until every retransmission in it was recovered
    SELECT *,
        coalesce(hole_opened_ns, ts_ns) AS start_ns,
        max(coalesce(recovered_ns, 9223372036854775807)) OVER (
            PARTITION BY capture_id, flow_id, from_client ORDER BY frame
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS open_until
    FROM marked WHERE is_retransmission
),

episodes AS (
    SELECT *,
        sum(CASE WHEN open_until IS NULL OR start_ns >= open_until THEN 1 ELSE 0 END) OVER (
            PARTITION BY capture_id, flow_id, from_client ORDER BY frame) AS episode
    FROM islands
),

rounds AS (
    SELECT *,
        row_number() OVER (PARTITION BY capture_id, flow_id, from_client, episode, rel_seq
                           ORDER BY frame) AS round,
        min(start_ns) OVER w AS episode_start_ns,
        CASE WHEN count(*) OVER w = count(recovered_ns) OVER w
             THEN max(recovered_ns) OVER w END AS episode_end_ns
    FROM episodes
    WINDOW w AS (PARTITION BY capture_id, flow_id, from_client, episode)
),

final AS (
    SELECT
        m.capture_id, m.flow_id, m.frame, m.ts_ns, m.direction, m.rel_seq, m.rel_end,
        m.payload_bytes,
        CASE WHEN m.is_retransmission THEN 'retransmission' ELSE m.segment END AS kind,
        CASE WHEN m.is_retransmission THEN m.segment = 'repeat' END AS seen_before,
        m.retransmission_trigger AS trigger,
        m.spurious,
        m.silence_before_ns,
        m.peer_dupacks,
        p.prev_frame AS original_frame,
        m.hole_opened_ns,
        CASE WHEN m.ws_fast_retransmission THEN 'fast_retransmission'
             WHEN m.ws_spurious_retransmission THEN 'spurious_retransmission'
             WHEN m.ws_retransmission THEN 'retransmission'
             WHEN m.ws_out_of_order THEN 'out_of_order' END AS wireshark,
        r.episode,
        m.recovery_point,
        m.recovered_ns,
        r.round,
        r.episode_start_ns,
        r.episode_end_ns
    FROM marked m
    LEFT JOIN previous p USING (capture_id, frame)
    LEFT JOIN rounds r USING (capture_id, frame)
)

SELECT * FROM final ORDER BY capture_id, flow_id, frame
