"""The receiver's advertised window, as Linux's receive side sets it, for the
replay (whatif/tcp.py). In segments.

The client's kernel offers `min(rcv_ssthresh, free space)` past the
cumulative ACK and never moves the right edge back (tcp_select_window):

- rcv_ssthresh starts at the window of the handshake's ACK and grows by
  two segments per data segment received, in order or not
  (tcp_grow_window), but only into the free space: its room is
  min(window clamp, tcp_space) - rcv_ssthresh, so while a hole holds data
  it stops where the held data leaves no room (the lab's 6.18 client keeps
  its offer at 55 segments for 300 ms while 54 wait above a hole in run
  chapter-case-042; docs/whatif.md, fifth round);
- free space is the clamp less what the socket holds: segments above a
  hole wait in the out-of-order queue, and the segments an arrival makes
  readable are still queued when that arrival is acknowledged (the ACK
  leaves before the application reads them: a filled hole first offers a
  small window), so a hole shrinks the room ahead of the cumulative ACK;
- the clamp is the receive buffer's window (tcp_rmem's default at first),
  raised as the lab's Linux 6.18 client does it (tcp_rcv_space_adjust and
  tcp_rcvbuf_grow; docs/whatif.md, seventh round). The receiver measures
  over consecutive intervals of at least its RTT estimate (rcv_rtt: a
  lower sample applies at once, a higher one is smoothed by 1/8); the
  measure runs as a read copies its first segment past the interval's
  end, and counts what was read since the interval began less what is
  still queued (copied -= inq), so a filled hole that releases many
  segments at once restarts the interval instead of growing the buffer.
  A count `new` above the last kept one `old` (`space`, ten segments at
  first) is kept and raises the clamp to 2 x new (one round trip late)
  plus the slow-start term 4 x new x (new - old) / old, plus the span of
  the out-of-order queue (from the hole to the highest segment held); a
  segment that arrives above a hole re-evaluates it with new = old (2 x
  space + span). Read from the lab's captures: a fresh lossless transfer
  offers 55.9 segments through its second round, then 2 x 21 + 4 x 21 x
  10 / 11 = 118 (117.4 offered) from the third, 240 from the fourth and
  480 from the fifth. The rule this model had before (2 x the most read
  in any sliding round trip + 16) offered 95 at the 80th segment where the
  kernel offers 134, and after a 245-segment warm-up left a persistent
  connection 203 segments where the kernel has 427.

A loss therefore costs window too: while a hole is open the application
reads nothing, the buffer is not raised, and the data above the hole takes
the room the sender could use -- the lab's kernel reports this as
`tcpi_rwnd_limited_us` on lossy paths only. The receiver's state lives on
the connection (`Conn.rcv`), so a persistent connection keeps its grown
buffer.
"""

import math
from dataclasses import dataclass

INIT_SPACE = 10          # TCP_INIT_CWND segments: the first autotuning measure
MAX_CLAMP = 4300.0       # tcp_rmem[2] in a namespace (6 MB), as a window of 1,448-byte segments


@dataclass
class Receiver:
    ssthresh: float          # segments: rcv_ssthresh
    clamp: float             # segments: the receive buffer's window
    space: float = INIT_SPACE  # the last interval's reading kept (rcvq_space.space)
    copied: int = 0          # segments read since the interval began
    since: float = -math.inf  # when it began (the transfer's clock; -inf: before this transfer)
    rtt: float = 0.0         # s: the receiver's RTT estimate (rcv_rtt_est); 0: none yet
    unread: int = 0          # segments the latest arrival made readable, queued when it is acked

    def window(self, held):
        """The window offered with `held` segments above a hole."""
        return max(min(self.ssthresh, self.clamp - held - self.unread), 0.0)

    def restart(self):
        """A new response on the connection: the idle before it (a request
        round trip and the server's time) outlasts the receiver's RTT, so
        its first read ends the interval; what was read since carries.
        Returns the window offered as it starts."""
        self.since = -math.inf
        return self.window(0)

    def grow(self, new, span):
        """tcp_rcvbuf_grow: `new` becomes the kept reading; the buffer's
        window rises to 2 x new + 4 x new x (new - old) / old + `span`."""
        old, self.space = self.space, new
        win = 2 * new + 4 * new * (new - old) / old + span
        self.clamp = max(self.clamp, min(win, MAX_CLAMP))

    def on_data(self, now, in_order, span, sample, held=0):
        """A data segment arrived at `now`, `sample` s after the ACK that
        clocked it left (the receiver's RTT sample; the replay: since it was
        sent, plus the ACK's half round trip): `in_order` segments
        became readable (read right after the ACK); `held` segments wait
        above a hole, `span` from the hole to the highest held (0 without
        a hole). Returns whether rcv_ssthresh grew."""
        if sample > 0:  # tcp_rcv_rtt_update: the minimum at once, else smoothed
            self.rtt = sample if not self.rtt or sample < self.rtt else (
                self.rtt + (sample - self.rtt) / 8)
        free = self.clamp - held - in_order
        before = self.ssthresh
        self.ssthresh = max(self.ssthresh, min(self.ssthresh + 2, free))
        self.unread = in_order
        if in_order and now - self.since >= self.rtt:
            # tcp_rcv_space_adjust, run as the read copies its first segment:
            # what was read since the interval began, less what is still queued
            new = self.copied + 1 - (in_order - 1)
            if new > self.space:
                self.grow(new, span)
            self.copied, self.since = in_order - 1, now  # the rest: the next interval
        elif in_order:
            self.copied += in_order
        elif span:  # data queued out of order: tcp_rcvbuf_grow with new = old
            self.grow(self.space, span)
        return self.ssthresh > before  # tcp_grow_window: a quick ACK (icsk_ack.quick |= 1)
