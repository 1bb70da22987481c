"""The store's tables, declared once: name, SQL type, meaning.

The CREATE TABLE statements, the Arrow schema used to load packets and the
README's table reference are all derived from these declarations, so they
cannot disagree. Names are the contract of docs/architecture.md; units are in the names.
"""

from typing import NamedTuple

from .schema_rates import BOTTLENECK


class Column(NamedTuple):
    name: str
    sql: str
    doc: str


CAPTURES = (
    Column("capture_id", "INTEGER PRIMARY KEY", "Capture number in this database, from 1"),
    Column("path", "VARCHAR NOT NULL", "Absolute path of the file when it was ingested"),
    Column("file_name", "VARCHAR NOT NULL", "Base name of the file"),
    Column("sha256", "VARCHAR NOT NULL UNIQUE", "SHA-256 of the whole file; re-ingesting the same content is refused"),
    Column("size_bytes", "BIGINT NOT NULL", "File size"),
    Column("format", "VARCHAR NOT NULL", "`pcap` or `pcapng`"),
    Column("byte_order", "VARCHAR NOT NULL", "`little`, `big` (pcapng sections may mix: `big/little`)"),
    Column("link_types", "INTEGER[] NOT NULL", "Distinct LINKTYPE_ values of the interfaces"),
    Column("snaplen", "BIGINT NOT NULL", "Snapshot length (largest over interfaces)"),
    Column("ts_resolution", "VARCHAR NOT NULL", "Timestamp resolution of the file (`1e-6`, `1e-9`, `2^-20`...; several joined by `,`)"),
    Column("sections", "INTEGER NOT NULL", "pcapng sections (1 for pcap)"),
    Column("interfaces", "INTEGER NOT NULL", "Interfaces described (1 for pcap)"),
    Column("packets", "BIGINT NOT NULL", "Packet records read (= rows in `packets`)"),
    Column("first_ts_ns", "BIGINT", "Smallest packet timestamp, ns since the epoch"),
    Column("last_ts_ns", "BIGINT", "Largest packet timestamp, ns since the epoch"),
    Column("skipped_blocks", "MAP(VARCHAR, BIGINT)", "pcapng blocks that carry no packets, by kind (statistics, name resolution...)"),
    Column("decode_status_counts", "MAP(VARCHAR, BIGINT)", "Packets not decoded through the transport header, per `packets.decode_status`"),
    Column("read_stop", "VARCHAR", "NULL if the whole file was read; else `truncated` or `corrupt`"),
    Column("read_stop_offset", "BIGINT", "Byte offset where reading stopped"),
    Column("read_stop_message", "VARCHAR", "What was wrong there"),
    Column("labels", "MAP(VARCHAR, VARCHAR)", "`--label KEY=VALUE` given at ingest (experiment factors)"),
    Column("ingested_at", "TIMESTAMPTZ NOT NULL", "When the file was ingested"),
    Column("tracekit_version", "VARCHAR NOT NULL", "Version of tracekit that ingested it"),
    Column("payloads_kept", "BOOLEAN NOT NULL DEFAULT false", "Ingest kept the TLS payload bytes (`payloads`): analyses never read the file again (false: a store from before, whose TLS analysis reads the capture file)"),
)

INTERFACES = (
    Column("capture_id", "INTEGER NOT NULL", "Capture"),
    Column("interface_id", "INTEGER NOT NULL", "Interface index over the whole file (pcapng: all sections in order)"),
    Column("section", "INTEGER NOT NULL", "pcapng section number from 0"),
    Column("link_type", "INTEGER NOT NULL", "LINKTYPE_ value"),
    Column("link_type_name", "VARCHAR NOT NULL", "Its name; tracekit decodes Ethernet, SLL, SLL2, raw IP, NULL, LOOP, PPP"),
    Column("snaplen", "BIGINT NOT NULL", "Snapshot length (0 = unlimited in pcapng; a 32-bit field)"),
    Column("ts_resolution", "VARCHAR NOT NULL", "Timestamp unit (`1e-6`, `1e-9`, `2^-k`)"),
    Column("ts_offset_s", "BIGINT NOT NULL", "pcapng if_tsoffset, seconds added to every timestamp"),
    Column("name", "VARCHAR", "pcapng if_name"),
    Column("description", "VARCHAR", "pcapng if_description"),
    Column("packets", "BIGINT NOT NULL", "Packets captured on it"),
)

PACKETS = (
    Column("capture_id", "INTEGER NOT NULL", "Capture"),
    Column("frame", "BIGINT NOT NULL", "Record number in the file from 1 (Wireshark's frame.number); the order of record"),
    Column("ts_ns", "BIGINT", "Timestamp, ns since the epoch (may step backwards in real captures; order by `frame`); NULL if the record's time does not fit int64 ns (before 1677 or after 2262, decode_status `timestamp_out_of_range`)"),
    Column("file_offset", "BIGINT NOT NULL", "Byte offset of the record in the file"),
    Column("interface_id", "INTEGER", "Interface (see `interfaces`); NULL if the pcapng record names an undescribed one"),
    Column("link_type", "INTEGER", "LINKTYPE_ of that interface"),
    Column("captured_bytes", "BIGINT NOT NULL", "Bytes in the file (frame.cap_len)"),
    Column("wire_bytes", "BIGINT NOT NULL", "Bytes on the wire (frame.len: up to 2^32 - 1 as the file says)"),
    Column("truncated", "BOOLEAN NOT NULL", "Cut by the snapshot length (captured < wire); fields that were captured are kept"),
    Column("decode_status", "VARCHAR", "NULL if decoded through the transport header; else why not (see Decode status)"),
    Column("ethertype", "INTEGER", "EtherType / SLL protocol after any VLAN tags"),
    Column("vlan_outer", "INTEGER", "First 802.1Q/802.1ad VLAN id"),
    Column("vlan_inner", "INTEGER", "Second (QinQ) VLAN id"),
    Column("ip_version", "TINYINT", "4 or 6; NULL if not IP"),
    Column("src_addr", "VARCHAR", "Source address as text (RFC 5952 for IPv6)"),
    Column("dst_addr", "VARCHAR", "Destination address as text"),
    Column("ip_ttl", "UTINYINT", "IPv4 TTL / IPv6 hop limit"),
    Column("ip_tos", "UTINYINT", "IPv4 TOS / IPv6 traffic class (DSCP and ECN)"),
    Column("ip_id", "INTEGER", "IPv4 identification"),
    Column("ip_header_bytes", "INTEGER", "IP header incl. options / IPv6 extension headers"),
    Column("ip_total_bytes", "INTEGER", "IP packet length from the header (from the wire length when the header says 0)"),
    Column("ip_dont_fragment", "BOOLEAN", "IPv4 DF"),
    Column("ip_more_fragments", "BOOLEAN", "IPv4 MF / IPv6 fragment header M flag"),
    Column("ip_fragment_offset", "INTEGER", "Fragment offset in bytes; > 0 means no transport header in this packet"),
    Column("ipv6_flow_label", "INTEGER", "IPv6 flow label"),
    Column("ipv6_ext_headers", "TINYINT", "IPv6 extension headers walked"),
    Column("protocol", "UTINYINT", "Transport protocol number (6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6...)"),
    Column("src_port", "INTEGER", "TCP/UDP source port"),
    Column("dst_port", "INTEGER", "TCP/UDP destination port"),
    Column("flow_id", "BIGINT", "Flow within the capture (see `flows`); NULL for non-TCP/UDP"),
    Column("from_client", "BOOLEAN", "Sent by the flow's client"),
    Column("tcp_seq", "UINTEGER", "Raw sequence number (tcp.seq_raw)"),
    Column("tcp_ack", "UINTEGER", "Raw acknowledgment number (tcp.ack_raw)"),
    Column("tcp_flags", "USMALLINT", "12 flag bits: FIN 0x01 SYN 0x02 RST 0x04 PSH 0x08 ACK 0x10 URG 0x20 ECE 0x40 CWR 0x80 AE 0x100"),
    Column("tcp_header_bytes", "TINYINT", "TCP header length incl. options"),
    Column("tcp_window", "USMALLINT", "Window field as sent (tcp.window_size_value)"),
    Column("tcp_window_shift", "TINYINT", "Window scale applied: >= 0 known, -1 unknown (handshake not seen, or a SYN), -2 not scaled"),
    Column("tcp_window_bytes", "BIGINT", "Window in bytes: tcp_window << shift when the shift is known, else tcp_window (tcp.window_size)"),
    Column("tcp_checksum", "USMALLINT", "Checksum as sent (not verified)"),
    Column("tcp_urgent_pointer", "USMALLINT", "Urgent pointer"),
    Column("tcp_mss", "INTEGER", "MSS option (SYNs)"),
    Column("tcp_wscale", "TINYINT", "Window scale option shift (SYNs)"),
    Column("tcp_sack_permitted", "BOOLEAN", "SACK-permitted option present"),
    Column("tcp_sack_left", "UINTEGER[]", "SACK blocks' left edges, raw (up to 4); NULL without a SACK option"),
    Column("tcp_sack_right", "UINTEGER[]", "SACK blocks' right edges, raw"),
    Column("tcp_tsval", "UINTEGER", "Timestamps option TSval"),
    Column("tcp_tsecr", "UINTEGER", "Timestamps option TSecr"),
    Column("tcp_fast_open", "BOOLEAN", "TCP Fast Open option present"),
    Column("payload_bytes", "INTEGER", "TCP/UDP payload length from the IP lengths (not the captured bytes)"),
    Column("udp_length", "INTEGER", "UDP length field"),
    Column("quic_type", "VARCHAR", "QUIC long header: initial, 0rtt, handshake, retry, version_negotiation"),
    Column("quic_version", "UINTEGER", "QUIC version of a long header"),
    Column("quic_dcid_len", "UTINYINT", "Destination connection id length"),
    Column("quic_scid_len", "UTINYINT", "Source connection id length"),
)

FLOWS = (
    Column("capture_id", "INTEGER NOT NULL", "Capture"),
    Column("flow_id", "BIGINT NOT NULL", "Flow within the capture, from 0 in order of first packet"),
    Column("protocol", "VARCHAR NOT NULL", "`tcp` or `udp`"),
    Column("ip_version", "TINYINT NOT NULL", "4 or 6"),
    Column("client_addr", "VARCHAR NOT NULL", "Client: TCP SYN sender (else SYN-ACK receiver, else first sender); UDP first sender"),
    Column("client_port", "INTEGER NOT NULL", "Client port"),
    Column("server_addr", "VARCHAR NOT NULL", "Server address"),
    Column("server_port", "INTEGER NOT NULL", "Server port"),
    Column("first_frame", "BIGINT NOT NULL", "First packet's frame"),
    Column("last_frame", "BIGINT NOT NULL", "Last packet's frame"),
    Column("first_ts_ns", "BIGINT NOT NULL", "First packet's timestamp"),
    Column("last_ts_ns", "BIGINT NOT NULL", "Last packet's timestamp"),
    Column("packets_c2s", "BIGINT NOT NULL", "Packets client to server"),
    Column("packets_s2c", "BIGINT NOT NULL", "Packets server to client"),
    Column("payload_bytes_c2s", "BIGINT NOT NULL", "Transport payload bytes client to server (retransmissions included)"),
    Column("payload_bytes_s2c", "BIGINT NOT NULL", "Transport payload bytes server to client"),
    Column("wire_bytes_c2s", "BIGINT NOT NULL", "Frame bytes on the wire client to server"),
    Column("wire_bytes_s2c", "BIGINT NOT NULL", "Frame bytes on the wire server to client"),
    Column("syn_ts_ns", "BIGINT", "TCP: first SYN from the client"),
    Column("syn_count", "INTEGER", "TCP: SYNs from the client (more than 1: SYN retransmission)"),
    Column("synack_ts_ns", "BIGINT", "TCP: first SYN-ACK from the server"),
    Column("synack_count", "INTEGER", "TCP: SYN-ACKs from the server"),
    Column("ack_ts_ns", "BIGINT", "TCP: first segment after the SYN with ACK and without SYN (the client's ACK of the SYN-ACK; a RST-ACK if refused)"),
    Column("handshake_rtt_ns", "BIGINT", "TCP: ack_ts_ns - the last SYN before it: the round trip the handshake saw wherever the capture was taken (Wireshark's tcp.analysis.initial_rtt)"),
    Column("client_mss", "INTEGER", "MSS option in the client's SYN"),
    Column("server_mss", "INTEGER", "MSS option in the server's SYN-ACK"),
    Column("client_wscale", "TINYINT", "Window scale in the client's SYN"),
    Column("server_wscale", "TINYINT", "Window scale in the server's SYN-ACK"),
    Column("client_sack_permitted", "BOOLEAN", "SACK-permitted in the client's SYN"),
    Column("server_sack_permitted", "BOOLEAN", "SACK-permitted in the server's SYN-ACK"),
    Column("fast_open", "BOOLEAN", "TCP Fast Open option on the SYN or SYN-ACK"),
    Column("fin_c2s_ts_ns", "BIGINT", "TCP: first FIN from the client"),
    Column("fin_s2c_ts_ns", "BIGINT", "TCP: first FIN from the server"),
    Column("rst_ts_ns", "BIGINT", "TCP: first RST either way"),
)

INGESTS_IN_PROGRESS = (
    Column("capture_id", "INTEGER NOT NULL", "Capture id an unfinished ingest is appending rows under"),
    Column("path", "VARCHAR NOT NULL", "The file"),
    Column("started_at", "TIMESTAMPTZ NOT NULL", "When"),
)

ANALYSES_IN_PROGRESS = (
    Column("analysis", "VARCHAR NOT NULL", "Analysis an unfinished `tracekit analyze` is appending rows for"),
    Column("capture_id", "INTEGER NOT NULL", "Capture"),
    Column("started_at", "TIMESTAMPTZ NOT NULL", "When"),
)

# Derived by `tracekit analyze` (tracekit/pipeline/steps/): one row per TCP packet.
_WS = "Wireshark 4.0's tcp.analysis."
TCP_ANALYSIS = (
    Column("capture_id", "INTEGER NOT NULL", "Capture"),
    Column("frame", "BIGINT NOT NULL", "Packet (`packets.frame`)"),
    Column("flow_id", "BIGINT NOT NULL", "Flow"),
    Column("from_client", "BOOLEAN NOT NULL", "Sent by the flow's client"),
    Column("ts_ns", "BIGINT NOT NULL", "Timestamp, ns since the epoch"),
    Column("rel_seq", "BIGINT NOT NULL", "Sequence number relative to the sender's ISN (tcp.seq)"),
    Column("rel_ack", "BIGINT", "Acknowledgment number relative to the receiver's ISN (tcp.ack); NULL without ACK"),
    Column("payload_bytes", "INTEGER NOT NULL", "TCP payload bytes (tcp.len)"),
    Column("rel_end", "BIGINT NOT NULL", "rel_seq + payload, SYN and FIN counting one (tcp.nxtseq when that is not rel_seq)"),
    Column("ws_retransmission", "BOOLEAN NOT NULL", _WS + "retransmission (set on the fast and spurious kinds too, as tshark prints it)"),
    Column("ws_fast_retransmission", "BOOLEAN NOT NULL", _WS + "fast_retransmission"),
    Column("ws_spurious_retransmission", "BOOLEAN NOT NULL", _WS + "spurious_retransmission"),
    Column("ws_out_of_order", "BOOLEAN NOT NULL", _WS + "out_of_order"),
    Column("ws_lost_segment", "BOOLEAN NOT NULL", _WS + "lost_segment (previous segment not captured)"),
    Column("ws_ack_lost_segment", "BOOLEAN NOT NULL", _WS + "ack_lost_segment (ACKed segment not captured)"),
    Column("ws_duplicate_ack", "BOOLEAN NOT NULL", _WS + "duplicate_ack"),
    Column("ws_duplicate_ack_num", "INTEGER", _WS + "duplicate_ack_num"),
    Column("ws_duplicate_ack_frame", "BIGINT", _WS + "duplicate_ack_frame (the ACK it repeats)"),
    Column("ws_zero_window", "BOOLEAN NOT NULL", _WS + "zero_window"),
    Column("ws_zero_window_probe", "BOOLEAN NOT NULL", _WS + "zero_window_probe"),
    Column("ws_zero_window_probe_ack", "BOOLEAN NOT NULL", _WS + "zero_window_probe_ack"),
    Column("ws_window_full", "BOOLEAN NOT NULL", _WS + "window_full"),
    Column("ws_window_update", "BOOLEAN NOT NULL", _WS + "window_update"),
    Column("ws_keep_alive", "BOOLEAN NOT NULL", _WS + "keep_alive"),
    Column("ws_keep_alive_ack", "BOOLEAN NOT NULL", _WS + "keep_alive_ack"),
    Column("ws_bytes_in_flight", "BIGINT", _WS + "bytes_in_flight (segments with payload)"),
    Column("ws_acks_frame", "BIGINT", _WS + "acks_frame: the segment whose end this ACK equals"),
    Column("ws_ack_rtt_ns", "BIGINT", _WS + "ack_rtt in ns (tshark leaves a 0 ns RTT out; it is kept here)"),
    Column("ws_rto_ns", "BIGINT", _WS + "rto: time since the oldest unacknowledged segment (retransmissions)"),
    Column("ws_rto_frame", "BIGINT", _WS + "rto_frame"),
    Column("segment", "VARCHAR", "tracekit's class of a segment with payload/SYN/FIN: `new`, `repeat` (bytes seen before here: a retransmission), `hole_fill` (only bytes never seen here: the retransmission of a segment lost before this vantage), `reordered` (a late original), `duplicate` (a network copy), `keep_alive` (one byte at the highest byte sent minus one, with everything acknowledged: a keep-alive probe, not a retransmission); NULL for pure ACKs"),
    Column("gap_bytes", "BIGINT", "`new` segment starting beyond the highest byte seen: bytes skipped (a hole)"),
    Column("retransmission_trigger", "VARCHAR", "`repeat`/`hole_fill`: `fast`, `rto`, `tlp`, `rack` or `other` (see Definitions)"),
    Column("silence_before_ns", "BIGINT", "`repeat`/`hole_fill`: time since the sender last sent or had data newly acknowledged"),
    Column("peer_dupacks", "INTEGER", "`repeat`/`hole_fill`: duplicate ACKs the peer had sent for the current ACK number"),
    Column("spurious", "BOOLEAN", "`repeat`/`hole_fill` proven unnecessary: D-SACK (RFC 2883) or Eifel timestamps (RFC 3522)"),
    Column("recovery_point", "BIGINT", "A segment that is not `new`: the highest rel_end sent before it (for a retransmission, RFC 6675's recovery point)"),
    Column("recovered_ns", "BIGINT", "`repeat`/`hole_fill`: the first ACK from the peer after it that covers its recovery point; NULL if none was captured"),
    Column("hole_opened_ns", "BIGINT", "`hole_fill`/`reordered`: when the segment beyond its hole was seen (the loss became visible here)"),
    Column("dsack", "BOOLEAN NOT NULL", "This packet's first SACK block is a D-SACK"),
    Column("inflight_bytes", "BIGINT NOT NULL", "Sender's bytes in flight after this packet, SACK-aware: snd_max - snd_una - SACKed"),
    Column("peer_inflight_bytes", "BIGINT", "The other direction's bytes in flight after this packet (an ACK lowers it)"),
    Column("acked_bytes", "BIGINT", "Bytes this ACK newly acknowledges cumulatively"),
    Column("rtt_ns", "BIGINT", "RTT sample of this ACK: newest newly acknowledged segment, Karn's rule (RFC 6298)"),
    Column("ts_rtt_ns", "BIGINT", "RTT sample from this ACK's TSecr (RFC 7323): time since that TSval was first sent"),
    Column("flight", "BIGINT", "`new` segment: flight (round trip of sending) of its direction, from 1"),
    Column("acked_segments", "BIGINT", "ACK advancing the cumulative ACK: new data segments it newly covers"),
    Column("ack_delay_ns", "BIGINT", "Such an ACK: time since the newest data segment it covers was seen"),
    Column("ack_gap_ns", "BIGINT", "A packet with ACK (not a SYN): time since the previous one of the same direction"),
    Column("window_full_segments", "BIGINT", "Such a packet: the other direction's segments Wireshark called window-full since this side's previous ACK"),
)

# Kept only for packets with an event (a few %) in `tcp_events`, narrow sparse facts; the view
# `tcp_analysis` joins them to `store.tcp_analysis`, every packet's other columns.
EVENT_COLUMNS = tuple(c.name for c in TCP_ANALYSIS[9:40] if c.name not in (
    "ws_bytes_in_flight", "ws_acks_frame", "ws_ack_rtt_ns", "segment", "gap_bytes"))
TCP_EVENTS = TCP_ANALYSIS[:2] + tuple(c for c in TCP_ANALYSIS if c.name in EVENT_COLUMNS)
SPLIT = {"tcp_analysis": ("tcp_events", EVENT_COLUMNS)}  # table -> (its facts, their columns)

# Derived by `tracekit analyze` (tracekit/kernels/segments.py): one row per flight.
FLIGHTS = (
    Column("capture_id", "INTEGER NOT NULL", "Capture"),
    Column("flow_id", "BIGINT NOT NULL", "TCP flow"),
    Column("direction", "VARCHAR NOT NULL", "`c2s` or `s2c`"),
    Column("flight", "BIGINT NOT NULL", "Flight of the direction, from 1 (`tcp_analysis.flight`)"),
    Column("start_ns", "BIGINT NOT NULL", "Its first new segment"),
    Column("end_ns", "BIGINT NOT NULL", "Its last new segment"),
    Column("duration_ns", "BIGINT", "Until the next flight began (NULL for the last)"),
    Column("segments", "BIGINT NOT NULL", "New segments sent in it (a SYN or FIN counts)"),
    Column("bytes", "BIGINT NOT NULL", "New payload bytes sent in it"),
    Column("peak_inflight_bytes", "BIGINT NOT NULL", "Largest bytes in flight after one of its new segments"),
    Column("growth", "DOUBLE", "bytes / the previous flight's bytes (NULL for the first, or after an empty one)"),
    Column("retransmissions", "BIGINT NOT NULL", "Retransmissions sent while it was the latest flight"),
    Column("peer_window_bytes", "BIGINT", "The receive window the peer last advertised before it began"),
    Column("delivery_rate_bps", "BIGINT", "Largest delivery rate the ACKs measured while it was the latest flight, as Linux's tcpi_delivery_rate: bytes newly delivered since a segment was sent / the time since the delivery before it (a sender-side view: near the receiver flights are single segments); bit/s"),
    Column("queued", "BOOLEAN NOT NULL", "An RTT sample while it was the latest flight was >= 1.25 x the direction's smallest so far: a queue on the path"),
)

# Derived by `tracekit analyze` (tracekit/pipeline/steps/tls.py): TLS over TCP.
TLS_MESSAGES = (
    Column("capture_id", "INTEGER NOT NULL", "Capture"),
    Column("flow_id", "BIGINT NOT NULL", "TCP flow"),
    Column("direction", "VARCHAR NOT NULL", "`c2s` or `s2c`"),
    Column("message", "VARCHAR NOT NULL", "Plaintext handshake message (`client_hello`, `server_hello`, `hello_retry_request`, `certificate`, `finished`...), `change_cipher_spec`, `alert`, or an encrypted record: `encrypted_handshake` (TLS 1.2 Finished), `application_data` (TLS 1.2), `encrypted` (TLS 1.3: handshake or data)"),
    Column("stream_offset", "BIGINT NOT NULL", "Offset of its first byte in the direction's byte stream"),
    Column("first_frame", "BIGINT NOT NULL", "Segment carrying its first byte"),
    Column("frame", "BIGINT NOT NULL", "Segment that completed it"),
    Column("ts_ns", "BIGINT NOT NULL", "Time of that segment"),
    Column("record_type", "VARCHAR NOT NULL", "TLS record content type"),
    Column("version", "VARCHAR", "ServerHello: negotiated version (supported_versions, else legacy_version)"),
    Column("offered_versions", "VARCHAR", "ClientHello: supported_versions offered"),
    Column("sni", "VARCHAR", "ClientHello: server_name"),
    Column("alpn", "VARCHAR", "ClientHello: protocols offered; TLS 1.2 ServerHello: chosen"),
    Column("psk", "BOOLEAN", "Hello: pre_shared_key extension present (offered / accepted)"),
    Column("early_data", "BOOLEAN", "ClientHello: early_data (0-RTT) extension"),
    Column("resumed", "BOOLEAN", "ServerHello: session resumed (PSK accepted, or TLS 1.2 session id echoed)"),
    Column("complete", "BOOLEAN NOT NULL", "false on the last row of a stream cut by the snaplen or a capture gap"),
)

# Derived by `tracekit analyze` (tracekit/kernels/segments.py): TCP request/response exchanges.
EXCHANGES = (
    Column("capture_id", "INTEGER NOT NULL", "Capture"),
    Column("flow_id", "BIGINT NOT NULL", "TCP flow"),
    Column("exchange", "BIGINT NOT NULL", "Exchange of the connection, from 1: it begins with client data that follows server data (or is the flow's first data) and lasts until the next such"),
    Column("request_first_byte_ns", "BIGINT NOT NULL", "Its first client data packet"),
    Column("request_last_byte_ns", "BIGINT NOT NULL", "Its last client data packet"),
    Column("response_first_byte_ns", "BIGINT", "Its first server data packet (NULL: no response)"),
    Column("response_last_byte_ns", "BIGINT", "Its last server data packet"),
    Column("end_ns", "BIGINT NOT NULL", "Its last data packet either way"),
    Column("bytes_up", "BIGINT NOT NULL", "Unique client bytes (highest end - lowest start of its client data)"),
    Column("bytes_down", "BIGINT NOT NULL", "Unique server bytes (0 without a response)"),
    Column("packets_up", "BIGINT NOT NULL", "Client data packets (retransmissions and copies included)"),
    Column("packets_down", "BIGINT NOT NULL", "Server data packets"),
)

# Limitation states of a flow direction (tracekit/pipeline/steps/stalls.py decides them).
STALL_STATES = ("handshake", "closed", "application_limited", "rto_wait", "loss_recovery",
                "zero_window", "receive_window_limited", "pacing_idle", "slow_start",
                "congestion_limited")

# Derived by `tracekit analyze` (tracekit/pipeline/steps/stalls.py): limitation states.
STALLS = (
    Column("capture_id", "INTEGER NOT NULL", "Capture"),
    Column("flow_id", "BIGINT NOT NULL", "TCP flow"),
    Column("direction", "VARCHAR NOT NULL", "Data direction: `c2s` or `s2c`"),
    Column("state", "VARCHAR NOT NULL", "`handshake`, `closed`, `application_limited`, `rto_wait`, `loss_recovery`, `zero_window`, `receive_window_limited`, `pacing_idle`, `slow_start`, `congestion_limited` (see Limitation states); `receive_window_limited` where the capture is at the data's receiver: the sender sat at the window edge it could have seen (the receiver's ACK + window one round trip of the sender's leg before), from that segment to the next new one, ranked above `application_limited` and `loss_recovery`; there, after the receiver's ACK drained the direction, `application_limited` only where the sender's next new data came later than a turnaround + 1 ms after it or answered the receiver's own data (else the sender's data was on its way: the state below)"),
    Column("start_ns", "BIGINT NOT NULL", "Start of the run"),
    Column("end_ns", "BIGINT NOT NULL", "End of the run (the next run's start)"),
    Column("duration_ns", "BIGINT NOT NULL", "Its duration; per flow and direction they add up to the flow's duration"),
    Column("busy", "BOOLEAN NOT NULL", "Data was in flight throughout (tcp_info's busy time)"),
    Column("packets", "BIGINT NOT NULL", "Packets (either way) that started an interval of the run"),
    Column("max_inflight_bytes", "BIGINT NOT NULL", "Largest bytes in flight of the direction during the run"),
)

# Derived by `tracekit analyze` (tracekit/pipeline/steps/phases.py) over the whole store.
REQUEST_PHASES = (
    Column("request_key", "VARCHAR NOT NULL", "Request (`requests.request_key`)"),
    Column("capture_id", "INTEGER", "Capture of its flow (NULL: no flow)"),
    Column("flow_id", "BIGINT", "Its flow"),
    Column("a_ns", "BIGINT NOT NULL", "First request byte at the capture point (clamped into [start, end]; start without a flow)"),
    Column("b_ns", "BIGINT NOT NULL", "Last request byte (at least a_ns)"),
    Column("c_ns", "BIGINT NOT NULL", "First response byte (at least b_ns)"),
    Column("d_ns", "BIGINT NOT NULL", "Last response byte (at least c_ns)"),
    *(Column(f"{phase}_{state}_ns", "BIGINT",
             f"Time the {who} data's limitation state was `{state}` within [{lo}, {hi}] (`stalls`)")
      for phase, who, lo, hi in (("up", "client's", "a", "b"), ("down", "server's", "c", "d"))
      for state in STALL_STATES),
    Column("gap_loss_ns", "BIGINT", "Client vantage or QUIC: the gaps between the server's data packets within [c, d] that began in loss recovery"),
    Column("gap_receiver_ns", "BIGINT", "... that began while the client's receive window held the sender"),
    Column("gap_short_ns", "BIGINT", "... that followed a segment shorter than full-sized (the sender had no full segment to send)"),
    Column("gap_clocked_ns", "BIGINT", "... after a full-sized segment, up to 1.25 R after the client's last packet before the gap ended (the ACK clock: a sender held by its window sends when the ACK reaches it)"),
    Column("gap_beyond_ns", "BIGINT", "... after a full-sized segment, beyond that (the sender waited for something the ACK clock does not explain)"),
    Column("loss_rounds", "STRUCT(episode BIGINT, round BIGINT, ns BIGINT)[]", "Time in download loss recovery within [c, d], by the recovery round each stretch began in (`recovery_rounds`)"),
)

# Written by `tracekit tls-keys` (tracekit/pipeline/steps/keylog.py).
TLS_DECRYPTED = (
    Column("capture_id", "INTEGER NOT NULL", "Capture"),
    Column("flow_id", "BIGINT NOT NULL", "TCP flow"),
    Column("direction", "VARCHAR NOT NULL", "`c2s` or `s2c`"),
    Column("frame", "BIGINT NOT NULL", "Frame in which tshark completed it"),
    Column("ts_ns", "BIGINT NOT NULL", "Its time"),
    Column("message", "VARCHAR NOT NULL", "Decrypted handshake message (`encrypted_extensions`, `certificate`, `finished`...) or `application_data`"),
)

EVENT_LOGS = (
    Column("log_id", "INTEGER PRIMARY KEY", "Event log number in this database, from 1"),
    Column("path", "VARCHAR NOT NULL", "Absolute path of the file when it was ingested"),
    Column("file_name", "VARCHAR NOT NULL", "Base name of the file"),
    Column("sha256", "VARCHAR NOT NULL UNIQUE", "SHA-256 of the file; re-ingesting the same content is refused"),
    Column("size_bytes", "BIGINT NOT NULL", "File size"),
    Column("format", "VARCHAR NOT NULL", "`jsonl`, `csv`, `qlog`, `queqiao`, `queqiaobench`, `queqiao-tsv`, `prometheus`, `har` or `otlp`"),
    Column("records", "BIGINT NOT NULL", "Records read (lines, CSV rows, qlog events), blank lines not counted"),
    Column("events", "BIGINT NOT NULL", "Rows in `events` (records minus malformed)"),
    Column("malformed", "BIGINT NOT NULL", "Records skipped as malformed"),
    Column("malformed_lines", "BIGINT[]", "Line (record) numbers of the first 1,000 malformed records"),
    Column("first_problem", "VARCHAR", "What was wrong with the first malformed record"),
    Column("private_fields_dropped", "BIGINT NOT NULL", "Identifier fields (account, device, user...) dropped at ingest"),
    Column("negative_deltas_skipped", "BIGINT NOT NULL", "Queqiao counters that fell where the interval's change is unknown (a QUIC sum or lane counter: delta stored as null)"),
    Column("clock_offset_ns", "BIGINT NOT NULL", "Added to every timestamp of the log to put it on the captures' clock"),
    Column("clock_source", "VARCHAR NOT NULL", "`same_host` (0), `given` (--clock-offset), `estimated` (tracekit clock), `trace_start` (a qlog or lane trace without a wall-clock reference, or a file with no time of its own ingested without --time: times count from its start until placed) or `stated` (a file with no time of its own, stamped with --time)"),
    Column("clock_uncertainty_ns", "BIGINT", "Half-width of the interval the offset is known to lie in (estimated)"),
    Column("first_ts_ns", "BIGINT", "Smallest event timestamp (after the offset)"),
    Column("last_ts_ns", "BIGINT", "Largest event timestamp (after the offset)"),
    Column("labels", "MAP(VARCHAR, VARCHAR)", "`--label KEY=VALUE` given at ingest"),
    Column("ingested_at", "TIMESTAMPTZ NOT NULL", "When the file was ingested"),
    Column("updated_at", "TIMESTAMPTZ NOT NULL", "Last change (ingest or a new clock offset); analyses built before it are redone"),
    Column("tracekit_version", "VARCHAR NOT NULL", "Version of tracekit that ingested it"),
    Column("counter_resets", "BIGINT NOT NULL DEFAULT 0", "Queqiao process counters that fell (a restart): delta stored as the new value"),
)

EVENTS = (
    Column("log_id", "INTEGER NOT NULL", "Event log (see `event_logs`)"),
    Column("line", "BIGINT NOT NULL", "Line of the record in its file (CSV: row's line; qlog: event number)"),
    Column("ts_ns", "BIGINT NOT NULL", "Timestamp on the captures' clock: `log_ts_ns + clock_offset_ns`, ns since the epoch"),
    Column("log_ts_ns", "BIGINT NOT NULL", "Timestamp as the log wrote it, ns since the epoch"),
    Column("source", "VARCHAR NOT NULL", "Format of the log (`event_logs.format`)"),
    Column("kind", "VARCHAR NOT NULL", "What happened (see Event kinds)"),
    Column("run", "VARCHAR", "Run the event belongs to (`run` field)"),
    Column("request", "VARCHAR", "Request id (`request` field)"),
    Column("stream", "VARCHAR", "Audio/chunk stream id (`stream` field)"),
    Column("local_addr", "VARCHAR", "Flow hint: the logging host's address"),
    Column("local_port", "INTEGER", "Flow hint: the logging host's port (matches `flows.client_port` for a client)"),
    Column("remote_addr", "VARCHAR", "Flow hint: the peer's address"),
    Column("remote_port", "INTEGER", "Flow hint: the peer's port"),
    Column("fields", "JSON NOT NULL", "The whole record as written (private identifiers removed); query with `fields->>'name'`"),
)

ANALYSIS_RUNS = (
    Column("analysis", "VARCHAR NOT NULL", "Derived table"),
    Column("capture_id", "INTEGER NOT NULL", "Capture it was built for; 0 for an analysis built over the whole store (events and all captures)"),
    Column("version", "VARCHAR NOT NULL", "Hash of the code that built it; a change rebuilds the table"),
    Column("rows", "BIGINT NOT NULL", "Rows written for this capture"),
    Column("seconds", "DOUBLE NOT NULL", "Time taken"),
    Column("built_at", "TIMESTAMPTZ NOT NULL", "When"),
    Column("error", "VARCHAR", "NULL if built; else why this analysis could not process this capture (it is left out of the analyses after it)"),
)

PAYLOADS = (
    Column("capture_id", "INTEGER NOT NULL", "Capture"),
    Column("frame", "BIGINT NOT NULL", "The packet (`packets.frame`)"),
    Column("payload", "BLOB NOT NULL", "Its captured TCP payload bytes"),
)

TABLES = {"captures": CAPTURES, "interfaces": INTERFACES, "packets": PACKETS, "flows": FLOWS,
          "payloads": PAYLOADS,
          "ingests_in_progress": INGESTS_IN_PROGRESS,
          "analyses_in_progress": ANALYSES_IN_PROGRESS, "analysis_runs": ANALYSIS_RUNS,
          "tls_decrypted": TLS_DECRYPTED, "event_logs": EVENT_LOGS, "events": EVENTS}
# Tables `tracekit analyze` builds in code (SQL-built ones: their analyses/*.sql header).
DERIVED = {"tcp_analysis": TCP_ANALYSIS, "tcp_events": TCP_EVENTS, "flights": FLIGHTS, "exchanges": EXCHANGES,
           "tls_messages": TLS_MESSAGES,
           "stalls": STALLS, "request_phases": REQUEST_PHASES, "bottleneck": tuple(Column(*c) for c in BOTTLENECK)}

# Decode status codes (packets.decode_status), documented in the README.
DECODE_STATUS_DOC = {
    "link_type_unsupported": "tracekit does not decode the interface's link type",
    "no_such_interface": "a pcapng packet names an interface its section never described",
    "truncated_link": "captured bytes end inside the link-layer header",
    "not_ip": "the link layer carries something other than IP (ARP, LLDP, ...)",
    "truncated_ip": "captured bytes end inside the IP header (or its extension headers)",
    "bad_ip_header": "impossible IP version or header length",
    "ip_fragment": "a non-first IP fragment: it has no transport header",
    "ipv6_extension_limit": "more than 8 IPv6 extension headers",
    "truncated_tcp": "captured bytes end inside the TCP header",
    "bad_tcp_header": "TCP data offset < 5 words or beyond the IP payload",
    "bad_tcp_options": "a TCP option whose length runs past the header (options before it kept)",
    "truncated_udp": "captured bytes end inside the UDP header",
    "bad_udp_length": "UDP length < 8 or beyond the IP payload",
    "timestamp_out_of_range": "the record's time (with the interface's offset) does not fit "
                              "int64 ns, 1677-2262: ts_ns is NULL, the packet is in no flow",
}


# Tables written in many short transactions (a capture's packets, a large
# capture's per-packet analyses): their rows live in schema `store` and the
# documented name is a view that hides the captures still being written (by
# their row in `ingests_in_progress` / `analyses_in_progress`), so a query
# never sees half a capture, even after a crash. The analysis that writes a
# derived one names it in its marker row.
STAGED_BY = {  # table -> "ingest", or the analysis its marker rows name
    "packets": "ingest", "flows": "ingest", "payloads": "ingest",
    "tcp_analysis": "tcp_analysis", "tcp_events": "tcp_analysis", "flights": "tcp_analysis", "exchanges": "tcp_analysis",
    "tls_messages": "tls_messages", "stalls": "stalls",
}
# what an ingest writes for a capture (the staged tables and its interfaces)
INGESTED = tuple(t for t, by in STAGED_BY.items() if by == "ingest") + ("interfaces",)
STAGED = {t: ("SELECT capture_id FROM ingests_in_progress" if by == "ingest" else
              f"SELECT capture_id FROM analyses_in_progress WHERE analysis = '{by}'")
          for t, by in STAGED_BY.items()}


def storage(name):
    """Where a table's rows are written: `store.<name>` for a staged table."""
    return f"store.{name}" if name in STAGED else name


def create_table_sql(name):
    """SQL that creates a table (and, for a staged one, its schema and view; for a split
    one, its facts' table too and a view joining them: no event row, flags false)."""
    events, facts = SPLIT.get(name, ("", ()))
    cols = ",\n  ".join(f"{c.name} {c.sql}" for c in {**TABLES, **DERIVED}[name]
                         if c.name not in facts)
    sql = f"CREATE TABLE IF NOT EXISTS {storage(name)} (\n  {cols}\n)"
    if name not in STAGED:
        return sql
    rows = ", ".join((f"coalesce(e.{c.name}, false) AS {c.name}" if "NOT NULL" in c.sql else
                      f"e.{c.name}") if c.name in facts else f"t.{c.name}"
                     for c in DERIVED[name]) if facts else "*"
    join = f" LEFT JOIN store.{events} e USING (capture_id, frame)" if facts else ""
    return (f"{create_table_sql(events) + '; ' if facts else ''}CREATE SCHEMA IF NOT EXISTS store; "
            f"{sql}; CREATE VIEW IF NOT EXISTS {name} AS SELECT {rows} FROM store.{name} t{join} "
            f"WHERE t.capture_id NOT IN ({STAGED[name]})")


def markdown_reference(name):
    lines = ["| column | type | meaning |", "| --- | --- | --- |"]
    for c in {**TABLES, **DERIVED}[name]:
        sql = c.sql.replace(" PRIMARY KEY", "").replace(" NOT NULL", "").replace(" UNIQUE", "")
        lines.append(f"| `{c.name}` | {sql} | {c.doc} |")
    return "\n".join(lines)


VIEWS_NOTE = """\
Tables marked *staged* keep their rows in schema `store` (`store.packets`...);
the name documented here is a view that leaves out captures still being
written (`ingests_in_progress`, `analyses_in_progress`), so no query sees
half a capture, even after a crash. Query the view."""


def markdown_document():
    """docs/tables.md: every table and column the store holds."""
    parts = ["# The store's tables", "",
             "Generated from `tracekit/store/schema.py` (`python -m tracekit.store.schema >",
             "docs/tables.md`), which also creates the tables; a test keeps the two identical.",
             "The derived tables built by SQL describe their columns at the top of their",
             "`analyses/*.sql` file.", "", VIEWS_NOTE, ""]
    for table in {**TABLES, **DERIVED}:
        staged = " (staged)" if table in STAGED else ""
        parts += [f"## `{table}`{staged}", "", markdown_reference(table), ""]
    parts += ["## Decode status", "",
              "`packets.decode_status` is NULL when a packet decoded through its transport",
              "header (TCP, UDP) or is IP with another protocol (ICMP...). Otherwise it says",
              "why decoding stopped; every field captured before that point is still",
              "filled. `captures.decode_status_counts` and the ingest summary count them.", "",
              "| code | meaning |", "| --- | --- |"]
    parts += [f"| `{code}` | {meaning} |" for code, meaning in DECODE_STATUS_DOC.items()]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":  # docs/tables.md
    print(markdown_document(), end="")
