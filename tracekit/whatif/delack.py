"""When the replay's receiver (the client, Linux) acknowledges: its
delayed ACKs (tcp_input.c, __tcp_ack_snd_check and tcp_event_data_recv).

- At once: the first 16 data segments of a connection (quickack mode:
  min(rcv_wnd / 2 MSS, 16) ACKs, tcp_incr_quickack), one on which the
  receive window grew (tcp_grow_window sets icsk_ack.quick: while the
  client's buffer autotunes upwards, as on a fresh connection's fast
  transfer, nearly every segment; the lab's fresh lossless BBR runs ACK
  0.84 of their data segments, the warm ones 0.59; without the window's
  model, whatif/receiver.py, every segment), a segment above a hole
  (the out-of-order queue is not empty: a SACK, at most ~1 ms compressed,
  taken as at once), the segment that fills a hole (ICSK_ACK_NOW), a
  duplicate (D-SACK; it also re-enters quickack mode), and every second
  in-order segment (more than one full segment since the last ACK).
- Else the delayed-ACK timer: TCP_DELACK_MIN, 40 ms, after the segment.

So a sender whose window is a few segments waits up to 40 ms for the ACK
of an odd last one: the lab's Reno at 2.5 % loss on 50 ms sends 1, 2, 2,
3 segments a round after a second cut, each round ~90 ms (docs/whatif.md,
eighth round). Off (`DELAYED = False`) the receiver acknowledges every
segment at once, as the replay did before.
"""

DELAYED = True
QUICKACKS = 16
DELACK = 0.040  # s, TCP_DELACK_MIN (and TCP_ATO_MIN)


class Acks:
    """The receiver's ACK state over one transfer; `quick` carries quickack
    mode over from a connection's start."""

    def __init__(self, fresh):
        self.quick = QUICKACKS if fresh else 0
        self.pending = 0   # in-order segments not yet acknowledged
        self.gen = 0       # the delayed-ACK timer's generation

    def now(self, in_order, had_hole, duplicate, grew=False):
        """Whether this arrival is acknowledged at once (else the timer);
        `grew`: the receive window's rcv_ssthresh grew on it."""
        if not DELAYED:
            return True
        if grew:
            self.quick = max(self.quick, 1)
        if duplicate:
            self.quick = QUICKACKS
            return True
        if not in_order or had_hole:
            return True
        self.pending += 1
        if self.quick:
            self.quick -= 1
            return True
        return self.pending >= 2

    def sent(self):
        self.pending = 0
        self.gen += 1
