-- retransmissions: every segment that carried bytes again, grouped into
-- recovery episodes and rounds, and the segments that only look like one.
--
-- Parameters: $capture_id (one capture; `tracekit analyze` runs it per capture).
-- Source: tcp_analysis (tracekit/transport/segments.py classifies each segment).
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
--   spurious            proven unnecessary by D-SACK or Eifel timestamps
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
--   round               transmission round within the episode: 1 for the first
--                       retransmission of these bytes, 2 when they had to be
--                       sent again in the same episode, ... (each round costs
--                       at least one round trip)
--   episode_start_ns, episode_end_ns   the episode (end NULL if never completed)
-- Reference: RFC 5681 / 6675 / 8985 for the kinds of loss recovery; Wireshark's
-- tcp.analysis flags are kept beside for comparison (tcp_analysis.ws_*).
WITH lossy AS (  -- only flows with something to report
    SELECT DISTINCT flow_id FROM tcp_analysis
    WHERE capture_id = $capture_id AND segment IN ('repeat', 'hole_fill', 'reordered', 'duplicate')
),

seg AS (
    SELECT *,
        CASE WHEN from_client THEN 'c2s' ELSE 's2c' END AS direction,
        max(rel_end) OVER (PARTITION BY flow_id, from_client ORDER BY frame
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS sent_max
    FROM tcp_analysis
    WHERE capture_id = $capture_id AND flow_id IN (SELECT flow_id FROM lossy)
),

previous AS (  -- the last earlier transmission of the same first byte
    SELECT *,
        lag(frame) OVER (PARTITION BY flow_id, from_client, rel_seq ORDER BY frame) AS prev_frame
    FROM seg
    WHERE segment IS NOT NULL
),

holes AS (  -- segments that arrived beyond a gap: [hole_lo, hole_hi) was missing here
    SELECT flow_id, from_client, ts_ns AS opened_ns, rel_seq - gap_bytes AS hole_lo,
        rel_seq AS hole_hi
    FROM seg WHERE gap_bytes > 0
),

marked AS (
    SELECT p.*,
        p.segment IN ('repeat', 'hole_fill') AS is_retransmission,
        (SELECT max(h.opened_ns) FROM holes h
         WHERE h.flow_id = p.flow_id AND h.from_client = p.from_client
           AND p.segment IN ('hole_fill', 'reordered')
           AND h.hole_lo <= p.rel_seq AND p.rel_seq < h.hole_hi AND h.opened_ns <= p.ts_ns)
            AS hole_opened_ns
    FROM previous p
    WHERE p.segment IN ('repeat', 'hole_fill', 'reordered', 'duplicate')
),

-- the peer's cumulative ACK over time: when each ACK level was first reached
acks AS (
    SELECT flow_id, NOT from_client AS data_from_client, cum_ack, min(ts_ns) AS reached_ns
    FROM (
        SELECT flow_id, from_client, ts_ns,
            max(rel_ack) OVER (PARTITION BY flow_id, from_client ORDER BY frame) AS cum_ack
        FROM seg WHERE rel_ack IS NOT NULL
    )
    GROUP BY ALL
),

peer_packets AS (
    SELECT flow_id, NOT from_client AS data_from_client, ts_ns FROM seg
    WHERE rel_ack IS NOT NULL
),

with_end AS (  -- done: the first peer ACK after it, once the recovery point is reached
    SELECT r.*,
        coalesce(r.hole_opened_ns, r.ts_ns) AS start_ns,
        CASE WHEN a.reached_ns IS NOT NULL AND p.ts_ns IS NOT NULL
             THEN greatest(a.reached_ns, p.ts_ns, r.ts_ns) END AS done_ns
    FROM (SELECT * FROM marked WHERE is_retransmission) r
    ASOF LEFT JOIN acks a
        ON a.flow_id = r.flow_id AND a.data_from_client = r.from_client
        AND a.cum_ack >= r.sent_max
    ASOF LEFT JOIN peer_packets p
        ON p.flow_id = r.flow_id AND p.data_from_client = r.from_client
        AND p.ts_ns > r.ts_ns
),

islands AS (
    SELECT *,
        max(coalesce(done_ns, 9223372036854775807)) OVER (
            PARTITION BY flow_id, from_client ORDER BY frame
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS open_until
    FROM with_end
),

episodes AS (
    SELECT *,
        sum(CASE WHEN open_until IS NULL OR start_ns >= open_until THEN 1 ELSE 0 END) OVER (
            PARTITION BY flow_id, from_client ORDER BY frame) AS episode
    FROM islands
),

rounds AS (
    SELECT *,
        row_number() OVER (PARTITION BY flow_id, from_client, episode, rel_seq ORDER BY frame) AS round,
        min(start_ns) OVER (PARTITION BY flow_id, from_client, episode) AS episode_start_ns,
        CASE WHEN count(*) OVER w = count(done_ns) OVER w
             THEN max(done_ns) OVER w END AS episode_end_ns
    FROM episodes
    WINDOW w AS (PARTITION BY flow_id, from_client, episode)
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
        CASE WHEN m.segment <> 'hole_fill' THEN m.prev_frame END AS original_frame,
        m.hole_opened_ns,
        CASE WHEN m.ws_fast_retransmission THEN 'fast_retransmission'
             WHEN m.ws_spurious_retransmission THEN 'spurious_retransmission'
             WHEN m.ws_retransmission THEN 'retransmission'
             WHEN m.ws_out_of_order THEN 'out_of_order' END AS wireshark,
        r.episode,
        m.sent_max AS recovery_point,
        r.round,
        r.episode_start_ns,
        r.episode_end_ns
    FROM marked m
    LEFT JOIN rounds r USING (flow_id, frame)
)

SELECT * FROM final ORDER BY flow_id, frame
