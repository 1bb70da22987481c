"""The attribution's spans, declared once: name, colour, what it is.

analyses/attribution.sql's catalogue names the spans it writes (each with the
evidence behind it); the charts colour them, the ablation scales and
predicts with them. They all read this registry, and
tests/test_spans.py holds the SQL catalogue to it: a span added in one
place and not the other fails there.

`irreducible`: part of the serial lower bound (propagation, processing,
transfer at the bottleneck rate). `round_trips`: the span lasts a round trip
or a whole number of them (it scales with the RTT).
"""

from typing import NamedTuple


class Span(NamedTuple):
    name: str
    color: str
    irreducible: bool
    round_trips: bool
    meaning: str


SPANS = (
    Span("connect_tcp", "#e45756", False, True, "the TCP handshake: SYN to the client's ACK"),
    Span("connect_tls", "#ff9d98", False, True, "the TLS handshake: ClientHello to Finished"),
    Span("connect_quic", "#f58518", False, True, "the QUIC handshake: first Initial to 1-RTT"),
    Span("connect_proxy", "#fdbf6f", False, False, "a proxy's negotiation (SOCKS5)"),
    Span("client_idle", "#bab0ac", False, False, "the client held the connection, sent nothing"),
    Span("upload_transfer", "#4c78a8", True, False, "S_u / B: the request at the bottleneck rate"),
    Span("upload_loss_recovery", "#d67195", False, True, "loss recovery of the client's data"),
    Span("upload_waiting", "#9ecae9", False, True, "the client's window held the request"),
    Span("pacing", "#8c6d31", False, False, "a sender's pacing released its data"),
    Span("propagation", "#54a24b", True, True, "R: the round trip's propagation"),
    Span("processing", "#88d27a", True, False, "T_c: the server's time"),
    Span("tunnel_queueing", "#b79a20", False, False, "queued in the local tunnel"),
    Span("tunnel_transit", "#17becf", False, False, "across the tunnel beyond R and T_c"),
    Span("download_transfer", "#2f5f8a", True, False, "S_d / B: the response at the bottleneck rate"),
    Span("headers", "#a0cbe8", False, False, "a transfer's packet headers at the bottleneck rate"),
    Span("window_waiting", "#eeca3b", False, True, "the sender waited for ACKs (its window was full)"),
    Span("loss_recovery", "#b279a2", False, True, "rounds of loss recovery of the response"),
    Span("receiver_limited", "#9d755d", False, False, "the client's receive window was full"),
    Span("server_idle", "#d8b5a5", False, False, "the application had not written the bytes"),
    Span("sender_wait", "#ff7f0e", False, False, "seen from the client: the sender waited"),
    Span("queueing", "#7f7f7f", False, False, "the response waited in the path's queue (seen at the server)"),
    Span("unexplained", "#000000", False, False, "no evidence explains it"),
    Span("unattributed", "#cccccc", False, False, "no flow of the request was linked"),
)
BY_NAME = {s.name: s for s in SPANS}
NAMES = tuple(BY_NAME)
COLORS = {s.name: s.color for s in SPANS}
ROUND_TRIPS = tuple(s.name for s in SPANS if s.round_trips)
IRREDUCIBLE = tuple(s.name for s in SPANS if s.irreducible)

# Spans of one stream among others on a connection (issue #27). The request
# attribution does not write them: analyses/streams.sql does, per stream, as
# `<name>_ns` columns, each from its evidence (stream_queueing: other streams'
# sends between the stream's ready time and its last send; hol_blocking: the
# stream complete, its delivery held until another stream's missing bytes
# arrived -- `held_by` names that stream).
STREAM_SPANS = (
    Span("stream_queueing", "#6b6ecf", False, False, "the sender sent other streams' bytes while this one waited"),
    Span("hol_blocking", "#393b79", False, False, "complete, held behind another stream's missing bytes"),
)
STREAM_COLORS = {s.name: s.color for s in STREAM_SPANS}

# The sender's limitation states (the `stalls` table), each with one colour
# every chart uses; a state that means what a span means has the span's colour.
STATE_COLORS = {
    "handshake": COLORS["connect_tcp"],
    "slow_start": "#f7e1a0",
    "congestion_limited": COLORS["window_waiting"],
    "receive_window_limited": COLORS["receiver_limited"],
    "zero_window": "#5c4033",
    "application_limited": COLORS["server_idle"],
    "pacing_idle": COLORS["pacing"],
    "loss_recovery": COLORS["loss_recovery"],
    "rto_wait": "#6b3d73",
    "closed": "#e8e8e8",
}
