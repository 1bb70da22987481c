"""A discrete-event replay of one TCP transfer, packet by packet.

The sender (the server) sends `n` segments of `mss` bytes to the receiver
(the client) over a path: random loss on the way in (Bernoulli, or bursty
with a second state as in Gilbert-Elliott: after a loss the next packet is
lost with probability `burst`), then a drop-tail FIFO of `queue_bytes`
drained at `rate` bytes/s (the bottleneck; with a `bucket`, a token bucket
as Linux's tbf: after an idle that many bytes more leave at once), then the one-way delay
`rtt / 2` (with jitter, uniform [0, jitter/2) more each way, never before
the packet ahead: the lab's forwarder). The receiver (the client,
whatif/delack.py) acknowledges as Linux does -- quick ACKs, every second
segment, a 40 ms timer, compressed SACKs -- each ACK cumulative and SACKing
what arrived since the last; ACKs come back after `rtt / 2` and are lost
with `loss_up`.

The sender, as Linux does it in outline:
- window (whatif/window.py): slow start below ssthresh, above it CUBIC
  (bictcp_update, with HyStart) or Reno, in whole segments, growing only
  on an ACK that moves snd_una and while tcp_is_cwnd_limited;
- loss detection by RACK (a segment is lost once one sent after it is
  delivered: with per-segment ACKs, fast retransmit; while its reordering
  window, min_rtt / 4, holds a segment back, a timer looks again when it
  expires: tcp_rack_reo_timeout); an episode sets
  ssthresh (CUBIC 717/1024 of cwnd, Reno half) and PRR (RFC 6937) sends in
  proportion to what is delivered until the recovery point, then cwnd =
  ssthresh -- and a new episode on that ACK if a segment is still lost;
- a tail loss probe after 2 srtt without an ACK (the last segment again),
  at most one per episode;
- the retransmission timeout srtt + max(4 rttvar, 200 ms), doubled on each
  expiry, marks everything outstanding lost and slow-starts from one
  segment (Linux's Loss state: no PRR);
- pacing (`Conn.pacing`: fq; BBR always paces): 2 x cwnd / srtt in slow
  start, 1.2 x after; none after a connection's first 10 segments (they
  leave as one burst: tcp_update_skb_after_send); new data leaves in units
  of about 1 ms at the pacing rate, at least 2 segments (tcp_tso_autosize),
  each unit paced as one (whatif/pacing.py);
- BBR, approximately: the bottleneck bandwidth is the windowed maximum of
  delivery-rate samples, the minimum RTT its floor; it paces at gain x
  bandwidth (Startup 2.89 until the bandwidth stops growing by 25 % for 3
  rounds, Drain, then ProbeBW's 1.25, 0.75, 1 x 6 cycle) with a window of
  2 BDP (plus the ACKs' aggregation once out of Startup: bbr.py), and does
  not reduce its rate on random loss -- a recovery that ends with a segment
  still marked lost goes on without a new conservation round or a restore,
  as Linux re-enters Recovery on that ACK -- except through
  Linux's long-term ("policer") bandwidth (whatif/bbr.py). A round ends
  when a segment sent after it began is delivered, a retransmission
  included (counted in segments delivered, as bbr_update_bw), and is
  application-limited only as Linux marks it (whatif/bbr.py, bbr_round).

The sixth round's five rules and the seventh's (docs/whatif.md) are switches,
on as Linux has them, for tools/whatif_sender.py to compare without each.

`Conn` carries the state across the transfers of one persistent connection
(slow start after idle off, as the lab's persistent level sets it).
"""

import heapq
from dataclasses import dataclass, field

from .bbr import ack_aggregation, bbr_round, bbr_window, lt_sampling
from .pacing import pacing_rate, tso_unit
from .delack import Acks, ClientSide, clock_phase
from .recovery import prr
from . import chain, window

RTO_MIN = 0.2
INITIAL_RTO = 1.0
MAX_TIME = 120.0
REO_TIMER = DELIVERED_ROUNDS = IW_BURST = TSO_UNITS = True  # Linux's rules (docstring)
CHAINED_RECOVERY = APP_LIMITED_AT_WRITE = True


@dataclass
class Path:
    rtt: float              # s, base round trip
    rate: float             # bytes/s at the bottleneck (wire bytes)
    queue_bytes: float
    loss: float = 0.0       # downstream (data) loss probability
    burst: float = 0.0      # P(loss | previous packet lost), 0: independent
    loss_up: float = 0.0    # upstream (ACK, SYN, request) loss probability
    jitter: float = 0.0     # s, the round trip's spread: uniform [0, jitter/2) each way,
    #                         an arrival never before the one ahead of it (the lab's forwarder)
    header: int = 52        # wire bytes on top of the payload
    bucket: float = 0.0     # bytes a token bucket (tbf) lets through at once beyond a
    #                         packet after an idle: its burst less one packet; 0 a FIFO
    bad_loss: float = 1.0   # share lost in a burst's bad state (whatif/chain.py)

    def __post_init__(self):
        # `loss` is the share of packets lost (the calibration's, the lab's), kept
        # with `burst` by the chain's rates (it lost `loss` after a delivery: 3.1 %
        # for 1.65 % at 0.49, set 18, docs/whatif.md)
        self.enter, self.stay, self.bad_loss = chain.rates(self.loss, self.burst, self.bad_loss)


@dataclass
class Conn:
    cc: str = "cubic"
    initcwnd: int = 10
    pacing: bool = False
    hystart: bool = True  # CUBIC's HyStart (whatif/window.py)
    cwnd: float = 0.0
    ssthresh: float = 1e9
    srtt: float = 0.0
    rttvar: float = 0.0
    min_rtt: float = 1e9
    cwnd_cnt: int = 0   # segments delivered towards the next +1 (tcp_cong_avoid_ai)
    cubic: object = None  # CUBIC's and HyStart's state (whatif/window.py)
    last_send: float = 0.0  # s, the last send on the previous response's clock
    btlbw: float = 0.0
    bw_samples: dict = field(default_factory=dict)  # round -> its largest rate sample
    bbr_mode: str = "startup"
    full_bw: float = 0.0
    full_bw_rounds: int = 0
    cycle: int = 0
    pace_rate: float = 0.0
    prior_cwnd: float = 0.0
    rounds: int = 0
    lt: dict = field(default_factory=dict)  # BBR's long-term bandwidth sampling
    agg: dict = field(default_factory=dict)  # BBR's ACK aggregation (extra_acked)
    tot_delivered: int = 0
    tot_lost: int = 0
    segs_out: int = 0   # data segments the connection has sent (tcpi_data_segs_out)
    rcv: object = None  # the client's receive window (whatif/receiver.py); None: unlimited
    head: int = 0       # bytes of a response's header sent apart (replayer.segments); 0 none

    def __post_init__(self):
        if not self.cwnd:
            self.cwnd = float(self.initcwnd)


class Transfer(ClientSide):
    """One response of `n` segments; `run()` returns the time (s, from the
    first send) at which the receiver holds all of it in order."""

    def __init__(self, conn, path, n, mss, rng):
        self.c, self.p, self.n, self.mss, self.rng = conn, path, n, mss, rng
        self.wire, self.events, self.seq = mss + path.header, [], 0
        self.head_wire = conn.head + path.header if conn.head else self.wire  # (segment 0)
        self.sacked = [False] * n
        self.lost = [False] * n
        self.resent = [False] * n  # sent again: no delay sample for CUBIC's HyStart
        self.sent_at = [0.0] * n
        self.echo = -path.rtt / 2  # when the client sent what the sender echoes now (TSecr)
        self.echo_at, self.echoed, self.ts_phase = [self.echo] * n, None, clock_phase(rng)
        self.deliv_at_send = [(0, 0.0, 0.0)] * n
        self.order = []            # (sent time, segment) in send order (RACK)
        self.order_head, self.rack_idx = 0, -1
        self.order_idx = [0] * n
        self.retx_queue = []       # heap of lost segments to send again
        self.nxt = self.cum = 0
        self.delivered, self.delivered_time, self.first_tx = 0, 0.0, 0.0
        self.pipe = 0
        self.in_recovery, self.recovery_point = False, 0
        self.loss_state = False  # after an RTO (Linux's Loss state: slow start, no PRR)
        self.prr_prior = self.prr_delivered = self.prr_out = 0
        self.rack_ts, self.tlp_done, self.conserve_round = -1.0, False, -1
        self.rack_rtt, self.reo_at = 0.0, -1.0
        self.marked, self.lost_out = [False] * n, 0  # marked lost, not yet delivered (lost_out)
        self.backoff, self.timer_gen = 0, 0
        self.q_free, self.bad = 0.0, False  # (the loss chain's state: whatif/chain.py)
        self.tokens_at = -1e9  # (a bucket) its tokens run this far ahead: full at the start
        self.last_data = self.last_ack = 0.0  # latest arrival each way (jitter never reorders)
        self.next_send, self.now, self.pace_at = 0.0, 0.0, -1.0
        self.rcv, self.rcv_cum, self.done = [False] * n, 0, None
        self.round_end, self.round_app_limited, self.max_pipe, self.rs_losses = 0, False, 0, 0
        # Linux's tcp_is_cwnd_limited: cwnd-limited once in a window counts for
        # the window (until snd_una passes usage_seq); else the most in flight
        self.cwnd_limited, self.max_out, self.usage_seq = False, 0, 0
        self.rcv_got = self.rcv_top = 0  # segments the receiver holds; above the highest
        self.rcv_edge = self.snd_edge = int(conn.rcv.restart()) if conn.rcv else n
        self.rcv_acks = Acks(fresh=conn.segs_out == 0)  # the client's delayed ACKs (whatif/delack.py)

    # -- the path -------------------------------------------------------------
    def _emit(self, s):
        """Put segment s on the path now; schedule its arrival unless lost."""
        p, now = self.p, self.now
        lost, self.bad = chain.draw(p, self.rng, self.bad)
        if lost:
            return
        wire = self.head_wire if s == 0 else self.wire
        backlog = max(0.0, self.q_free - now) * p.rate
        if backlog > 0 and backlog + wire > p.queue_bytes:
            return  # tail drop at the bottleneck (an idle one takes any packet)
        if p.bucket:  # the packet leaves once the bucket holds its tokens
            leave = max(now, self.tokens_at - p.bucket / p.rate)
            self.tokens_at = max(self.tokens_at, leave) + wire / p.rate
            self.q_free = leave + wire / p.rate
        else:
            self.q_free = max(now, self.q_free) + wire / p.rate
        t = self.q_free + p.rtt / 2
        if p.jitter:  # the lab's: jitter/2 each way, held behind the packet before
            t = self.last_data = max(t + p.jitter / 2 * self.rng.random(), self.last_data)
        self._at(t, "data", s)

    def _at(self, t, kind, arg):
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, arg))

    # -- the sender -----------------------------------------------------------
    def _send_segment(self, s, retx):
        c = self.c
        self.sent_at[s], self.echo_at[s] = self.now, self.echo
        if self.pipe <= 0:  # nothing in flight: a sampling interval starts now (tcp_rate.c)
            self.first_tx = self.delivered_time = self.now
        self.deliv_at_send[s] = (self.delivered, self.delivered_time, self.first_tx)
        self.order_idx[s] = len(self.order)
        self.order.append((self.now, s))
        if retx:
            self.lost[s] = False
            self.resent[s] = True
        if self.in_recovery and not self.loss_state:
            self.prr_out += 1
        self.pipe += 1
        self.max_pipe = max(self.max_pipe, self.pipe)
        self._emit(s)
        c.segs_out += 1
        if IW_BURST and c.segs_out <= 10:
            return  # Linux paces no delay after the first 10 (tcp_update_skb_after_send)
        if c.cc == "bbr" or c.pacing:
            rate = pacing_rate(self)
            self.next_send = self.now + self.wire / rate if rate else self.now

    def _try_send(self):
        sent = len(self.order)
        self._send_loop()
        limited = self.pipe >= int(self.c.cwnd)
        if len(self.order) > sent or limited:  # tcp_write_xmit -> tcp_cwnd_validate
            if self.cum >= self.usage_seq or limited or (
                    not self.cwnd_limited and self.pipe > self.max_out):
                self.cwnd_limited, self.max_out, self.usage_seq = limited, self.pipe, self.nxt

    def _send_loop(self):
        c = self.c
        while True:
            if self.next_send > self.now + 1e-12:
                if self.pace_at != self.next_send:
                    self.pace_at = self.next_send
                    self._at(self.next_send, "pace", None)
                return
            if self.pipe >= int(c.cwnd):
                return
            while self.retx_queue and not self.lost[self.retx_queue[0]]:
                heapq.heappop(self.retx_queue)
            if self.retx_queue:
                self._send_segment(heapq.heappop(self.retx_queue), True)
            elif self.nxt < min(self.n, self.snd_edge):
                unit = min(tso_unit(self) if TSO_UNITS else 1, int(c.cwnd) - self.pipe,
                           min(self.n, self.snd_edge) - self.nxt)
                for _ in range(unit):
                    self.nxt += 1
                    self._send_segment(self.nxt - 1, False)
                if unit > 1 and self.next_send > self.now:  # paced as one skb of `unit` segments
                    self.next_send = self.now + unit * (self.next_send - self.now)
            else:
                return
            self._arm_timer()

    def _rto(self):
        c = self.c
        if not c.srtt:
            return INITIAL_RTO * 2 ** self.backoff
        return min((c.srtt + max(4 * c.rttvar, RTO_MIN)) * 2 ** self.backoff, 60.0)

    def _arm_timer(self):
        self.timer_gen += 1
        if self.cum >= self.nxt:
            return
        c = self.c
        if not self.tlp_done and c.srtt:  # in recovery too (RACK-TLP, RFC 8985)
            self._at(self.now + max(2 * c.srtt, 0.01), "tlp", self.timer_gen)
        else:
            self._at(self.now + self._rto(), "rto", self.timer_gen)

    def _on_tlp(self, gen):
        if gen != self.timer_gen or self.cum >= self.nxt:
            return
        self.tlp_done = True
        if self.nxt < min(self.n, self.snd_edge) and self.pipe < int(self.c.cwnd) + 1:
            self.nxt += 1
            self._send_segment(self.nxt - 1, False)
        else:
            s = self.nxt - 1
            while s > self.cum and self.sacked[s]:
                s -= 1
            self.pipe -= 1  # a probe replaces, it does not add
            self._send_segment(s, True)
        self.timer_gen += 1
        self._at(self.now + self._rto(), "rto", self.timer_gen)

    def _on_reo(self, _):
        """RACK's reordering timer (tcp_rack_reo_timeout)."""
        self.reo_at = -1.0
        lost = self.c.tot_lost
        self._mark_rack_losses()
        if self.c.tot_lost > lost:
            self._try_send()

    def _on_rto(self, gen):
        if gen != self.timer_gen or self.cum >= self.nxt:
            return
        c = self.c
        if c.cc == "bbr":
            self._window_cut(self.in_recovery)
            c.ssthresh = max(c.cwnd, 2.0)
            c.cwnd = 1.0
        else:  # tcp_enter_loss
            window.on_loss(c, rto=True, recovering=self.in_recovery)
        self.in_recovery, self.recovery_point, self.loss_state = True, self.nxt, True
        self.backoff += 1
        for s in range(self.cum, self.nxt):
            if not self.sacked[s]:
                self.c.tot_lost += not self.lost[s]
                self.lost[s] = True
                self._mark(s)
                heapq.heappush(self.retx_queue, s)
        self.pipe = 0
        if c.cc == "bbr":  # an RTO ends a round and a long-term interval (bbr_set_state)
            c.full_bw, self.rs_losses = 0.0, 1
            lt_sampling(self, True, False)
        self._try_send()
        self._arm_timer()

    def _window_cut(self, recovering=False):
        """ssthresh and cwnd on a loss episode's start (CUBIC, Reno; BBR keeps its rate)."""
        c = self.c
        if c.cc == "bbr":  # packet conservation for a round, then the window is restored
            # the window to restore: an RTO during recovery keeps the larger (bbr_save_cwnd)
            c.prior_cwnd = max(c.prior_cwnd, c.cwnd) if recovering else c.cwnd
            c.cwnd = max(self.pipe + 1, 4)
            self.round_end = self.delivered if DELIVERED_ROUNDS else self.nxt
            self.conserve_round = c.rounds
            return
        self.prr_prior, self.prr_delivered, self.prr_out = c.cwnd, 0, 0
        window.on_loss(c)

    def _mark_rack_losses(self):
        """RACK: a transmission sent before the latest-sent one delivered is lost
        once it is older than that by the reordering window, min_rtt / 4 (none
        in recovery or once three segments above the hole are SACKed)."""
        dupthresh = self.delivered - self.cum >= 3 or self.in_recovery
        reo = 0.0 if dupthresh or not self.c.srtt else self.c.min_rtt / 4
        order, cut = self.order, self.now - self.rack_rtt - reo
        while self.order_head < self.rack_idx:
            t, s = order[self.order_head]
            if reo and t > cut + 1e-9:  # not yet: RACK's reordering timer (tcp_rack_reo_timeout)
                if REO_TIMER and self.reo_at < self.now:
                    self.reo_at = t + self.rack_rtt + reo
                    self._at(self.reo_at, "reo", None)
                return
            self.order_head += 1
            if s >= self.cum and not self.sacked[s] and not self.lost[s] and self.sent_at[s] == t:
                self.lost[s] = True
                self._mark(s)
                self.pipe -= 1
                self.c.tot_lost += 1
                self.rs_losses += 1
                heapq.heappush(self.retx_queue, s)
                if self.c.cc == "bbr":  # Linux's BBR takes each loss off the window
                    self.c.cwnd = max(self.c.cwnd - 1, 1.0)
                if not self.in_recovery:
                    self.in_recovery, self.recovery_point = True, self.nxt
                    self._window_cut()

    def _mark(self, s):
        if not self.marked[s]:
            self.marked[s], self.lost_out = True, self.lost_out + 1

    def _deliver(self, s):
        """Segment s newly acknowledged (cumulatively or selectively)."""
        c = self.c
        if self.marked[s]:
            self.marked[s], self.lost_out = False, self.lost_out - 1
        if not self.lost[s]:
            self.pipe -= 1
        self.lost[s] = False
        self.delivered += 1
        c.tot_delivered += 1
        self.delivered_time = self.now
        if self.order_idx[s] > self.rack_idx:
            self.rack_idx, self.rack_ts = self.order_idx[s], self.sent_at[s]
            self.rack_rtt = self.now - self.sent_at[s]
        if c.cc == "bbr":
            # Linux's delivery rate: over the longer send/ACK interval, >= min_rtt (tcp_rate_gen)
            d0, t0, f0 = self.deliv_at_send[s]
            self.first_tx = max(self.first_tx, self.sent_at[s])
            span = max(self.now - t0, self.sent_at[s] - f0)
            sample = (self.delivered - d0) * self.wire / span if span >= c.min_rtt else 0.0
            if sample > c.btlbw:
                c.btlbw = sample
            if sample > c.bw_samples.get(c.rounds, 0.0):
                c.bw_samples[c.rounds] = sample
        if (self.deliv_at_send[s][0] >= self.round_end if DELIVERED_ROUNDS
                else s >= self.round_end):
            c.rounds += 1
            self.round_end = self.delivered if DELIVERED_ROUNDS else self.nxt
            self.max_pipe = self.pipe
            limited = (self.deliv_at_send[s][0] == 0 if APP_LIMITED_AT_WRITE  # sent before
                       else self.round_app_limited)  # the response's first delivery: bbr.py
            self.round_app_limited = self.nxt >= self.n
            if c.cc == "bbr":
                bbr_round(self, limited)

    def _on_ack(self, arg):
        cum, s, edge, more = arg
        c, self.echo = self.c, self.now - self.p.rtt / 2  # the ACK's TSval, echoed from now
        self.snd_edge = max(self.snd_edge, edge)
        rtt = self.now - self.sent_at[s]
        if (not self.lost[s] and not self.sacked[s] and s >= self.cum and self.backoff == 0
                and rtt > 0):  # (not an ACK sent before the segment's resend left)
            c.min_rtt = min(c.min_rtt, rtt)
            if not c.srtt:
                c.srtt, c.rttvar = rtt, rtt / 2
            else:
                c.rttvar = 0.75 * c.rttvar + 0.25 * abs(c.srtt - rtt)
                c.srtt = 0.875 * c.srtt + 0.125 * rtt
        newly, self.rs_losses, rounds, una = 0, 0, c.rounds, self.cum
        fresh_sample = not self.sacked[s] and s >= una and not self.resent[s]
        for x in more:  # the other segments its SACK blocks cover
            if x >= self.cum and not self.sacked[x] and x >= cum:
                self.sacked[x] = True
                self._deliver(x)
                newly += 1
        if s >= self.cum and not self.sacked[s] and s >= cum:
            self.sacked[s] = True
            self._deliver(s)
            newly += 1
        while self.cum < cum:
            if not self.sacked[self.cum]:
                self._deliver(self.cum)
                newly += 1
            self.sacked[self.cum] = True
            self.cum += 1
        if newly:
            self.backoff = 0
            self.tlp_done = False
            if fresh_sample and c.cc != "bbr":  # cubictcp_acked
                window.on_sample(self, rtt)
        self._mark_rack_losses()
        if self.in_recovery and self.cum >= self.recovery_point:
            if (CHAINED_RECOVERY and c.cc == "bbr" and self.lost_out
                    and not self.loss_state):  # leaves and re-enters on this ACK: BBR sees
                self.recovery_point = self.nxt  # no exit (no restore, no new conservation)
                c.prior_cwnd = max(c.prior_cwnd, c.cwnd)  # bbr_save_cwnd in Recovery
            elif CHAINED_RECOVERY and self.lost_out and not self.loss_state:
                # a segment still marked lost: Linux ends the reduction (cwnd =
                # ssthresh) and, on the same ACK, enters Recovery again with a
                # new cut from there (tcp_time_to_recover: lost_out)
                c.cwnd = c.ssthresh
                self.recovery_point = self.nxt
                self._window_cut()
            else:
                if c.cc == "bbr":
                    c.cwnd = max(c.cwnd, c.prior_cwnd)
                elif not self.loss_state:  # tcp_end_cwnd_reduction
                    c.cwnd = c.ssthresh
                self.in_recovery = self.loss_state = False
        if not newly or c.cc == "bbr":
            pass
        elif not self.in_recovery or self.loss_state:  # after an RTO: slow start from 1
            if self.cum > una:  # tcp_may_raise_cwnd: the cumulative ACK moved
                window.grow(self, newly)
        else:
            prr(self, newly, self.rs_losses, self.cum > una)
        if c.cc == "bbr":
            if newly:
                lt_sampling(self, c.rounds != rounds, self.deliv_at_send[s][0] == 0)
                ack_aggregation(self, newly, c.rounds != rounds)
            bbr_window(self, newly)
        self._try_send()
        if newly:
            self._arm_timer()

    def run(self):
        window.new_transfer(self.c, self.c.last_send)
        if not self.c.lt.get("use"):  # the idle before a response: application-limited
            self.c.lt.clear()
        self._try_send()
        handlers = {"data": self._on_data, "ack": self._on_ack, "tlp": self._on_tlp,
                    "rto": self._on_rto, "pace": lambda _: self._try_send(),
                    "reo": self._on_reo, "delack": self._on_delack}
        while self.events and self.done is None:
            t, _, kind, arg = heapq.heappop(self.events)
            if t > MAX_TIME:
                break
            self.now = t
            handlers[kind](arg)
        # ACKs still in flight when the receiver completes: the sender's state
        # (window, RTT) at the end of the transfer is what the next one starts with
        while self.events and self.cum < self.n:
            t, _, kind, arg = heapq.heappop(self.events)
            self.now = t
            if kind == "ack":
                self._on_ack(arg)
            elif kind == "delack":  # the last segment's delayed ACK
                self._on_delack(arg)
        self.c.last_send = max(self.sent_at)  # (the next response's clock starts at 0)
        window.end_transfer(self.c, self.now)
        if self.c.cc == "bbr" and self.in_recovery:  # the window is restored as recovery ends
            self.c.cwnd = max(self.c.cwnd, self.c.prior_cwnd)
        return self.done if self.done is not None else MAX_TIME
