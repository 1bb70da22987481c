-- recovery_rounds: each round trip of loss recovery and what it cost.
--
-- Step: capture.
-- Sources: retransmissions.
--
-- Parameters: $first, $last (the captures capture_id BETWEEN them).
-- Where the inputs come from: retransmissions (episode and round of every retransmission).
-- Definitions: an episode is one loss recovery of a flow direction (see
-- retransmissions.sql). Round k holds the retransmissions that sent their
-- bytes for the k-th time in the episode: round 1 repairs the first losses,
-- round 2 repairs retransmissions that were lost again, and so on; each
-- round costs at least one round trip (docs/timing-model.md).
-- Columns:
--   capture_id, flow_id, direction, episode, round
--   segments, bytes        retransmitted in this round
--   spurious_segments      of which proven unnecessary (D-SACK / Eifel)
--   triggers               the triggers seen, e.g. `fast,rto`
--   first_ts_ns, last_ts_ns  first and last retransmission of the round (near
--                          the receiver, round 1 starts when its hole opened)
--   cost_ns                until the next round began, or for the last round
--                          until the episode ended (NULL if it never did)
--   episode_rounds         rounds in the episode
--   episode_start_ns, episode_end_ns, episode_ns (its duration)
WITH r AS (
    SELECT * FROM retransmissions
    WHERE capture_id BETWEEN $first AND $last AND kind = 'retransmission'
),

per_round AS (
    SELECT
        capture_id, flow_id, direction, episode, round,
        count(*) AS segments,
        sum(payload_bytes) AS bytes,
        count(*) FILTER (spurious) AS spurious_segments,
        string_agg(DISTINCT trigger, ',' ORDER BY trigger) AS triggers,
        min(coalesce(CASE WHEN round = 1 THEN hole_opened_ns END, ts_ns)) AS first_ts_ns,
        max(ts_ns) AS last_ts_ns,
        any_value(episode_start_ns) AS episode_start_ns,
        any_value(episode_end_ns) AS episode_end_ns
    FROM r
    GROUP BY ALL
),

final AS (
    SELECT
        capture_id, flow_id, direction, episode, round, segments, bytes,
        spurious_segments, triggers, first_ts_ns, last_ts_ns,
        coalesce(lead(first_ts_ns) OVER w, episode_end_ns) - first_ts_ns AS cost_ns,
        max(round) OVER (PARTITION BY capture_id, flow_id, direction, episode) AS episode_rounds,
        episode_start_ns, episode_end_ns,
        episode_end_ns - episode_start_ns AS episode_ns
    FROM per_round
    WINDOW w AS (PARTITION BY capture_id, flow_id, direction, episode ORDER BY round)
)

SELECT * FROM final ORDER BY capture_id, flow_id, direction, episode, round
