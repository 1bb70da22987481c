"""The turnaround rule of `stalls` (steps/stalls.py), branch by branch, on a
crafted capture at the client of a 100 ms path: each gap after the client's
ACK left nothing in flight, read as the server's (busy) or the
application's by when the server's next data came.

One connection, the client's ACKs leaving at once (T = the handshake's
ACK, 100.1 ms; lag = the SYN -> SYN-ACK round trip, 100 ms):

- a segment 99.4 ms after the ACK that drained the direction: it left the
  server before that ACK reached it -- busy;
- 119.9 ms after: the server waited with nothing to send -- idle;
- 100.4 ms after, a request sent 0.1 ms after the drain: within lag + 1 ms
  of the drain, but a round trip after the request -- its answer, idle;
- 79.4 ms after, the client having sent a few bytes 19.4 ms after the
  drain (a WINDOW_UPDATE frame, say): too soon to answer them -- busy.

A second connection whose server speaks first (a greeting 0.5 ms after
the handshake): the ACK of the SYN-ACK drained nothing the server had
sent, so the wait is the application's.
"""

import pytest

from pcapgen import pcap_bytes
from tcpsim import ACK, FIN, PSH, SYN, tcp_packet
from tracekit.pipeline.analyze import analyze
from tracekit.pipeline.captures import load_captures
from tracekit.store.db import connect

T0 = 1_800_000_000_000_000_000
MS = 1_000_000
C, S = (198, 18, 0, 1), (198, 19, 0, 1)


def _flow(port, steps):
    """Frames of one connection from (ms, from_client, flags, payload bytes,
    ack_upto: how much of the other side's data the ACK covers, None: all)."""
    seq = {True: 1000, False: 5000}
    sent = {True: 0, False: 0}  # payload sent so far (+1 once a SYN or FIN went)
    out = []
    for ms, c2s, flags, payload, ack_upto in steps:
        other = not c2s
        ack = seq[other] + (sent[other] if ack_upto is None else ack_upto)
        a, b = (C, S) if c2s else (S, C)
        pa, pb = (port, 443) if c2s else (443, port)
        frame, wire = tcp_packet(a, b, pa, pb, seq[c2s] + sent[c2s], ack,
                                 flags | (ACK if flags != SYN else 0), payload)
        out.append((T0 + round(ms * MS), frame, wire))
        sent[c2s] += payload + (1 if flags & (SYN | FIN) else 0)
    return out


def _handshake():
    return [(0.0, True, SYN, 0, None), (100.0, False, SYN, 0, None), (100.1, True, 0, 0, None)]


RPC = _handshake() + [
    (100.2, True, PSH, 100, None),     # the request
    (200.5, False, PSH, 1448, None),   # its response begins
    (200.6, True, 0, 0, None),         # drained
    (300.0, False, 0, 1448, None),     # 99.4 ms on: on its way before the ACK arrived
    (300.1, True, 0, 0, None),         # drained
    (420.0, False, 0, 1448, None),     # 119.9 ms on: the server had nothing to send
    (420.1, True, 0, 0, None),         # drained
    (420.2, True, PSH, 100, None),     # a new request
    (520.5, False, PSH, 1448, None),   # 100.4 ms after the drain: its answer
    (520.6, True, 0, 0, None),         # drained
    (540.0, True, PSH, 9, None),       # a few bytes (a window update)
    (600.0, False, 0, 1448, 200),      # 79.4 ms after the drain, not covering them
    (600.1, True, 0, 0, None),         # drained
    (640.1, False, 0, 0, None),        # the server's ACK of the 9 bytes
    (700.0, False, FIN, 0, None),
    (700.1, True, FIN, 0, None),
    (800.1, False, 0, 0, None),
]
GREETING = _handshake() + [
    (100.6, False, PSH, 200, None),    # the server speaks first
    (100.7, True, 0, 0, None),
    (300.0, True, FIN, 0, None),
    (400.0, False, FIN, 0, None),
    (400.1, True, 0, 0, None),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("turnaround")
    frames = sorted(_flow(40000, RPC) + _flow(40001, GREETING), key=lambda f: f[0])
    (tmp / "c.pcap").write_bytes(pcap_bytes(frames, nanoseconds=True))
    con = connect(str(tmp / "s.duckdb"))
    load_captures(con, [str(tmp / "c.pcap")])
    analyze(con)
    yield con
    con.close()


def state_at(con, port, ms):
    (row,) = con.execute("""
        SELECT s.state, s.busy FROM stalls s JOIN flows f USING (capture_id, flow_id)
        WHERE f.client_port = ? AND s.direction = 's2c'
          AND s.start_ns <= ? AND ? < s.end_ns""", [port, T0 + ms * MS, T0 + ms * MS]).fetchall()
    return row


def test_the_capture_is_at_the_client_a_round_trip_from_the_server(store):
    rows = store.execute("""SELECT f.client_port, r.vantage, r.path_rtt_ns
        FROM rtt_summary r JOIN flows f USING (capture_id, flow_id)
        WHERE r.direction = 'c2s' ORDER BY 1""").fetchall()
    assert rows == [(40000, "client", 100_100_000), (40001, "client", 100_100_000)]


@pytest.mark.parametrize("ms, busy", [
    (250, True),    # on its way before the drain's ACK reached the server
    (360, False),   # later than lag + 1 ms: idle
    (470, False),   # the answer to the request sent after the drain
    (570, True),    # too soon after the client's bytes to answer them
])
def test_each_gap_after_a_drain(store, ms, busy):
    state, is_busy = state_at(store, 40000, ms)
    assert is_busy == busy, (ms, state, is_busy)
    assert (state == "application_limited") == (not busy), (ms, state)


def test_the_handshakes_ack_drains_nothing_the_server_sent(store):
    assert state_at(store, 40001, 100.3) == ("application_limited", False)
