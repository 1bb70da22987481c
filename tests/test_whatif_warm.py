"""Warm responses on one connection against Linux's own window
(tests/data/whatif/kernel-clock/warm-windows.jsonl: the server's tcp_probe
trace, response by response; docs/whatif.md, twenty-fifth round).

Two rules decide where a warm response's burst overflows the queue: the
response's header, which Python's http.server sends as a packet of its
own (a window's slot, 256 bytes of queue), and CUBIC's epoch, which the
idle between responses shifts (cubictcp_cwnd_event) but does not end."""

import json
from pathlib import Path

import numpy as np
import pytest

from tracekit.whatif import replayer, tcp, window
from tracekit.whatif.pathrate import WIRE_HEADER
from tracekit.whatif.receiver import Receiver

DATA = Path(__file__).parent / "data" / "whatif" / "kernel-clock" / "warm-windows.jsonl"
RCV = (44.55, 55.87)  # the lab's client: its offer at the handshake and over the first flight
MSS, HEAD = 1448, 204


def _kernel(run):
    return [c for c in map(json.loads, DATA.read_text().splitlines()) if c["run"] == run]


def _replay(conn, head):
    """[(start, end) window and ssthresh, time s] of the six responses replayed."""
    p, rtt = conn["path"], conn["handshake_rtt_ms"] / 1e3
    path = tcp.Path(rtt=rtt, rate=p["rate_mbps"] * 1e6 / 8, queue_bytes=p["queue_bytes"],
                    header=WIRE_HEADER)
    c = tcp.Conn(cc="cubic", initcwnd=10, head=head)
    c.srtt, c.rttvar, c.min_rtt, c.rcv = rtt, rtt / 2, rtt, Receiver(*RCV)
    rng, out = np.random.default_rng(0), []
    for _ in range(6):
        before = [int(c.cwnd), None if c.ssthresh > 1e8 else int(c.ssthresh)]
        n = replayer.segments(p["body_bytes"] + HEAD, MSS, head)
        t = tcp.Transfer(c, path, n, MSS, rng).run()
        out.append((before, [int(c.cwnd), None if c.ssthresh > 1e8 else int(c.ssthresh)], t))
    return out


def test_a_burst_into_a_shallow_queue_cuts_twice_as_the_kernels():
    """t4: 120 ms, 6 Mbit/s, a 40 kB queue (26 packets, BDP 60): each warm
    response bursts its window into the queue. The kernel's window and
    ssthresh after responses 2-6 (at the next request; the sixth's end), on
    both connections: 44/44, 33/31, 26/23, 28/23, 24/19. With the header as a packet of its own the replay's are the
    same; with full segments only, the second response's burst drops
    differently and is cut once (63/63), and every later response differs."""
    for conn in _kernel("t4"):
        kernel = [r["start"] for r in conn["responses"][2:]] + [conn["responses"][-1]["end"]]
        assert kernel == [[44, 44], [33, 31], [26, 23], [28, 23], [24, 19]]
        replayed = _replay(conn, HEAD)
        assert [end for _, end, _ in replayed[1:]] == kernel
        assert _replay(conn, 0)[1][1] == [63, 63]


def test_cubics_epoch_runs_on_across_the_idle_between_responses():
    """u1: 80 ms, 9 Mbit/s, 70 kB (46 packets). After two cuts the kernel's
    window grows 44 -> 47 in the fourth response (at 19, 73 and 135
    segments acknowledged) and 47 -> 49 in the fifth: its burst of 47
    (header and 46 segments: 69,256 bytes) fits the queue, the sixth's of 49
    does not (cut to 36/34). The epoch shifted by the idle is at a negative
    time on the next response's clock; read as no epoch (the replay until
    this round) it restarted there with a new K, the fourth response grew to
    48 and the fifth's burst lost a segment (cut to 36, 60 ms slower)."""
    for conn in _kernel("u1"):
        k = conn["responses"]
        assert [r["end"][0] for r in k] == [78, 58, 44, 47, 49, 36]
        assert [g[0] for g in k[3]["grew"]] == [19, 73, 135]
        replayed = _replay(conn, HEAD)
        ends = [end[0] for _, end, _ in replayed]
        assert all(abs(a - b) <= 1 for a, b in zip(ends, [78, 58, 44, 47, 49, 36]))
        assert ends[4] >= ends[3] and ends[5] < ends[4]  # the fifth keeps its window, the sixth is cut


def test_an_epoch_before_the_responses_start_is_still_an_epoch():
    """Shifted onto the next response's clock the epoch is at a negative
    time: still the epoch (its K and origin kept on the next ACK), not none;
    one begun after the last send is capped at the response's start."""
    class Tr:
        def __init__(self, now):
            self.now, self.c = now, c
    c = tcp.Conn(cc="cubic")
    cu = window.state(c)
    cu.last_max, cu.delay_min = 60, 0.08
    window._cubic_cnt(Tr(0.2), 40, 1)  # the epoch begins at 0.2 s, K from 60 - 40
    k = cu.k
    window.new_transfer(c, 0.5)  # the response's last send at 0.5 s
    assert cu.epoch == pytest.approx(-0.3)
    window._cubic_cnt(Tr(0.1), 41, 1)  # the next response's first ACK
    assert cu.epoch == pytest.approx(-0.3) and cu.k == k
    cu.epoch = 0.7
    window.new_transfer(c, 0.5)
    assert cu.epoch == 0.0


def test_the_count_is_kept_a_32nd_of_a_second_while_the_window_stays():
    class Tr:  # (what _cubic_cnt reads of a transfer)
        def __init__(self, now):
            self.now, self.c = now, c
    c = tcp.Conn(cc="cubic")
    cu = window.state(c)
    cu.last_max, cu.delay_min = 60, 0.08
    first = window._cubic_cnt(Tr(1.0), 40, 1)  # the epoch starts: K from 60 - 40
    cu.epoch -= 2.0  # (as if two seconds on the curve had passed)
    assert window._cubic_cnt(Tr(1.0 + window.CNT_EVERY), 40, 1) == first  # kept
    assert window._cubic_cnt(Tr(1.0 + window.CNT_EVERY + 0.001), 40, 1) < first  # recomputed
