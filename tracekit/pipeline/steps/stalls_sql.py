"""The stalls step's reads (steps/stalls.py): a capture's packets in chunks of
frames (their analysis and, apart, their windows), its timeouts'
retransmissions, its recovery episodes and its flows.

The packets come from `store.tcp_analysis` (every packet's dense columns)
rather than the view, which joins each row to its event row: the capture's
tcp_analysis is complete when this step runs, and the one event column the
pass needs, a retransmission by timeout, is read apart (RTO_SQL).
"""

READ_SQL = """
SELECT frame, ts_ns, flow_id, from_client,
       coalesce(segment = 'new' AND payload_bytes > 0, false) AS new_data,
       payload_bytes, inflight_bytes, coalesce(peer_inflight_bytes, 0) AS peer_inflight,
       coalesce(flight, -1) AS flight
FROM store.tcp_analysis
WHERE capture_id = $capture_id AND frame >= $lo AND frame < $hi
"""

# The window each packet advertised (-1: no ACK flag, or none), read apart and
# matched by frame: joined to the read above in the query, the reads of the
# mixed capture (2.9 M packets) took 0.50-0.63 CPU s against 0.43.
WINDOWS_SQL = """
SELECT frame, CASE WHEN tcp_flags & 16 = 16 THEN coalesce(tcp_window_bytes, -1) ELSE -1 END
       AS window
FROM packets WHERE capture_id = $capture_id AND frame >= $lo AND frame < $hi
"""

RTO_SQL = """
SELECT frame FROM store.tcp_events
WHERE capture_id = $capture_id AND retransmission_trigger = 'rto' ORDER BY frame
"""

EPISODES_SQL = """
SELECT DISTINCT flow_id, direction = 'c2s' AS d_client, episode_start_ns,
       coalesce(episode_end_ns, 9223372036854775807) AS episode_end_ns
FROM retransmissions WHERE capture_id = $capture_id AND kind = 'retransmission'
ORDER BY flow_id, d_client DESC, episode_start_ns
"""

FLOWS_SQL = """
SELECT flow_id, last_frame, coalesce(ack_ts_ns, -1) AS ack,
       coalesce(fin_c2s_ts_ns, 9223372036854775807) AS fin_c,
       coalesce(fin_s2c_ts_ns, 9223372036854775807) AS fin_s,
       coalesce(rst_ts_ns, 9223372036854775807) AS rst
FROM flows WHERE capture_id = $capture_id AND protocol = 'tcp'
"""
