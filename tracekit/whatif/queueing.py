"""The bottleneck's queue from one-way delay, for the calibration
(whatif/calibrate.py).

A sender that stamps its segments (TCP timestamps, RFC 7323: Linux's TSval
counts milliseconds) says when each left it; a capture at the client says
when it arrived. Arrival less the stamp is the one-way delay plus the two
clocks' offset, which is constant over a flow (drift is parts per million:
a few microseconds over a transfer). Its smallest value over the flow is
the delay with an empty queue, so each segment's excess over it is the
time it waited at the bottleneck, to one tick of the sender's clock. The
largest wait is the queue's depth in time: times the bottleneck rate, its
size in bytes.

Which losses were the queue's: a drop-tail queue drops what arrives when
it is full, so the segment sent just before a lost one (the last before a
run of them) entered a queue all but full and waited (nearly) the longest.
(Not the one after: a sender that overflows the queue at the end of its
window sends the next segment a round trip later, into a drained queue.)
A loss is read as the queue overflowing when that wait is within `FULL`
of the flow's largest (or two ticks of the clock, whichever is more); the
others are random loss. Random losses also fall at a full queue now and
then -- as often as segments arrived with such a wait -- so the reading
holds only where more losses were at a full queue than random loss would
put there but once in `UNLIKELY` (binomial, at that share, one trial a
witness: a run of drops behind one segment is one loss event); else none
is the queue's. (Twice the share was too weak: one loss of eight at a full
queue, or ten of 434 against 4.4, took the lab's random losses for the
queue's.)

The sender's clock rate is read from the flow itself (ticks over seconds
between its first and last data segment, to the nearest of the rates
stacks use, within `CLOCK_SLACK`: the last arrival is late by the queue
the flow built); a flow shorter than `MIN_SPAN_S`, one with a clock rate
matching none of them, or one whose ticks are too coarse for its waits,
says nothing -- unless its group's other flows held the queue longer than
four ticks: then it is judged against that (`held`), a full queue it never
came near (a burst of random loss in its first flights cuts it short).

A capture at the server sees its segments leave, not arrive: there the
wait is a segment's round trip less the flow's smallest -- timed by the
cumulative ACK that first reached its end (tcp_analysis.rtt_ns, Karn's
rule) or, behind an open hole, by the SACK block whose right edge it
first was (segments sent once only; a D-SACK is no sample) -- and no
longer than a FIFO queue allows (`_unheld`: a longer one is the client
holding its ACK). A lost segment's own ACK never comes; the segment
before it entered the queue just before the drop. So at a server losses
are read by episode: those sent within one round trip of the episode's
first, or in a run of drops at most `CHAIN` segments apart (without SACKs
the later holes of a slow start that overshoots have no ACK to time), are
the queue's when a witness's wait is within `FULL` of the flow's largest
-- the largest that `PLATEAU` samples reach: a full queue holds many
segments as long, an ACK the client held is alone above it. A flow seen
between the two, or at an unknown vantage, says nothing.
"""

import math

import numpy as np

RATES_HZ = (1.0, 10.0, 100.0, 250.0, 1000.0, 1_000_000.0)  # TSval clocks stacks use
MIN_SPAN_S = 0.05  # a flow's data must span this to read its clock's rate
# how far the ticks over the seconds may be from the nearest rate: the queue a
# flow builds moves its last arrival later by its wait (120 ms of a 0.78 s
# Reno flow at 4 Mbit/s: 15 %); the rates are 2.5x apart at the closest
CLOCK_SLACK = 0.25
FULL = 0.15  # a wait within this share of the largest: the queue was full
UNLIKELY = 1e-3  # random loss putting this many at a full queue: no likelier than this
CHAIN = 3  # at a server, drops with at most this many segments sent between: one episode
SACK_TIMED = True  # at a server, segments timed by the SACK block they end too (off: by ACKs alone)
BY_EVENT = True  # at a client the full-queue test counts witnesses (off: lost segments)
PLATEAU, PLATEAU_S = 3, 0.002  # a server's largest wait: the one 3 of its ACKs reach, within 2 ms


def read(con, flows, rate=None):
    """{(capture, flow): (largest wait s, lost seqs at a full queue, lost seqs,
    share of segments that arrived at a full queue)} for the flows ({(capture,
    flow): vantage}, as requests.vantage has it) whose server stamped its
    segments (client vantage) or whose ACKs time them (server vantage);
    others are left out. `rate` (bytes/s, the bottleneck's) bounds how fast
    a server's ACKs may say the queue grew (`_unheld`)."""
    out, unread = {}, {}
    for (cap, fl), vantage in flows.items():
        if vantage == "server":
            got = _server_flow(con, cap, fl, rate)
            if got is not None:
                out[(cap, fl)] = got
            continue
        rows = con.execute("""SELECT a.ts_ns, p.tcp_tsval, a.rel_seq FROM tcp_analysis a
            JOIN packets p ON p.capture_id = a.capture_id AND p.frame = a.frame
            WHERE a.capture_id = ? AND a.flow_id = ? AND NOT a.from_client
              AND a.payload_bytes > 0 AND p.tcp_tsval IS NOT NULL
            ORDER BY a.ts_ns""", [cap, fl]).fetchall()
        lost = lost_segments(con, cap, fl)
        got = _flow(rows, lost)
        if got is not None:
            out[(cap, fl)] = got
        elif lost:
            unread[(cap, fl)] = (rows, lost)
    # a flow that never waited four ticks says nothing of a queue that shallow,
    # but against one its group saw hold far longer its losses are not a full
    # queue's (a burst in the first flights: set 22's L1, docs/whatif.md)
    ceiling = held(out) if out and unread else 0.0
    for k, (rows, lost) in unread.items():
        got = _flow(rows, lost, ceiling)
        if got is not None:
            out[k] = got
    return out


def lost_segments(con, cap, fl):
    """The response's segments sent again, not spuriously: its losses."""
    return {r[0] for r in con.execute("""SELECT rel_seq FROM retransmissions
        WHERE capture_id = ? AND flow_id = ? AND direction = 's2c'
          AND NOT coalesce(spurious, false)""", [cap, fl]).fetchall()}


def _flow(rows, lost, ceiling=0.0):
    """A client flow's reading; None where its clock or its waits say
    nothing. `ceiling` (s): the longest wait its group's flows held, the
    full queue for a flow that never came near it (else its own longest)."""
    if len(rows) < 2:
        return None
    t = np.array([r[0] for r in rows], dtype=np.int64)
    ticks = np.array([r[1] for r in rows], dtype=np.int64)
    ticks = (ticks - ticks[0]) % (1 << 32)  # the stamp wraps at 2^32
    span = (t[-1] - t[0]) / 1e9
    if span < MIN_SPAN_S or ticks[-1] <= 0:
        return None
    hz = min(RATES_HZ, key=lambda r: abs(np.log(ticks[-1] / span / r)))
    if abs(ticks[-1] / span / hz - 1) > CLOCK_SLACK:
        return None
    delay = (t - t[0]) / 1e9 - ticks / hz
    wait = delay - delay.min()
    largest = float(wait.max())
    top = max(largest, ceiling)
    if top < 4 / hz:  # ticks too coarse to tell a full queue from an empty one
        return None
    seqs = [r[2] for r in rows]
    first = {}
    for i, s in enumerate(seqs):
        first.setdefault(s, i)
    order = sorted(first)
    before = dict(zip(order[1:], order))
    full, witnessed = set(), {}
    threshold = top - max(FULL * top, 2 / hz)
    for s in lost:
        n = before.get(s)
        while n in lost:  # a run of drops: the last segment before it that arrived
            n = before.get(n)
        if n is None:
            continue
        witnessed[n] = wait[first[n]] >= threshold
        if witnessed[n]:
            full.add(s)
    share = float(np.mean(wait >= threshold))
    return largest, full, lost, share, (len(witnessed), sum(witnessed.values()))


def overflowed(reading):
    """(lost seqs at a full queue per flow, the flows' largest waits) where
    more losses fell at a full queue than random loss would put there (at
    the share of segments that arrived at a full queue) with odds of
    `UNLIKELY` or less; ({}, []) where they did not. At a client, counted by
    witness: a run of drops has one, so a burst of random loss, eight in a
    row behind a segment that waited long, is one trial, not eight (set
    18's bursts read as the queue's, docs/whatif.md). At a server by
    segment (`_server_flow`)."""
    if BY_EVENT:
        lost = sum(v[4][0] for v in reading.values())
        at_full = sum(v[4][1] for v in reading.values())
        chance = sum(v[4][0] * v[3] for v in reading.values())
    else:
        lost = sum(len(v[2]) for v in reading.values())
        at_full = sum(len(v[1]) for v in reading.values())
        chance = sum(len(v[2]) * v[3] for v in reading.values())
    if not at_full or _tail(lost, chance / lost, at_full) > UNLIKELY:
        return {}, []
    return ({k: v[1] for k, v in reading.items() if v[1]},
            [v[0] for v in reading.values() if v[1]])


def held(reading):
    """The longest wait (s) the flows of a reading had at the bottleneck,
    as `PLATEAU` of them reach it (within `PLATEAU_S`; the largest where
    fewer flows were read): a queue that held it is at least that deep,
    whether or not it ever overflowed. 0 without a reading."""
    largest = [v[0] for v in reading.values()]
    if len(largest) < PLATEAU:
        return float(max(largest, default=0.0))
    return _plateau(np.array(largest))


def _server_flow(con, cap, fl, rate=None):
    data = con.execute("""SELECT ts_ns, rel_seq, rel_end, payload_bytes FROM tcp_analysis
        WHERE capture_id = ? AND flow_id = ? AND NOT from_client AND payload_bytes > 0
        ORDER BY ts_ns""", [cap, fl]).fetchnumpy()
    ts = data["ts_ns"].astype(np.int64)
    sent, first, copies = {}, {}, {}  # by rel_seq; by (rel_seq, rel_end): its first send, copies
    for t, q, e in zip(ts.tolist(), data["rel_seq"].tolist(), data["rel_end"].tolist()):
        sent.setdefault(q, t)
        first.setdefault((q, e), t)
        copies[(q, e)] = copies.get((q, e), 0) + 1
    once = {e: (q, first[(q, e)]) for (q, e), n in copies.items() if n == 1}
    samples = _round_trips(con, cap, fl, once)
    if len(samples) < 2:
        return None
    base = min(r for _, _, r in samples)
    rtt = dict(_unheld(samples, rate, (ts, np.cumsum(data["payload_bytes"], dtype=np.int64))))
    wait = np.array([r - base for r in rtt.values()])
    largest = _plateau(wait)
    lost = lost_segments(con, cap, fl)
    threshold = largest - FULL * largest
    times = np.sort(np.fromiter(sent.values(), dtype=np.int64))
    full, episode, start, last = set(), [], None, None
    for s in sorted((x for x in lost if x in sent), key=sent.get) + [None]:
        if s is None or start is None or (
                sent[s] - start > base * 1e9  # a round trip after the episode's first
                and (sent[s] - last > base * 1e9  # and not in a run of drops a few
                     or np.searchsorted(times, sent[s])  # segments apart
                     - np.searchsorted(times, last, "right") > CHAIN)):
            waits = [rtt[x] - base for x in episode if x in rtt]
            if waits and max(waits) >= threshold and largest > 0:
                full.update(episode)
            if s is None:
                break
            episode, start = [], sent[s]
        episode.append(s)
        last = sent[s]
    # (counted by segment: an episode here spans a round trip or more, random
    # drops and the queue's together -- BBR's 375 drops in 8 of them)
    return (largest, full, lost, float(np.mean(wait >= threshold)) if largest > 0 else 0.0,
            (len(lost), len(full)))


def _round_trips(con, cap, fl, once):
    """[(send ns, end, round trip s)] of the response segments sent once
    (`once`: {rel_end: (rel_seq, send ns)}) that an ACK from the client
    timed, in the order sent: the cumulative ACK that first reached a
    segment's end (Karn's sample, tcp_analysis.rtt_ns), or the SACK block
    whose right edge it first was. Behind an open hole the cumulative ACK
    stands still and the segments that arrive are SACKed, each extending a
    block to its end as it arrives (BBR under random loss keeps its queue
    full through recovery and overflows it there: 221 of 355 such drops
    had no cumulative ACK to time them)."""
    got = {}
    for end, r in con.execute("""SELECT rel_ack, min(rtt_ns) FROM tcp_analysis
            WHERE capture_id = ? AND flow_id = ? AND from_client AND rtt_ns IS NOT NULL
            GROUP BY rel_ack""", [cap, fl]).fetchall():
        got[end] = r / 1e9
    if SACK_TIMED:
        for ts, rel_ack, raw_ack, rights in con.execute("""SELECT a.ts_ns, a.rel_ack,
                p.tcp_ack, p.tcp_sack_right FROM tcp_analysis a JOIN packets p
                ON p.capture_id = a.capture_id AND p.frame = a.frame
                WHERE a.capture_id = ? AND a.flow_id = ? AND a.from_client
                  AND p.tcp_sack_right IS NOT NULL AND a.rel_ack IS NOT NULL
                ORDER BY a.ts_ns""", [cap, fl]).fetchall():
            for raw in rights or ():
                # the edge relative to this ACK (the sequence space wraps at 2^32)
                ahead = (raw - raw_ack) % (1 << 32)
                if not 0 < ahead < 1 << 31:
                    continue  # at or below the cumulative ACK: a D-SACK, no sample
                end = rel_ack + ahead
                if end in once and end not in got:
                    got[end] = (ts - once[end][1]) / 1e9
    return sorted((once[e][1], e, r) for e, r in got.items() if e in once)


def _unheld(samples, rate, sent):
    """[(end, round trip s)] of `samples` ([(send ns, end, round trip s)] in
    the order sent), each round trip no longer than a FIFO queue allows: a
    segment waits at most the serialisation of the bytes sent between it
    and an earlier segment (`sent`: the flow's data segments' send times
    and their bytes so far, retransmissions included) longer than that one,
    so a longer round trip is the client holding its ACK -- its
    delayed-ACK timer when nothing came after the segment (the last before
    a run of drops: Reno at 150 ms, each warm response's first hole timed
    by an ACK held 44 ms, read as an 82 ms queue in a 40 ms one). Capped
    there, with `PLATEAU_S` for the clocks; as read without a rate. (The
    bound holds for a queue this flow has alone.)"""
    times, total = sent
    out, prev = [], None
    for t_sent, end, t in samples:
        upto = total[np.searchsorted(times, t_sent, "right") - 1]
        if rate and prev is not None:
            t = min(t, prev[1] + max(upto - prev[0], 0) / rate + PLATEAU_S)
        out.append((end, t))
        prev = (upto, t)
    return out


def _plateau(wait):
    """The largest wait that PLATEAU of the ACKs reach, within PLATEAU_S of
    it: a full queue holds every segment that arrives while it is full as
    long, while an ACK held by the client (its delayed-ACK timer, its
    application) is a single sample above it (a warm CUBIC flow at 120 ms:
    five ACKs at 46.6 ms, the queue's, and two at 82 and 92 ms, which made
    every drop look early)."""
    w = np.sort(wait)[::-1]
    for i in range(len(w) - PLATEAU + 1):
        if w[i] - w[i + PLATEAU - 1] <= PLATEAU_S:
            return float(w[i])
    return float(w[0])


def _tail(n, p, k):
    """P(X >= k) for X binomial (n, p)."""
    if p <= 0:
        return 0.0 if k > 0 else 1.0
    if p >= 1:
        return 1.0
    log = math.lgamma(n + 1)
    return min(1.0, sum(math.exp(log - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                                 + i * math.log(p) + (n - i) * math.log1p(-p))
                        for i in range(k, n + 1)))
