"""The client's receive window in the replay (whatif/receiver.py) against
Linux 6.18's receive-buffer autotuning, the rule the lab's client kernel
follows (docs/whatif.md, seventh round): closed forms, and a warmed
lossless connection that the kernel's window never holds."""

import math

import numpy as np
import pytest

from tracekit.whatif import delack
from tracekit.whatif.receiver import Receiver
from tracekit.whatif.tcp import Conn, Path, Transfer

RTT, MSS = 0.08, 1448


def test_the_buffer_grows_one_round_late_with_the_slow_start_term():
    """Slow-start rounds of 10, 20, 40 and 80 segments arrive 1 ms apart,
    each round one RTT + 5 ms after the last, read as they arrive. Linux
    measures what was read over intervals of at least its RTT estimate and,
    at the first read past one, raises the buffer's window to 2 x new +
    4 x new x (new - old) / old (tcp_rcvbuf_grow). The first read ends the
    connection's first interval (1 read: nothing); round 2's first read
    ends the next (10 read, not above the first measure of 10: the clamp
    stays the handshake's 56); round 3's counts 20 (2 x 20 + 4 x 20 x 10 /
    10 = 120), round 4's 40 (240), round 5's 80 (480). rcv_ssthresh, +2 a
    segment into the room, is 55 through round 2 (56 less the segment just
    read), 119 after round 3 (120 less the segment read), and the 80th
    segment, round 4's 10th, is acknowledged with 119 + 2 x 9 = 137
    segments of window (each arrival grows rcv_ssthresh before its read
    raises the buffer, as tcp_event_data_recv runs before tcp_recvmsg). The lab's client
    offers 55.9 through round 2, 117.4 from round 3, 133.7 at the 80th
    segment (median of 9 fresh lossless transfers, rwnd-connection reno);
    the sliding-round rule this model had, 2 x the most read in a round
    trip + 16, offered 95 there."""
    r = Receiver(ssthresh=44.6, clamp=55.9)
    clamps, offers, seg = [], {}, 0
    for k, n in enumerate((10, 20, 40, 80, 1)):
        for i in range(n):
            seg += 1
            r.on_data(k * (RTT + 0.005) + i * 0.001, 1, 0, RTT)
            offers[seg] = r.window(0)
            if i == 0:
                clamps.append(r.clamp)
    assert clamps == [55.9, 55.9, 120.0, 240.0, 480.0]
    assert offers[30] == pytest.approx(54.9) and offers[80] == pytest.approx(137.0)


def _second_response_s(rcv):
    """A lossless Reno connection, 80 ms, 30 Mbit/s, 256 kB of queue: a
    245-segment warm-up response, then the time of the next one."""
    c = Conn(cc="reno")
    c.srtt, c.rttvar, c.min_rtt = RTT, RTT / 2, RTT
    c.rcv = rcv
    path = Path(rtt=RTT, rate=30e6 / 8, queue_bytes=256_000, loss=0.0)
    rng = np.random.default_rng(7)
    Transfer(c, path, 245, MSS, rng).run()
    t = Transfer(c, path, 245, MSS, rng)
    return t.snd_edge, t.run()


def test_a_warmed_lossless_connection_is_not_held_by_the_receive_window(monkeypatch):
    """After a 245-segment warm-up the lab's client offers 427 segments
    (rwnd-connection, persistent reno; tcpi_rwnd_limited 0 in all 9
    measured responses of each congestion control): the window it grew
    during the warm-up (clamp 480 from its fifth round) is past the whole
    next response, so the replay's second response takes the same time
    with the client's window as without it. The sliding-round rule left
    203 segments, which held back the warmed window of 255 that the
    kernel sends into the queue. (Delayed ACKs off in both: with the
    window's model the client delays its ACKs once its window stops
    growing, whatif/delack.py; without it, it ACKs every segment.)"""
    monkeypatch.setattr(delack, "DELAYED", False)
    edge, with_window = _second_response_s(Receiver(ssthresh=44.6, clamp=55.9))
    _, without = _second_response_s(None)
    assert edge >= 245
    assert with_window == pytest.approx(without, abs=1e-9)
    assert math.isfinite(without)


def test_a_filled_hole_restarts_the_measure_without_growing():
    """Linux measures at each segment copied to the application, less what
    is still queued (tcp_rcv_space_adjust: copied -= inq). 9 segments are
    read in an interval begun at 0 (RTT estimate RTT), then 20 wait above
    a hole; past the interval the hole fills and 21 become readable at
    once: the measure runs as the first is copied, 9 + 1 - 20 read is not
    above the first measure of 10, so the buffer stays (55.9) and the
    interval restarts with the 20 still to copy in it; one RTT later a read
    of 1 counts 21: 2 x 21 + 4 x 21 x 11 / 10. The lab's client does the
    same (chapter-case-103: 27 segments released 258 ms into an interval,
    its offer stays 55.9 segments for 440 ms); counting the released
    segments (9 + 21 = 30) would raise the buffer to 300 at the fill. Fed
    the lab's own arrivals (40 fresh transfers, 3.6 %), this model offers
    59.9 / 75.6 / 101.5 / 141.7 segments (means) at the 40th / 60th / 80th /
    120th segment received where the kernel offers 61.4 / 75.6 / 103.2 /
    146.4; without the rule 64.2 / 88.2 / 123.4 / 173.6."""
    r = Receiver(ssthresh=44.6, clamp=55.9, since=0.0, rtt=RTT)
    for i in range(9):
        r.on_data(0.001 * (i + 1), 1, 0, RTT)
    for held in range(1, 21):
        r.on_data(0.01 + 0.001 * held, 0, held + 1, RTT, held)
    assert r.clamp == 55.9
    r.on_data(RTT + 0.01, 21, 0, RTT)
    assert r.clamp == 55.9 and r.space == 10 and r.copied == 20
    r.on_data(2 * RTT + 0.02, 1, 0, RTT)
    assert r.space == 21 and r.clamp == pytest.approx(2 * 21 + 4 * 21 * 11 / 10)


def _one_segment_acks(con):
    """Per connection of a client capture in `con`: the client's ACKs that
    each acknowledge one data packet of the response, before the first that
    acknowledges two."""
    rows = con.execute(
        "SELECT capture_id, flow_id, from_client, payload_bytes FROM packets "
        "WHERE protocol = 6 AND flow_id IS NOT NULL ORDER BY capture_id, frame").fetchall()
    counts, since, done = {}, {}, set()
    for capture, flow_id, from_client, payload in rows:
        flow = (capture, flow_id)
        if flow in done:
            continue
        if not from_client and payload:
            since[flow] = since.get(flow, 0) + 1
        elif from_client and not payload and since.get(flow):
            if since[flow] >= 2:
                done.add(flow)
                continue
            counts[flow] = counts.get(flow, 0) + 1
            since[flow] = 0
    return sorted(counts.values())


def test_the_window_growing_keeps_quickack_mode_as_linux_does(tmp_path, monkeypatch):
    """Linux starts a connection's receiver in quickack mode (16 ACKs, one a
    segment) and each segment that grows rcv_ssthresh sets
    `icsk_ack.quick |= 1` (tcp_grow_window): a bitwise OR, so on an even
    count the growing ACK costs quickack mode nothing. The lab's clients
    ACK 22 data packets one by one before their first ACK of two (the
    response's header packet included) in every lossless connection of the
    delay line's committed captures, CUBIC and Reno, 30 to 110 ms; the
    replay, whose window grows on the first six segments, ACKs 22 one by
    one on each of those paths (16 when a growing ACK spent quickack mode
    like any other, as the replay had it before the twenty-fourth round)."""
    import os
    import sys

    import tracekit
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(root, "tools"))
    import whatif_droplog
    data = os.path.join(root, "tests", "data", "whatif", "delay-line")
    names = ["c-cubic-rtt30-fresh-0.pcap", "c-cubic-rtt90-fresh-0.pcap",
             "c-ren9-rtt110-fresh-0.pcap", "c-l3n-rtt60-nl-fresh-0.pcap"]
    with tracekit.open(str(tmp_path / "k.duckdb")) as s:
        s.ingest([os.path.join(data, n) for n in names])
        kernel = _one_segment_acks(s.con)
    assert len(kernel) == 24 and set(kernel) == {22}
    acked, send = [], Transfer._ack
    monkeypatch.setattr(Transfer, "_ack", lambda t, seg: (acked.append(t.rcv_cum), send(t, seg)))
    for rtt, rate, queue in ((0.030, 1.5e6, 60000), (0.090, 1.5e6, 60000), (0.110, 1.125e6, 90000),
                             (0.060, 1.5e6, 60000)):
        acked.clear()
        whatif_droplog.replay_run({  # one fresh response of 208 segments, nothing lost
            "cc": "cubic", "rtt": rtt, "rate": rate, "queue": queue, "size": 208 * MSS,
            "connections": [{"requests": ["first"], "drops": []}]})
        steps = np.diff([0] + acked)
        assert int(np.argmax(steps >= 2)) == 22, (rtt, steps[:30])
