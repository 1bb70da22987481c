"""Streams that share one link (docs/timing-model.md, Multiplexed streams).

Two mechanisms, kept apart:

- send scheduling: which stream's bytes the sender puts on the link next.
  FIFO sends whole messages in the order they became ready; preemptive
  priority sends the most urgent ready stream's bytes, interrupting a less
  urgent one when a more urgent one becomes ready (`link_schedule`);
- delivery order at the receiver: with one connection-wide byte stream (TCP,
  so HTTP/2) a byte reaches the application only when every byte sent before
  it on the connection has arrived; with per-stream order (QUIC, so HTTP/3)
  only when every byte before it in its own stream has (`delivery_times`).

Seconds and bytes; a piece is a contiguous run of one stream's bytes sent
without interruption. Public through `tracekit.model`.
"""

from typing import NamedTuple

import numpy as np


class Piece(NamedTuple):
    stream: int      # index into the streams given
    start: float     # its first byte starts onto the link
    end: float       # its last byte has left
    offset: int      # first stream offset it carries
    size: int        # bytes


def link_schedule(sizes, ready, rate, priority=None, committed=0, slowed=None):
    """The pieces a link of `rate` bytes/s sends, in send order.

    Stream i has sizes[i] bytes, all ready at ready[i]. Without `priority`
    the link is FIFO: whole streams in ready order (ties in index order).
    With it, preemptive priority: at every instant the ready, unfinished
    stream of lowest priority[i] (ties: earlier ready, then index) is sent;
    a more urgent stream becoming ready cuts the current piece there, or
    `committed` bytes later: what the sender had already handed on (a socket
    buffer, a frame being written) goes first, whatever its priority.

    `slowed`: [(t0, t1, pace)], the sender's loss recovery periods (TCP's
    from its first retransmission until the cumulative ACK passes the
    recovery point, RFC 6582; QUIC's RFC 9002 7.3.2): with its window cut
    and the hole keeping its bytes unacknowledged the sender hands on only
    `pace` bytes/s of what is queued, so from t0 to t1 the queued streams'
    bytes leave at `pace` -- every stream under FIFO, the less urgent ones
    under priority (an urgent stream's few bytes still go at `rate`); a
    piece under way at t0 or t1 is cut there, and at pace 0 the link idles.
    None or [] is the lossless schedule."""
    sizes = [int(s) for s in sizes]
    ready = [float(r) for r in ready]
    n = len(sizes)
    if priority is None:
        order = sorted(range(n), key=lambda i: (ready[i], i))
        priority = [0] * n
        key = {i: k for k, i in enumerate(order)}
        queued = set(range(n))
    else:
        key = {i: (priority[i], ready[i], i) for i in range(n)}
        queued = {i for i in range(n) if priority[i] > min(priority)}
    periods = sorted((float(a), float(b), float(p)) for a, b, p in slowed or () if b > a)
    left = list(sizes)
    sent = [0] * n
    pieces, now = [], 0.0
    while any(left):
        waiting = [i for i in range(n) if left[i] and ready[i] <= now]
        if not waiting:
            now = min(ready[i] for i in range(n) if left[i])
            continue
        i = min(waiting, key=key.get)
        pace, edge = _pace(periods, now, rate) if i in queued else (rate, np.inf)
        end = now + left[i] / pace if pace > 0 else np.inf
        cut = [ready[j] + committed / rate for j in range(n) if left[j] and now < ready[j]
               and ready[j] + committed / rate < end and priority[j] < priority[i]]
        if edge < end:
            cut.append(edge)
        if cut:
            end = min(cut)
        size = left[i] if not cut else min(left[i], round((end - now) * pace))
        if size > 0:
            pieces.append(Piece(i, now, end, sent[i], size))
        sent[i] += size
        left[i] -= size
        now = end
    return pieces


def _pace(periods, now, rate):
    """(the pace at `now`, when it next changes) under link_schedule's
    recovery periods."""
    for t0, t1, pace in periods:
        if t0 <= now < t1:
            return min(pace, rate), t1
        if now < t0:
            return rate, t0
    return rate, np.inf


def gated_ahead(committed, piece, rate, round_trip):
    """Bytes ahead of an urgent message at the bottleneck when the sender
    writes its next less urgent piece only while fewer than `committed`
    bytes are unacknowledged: the gate holds `committed` plus, on average,
    half a `piece`, less the round trip's worth (`rate` x `round_trip`)
    already past the bottleneck and waiting only for its ACK. With the link
    kept busy by the less urgent stream, the urgent one leaves
    gated_ahead / rate after it is ready (give link_schedule that later
    ready time). Never below 0."""
    return max(0.0, committed + piece / 2 - rate * round_trip)


def drained_ahead(ahead, rate, rate_after, since):
    """Bytes still ahead of an urgent message at the bottleneck `since`
    seconds after the sender slowed to `rate_after` (link_schedule's
    `slowed`): the queue of `ahead` bytes (gated_ahead) drains at the link's
    `rate` less what the sender still adds, rate_after. `ahead` before the
    slowdown (since <= 0) and when the sender did not slow; never below 0."""
    if since <= 0 or rate_after >= rate:
        return float(ahead)
    return max(0.0, ahead - (rate - rate_after) * since)


def held_chance(ahead_bytes, hole, piece):
    """The chance that a hole at byte `hole` of a less urgent stream lies
    before an urgent message in one byte stream, when the sender writes the
    less urgent stream in whole `piece`s behind a gate and a schedule puts
    `ahead_bytes` of it before the message on average (link_schedule with
    gated_ahead's half piece). The bytes really written first are whole
    pieces, floor(ahead_bytes / piece - 1/2 + U) of them with the gate's
    phase U uniform in [0, 1); the hole is ahead when they reach past the
    hole's piece: clip(ahead_bytes / piece + 1/2 - (hole // piece + 1),
    0, 1)."""
    return min(1.0, max(0.0, ahead_bytes / piece + 0.5 - (hole // piece + 1)))


def stream_schedule(pieces, n_streams):
    """Per stream, (first byte sent, last byte sent): the start of its first
    piece and the end of its last."""
    first = np.full(n_streams, np.nan)
    last = np.full(n_streams, np.nan)
    for p in pieces:
        if np.isnan(first[p.stream]):
            first[p.stream] = p.start
        last[p.stream] = p.end
    return first, last


def delivery_times(pieces, n_streams, delay=0.0, holes=(), order="connection"):
    """Per stream, (complete, deliverable) in seconds.

    A piece arrives at its end + delay; a hole (stream, offset, repaired_at)
    says the byte at that offset of that stream arrived only at repaired_at
    (its loss recovery), so the piece carrying it arrives then. complete:
    the stream's last piece to arrive. deliverable: under
    order="connection" the latest arrival of every piece sent up to the
    stream's last piece (one byte stream: the in-order point); under
    order="stream" the stream's own complete time. deliverable - complete is
    head-of-line time."""
    if order not in ("connection", "stream"):
        raise ValueError(f"order must be 'connection' or 'stream', not {order!r}")
    arrival = [p.end + delay for p in pieces]
    for stream, offset, repaired in holes:
        for k, p in enumerate(pieces):
            if p.stream == stream and p.offset <= offset < p.offset + p.size:
                arrival[k] = max(arrival[k], repaired)
    complete = np.full(n_streams, np.nan)
    deliverable = np.full(n_streams, np.nan)
    in_order = -np.inf
    for k, p in enumerate(pieces):
        in_order = max(in_order, arrival[k])
        complete[p.stream] = np.fmax(complete[p.stream], arrival[k])
        if order == "connection":
            deliverable[p.stream] = in_order
    if order == "stream":
        deliverable = complete.copy()
    return complete, deliverable


def on_time_seconds(arrivals, play_times, durations):
    """Seconds of media that arrived by their play time: the sum of
    durations[i] over chunks with arrivals[i] <= play_times[i]. A late chunk
    counts nothing, however many of its bytes arrived."""
    arrivals = np.asarray(arrivals, dtype=float)
    play = np.asarray(play_times, dtype=float)
    dur = np.broadcast_to(np.asarray(durations, dtype=float), arrivals.shape)
    return float(dur[arrivals <= play].sum())
