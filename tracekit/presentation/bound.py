"""`tracekit bound`: the serial lower bound from flags alone, and what the
mechanisms would add, as rows (component, ms, kind) -- all from tracekit.model."""

import math

from ..core import model


def bound_rows(up_bytes, down_bytes, rtt_ms, up_rate_mbps=None, down_rate_mbps=None,
               processing_ms=0.0, loss=0.0, mss=1448, iw_segments=10):
    """The bound's terms and total, then a fresh connection's round trips, slow
    start's waits and the retransmission rounds of random loss (mean, p99)."""
    rtt = rtt_ms / 1e3
    up_rate = (up_rate_mbps or math.inf) * 1e6 / 8
    down_rate = (down_rate_mbps or math.inf) * 1e6 / 8
    t = model.serial_time(up_bytes, up_rate, rtt, processing_ms / 1e3, down_bytes, down_rate)
    iw = iw_segments * mss
    ss_rounds = model.slow_start_rounds(down_bytes, iw)
    packets = math.ceil(down_bytes / mss) if down_bytes else 0
    mean_s, p99_s = model.retransmission_completion(packets, loss, rtt, t, q=0.99)
    rows = [
        ("upload S_u/B_u", up_bytes / up_rate * 1e3 if up_bytes else 0.0, "bound"),
        ("propagation R", rtt_ms, "bound"),
        ("processing T_c", processing_ms, "bound"),
        ("download S_d/B_d", down_bytes / down_rate * 1e3 if down_bytes else 0.0, "bound"),
        ("serial bound", t * 1e3, "total"),
        ("+ TCP handshake (fresh connection)", rtt_ms, "mechanism"),
        ("+ TLS 1.3 handshake (fresh connection)", rtt_ms, "mechanism"),
        (f"+ slow start from {iw_segments} segments: {ss_rounds} rounds, RTT waits",
         max(ss_rounds - 1, 0) * rtt_ms, "mechanism"),
        (f"loss {loss:g} over {packets} packets: mean completion", mean_s * 1e3, "with loss"),
        ("  p99 completion", p99_s * 1e3, "with loss"),
    ]
    return ["component", "ms", "kind"], [(n, round(v, 3), k) for n, v, k in rows]
