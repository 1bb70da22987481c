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
  chapter-case-042; this model opens to 93 there: its clamp, below, grows
  faster than that kernel's -- docs/whatif.md, fifth round);
- free space is the clamp less what the socket holds: segments above a
  hole wait in the out-of-order queue, and the segments an arrival makes
  readable are still queued when that arrival is acknowledged (the ACK
  leaves before the application reads them: a filled hole first offers a
  small window), so a hole shrinks the room ahead of the cumulative ACK;
- the clamp is the receive buffer's window (tcp_rmem's default at first),
  raised as Linux 6.16 and later do it (tcp_rcvbuf_grow): to twice what
  the application read in a receiver round trip (`space`, ten segments at
  first, kept only when it grows: tcp_rcv_space_adjust, which measures it
  once per round trip; here over the round trip before each arrival), 16
  segments more, plus the span of the out-of-order queue
  (from the hole to the highest segment held), re-evaluated on every
  segment that arrives above a hole. (The 16 segments are the cushion of
  tcp_rcv_space_adjust before 6.16; 6.16's tcp_rcvbuf_grow has none, and
  Linux measures `space` over consecutive intervals of at least its RTT
  estimate, not a sliding one. Done that way, the model's clamp stays
  below the 6.18 client's on these runs -- e.g. 54 against the 70 segments
  chapter-case-066 offers after reading 12 in a round: that kernel's
  growth is not reproduced either way; docs/whatif.md, fifth round.)

A loss therefore costs window too: while a hole is open the application
reads nothing, the buffer is not raised, and the data above the hole takes
the room the sender could use -- the lab's kernel reports this as
`tcpi_rwnd_limited_us` on lossy paths only. The receiver's state lives on
the connection (`Conn.rcv`), so a persistent connection keeps its grown
buffer.
"""

from collections import deque
from dataclasses import dataclass, field

INIT_SPACE = 10          # TCP_INIT_CWND segments: the first autotuning measure
CUSHION = 16             # segments the buffer's window keeps beyond 2 x space
MAX_CLAMP = 4300.0       # tcp_rmem[2] in a namespace (6 MB), as a window of 1,448-byte segments


@dataclass
class Receiver:
    ssthresh: float          # segments: rcv_ssthresh
    clamp: float             # segments: the receive buffer's window
    space: float = INIT_SPACE
    reads: deque = field(default_factory=deque)  # (time, segments read) in the last round trip
    recent: int = 0          # segments read in the last round trip
    unread: int = 0          # segments the latest arrival made readable, queued when it is acked

    def window(self, held):
        """The window offered with `held` segments above a hole."""
        return max(min(self.ssthresh, self.clamp - held - self.unread), 0.0)

    def grow(self, span):
        """tcp_rcvbuf_grow: room for twice the last round's reading, a
        cushion, and `span` segments from the hole to the highest held."""
        self.clamp = max(self.clamp, min(2 * self.space + CUSHION + span, MAX_CLAMP))

    def on_data(self, now, in_order, span, rtt, held=0):
        """A data segment arrived at `now`: `in_order` segments became
        readable (read right after the ACK); `held` segments wait above a
        hole, `span` from the hole to the highest held (0 without a hole)."""
        free = self.clamp - held - in_order
        self.ssthresh = max(self.ssthresh, min(self.ssthresh + 2, free))
        self.unread = in_order
        if in_order:
            self.reads.append((now, in_order))
            self.recent += in_order
        while self.reads and self.reads[0][0] <= now - rtt:
            self.recent -= self.reads.popleft()[1]
        if self.recent > self.space:
            self.space = self.recent
            self.grow(span)
        elif span:
            self.grow(span)
