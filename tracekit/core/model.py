"""The closed-form models of docs/timing-model.md, as pure functions in SI units.

Bytes, bytes per second, seconds, probabilities in [0, 1]. Every function
states its formula; arrays (numpy) are accepted where a sequence is natural.
The analyses put these predictions beside what a trace measured; the tests
check each on cases worked by hand.
"""

import math
from dataclasses import dataclass

import numpy as np

INF = math.inf


def serial_time(up_bytes, up_rate, rtt, processing, down_bytes=0, down_rate=INF):
    """The serial lower bound (docs/timing-model.md):

        T_serial = S_u / B_u + R + T_c + S_d / B_d

    Setup, queueing and windows are not in it. A rate of inf makes its
    transfer free (0 bytes at any rate cost 0)."""
    def send(size, rate):
        return 0.0 if size == 0 else size / rate
    return send(up_bytes, up_rate) + rtt + processing + send(down_bytes, down_rate)


def _cummax_start(start, sizes):
    """x_i = max(start_i, x_{i-1}) + size_i for all i at once:
    x_i = S_i + max_{k<=i}(start_k - S_{k-1}), S the running sum of sizes."""
    sizes = np.asarray(sizes, dtype=float)
    start = np.broadcast_to(np.asarray(start, dtype=float), sizes.shape)
    total = np.cumsum(sizes)
    before = total - sizes
    return total + np.maximum.accumulate(start - before)


def chunk_pipeline(ready, compute, send, delay):
    """Chunks through one processor and one outgoing link (docs/timing-model.md):

        c_i = max(a_i, c_{i-1}) + m_i     compute done (data AND processor)
        u_i = max(c_i, u_{i-1}) + s_i     send done (compute AND link)
        r_i = u_i + d_i                   arrival

    `ready` a_i, `compute` m_i, `send` s_i, `delay` d_i: arrays or scalars
    (broadcast to the number of chunks). Returns (c, u, r) as numpy arrays."""
    n = max(np.size(ready), np.size(compute), np.size(send), np.size(delay))
    shape = (n,)
    ready = np.broadcast_to(np.asarray(ready, dtype=float), shape)
    c = _cummax_start(ready, np.broadcast_to(np.asarray(compute, dtype=float), shape))
    u = _cummax_start(c, np.broadcast_to(np.asarray(send, dtype=float), shape))
    r = u + np.broadcast_to(np.asarray(delay, dtype=float), shape)
    return c, u, r


def playback_schedule(arrivals, chunk_duration, initial_buffer):
    """A player that waits for missing chunks (docs/timing-model.md):

        p_0 = r_0 + J,   p_i = max(r_i, p_{i-1} + tau)

    Returns (play times, gaps): gap_i = p_i - (p_{i-1} + tau_{i-1}) when r_i
    wins (a stall the listener hears), else 0; gap_0 = 0. `chunk_duration`
    tau is a scalar or one per chunk."""
    r = np.asarray(arrivals, dtype=float)
    tau = np.broadcast_to(np.asarray(chunk_duration, dtype=float), r.shape)
    before = np.cumsum(tau) - tau  # T_i: audio before chunk i
    p = before + np.maximum(r[0] + initial_buffer, np.maximum.accumulate(r - before))
    gaps = np.zeros_like(p)
    gaps[1:] = p[1:] - (p[:-1] + tau[:-1])
    return p, np.where(gaps > 1e-12, gaps, 0.0)


def buffer_drain_time(buffer_bytes, playback_rate, receive_rate):
    """Time for a buffer to empty under a sustained rate deficit (docs/timing-model.md):

        b / (playback_rate - receive_rate)

    inf when the receive rate keeps up. Any consistent units (bytes and
    bytes/s, or seconds of audio and audio-seconds/s)."""
    deficit = playback_rate - receive_rate
    return INF if deficit <= 0 else buffer_bytes / deficit


def window_limited_rate(window_bytes, rtt, path_rate=INF):
    """Useful rate <= min(B_path, W / R) (docs/timing-model.md)."""
    return min(path_rate, window_bytes / rtt)


def bdp(rate, rtt):
    """Bandwidth-delay product B x R: the window that fills the path."""
    return rate * rtt


def slow_start_bytes(initial_window_bytes, rounds):
    """Cumulative bytes sent after n rounds of slow start: IW x (2^n - 1)."""
    return initial_window_bytes * (2 ** rounds - 1)


def slow_start_rounds(total_bytes, initial_window_bytes):
    """Rounds of slow start to send `total_bytes`: the smallest n with
    IW x (2^n - 1) >= total, i.e. ceil(log2(total / IW + 1))."""
    if total_bytes <= 0:
        return 0
    n = math.ceil(math.log2(total_bytes / initial_window_bytes + 1))
    while slow_start_bytes(initial_window_bytes, n - 1) >= total_bytes:  # float edge
        n -= 1
    return n


def mathis_rate(mss, rtt, loss, c=1.0):
    """The Mathis bound B <= (MSS / R) x C / sqrt(p) (docs/timing-model.md; C = 1 is
    the simplified form, sqrt(3/2) for periodic loss). inf without loss."""
    return INF if loss <= 0 else mss / rtt * c / math.sqrt(loss)


@dataclass(frozen=True)
class RetransmissionRounds:
    """Rounds of selective retransmission until all `packets` arrived, each
    lost independently with probability `loss` in every round (docs/timing-model.md):
    P(done within n rounds) = (1 - p^n)^k."""

    packets: int
    loss: float

    def cdf(self, n):
        if n <= 0:
            return 0.0 if self.packets > 0 else 1.0
        return (1.0 - self.loss ** n) ** self.packets

    @property
    def mean(self):
        """E[N] = sum_{n>=0} (1 - cdf(n)), summed until the terms vanish."""
        if self.loss <= 0 or self.packets == 0:
            return 1.0 if self.packets else 0.0
        total, n = 0.0, 0
        while True:
            term = 1.0 - self.cdf(n)
            total += term
            n += 1
            if term < 1e-15 or n > 10_000:
                return total

    def quantile(self, q):
        """The smallest n with cdf(n) >= q."""
        if self.packets == 0:
            return 0
        if self.loss <= 0:
            return 1
        if self.loss >= 1:
            return INF
        n = max(1, math.ceil(math.log(1.0 - q ** (1.0 / self.packets)) / math.log(self.loss)))
        while n > 1 and self.cdf(n - 1) >= q:  # float edges
            n -= 1
        while self.cdf(n) < q:
            n += 1
        return n


def retransmission_rounds(packets, loss):
    """The distribution of retransmission rounds (see RetransmissionRounds)."""
    return RetransmissionRounds(packets, loss)


def retransmission_completion(packets, loss, rtt, budget, q=0.99):
    """Completion time = the serial budget + (rounds - 1) x RTT (docs/timing-model.md);
    returns (mean seconds, q-quantile seconds)."""
    rounds = RetransmissionRounds(packets, loss)
    return budget + (rounds.mean - 1) * rtt, budget + (rounds.quantile(q) - 1) * rtt


def _binom_cdf(n, p, r):
    """P(Binomial(n, p) <= r), summed in log space."""
    if p <= 0:
        return 1.0
    if p >= 1:
        return 1.0 if r >= n else 0.0
    lp, lq = math.log(p), math.log1p(-p)
    return min(1.0, sum(math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                                 + i * lp + (n - i) * lq) for i in range(0, min(r, n) + 1)))


def fec_repair_symbols(data_symbols, loss, target=0.999):
    """Smallest r repair symbols with which k data symbols survive: an MDS code
    recovers the block when at most r of its k + r symbols are lost, so
    r is the smallest with P(Binomial(k + r, p) <= r) >= target."""
    if loss <= 0:
        return 0
    if loss >= 1:
        raise ValueError("no number of repair symbols survives a loss rate of 1")
    r = 0
    while _binom_cdf(data_symbols + r, loss, r) < target - 1e-12:  # a sum of floats
        r += 1
    return r


def wire_bytes(payload_bytes, max_payload, header_bytes, ack_bytes=0):
    """Bytes on the wire for a payload (docs/timing-model.md, Headers): packets =
    ceil(payload / max_payload), each adding header_bytes, and ack_bytes of
    acknowledgement on the reverse path per data packet (0 to leave ACKs out):

        payload + packets x (header_bytes + ack_bytes)"""
    packets = math.ceil(payload_bytes / max_payload) if payload_bytes > 0 else 0
    return payload_bytes + packets * (header_bytes + ack_bytes)


def split_fraction(rate_1, rate_2):
    """Share of the bytes for path 1 so two independent paths finish
    together: x = B1 / (B1 + B2)."""
    return rate_1 / (rate_1 + rate_2)


def replication_failure(q, p1, p2):
    """Failure probability of a request replicated over two paths that share
    an endpoint failing with probability q: p_fail = q + (1 - q) p1 p2."""
    return q + (1 - q) * p1 * p2


def breakeven_uses(preparation, saving_per_use):
    """Uses after which a one-time preparation M pays for itself: the net gain
    N x dt - M is >= 0 from N = ceil(M / dt); inf when nothing is saved."""
    if saving_per_use <= 0:
        return INF
    return math.ceil(preparation / saving_per_use)


def expected_retry_cost(cost, success_probability):
    """Retrying until success, each try costing C and succeeding with
    probability p: on average C / p."""
    if success_probability <= 0:
        return INF
    return cost / success_probability


def static_batch_waste(tokens_needed):
    """Slots a static batch leaves idle (docs/timing-model.md): its membership is fixed
    until the longest member finishes, so of B x max tokens slots only the
    sum of tokens needed is used: 1 - sum / (B x max)."""
    tokens = list(tokens_needed)
    if not tokens or max(tokens) == 0:
        return 0.0
    return 1.0 - sum(tokens) / (len(tokens) * max(tokens))


# The same formulas for the SQL analyses: DuckDB macros, declared here beside
# the functions they must agree with (tests/test_model_sql.py holds them to
# the same values), created on every connection analyze runs SQL on
# (pipeline/runner.py). Units are the stores': integer nanoseconds, bytes,
# bytes per second.
SQL_MACROS = {
    # serial_time's transfer term: S / B in ns (rounded), NULL when B is unknown
    "tk_transfer_ns": (("size_bytes", "rate_Bps"),
                       "round(size_bytes * 1e9 / rate_Bps)::BIGINT"),
    # serial_time: the four terms, an unknown one left out (the bound is then partial)
    "tk_serial_ns": (("upload_ns", "rtt_ns", "processing_ns", "download_ns"),
                     "coalesce(upload_ns, 0) + coalesce(rtt_ns, 0) + coalesce(processing_ns, 0)"
                     " + coalesce(download_ns, 0)"),
    # playback_schedule in closed form: p_i = T_i + max(r_0 + J, max_{k<=i}(r_k - T_k))
    "tk_play_ns": (("audio_before_ns", "first_arrival_ns", "initial_buffer_ns", "late_max_ns"),
                   "audio_before_ns + greatest(first_arrival_ns + initial_buffer_ns, late_max_ns)"),
    # static_batch_waste: 1 - sum / (B x max)
    "tk_slot_waste": (("tokens_sum", "batch_size", "max_tokens"),
                      "1 - tokens_sum / (batch_size * max_tokens)"),
}


def sql_macros():
    """CREATE statements of SQL_MACROS, as temporary macros of one connection."""
    return [f"CREATE OR REPLACE TEMP MACRO {name}({', '.join(params)}) AS ({body})"
            for name, (params, body) in SQL_MACROS.items()]


# the closed forms of agent rounds (docs/agents.md), public here as tracekit.model's
from .agent import (  # noqa: E402,F401
    agent_task_time,
    block_bootstrap_totals,
    deadline_probability,
    placement_round,
    redo_after_disconnect,
    transfer_saving,
    uplink_for_deadline,
)
# Streams sharing a link (issue #27): send schedules and delivery order.
from .multiplex import (Piece, delivery_times, drained_ahead,  # noqa: E402,F401
                        gated_ahead, held_chance, link_schedule, on_time_seconds,
                        stream_schedule)
