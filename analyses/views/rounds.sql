-- The `tracekit rounds` view: each round of loss recovery and what it cost.
-- Parameters: $capture_id, $flow_id.
-- Sources: recovery_rounds.
SELECT capture_id AS capture, flow_id AS flow, direction, episode, round, segments, bytes,
    spurious_segments AS spurious, triggers, round(cost_ns / 1e6, 3) AS cost_ms,
    episode_rounds, round(episode_ns / 1e6, 3) AS episode_ms
FROM recovery_rounds
WHERE ($capture_id IS NULL OR capture_id = $capture_id) AND ($flow_id IS NULL OR flow_id = $flow_id)
ORDER BY capture, flow, direction, episode, round
