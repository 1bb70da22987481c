"""The emulator's per-direction decisions (tracekit.lab.wan.Link) against
their closed forms: it is given the time, so no namespace is needed."""

import random

import pytest

from tracekit.lab.wan import Direction, Link


def run(direction, n=200_000, gap=0.001, seed=5):
    link = Link(direction, random.Random(seed))
    out = []
    for i in range(n):
        arrive, reason = link.admit(i * gap, 1000)
        out.append((i * gap, arrive, reason))
    return out


def test_bernoulli_loss_rate():
    got = run(Direction(delay_ms=10, loss=0.05))
    lost = sum(1 for _, _, r in got if r == "loss") / len(got)
    assert lost == pytest.approx(0.05, abs=0.003)
    assert all(a - t == pytest.approx(0.010) for t, a, r in got if r is None)


def test_gilbert_elliott_mean_loss_and_burst_length():
    d = Direction(loss=0.001, burst_p=0.01, burst_r=0.25, burst_loss=0.9)
    got = run(d)
    lost = [r is not None for _, _, r in got]
    # stationary: P(bad) = p / (p + r) = 0.01 / 0.26; mean loss = 0.0385 x 0.9 + 0.9615 x 0.001
    want = (0.01 * 0.9 + 0.25 * 0.001) / 0.26
    assert sum(lost) / len(lost) == pytest.approx(want, rel=0.08)
    # losses come in bursts: runs of consecutive losses longer than Bernoulli's
    runs, current = [], 0
    for x in lost:
        if x:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    mean_run = sum(runs) / len(runs)
    # a bad spell lasts 1/r = 4 packets and loses 90 % of them: mean run of
    # consecutive losses 1 / (1 - 0.9 (1 - r)) = 1 / 0.325 = 3.08
    assert mean_run == pytest.approx(1 / (1 - 0.9 * 0.75), rel=0.1)
    assert {r for _, _, r in got} == {None, "loss", "burst_loss"}


def test_jitter_delays_within_bounds_and_never_reorders():
    got = run(Direction(delay_ms=20, jitter_ms=5), n=20_000, gap=0.0002)
    arrivals = [a for _, a, r in got if r is None]
    assert arrivals == sorted(arrivals)
    extra = [a - t - 0.020 for t, a, r in got if r is None]
    assert min(extra) >= 0 and max(extra) < 0.0052  # 5 ms, plus holding back behind a later draw
    assert sum(extra) / len(extra) > 0.002  # about half the jitter on average


def test_bottleneck_rate_and_tail_drop():
    # 10 Mbit/s, 1000-byte packets offered every 0.4 ms (20 Mbit/s): half must be dropped
    d = Direction(rate_mbps=10, queue_bytes=20_000)
    got = run(d, n=10_000, gap=0.0004)
    delivered = [a for _, a, r in got if r is None]
    rate = (len(delivered) - 1) * 1000 * 8 / (delivered[-1] - delivered[0])
    assert rate == pytest.approx(10e6, rel=0.01)
    assert sum(1 for _, _, r in got if r == "queue") / len(got) == pytest.approx(0.5, abs=0.01)


def test_runs_held_up_are_named_from_their_own_records():
    """`lab run` names the runs during which the forwarder ran late, or the
    disturbance probe saw the machine away, by more than 5 ms at a time; and
    the probe's record of a finished run sums what overlaps an interval."""
    from tracekit.lab.disturbance import PERIOD_NS, Probe
    from tracekit.lab.experiment import disturbed
    manifests = [{"run": "quiet", "forwarder": {"max_late_ms": 0.3, "machine": {"max_late_ms": 4.9}}},
                 {"run": "late", "forwarder": {"max_late_ms": 5.1, "machine": {"max_late_ms": 0.0}}},
                 {"run": "away", "forwarder": {"max_late_ms": 0.2, "machine": {"max_late_ms": 11.0}}},
                 {"run": "no-path", "forwarder": None}]
    assert disturbed(manifests) == ["late", "away"]
    probe = Probe("unused")
    # CPU 0 slept at 100 and woke 8 ms late; CPU 1 slept at 200 and woke 3 ms late
    probe.late = [(0, 100, 100 + PERIOD_NS + 8_000_000), (1, 200, 200 + PERIOD_NS + 3_000_000)]
    assert probe.held_back(0, 150) == 8_000_000
    assert probe.held_back(0, 10 ** 9) == 11_000_000
    assert probe.held_back(10 ** 9, 2 * 10 ** 9) == 0
    assert probe.summary() == {"late_wakeups": 2, "max_late_ms": 8.0, "late_ms_total": 11.0}


def test_late_packets_are_explained_only_by_what_the_probe_saw():
    """calibrate.unexplained: a packet due while the machine was away (5 ms
    from 1.001 s) or in the 4 x 5 ms catch-up after it is explained; one due
    later is not; one queued behind a busy stretch that began late for that
    reason is explained when it is no more than 0.5 ms later than that start."""
    from tracekit.lab.calibrate import Late, unexplained
    from tracekit.lab.disturbance import PERIOD_NS, Probe
    probe = Probe("unused")
    probe.late = [(0, 1_000_000_000, 1_000_000_000 + PERIOD_NS + 5_000_000)]
    late = [Late(1.003, 1.0), Late(1.030, 1.0), Late(1.0305, 6.0), Late(0.5, 1.0),
            Late(2.0, 1.2, (1.003, 1.0)), Late(2.0, 1.6, (1.003, 1.0)),
            Late(2.0, 1.2, (1.030, 1.0)), Late(3.0, 9.0, None, woke_late=True)]
    assert unexplained(late, probe) == [(1.030, 1.0), (0.5, 1.0), (2.0, 1.6), (2.0, 1.2)]
    # a spell in which a lane did nothing with a packet waiting explains like the probe's
    assert unexplained([Late(0.5, 1.0), Late(0.5042, 0.7), Late(0.5047, 0.6)], probe,
                       [(0.4985, 0.4995)]) == [(0.5047, 0.6)]


def delivery(read, sent, late, done=None, slept_to=0.0, key=None):
    """A deliveries.jsonl row (wan.write_deliveries), times in ms."""
    row = {"read_ns": int(read * 1e6), "sent_ns": int(sent * 1e6), "late_ns": int(late * 1e6),
           "done_ns": int((done if done is not None else sent + 0.002) * 1e6),
           "slept_to_ns": int(slept_to * 1e6)}
    if key:
        row.update(ip_id=key[0], tcp_seq=key[1], tcp_ack=key[2])
    return row


def test_a_lane_is_held_only_when_it_did_nothing_with_work_waiting():
    """calibrate.Lane: a packet due at 10 ms (the lane asked to wake by then)
    begun at 11.2 ms, nothing read or written in between: held 10-11.2 ms. Not
    held: when the lane was inside a write until 11.0 ms (its own work), when
    it asked to sleep past the due time (its own doing), when it read
    something at 10.4 ms, or when the wait was within 0.5 ms."""
    from tracekit.lab.calibrate import Lane
    before = delivery(1, 9.0, 0, done=9.01)
    due = delivery(2, 11.2, 1.2, slept_to=9.98)
    assert Lane([before, due]).overdue == [(0.010, 0.0112)]
    assert Lane([before, due]).held(0.010) == pytest.approx((0.010, 0.0112))
    assert Lane([delivery(1, 9.9, 0, done=11.0), due]).held(0.010) is None
    assert Lane([before, delivery(2, 11.2, 1.2, slept_to=10.3)]).overdue == []
    assert Lane([before, delivery(10.4, 12, 0), due]).held(0.010) is None
    assert Lane([before, delivery(2, 10.4, 0.4)]).held(0.010) is None


def test_a_packet_read_late_by_a_sleeping_lane_is_the_machines_only_when_kept_on_schedule(
        tmp_path):
    """calibrate.measure with the forwarder's log: an ACK the client's capture
    saw leave at 0 and the up lane read 1.2 ms later, having done nothing
    since, arrives 101.2 ms after it left: 1.2 ms late, all of it the lane's
    late waking (woke_late, a held spell of 0-1.2 ms). A second ACK read at
    the same time but delivered 1.0 ms after its schedule from that read is
    not the lane's waking: it stays unexplained."""
    import json
    import shutil

    from tracekit.lab.calibrate import measure, unexplained
    from tracekit.lab.disturbance import Probe
    from tracekit.lab.wan import CLIENT_ADDR, SERVER_ADDR, Direction, PathSpec
    scapy = pytest.importorskip("scapy.all")
    if not shutil.which("tshark"):
        pytest.skip("calibrate reads the captures with tshark")
    spec = PathSpec(up=Direction(delay_ms=100), down=Direction(delay_ms=100))
    t0 = 1_800_000_000.0

    def ack(i, t):
        p = scapy.IP(src=CLIENT_ADDR, dst=SERVER_ADDR, id=i) / scapy.TCP(sport=5000, dport=80,
                                                                          seq=i, ack=7, flags="A")
        p.time = t
        return p

    scapy.wrpcap(str(tmp_path / "client.pcap"), [ack(1, t0), ack(2, t0 + 0.0001)])
    scapy.wrpcap(str(tmp_path / "server.pcap"), [ack(1, t0 + 0.1012), ack(2, t0 + 0.1022)])
    with open(tmp_path / "deliveries.jsonl", "w") as f:
        for i, got in ((1, 1.2), (2, 1.201)):
            row = delivery(t0 * 1e3 + got, t0 * 1e3 + 100 + got, 0, key=(i, i, 7))
            f.write(json.dumps({"direction": "up", **row}) + "\n")
    m = measure(spec, str(tmp_path / "client.pcap"), str(tmp_path / "server.pcap"),
                str(tmp_path / "deliveries.jsonl"))
    first, second = m["late"]["up"]
    assert first.late_ms == pytest.approx(1.2, abs=0.01) and first.woke_late
    assert second.late_ms == pytest.approx(2.1, abs=0.01) and not second.woke_late
    assert m["lane_held"]["up"] == [pytest.approx((t0, t0 + 0.0012))]
    assert unexplained(m["late"]["up"], Probe("unused"), m["lane_held"]["up"]) == \
        [(second.arrival, second.late_ms)]


def test_a_token_bucket_passes_its_burst_then_spaces_at_its_rate():
    """As tbf: after an idle the bucket's bytes more than a packet leave at
    once, the rest at the rate, and the queue holds what waits for tokens
    (a packet in service counted, as the FIFO counts it); the bucket fills
    again in bucket / rate of idle. The what-if's replay does the same
    (tests/test_whatif_bucket.py)."""
    d = Direction(rate_mbps=12, queue_bytes=60_700, bucket_bytes=6_000)
    link = Link(d, random.Random(1))
    step = 1500 * 8 / 12e6
    for start in (10.0, 10.0 + 1.0):  # a second burst after the bucket refilled
        got = [link.admit(start, 1500) for _ in range(60)]
        arrivals = [a for a, reason in got if reason is None]
        assert len(arrivals) == (60_700 + 6_000) // 1500
        assert arrivals[:5] == [pytest.approx(start + step)] * 5
        assert [b - a for a, b in zip(arrivals[4:], arrivals[5:])] == [pytest.approx(step)] * 39
    fifo = Link(Direction(rate_mbps=12, queue_bytes=60_700), random.Random(1))
    assert sum(fifo.admit(10.0, 1500)[1] is None for _ in range(60)) == 60_700 // 1500
