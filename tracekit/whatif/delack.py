"""The replay's client (whatif/tcp.py's Transfer, `ClientSide`): what it holds,
the window it offers, and when it acknowledges -- Linux's delayed ACKs
(tcp_input.c, __tcp_ack_snd_check and tcp_event_data_recv).

- At once: the first 16 ACKs of a connection (quickack mode:
  min(rcv_wnd / 2 MSS, 16) ACKs, tcp_incr_quickack), one on which the
  receive window grew (tcp_grow_window sets `icsk_ack.quick |= 1`, a
  bitwise OR: on an even count the growing ACK leaves quickack mode as it
  was, so a fresh connection whose window grows on its first six segments
  ACKs 22 one by one, as the lab's clients do in every lossless connection
  of the committed delay-line captures -- 16 with the count spent as for
  any ACK, the replay's rule before the twenty-fourth round; while the
  client's buffer autotunes upwards, as on a fresh connection's fast
  transfer, nearly every segment; the lab's fresh lossless BBR runs ACK
  0.84 of their data segments, the warm ones 0.59; without the window's
  model, whatif/receiver.py, every segment; tcp_grow_window runs for
  out-of-order segments too), the segment that fills a hole
  (ICSK_ACK_NOW), a
  duplicate (D-SACK; it also re-enters quickack mode), and every second
  in-order segment (more than one full segment since the last ACK).
- Else the delayed-ACK timer: TCP_DELACK_MIN, 40 ms, after the segment;
  or, for a segment above a hole once the first 3 duplicate ACKs for that
  hole are out, SACK compression (tcp_comp_sack: one ACK after
  min(1 ms, RTT / 20), or at once when 44 are held back). The ACK then
  SACKs every segment that arrived since the last (the replay's ACK
  carries them: `more`).

So a sender whose window is a few segments waits up to 40 ms for the ACK
of an odd last one: the lab's Reno at 2.5 % loss on 50 ms sends 1, 2, 2,
3 segments a round after a second cut, each round ~90 ms (docs/whatif.md,
eighth round). Off (`DELAYED = False`) the receiver acknowledges every
segment at once, as the replay did before.

The receiver's RTT estimate, which times its buffer's growth
(whatif/receiver.py), takes a sample from the timestamps the sender
echoes: Linux's clock ticks in whole milliseconds and a sample is taken
only where the echo is new (tcp_rcv_rtt_measure_ts), so the estimate is
101 or 102 ms on a 101.6 ms path, and whether a round's first or second
segment ends the receiver's interval -- 20 or 21 segments read, then 40 or
39 -- turns on where the clock ticks. On a fresh CUBIC transfer that
decides where the window stops growing, so where the ACKs stop coming one
a segment and whether HyStart's ACK train ends slow start at 124 segments
or the window runs on to 204 (the kernel's own tracepoints: docs/whatif.md,
twenty-third round). `TS_CLOCK` replays those ticks, the phase drawn once
a transfer; it is off: on, the share of transfers on either side is not
yet the kernel's (at 150 ms slow start runs on in 11 transfers of 40, the
kernel's in 7 connections of 14), and the held-out sets do not move
(docs/whatif.md).
"""

import math

DELAYED = True
TS_CLOCK = False  # the receiver's RTT samples in the timestamps' ticks (docstring)
TS_TICK = 0.001  # s, TCP_TS_HZ
TS_PHASE = None  # s: where the client's clock ticks (None: drawn a transfer; tools fix it)
QUICKACKS = 16
DELACK = 0.040  # s, TCP_DELACK_MIN (and TCP_ATO_MIN)
COMPRESS = 0.001  # s, tcp_comp_sack_delay_ns (0: a SACK for each segment)
COMP_SACK_NR = 44  # tcp_comp_sack_nr


def clock_phase(rng):
    """Where the client's timestamp clock ticks against the transfer's clock
    (s, under a tick), drawn once a transfer from a child of `rng`, so that
    the transfer's own draws (the loss chain's, the jitter's) are the ones
    they were (a scripted stand-in without children: 0)."""
    if not TS_CLOCK:
        return 0.0
    if TS_PHASE is not None:
        return TS_PHASE
    spawn = getattr(rng, "spawn", None)
    return spawn(1)[0].random() * TS_TICK if spawn else 0.0


class Acks:
    """The receiver's ACK state over one transfer; `quick` carries quickack
    mode over from a connection's start."""

    def __init__(self, fresh):
        self.quick = QUICKACKS if fresh else 0
        self.pending = 0     # in-order segments not yet acknowledged
        self.unacked = []    # segments received since the last ACK (its SACK blocks)
        self.gen = 0         # the timer's generation: an ACK sent cancels it
        self.armed = False
        self.compressed = 0  # SACKs held back since the last ACK (tp->compressed_ack)
        self.dup_at, self.dups = -1, 0  # rcv_nxt of the duplicate ACKs counted, and how many

    def now(self, in_order, had_hole, duplicate, grew=False, ofo=False, rcv_nxt=0, rtt=0.0):
        """When this arrival is acknowledged: 0 (at once), a delay (s) for
        a timer, or None (a timer already runs). `grew`: the receive window's
        rcv_ssthresh grew on it; `ofo`: segments wait above a hole now."""
        if not DELAYED:
            return 0
        if grew:
            self.quick |= 1  # (tcp_grow_window: icsk_ack.quick |= 1, a bitwise OR)
        if duplicate:
            self.quick = QUICKACKS
            return 0
        if in_order and not had_hole:
            self.pending += 1
        if in_order and had_hole and not ofo:
            return 0  # the hole filled: ICSK_ACK_NOW
        if self.quick:
            self.quick -= 1
            return 0
        if self.pending >= 2:
            return 0
        if not ofo:
            return self._timer(DELACK)
        if COMPRESS == 0 or self.compressed >= COMP_SACK_NR:
            return 0
        if self.dup_at != rcv_nxt:
            self.dup_at, self.dups = rcv_nxt, 0
        if self.dups < 3:  # TCP_FASTRETRANS_THRESH duplicate ACKs at once
            self.dups += 1
            return 0
        self.compressed += 1
        return self._timer(min(COMPRESS, rtt / 20))

    def _timer(self, delay):
        if self.armed:
            return None
        self.armed = True
        return delay

    def sent(self):
        self.pending = self.compressed = 0
        self.unacked = []
        self.armed = False
        self.gen += 1


class ClientSide:
    """The client's half of a transfer (whatif/tcp.py's Transfer): a segment
    arrives, is held (in order or above a hole), grows the window it
    offers (whatif/receiver.py) and is acknowledged as `Acks` decides."""

    def _on_data(self, s):
        duplicate, before, held_before = self.rcv[s], self.rcv_cum, self.rcv_got - self.rcv_cum
        grew = True  # without the receive window's model: an ACK for each segment
        if not duplicate:
            self.rcv[s] = True
            self.rcv_got += 1
            while self.rcv_cum < self.n and self.rcv[self.rcv_cum]:
                self.rcv_cum += 1
            if self.rcv_cum == self.n and self.done is None:
                self.done = self.now
            self.rcv_top = max(self.rcv_top, s + 1)
            r = self.c.rcv
            if r is not None:  # the window it offers: never a right edge moved back
                held = self.rcv_got - self.rcv_cum
                grew = r.on_data(self.now, self.rcv_cum - before, self.rcv_top - self.rcv_cum if held
                          else 0, self._rtt_sample(s), held)
                self.rcv_edge = max(self.rcv_edge, self.rcv_cum + int(r.window(held)))
        a = self.rcv_acks
        if not duplicate:
            a.unacked.append(s)
        when = a.now(s == before, held_before > 0, duplicate, grew, self.rcv_got > self.rcv_cum,
                     self.rcv_cum, self.p.rtt)
        if when == 0:
            self._ack(s)
        elif when is not None:  # the delayed-ACK or the SACK-compression timer
            self._at(self.now + when, "delack", a.gen)

    def _rtt_sample(self, s):
        """The receiver's RTT sample on segment s (tcp_rcv_rtt_measure_ts): the
        client's millisecond timestamp clock now less the TSval the segment
        echoes (the client's ACK or request the sender last had when it sent
        s); none (0) where that echo is the one sampled before."""
        if not TS_CLOCK:
            return self.now - self.sent_at[s] + self.p.rtt / 2
        echo = math.floor((self.echo_at[s] + self.ts_phase) / TS_TICK)
        if echo == self.echoed:
            return 0.0
        self.echoed = echo
        return (math.floor((self.now + self.ts_phase) / TS_TICK) - echo) * TS_TICK

    def _on_delack(self, gen):
        if gen == self.rcv_acks.gen and self.rcv_acks.unacked:
            self._ack(self.rcv_acks.unacked[-1])

    def _ack(self, s):
        """An ACK for segment s, SACKing too what arrived since the last
        (compressed SACKs, delayed ACKs)"""
        more = tuple(x for x in self.rcv_acks.unacked if x != s)
        self.rcv_acks.sent()
        if self.p.loss_up and self.rng.random() < self.p.loss_up:
            return
        t = self.now + self.p.rtt / 2
        if self.p.jitter:
            t = self.last_ack = max(t + self.p.jitter / 2 * self.rng.random(), self.last_ack)
        self._at(t, "ack", (self.rcv_cum, s, self.rcv_edge, more))
