-- The `tracekit retransmissions` view: per flow direction, what was sent again and why,
-- beside what Wireshark calls the same segments.
-- Parameters: $capture_id, $flow_id.
-- Sources: retransmissions.
SELECT capture_id AS capture, flow_id AS flow, direction,
    count(*) FILTER (kind = 'retransmission') AS retransmissions,
    count(*) FILTER (kind = 'retransmission' AND NOT seen_before) AS hole_fills,
    count(*) FILTER (trigger = 'fast') AS fast,
    count(*) FILTER (trigger = 'rto') AS rto,
    count(*) FILTER (trigger = 'tlp') AS tlp,
    count(*) FILTER (trigger = 'rack') AS rack,
    count(*) FILTER (trigger = 'other') AS other,
    count(*) FILTER (spurious) AS spurious,
    count(*) FILTER (kind = 'reordered') AS reordered,
    count(*) FILTER (kind = 'duplicate') AS duplicates,
    max(episode) AS episodes,
    max(round) AS max_rounds,
    count(*) FILTER (kind = 'retransmission' AND wireshark = 'out_of_order') AS wireshark_says_ooo
FROM retransmissions
WHERE ($capture_id IS NULL OR capture_id = $capture_id) AND ($flow_id IS NULL OR flow_id = $flow_id)
GROUP BY ALL
ORDER BY capture, flow, direction
