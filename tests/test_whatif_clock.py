"""The receiver's clock: Linux's receive buffer grows from readings timed by
an RTT estimate in whole milliseconds, and on a fresh CUBIC transfer the
reading decides where HyStart ends the first slow start (docs/whatif.md,
twenty-third round; whatif/delack.py, TS_CLOCK).

Material (tests/data/whatif/kernel-clock, README there): the kernel's own
tracepoints (tcp:tcp_rcvbuf_grow at the client, tcp:tcp_probe at the
server) over four runs of the delay line (tests/data/whatif/delay-line's
make.py: 100 ms / 10 Mbit/s / 80 kB, 150 ms / 8 Mbit/s / 80 kB, 120 ms / 6
Mbit/s / 40 kB; six fresh and six warm responses a run, CUBIC), summarised
by tools/rcvbuf_trace.py, and what tools/whatif_droplog.py keeps of one
100 ms run's captures.
"""

import json
import os
import sys
from collections import Counter, defaultdict

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import rcvbuf_trace  # noqa: E402
import whatif_droplog  # noqa: E402

HERE = os.path.join(ROOT, "tests", "data", "whatif", "kernel-clock")
MSS = 1448


def _kernel():
    with open(os.path.join(HERE, "rcvbuf-trace.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_the_kernels_trace_gives_its_readings_and_where_hystart_ended():
    """Four grow events and six probes of the warm connection of one run,
    as the kernel wrote them: the bytes read in each interval in segments
    (the first interval holds the 204-byte header too), the estimate in
    whole ms, and the window at which ssthresh was first set."""
    with open(os.path.join(HERE, "trace-excerpt.txt")) as f:
        (c,) = rcvbuf_trace.connections(f)
    assert c["reads"] == [round(14684 / MSS, 2), 21.0, 39.0, 80.0]
    assert c["rtt_ms"] == [102.0, 102.0, 101.0, 101.0]
    assert c["exit_cwnd"] == 204


def test_the_receivers_samples_tick_in_milliseconds_and_only_on_a_new_echo():
    from tracekit.whatif.delack import ClientSide

    class Side(ClientSide):
        pass
    side = Side()
    side.echo_at, side.echoed, side.ts_phase = [0.0, 0.0, 0.0012], None, 0.0003
    from tracekit.whatif import delack
    old = delack.TS_CLOCK
    delack.TS_CLOCK = True
    try:
        side.now = 0.1016
        assert side._rtt_sample(0) == pytest.approx(0.101)   # 101.9 ms - 0.3 ms, in ticks
        assert side._rtt_sample(1) == 0.0                    # the same echo: no sample
        side.now = 0.1030
        assert side._rtt_sample(2) == pytest.approx(0.102)   # 103.3 - 1.5
    finally:
        delack.TS_CLOCK = old


def _replayed_pairs(path, clock, phases=40):
    """{(second, third reading): [HyStart's exit, ...]} of a fresh transfer on
    `path` replayed with the client's clock ticking at each of `phases`
    points of a millisecond (or with exact samples: clock False)."""
    from tracekit.whatif import delack, receiver, window
    reads, exit_ = [], [None]
    grow, hystart = receiver.Receiver.grow, window._hystart

    def traced_grow(self, new, span):
        reads.append(new)
        grow(self, new, span)

    def traced_hystart(tr, cu, rtt):
        found = cu.found
        hystart(tr, cu, rtt)
        if cu.found and not found and exit_[0] is None:
            exit_[0] = int(tr.c.ssthresh)
    out = defaultdict(list)
    saved = delack.TS_CLOCK, delack.TS_PHASE
    receiver.Receiver.grow, window._hystart = traced_grow, traced_hystart
    try:
        for i in range(phases):
            delack.TS_CLOCK, delack.TS_PHASE = clock, (i + 0.5) / phases * delack.TS_TICK
            reads.clear()
            exit_[0] = None
            whatif_droplog.replay_run({  # one fresh response, nothing lost but to the queue
                "cc": "cubic", "rtt": path["rtt_ms"] / 1e3,  # the handshake's, at the client
                "rate": path["rate_mbps"] * 1e6 / 8, "queue": path["queue"], "size": path["size"],
                "connections": [{"requests": ["first"], "drops": []}]})
            big = [round(r) for r in reads if r > 11]
            out[tuple(big[:2])].append(exit_[0])
    finally:
        delack.TS_CLOCK, delack.TS_PHASE = saved
        receiver.Receiver.grow, window._hystart = grow, hystart
    return out


def test_where_the_clock_ticks_decides_hystart_as_in_the_kernel():
    """At 150 ms / 8 Mbit/s the kernel read 20 or 21 segments in the second
    round and 40 or 39 in the third; where it read 20 then 40 HyStart's ACK
    train ended slow start at 132 segments (7 connections of 14), where 21
    then 39 the ACKs stopped coming one a segment before the train was long
    enough and slow start ran on to 212 (3 of 4; 183 once), as after 21 then
    40 (3). Replayed at the handshake's RTT with the clock's ticks, both
    readings come out, each at the kernel's window within 2 segments; with
    exact samples every phase reads 20 then 40 and ends early, so the late
    side, which a warm connection then carries, cannot be replayed. (Not
    asserted: the replay's slow start runs on at 11 phases of 40, the
    kernel's in 7 connections of 14 -- and at 100 ms, run t2, the replay at the
    handshake's 100.79 ms reads 21 then 40 at every phase and its HyStart
    never ends slow start, where the kernel's ended at 124 or 204: its
    receiver is not yet the kernel's to the segment at a round's edge,
    docs/whatif.md, twenty-third round.)"""
    run = "t3"
    kernel = defaultdict(list)
    for c in _kernel():
        if c["run"] == run and "exit_cwnd" in c:
            kernel[(int(c["reads"][1]), int(c["reads"][2]))].append(c["exit_cwnd"])
    path = next(c["path"] for c in _kernel() if c["run"] == run)
    replayed = _replayed_pairs(path, clock=True)
    late = (21, 39)
    assert late in kernel and late in replayed
    early = (20, 40)
    for pair in (early, late):
        k = Counter(kernel[pair]).most_common(1)[0][0]
        assert all(abs(x - k) <= 2 for x in replayed[pair]), (pair, k, replayed[pair])
    assert min(kernel[late]) > max(kernel[early]) + 40
    exact = _replayed_pairs(path, clock=False)
    assert set(exact) == {early}


def test_a_warm_connection_follows_where_its_first_response_left_hystart():
    """One run at 100 ms / 10 Mbit/s / 80 kB (lossless: the queue's drops are
    the replay's own), its six fresh and six warm responses against the
    kernel's times. The kernel's warm connection read 21 then 39 and ended
    its first slow start at 204 segments: its first warm response burst
    into the queue (0.673 s), the others ran at 0.36. Replayed with the
    clock ticking where it reads so (0.45 ms into each transfer) every
    response is within 12 %; with exact samples HyStart ends at 124, the
    first warm response is 47 % fast and two of the rest 13-16 % slow -- the
    twenty-second round's "warm responses after the big overflow go faster
    than the replay's" (set 23's M4; three of them 12-25 % slow until the
    twenty-fifth round kept CUBIC's epoch across the idle)."""
    from tracekit.whatif import delack
    with open(os.path.join(HERE, "droplog-clock.json")) as f:
        runs = json.load(f)
    saved = delack.TS_CLOCK, delack.TS_PHASE
    try:
        delack.TS_CLOCK, delack.TS_PHASE = True, 0.00045
        ticking = whatif_droplog.compare(runs)
        delack.TS_CLOCK, delack.TS_PHASE = False, None
        exact = whatif_droplog.compare(runs)
    finally:
        delack.TS_CLOCK, delack.TS_PHASE = saved
    assert len(ticking) == len(exact) == 12
    errors = {req: (r - k) / k for _, _, _, req, k, r in ticking}
    assert max(abs(e) for e in errors.values()) <= 0.12
    assert np.median([abs(e) for e in errors.values()]) <= 0.02
    warm = {req: (r - k) / k for _, conn, _, req, k, r in exact if conn == "persistent"}
    assert warm["t2-rtt100-nl-persistent-0/1"] < -0.40
    assert sum(e > 0.10 for e in warm.values()) >= 2
