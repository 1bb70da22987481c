"""The what-if engine: the replay against closed forms, the vocabulary, the
Shapley split, and the suite on the lab's committed counterfactual runs."""

import csv
import io
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tracekit.core.errors import TracekitError
from tracekit.whatif import factors, shapley
from tracekit.whatif.tcp import Conn, Path, Transfer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTT, RATE, MSS = 0.1, 50e6 / 8, 1448
W = (MSS + 52) / RATE  # one segment's serialisation at the bottleneck


class Scripted:
    """An rng whose random() returns a script (then 0.99: no more loss)."""

    def __init__(self, values):
        self.values = list(values)

    def random(self):
        return self.values.pop(0) if self.values else 0.99


def _transfer(n, loss=0.0, script=(), cc="cubic"):
    c = Conn(cc=cc)
    c.srtt, c.rttvar, c.min_rtt = RTT, RTT / 2, RTT
    path = Path(rtt=RTT, rate=RATE, queue_bytes=10_000_000, loss=loss)
    return Transfer(c, path, n, MSS, Scripted(script)).run(), c


def test_a_bursty_paths_share_of_packets_lost_is_its_loss():
    """`loss` is the share of packets a path loses -- the calibration reads it
    so and the lab's Gilbert-Elliott path keeps it (whatif/emulate.py) -- and
    `burst` is P(lost | the packet before lost). The replay lost `loss` after
    every delivered packet as well, so with a burst it lost more: 3.1 % for
    1.65 % at 0.49 (set 18's reading). 400,000 packets through the path's
    own draw: the share and the burstiness as stated, within 5 %. A chain
    whose bad state loses 0.6 of its packets (set 19's delay line) keeps
    them too, and its second neighbours give the 0.6 back (whatif/chain.py)."""
    import numpy as np
    from tracekit.whatif import chain
    for loss, burst, bad_loss in ((0.0165, 0.49, 1.0), (0.05, 0.3, 1.0), (0.02, 0.0, 1.0),
                                  (0.0059, 0.36, 0.6)):
        t = Transfer(Conn(), Path(rtt=RTT, rate=RATE, queue_bytes=1e12, loss=loss, burst=burst,
                                  bad_loss=bad_loss), 1, MSS, np.random.default_rng(26))
        got = []
        t._at = lambda *a: got.append(True)  # (an arrival: the packet was not lost)
        lost = []
        for _ in range(400_000):
            n = len(got)
            t._emit(0)
            lost.append(len(got) == n)
        lost = np.array(lost)
        assert lost.mean() == pytest.approx(loss, rel=0.05)
        if burst:
            assert lost[1:][lost[:-1]].mean() == pytest.approx(burst, rel=0.05)
            second = lost[2:][lost[:-2]].mean()
            assert chain.bad_loss_of(loss, burst, second) == pytest.approx(bad_loss, rel=0.1)


def test_one_flight_is_half_a_round_trip_and_its_serialisation():
    t, _ = _transfer(10)
    assert t == pytest.approx(RTT / 2 + 10 * W, abs=1e-9)


def test_slow_start_second_flight_is_ack_clocked_through_the_queue():
    # flight 2 (20 segments) leaves as flight 1's ACKs return, two per ACK:
    # the bottleneck serves it back to back from RTT + W on
    t, c = _transfer(30)
    assert t == pytest.approx(RTT + 21 * W + RTT / 2, abs=1e-9)
    # +1 per segment acknowledged while window-limited -- Linux's
    # tcp_is_cwnd_limited holds for the window in which the sender was: all 30
    assert c.cwnd == 40


def test_a_lost_last_segment_is_recovered_by_the_tail_loss_probe():
    # the only segment lost once: the probe after 2 srtt carries it
    t, _ = _transfer(1, loss=0.5, script=[0.0])
    assert t == pytest.approx(2 * RTT + W + RTT / 2, abs=1e-9)


def test_then_the_timeout_and_its_backoff():
    # lost, its probe lost, the RTO (srtt + max(4 rttvar, 200 ms) = 300 ms)
    # lost, the doubled RTO (600 ms) gets through
    t, _ = _transfer(1, loss=0.5, script=[0.0, 0.0, 0.0])
    assert t == pytest.approx(2 * RTT + 0.3 + 0.6 + W + RTT / 2, abs=1e-9)


def test_fast_recovery_cuts_cubic_to_seven_tenths():
    # segment 3 of a burst lost (all sent at once: RACK cannot tell by time):
    # found at the third SACK above it (DupThresh); by then the window grew
    # only on the ACKs that moved snd_una (segments 1 and 2: 12), not on the
    # SACKs (tcp_may_raise_cwnd), and CUBIC cuts in integers: 12 x 717 / 1024
    script = [0.99, 0.99, 0.0]
    _, c = _transfer(10, loss=0.5, script=script)
    assert c.ssthresh == 8


def test_fast_recovery_halves_reno_in_whole_segments():
    _, c = _transfer(10, loss=0.5, script=[0.99, 0.99, 0.0], cc="reno")
    assert c.ssthresh == 6  # 12 >> 1


def test_hystart_counts_its_rounds_from_the_first_ack():
    """CUBIC at 150 ms, 8 Mbit/s, an 80 kB queue, a 400 kB response (the
    delay line's set 3C): the kernel's rounds carry 10, 20, 40, 80 and then
    the rest, and the fifth overflows the queue at its end (2-13 drops a
    response). Linux counts HyStart's rounds from the first ACK and looks for
    the exit only from a window of 16 (since 2024); a round begun where the
    window reached 16, mid-flight, saw the flight's queue in its first
    samples and ended slow start at 72, before the fourth round was out: no
    drops, and a response 120-220 ms quicker than the kernel's."""
    c = Conn(cc="cubic")
    c.srtt, c.rttvar, c.min_rtt = 0.1505, 0.075, 0.1505
    path = Path(rtt=0.1505, rate=1e6, queue_bytes=80_000)
    drops = []

    class Counting(Transfer):
        def _emit(self, seg):
            if max(0.0, self.q_free - self.now) * self.p.rate + self.wire > self.p.queue_bytes:
                drops.append(seg)
            return super()._emit(seg)
    Counting(c, path, 277, MSS, Scripted(())).run()
    assert c.ssthresh >= 90 and drops  # (with the round begun at 16: 72, none)


def test_bbr_keeps_its_window_on_random_loss():
    _, c = _transfer(60, loss=0.5, script=[0.99] * 20 + [0.0], cc="bbr")
    assert c.ssthresh == 1e9


def test_bbr_window_follows_the_kernels_tcp_info():
    """The lab's persistent run without loss (50 Mbit/s, 100 ms, 256 kB queue,
    a warm-up and three responses of 354,640 bytes on one BBR connection):
    the server's TCP_INFO after each response against the replay's window."""
    import json
    with open(os.path.join(ROOT, "captures/lab/counterfactual-002/server-events.jsonl")) as f:
        events = [json.loads(line) for line in f]
    kernel = [e["tcpi_snd_cwnd"] for e in events if e["kind"] == "tcp_info"]
    c = Conn(cc="bbr")
    c.srtt, c.rttvar, c.min_rtt = RTT, RTT / 2, RTT
    path = Path(rtt=RTT, rate=RATE, queue_bytes=256_000)
    replay = []
    for _ in kernel:
        Transfer(c, path, 245, MSS, Scripted([])).run()
        replay.append(c.cwnd)
    assert kernel == [255, 420, 439, 456]
    assert replay == pytest.approx(kernel, rel=0.03)


def test_vocabulary_refuses_with_a_reason():
    assert factors.parse("loss_down=0,connection=persistent") == {
        "loss_down": 0.0, "connection": "persistent"}
    assert factors.parse("bottleneck_mbps=20") == {"rate_mbps": 20.0}
    assert factors.parse("path=tunnel,rcv_window=client") == {"path": "tunnel",
                                                             "rcv_window": "client"}
    with pytest.raises(TracekitError, match="calibrate on direct runs"):
        factors.parse("path=tunnel", "--from")
    with pytest.raises(TracekitError, match="unknown factor 'mtu'"):
        factors.parse("mtu=9000")
    with pytest.raises(TracekitError, match="outside"):
        factors.parse("loss_down=1.5")


def test_shapley_shares_add_up_and_name_the_interaction():
    fs = ("connection", "loss")
    # medians (s) of the four cells; v(S) = median(A) - median(S)
    med = {(): 1.0, ("connection",): 0.4, ("loss",): 0.7, ("connection", "loss"): 0.2}
    v = shapley._values(med, fs)
    shares = shapley._shares(v, fs)
    assert sum(shares.values()) == pytest.approx(0.8)
    # two factors: phi_f = v(f) / 2 + (v(fg) - v(g)) / 2
    assert shares["connection"] == pytest.approx(0.6 / 2 + (0.8 - 0.3) / 2)
    assert shapley._pairs(v, fs)[fs] == pytest.approx(0.8 - 0.6 - 0.3)


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import whatif_suite
    d = tmp_path_factory.mktemp("suite")
    results = whatif_suite.main(["--experiments", "counterfactual", "--draws", str(SUITE_DRAWS),
                                 "--store-dir", str(d)])
    return results, whatif_suite, str(d / "counterfactual.duckdb")


def test_suite_on_the_committed_counterfactual_runs(suite):
    results, mod, _ = suite
    within, n, median_error = mod.summary(results)
    assert n == 8
    # what the engine achieves on these runs (docs/whatif.md has the table)
    assert within >= WITHIN and median_error <= MEDIAN_ERROR
    by = {(w.get("connection", w.get("loss_down")), tuple(s.items())): r
          for w, s, _, r in results}
    # the lossless fresh -> persistent cell: handshake and slow start, no loss
    r = by[("0.0", (("connection", "fresh"),))]
    assert r.within and abs(r.saving - r.measured_saving) < 0.02
    for *_, r in results:
        assert np.isfinite(r.saving) and r.measured_saving is not None
        # the lab's lossy path drops at random only (its drop logs): none read as the queue's
        assert r.calibration.estimates["queue_drops"] == 0
        # the lab's server writes its length and the response at once: no header apart
        assert r.calibration.head_bytes == 0


# What the engine achieves on these runs (9 requests a cell) at 300 draws and the
# engine's seed: 6 of 8, 7.2 % -- 5.4 % until the 5 % groups' runs of three lost
# segments were judged by their witnesses (the queue never filled: the drop logs
# name every drop random; read so, two warm cells moved from 1.2 and 25.1 ms off
# to 14.4 and 38.1, both within; docs/whatif.md, "Bursts judged by their witness"). At 60 draws the Monte Carlo alone moved it from 4
# to 8 of 8 over seeds 26-29 (the seventh round's 8 of 8, 1.8 % was seed 26's
# luck); at 300 the seeds give 6, 6, 6, 5 (5.4-7.5 %), the tree before the
# eighth round 7, 6, 6, 6 (5.0-6.9 %). docs/whatif.md, eighth round. Since the
# twenty-fifth round (CUBIC's epoch kept across the idle between responses) 6 of
# 8 and 8.2 % at seed 26 (7.3 % the tree before): four persistent cells' predictions
# moved 3-17 ms (-189.0 -> -192.7, 192.1 -> 188.7, -539.0 -> -541.6, -707.0 -> -724.4).
SUITE_DRAWS, WITHIN, MEDIAN_ERROR = 300, 6, 0.085


def test_the_command_prints_and_refuses_in_one_line(suite):
    import subprocess
    run = [sys.executable, "-m", "tracekit.cli", "whatif", "--db", suite[2], "--where",
           "experiment=counterfactual", "--where", "connection=fresh", "--from",
           "loss_down=0.05", "--draws", "20"]
    ok = subprocess.run(run + ["--set", "loss_down=0"], capture_output=True, text=True)
    assert ok.returncode == 0 and "732.3" in ok.stdout  # the measured median at the target
    bad = subprocess.run(run + ["--from", "path=tunnel", "--set", "loss_down=0"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stdout == ""
    (line,) = bad.stderr.strip().splitlines()
    assert line.startswith("tracekit: error: --from path=tunnel") and "direct" in line
    tun = subprocess.run(run + ["--set", "path=tunnel-arq", "--format", "csv"],
                         capture_output=True, text=True)
    assert tun.returncode == 0, tun.stderr
    assert tun.stdout.splitlines()[1].startswith("9,")  # the 9 fresh requests at 5 %


def test_the_seed_names_the_replays_draws(suite):
    """--seed (the API's seed): the default is the engine's fixed seed (the
    same draws as stated), another gives other draws of the calibrated loss."""
    import tracekit
    from tracekit.whatif.replayer import SEED
    with tracekit.open(suite[2], read_only=True) as s:
        def run(seed):
            [(_, r)] = s.whatif({"loss_down": 0}, {"experiment": "counterfactual",
                                                   "connection": "fresh"},
                                {"loss_down": 0.05}, draws=8, seed=seed)
            return r.replay_source
        same, stated, other = run(None), run(SEED), run(SEED + 1)
    assert np.array_equal(same, stated) and not np.array_equal(same, other)


def test_explain_names_what_was_assumed_and_what_was_read(suite):
    """--assume states a value in place of the calibration's: --explain shows
    the stated value with 'assumed' as its source (it kept the trace's
    source beside the stated value before), and the values not stated keep
    theirs. A guessed queue brings the predicted saving at half and at twice
    it (here the same: these fresh connections' flights never fill even half
    of it); a stated one does not."""
    import subprocess
    run = [sys.executable, "-m", "tracekit.cli", "whatif", "--db", suite[2], "--where",
           "experiment=counterfactual", "--where", "connection=fresh", "--from",
           "loss_down=0.05", "--set", "loss_down=0", "--draws", "8", "--explain",
           "--format", "csv"]
    rows = {}
    for assume in ([], ["--assume", "jitter_ms=2.5,rtt_ms=90,loss_up=0.01,queue_bytes=300000"]):
        out = subprocess.run(run + assume, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        got = list(csv.reader(io.StringIO(out.stdout)))
        assert got[0] == ["group", "parameter", "value", "from"]
        rows[bool(assume)] = {r[1]: (r[2], r[3]) for r in got[1:] if len(r) == 4}
    read, stated = rows[False], rows[True]
    assert stated["jitter_ms"] == ("2.50", "assumed (--assume)")
    assert stated["rtt_ms"] == ("90.0", "assumed (--assume)")
    assert stated["loss_up"] == ("0.0100", "assumed (--assume)")
    assert "assumed" not in read["jitter_ms"][1] and "assumed" not in read["rtt_ms"][1]
    assert stated["rate_mbps"] == read["rate_mbps"] and stated["initcwnd"] == read["initcwnd"]
    guess = float(read["queue_bytes"][0])
    around = {k: v for k, v in read.items() if k.startswith("saving_ms at queue_bytes=")}
    assert sorted(float(k.split("=")[1]) for k in around) == pytest.approx([guess / 2, guess * 2],
                                                                          abs=1)
    assert len({v for v, _ in around.values()}) == 1
    assert not any(k.startswith("saving_ms at") for k in stated)
    assert stated["queue_bytes"] == ("300000", "assumed (--assume)")


def test_the_tunnel_in_whatif_is_the_kcp_replay_beside_the_servers_time(suite):
    """--set path=tunnel-arq,loss_down=0 from the direct runs: every replayed
    request is the closed form -- two KCP flushes of 5 ms on average, the
    request's one-way trip, the server's time, the response's KCP segments
    at the bottleneck rate and the last one's one-way trip; FEC as the lab
    sizes it (10+8 at 14 %, 10+3 at 3.6 %: docs/lab.md)."""
    import duckdb

    from tracekit.whatif import tunnel as kcp
    from tracekit.whatif.engine import whatif
    assert kcp.sizing("tunnel", 0.14) == (10, 8) and kcp.sizing("tunnel", 0.036) == (10, 3)
    assert kcp.sizing("tunnel-arq", 0.14) == (0, 0)
    with duckdb.connect(suite[2], read_only=True) as con:
        r = whatif(con, {"experiment": "counterfactual", "connection": "fresh"},
                   {"loss_down": 0.05}, {"path": "tunnel-arq", "loss_down": 0.0}, draws=20)
    cal = r.calibration
    n = math.ceil(cal.requests[0].bytes_down / kcp.payload(kcp.SEGMENT, False))
    closed = (kcp.INTERVAL + cal.rtt_s + cal.processing_s + cal.server_s
              + n * (kcp.SEGMENT + kcp.UDP_IP) / cal.rate_Bps)
    assert r.replay_target == pytest.approx(closed, abs=1e-9)


def test_the_receive_window_binds_where_the_kernels_tcp_info_says(suite, monkeypatch):
    """The client's receive window (whatif/receiver.py, rcv_window=client),
    against the kernel in the same committed runs: the handshake's window is
    Linux's first offer for tcp_rmem 131072 (63 x 1,024 B), and the replay
    is held by it only where the server's tcpi_rwnd_limited_us is not zero --
    never on the lossless fresh connections (0 us in all 9), on some with
    5 % loss (so the replay without the window, `unlimited`, is faster
    there than the default replay, which has it). Delayed ACKs off: with the
    window's model the client delays ACKs once its window stops growing,
    without it every segment is ACKed (whatif/delack.py), a difference
    that is not the window's."""
    import duckdb

    from tracekit.whatif import delack
    monkeypatch.setattr(delack, "DELAYED", False)

    from tracekit.whatif.engine import whatif
    where = {"experiment": "counterfactual", "connection": "fresh"}
    with duckdb.connect(suite[2], read_only=True) as con:
        limited = dict(con.execute("""SELECT r.labels['loss_down'],
                count(*) FILTER (WHERE json_extract(e.fields, '$.tcpi_rwnd_limited_us')::BIGINT > 0)
            FROM events e JOIN (SELECT DISTINCT run, labels FROM requests) r USING (run)
            WHERE e.kind = 'tcp_info' AND r.labels['connection'] = 'fresh'
            GROUP BY 1""").fetchall())
        lossless = whatif(con, where, {"loss_down": 0.0}, {"rcv_window": "unlimited"}, draws=20)
        lossy = whatif(con, where, {"loss_down": 0.05}, {"rcv_window": "unlimited"}, draws=60)
    assert limited == {"0.0": 0, "0.05": 6}
    first, clamp = lossless.calibration.rcv_window
    assert first == pytest.approx(63 * 1024 / MSS) and first < clamp
    assert lossless.calibration.rcv_model  # replayed by default
    assert lossless.saving == 0.0
    assert lossy.saving > 0


def test_a_hole_holds_the_receivers_window_closed_form():
    """Linux's receiver (first offer 44.6 segments, clamp 56) with segment 0
    lost and a sender whose own window is larger: the first flight is the
    offer's 44 segments; while the hole is open each arrival grows
    rcv_ssthresh by 2 and each held segment takes one off the room, so the
    right edge stops at max_k min(44.6 + 2k, 56 - k) = 52 (k = 4), and the
    sender sends segments 0..51 before the hole is filled."""
    from tracekit.whatif.receiver import Receiver

    class Watched(Transfer):
        sent_in_hole = 0

        def _send_segment(self, s, retx):
            super()._send_segment(s, retx)
            if self.rcv_cum == 0:
                self.sent_in_hole = max(self.sent_in_hole, self.nxt)

    c = Conn(cc="cubic", initcwnd=80)
    c.srtt, c.rttvar, c.min_rtt = RTT, RTT / 2, RTT
    c.rcv = Receiver(ssthresh=44.6, clamp=56.0)
    path = Path(rtt=RTT, rate=RATE, queue_bytes=10_000_000, loss=0.5)
    t = Watched(c, path, 200, MSS, Scripted([0.0]))
    assert t.snd_edge == 44
    t.run()
    assert t.sent_in_hole == 52


def test_a_filled_hole_offers_only_the_room_its_queued_data_leaves():
    """Closed form, Linux's receiver (first offer 44.6 segments, clamp 56,
    its RTT estimate RTT, a measuring interval begun at 0): segments 1..k
    arrive above a hole at 0. rcv_ssthresh grows by 2 per arrival only into
    the free space 56 - held (tcp_grow_window's room), so it stops at 52
    (k = 4: min(44.6 + 2k, 56 - k)) instead of climbing to the clamp; the
    out-of-order data re-evaluates the buffer (2 x 10 + the span k + 1 =
    41: still 56). When segment 0 arrives, within the interval, the k + 1
    segments it releases are still queued as its ACK leaves, so that ACK
    offers only the clamp less those 21 segments: 35, where rcv_ssthresh
    alone would offer 52; at the next arrival they have been read and the
    offer is rcv_ssthresh, 54. The first read after the interval (one RTT)
    counts the 23 read: the buffer's window becomes 2 x 23 + 4 x 23 x 13 /
    10 (tcp_rcvbuf_grow's slow-start term)."""
    from tracekit.whatif.receiver import Receiver

    k = 20
    r = Receiver(ssthresh=44.6, clamp=56.0, since=0.0, rtt=RTT)
    edge = 44
    for held in range(1, k + 1):
        r.on_data(0.001 * held, 0, held + 1, RTT, held)
        edge = max(edge, int(r.window(held)))
    assert edge == 52 and r.ssthresh == pytest.approx(52.0) and r.clamp == 56.0
    r.on_data(0.05, k + 1, 0, RTT, 0)
    assert r.clamp == 56.0 and r.window(0) == pytest.approx(35.0)
    r.on_data(0.06, 1, 0, RTT, 0)  # the application has read them
    assert r.window(0) == pytest.approx(54.0)
    r.on_data(0.11, 1, 0, RTT, 0)
    assert r.space == 23 and r.clamp == pytest.approx(2 * 23 + 4 * 23 * 13 / 10)


def test_the_tunnel_replay_has_the_rounds_of_selective_repeat_and_fec_groups():
    """whatif/tunnel.py against closed forms: ARQ alone over n segments needs
    more than r retransmission rounds with probability 1 - (1 - p^(r+1))^n
    (the last segment's attempts); with FEC 10+8 at 14 % a round is needed
    only when a group loses more than 8 of its 18 packets."""
    import math

    from tracekit.core.model import _binom_cdf
    from tracekit.whatif import tunnel as kcp
    rtt, rate, p, nbytes, draws = 0.2, 333e6 / 8, 0.14, 354_640, 400
    n = math.ceil(nbytes / kcp.payload(1350, False))
    t = kcp.replay(nbytes, 1350, 0, 0, p, rtt, rate, draws)
    send = n * (1350 + kcp.UDP_IP) / rate
    rounds = np.round((t - send - rtt / 2) / (rtt + kcp.INTERVAL)).astype(int)
    for r in (2, 3, 4):
        expected = (1 - p ** (r + 1)) ** n
        got = float(np.mean(rounds <= r))
        assert abs(got - expected) < 4 * math.sqrt(expected * (1 - expected) / draws) + 0.01, r
    t = kcp.replay(nbytes, 1350, 10, 8, p, rtt, rate, draws)
    groups = math.ceil(nbytes / kcp.payload(1350, True)) // 10
    clean = (1 - (1 - _binom_cdf(18, p, 8))) ** groups
    got = float(np.mean(t < rtt))  # no retransmission round
    assert abs(got - clean) < 4 * math.sqrt(clean * (1 - clean) / draws) + 0.01
    assert 0.3 < clean < 0.999  # the check can fail either way


def test_slow_start_grows_through_the_last_window_as_linux():
    """tcp_is_cwnd_limited: window-limited once in a window counts for the
    whole window, so a lossless 245-segment response from 10 ends at
    10 + 245 = 255 segments -- the server's tcp_info after the lab's warm-up
    response on every warm CUBIC and Reno run (the replay had 188: it
    stopped growing when the last, application-limited round began)."""
    _, c = _transfer(245)
    assert c.cwnd == 255


def test_a_dropped_tail_is_recovered_by_prr_doubling_each_round():
    """The last 31 of a 100-segment flight lost (a queue's tail drop): the
    probe after 2 srtt brings one SACK, RACK marks the other 30 lost, and
    PRR's slow-start bound (pipe far below ssthresh) sends 1, 2, 4, 8 and
    the last 15 a round apart -- as the lab's kernel recovered a warm CUBIC
    burst's 73 dropped segments (1, 2, 4, 8, 16, 32, 10 a round; the replay
    before sent all 30 at once)."""
    class Watched(Transfer):
        def _send_segment(self, s, retx):
            if retx:
                self.retx_at.append(self.now)
            super()._send_segment(s, retx)

    c = Conn(cc="cubic", initcwnd=100)
    c.srtt, c.rttvar, c.min_rtt = RTT, RTT / 2, RTT
    path = Path(rtt=RTT, rate=RATE, queue_bytes=10_000_000, loss=0.5)
    t = Watched(c, path, 100, MSS, Scripted([0.99] * 69 + [0.0] * 31))
    t.retx_at = []
    t.run()
    rounds = np.round((np.array(t.retx_at) - t.retx_at[0]) / RTT).astype(int)
    assert np.bincount(rounds).tolist() == [1, 1, 2, 4, 8, 15]  # the probe, then PRR
    # ssthresh: 717 / 1024 of the window at detection (100 + 69 acknowledged in
    # slow start), in whole segments as tcp_cubic.c computes it
    assert c.ssthresh == 169 * 717 // 1024 and c.ssthresh <= c.cwnd < c.ssthresh + 1


def _retransmissions(loss, draws=40):
    """The chapter case's path (200 ms, 333 Mbit/s, a BDP of queue, 4 ms of
    jitter) and its 245-segment response on a fresh BBR connection."""
    out = []
    for d in range(draws):
        c = Conn(cc="bbr")
        c.srtt, c.rttvar, c.min_rtt = 0.2, 0.1, 0.2
        path = Path(rtt=0.2, rate=333e6 / 8, queue_bytes=8_325_000, loss=loss, jitter=0.004)
        tr = Transfer(c, path, 245, MSS, np.random.default_rng([26, d]))
        tr.run()
        out.append(len(tr.order) - 245)
    return np.array(out)


def test_jitter_never_reorders_so_rack_resends_only_what_was_lost():
    # the lab's forwarder holds a packet's jitter behind the one before it:
    # no reordering. The replay had drawn 4 ms per packet, 35 us apart: hidden
    # by RACK's reordering window (min_rtt / 4) without loss, but in recovery
    # the window is 0 and it resent ~128 of 245 segments at 3.6 %
    assert _retransmissions(0.0, draws=5).max() == 0
    # with random loss p a client-bound segment is sent 1/(1-p) times on
    # average: 245 p/(1-p) retransmissions, 9.2 at 3.6 % (the kernel's tcp_info
    # on the chapter case's 40 fresh requests: mean 9.9), 39.9 at 14 % (41.1)
    for p in (0.036, 0.14):
        assert _retransmissions(p).mean() == pytest.approx(245 * p / (1 - p), rel=0.25)


class _Logged(Transfer):
    """A replay that notes every transmission: (time, segment)."""

    def _send_segment(self, s, retx):
        self.sends.append((self.now, s))
        super()._send_segment(s, retx)


def _bbr_sends(n, script=(), rate=1e9):
    c = Conn(cc="bbr")
    c.srtt, c.rttvar, c.min_rtt = RTT, RTT / 2, RTT
    path = Path(rtt=RTT, rate=rate, queue_bytes=10_000_000, loss=0.5 if script else 0.0)
    tr = _Logged(c, path, n, MSS, Scripted(script))
    tr.sends = []
    tr.run()
    return tr, c


def test_bbr_sends_its_initial_window_unpaced_then_two_segment_units():
    """Linux paces no delay after a connection's first 10 data segments
    (tcp_update_skb_after_send, "as the original sch_fq"), and a paced sender
    puts about 1 ms of its rate, at least 2 segments, in one skb
    (tcp_tso_autosize): the chapter case's kernel sends its first flight
    within 2 ms and then pairs of segments (client captures,
    tools/whatif_sender.py). The replay had paced the first flight and sent
    single segments. On a fast path (serialisation ~0) BBR's first pacing
    rate is 2.89 x 10 segments a round trip, so the second pair leaves
    2 segments at that rate after the first."""
    tr, _ = _bbr_sends(40)
    t = dict((s, t) for t, s in reversed(tr.sends))
    assert [t[s] for s in range(10)] == [0.0] * 10
    assert t[10] == t[11] == pytest.approx(RTT, rel=1e-4)
    assert t[12] == t[13] == pytest.approx(t[10] + 2 * RTT / (2.89 * 10), rel=1e-4)


def test_rack_reordering_timer_resends_without_waiting_for_more_acks():
    """Segment 8 of 10 lost: one SACK above it (fewer than 3), so RACK allows
    min_rtt / 4 of reordering and, with no later ACK to look again,
    Linux's reordering timer (tcp_rack_reo_timeout) marks it lost at its
    send time + the latest RTT + min_rtt / 4. The replay had waited for the
    tail loss probe, 2 srtt after the last ACK."""
    tr, _ = _bbr_sends(10, script=[0.99] * 8 + [0.0])
    resent = [t for t, s in tr.sends if s == 8][1]
    assert resent == pytest.approx(RTT + RTT / 4, rel=1e-3)


def test_a_retransmission_sent_in_recovery_ends_bbrs_round():
    """Segment 2 of 10 lost, found at the third SACK above it; BBR starts a
    round there (packet conservation). Linux ends it when a segment sent
    after that point is delivered -- the retransmission counts
    (bbr_update_bw: prior_delivered >= next_rtt_delivered), so the round
    counter reads 2 after the transfer. The replay had ended rounds only on
    segments above the highest sent, so the retransmission did not count
    and the conservation round ran on (1 round)."""
    _, c = _bbr_sends(10, script=[0.99, 0.99, 0.0])
    assert c.rounds == 2


def test_bbr_recovery_ending_with_a_loss_still_marked_goes_on_as_linux():
    """Segment 2 of the initial window lost, then its retransmission and
    segment 12 (sent in recovery) too. When the cumulative ACK passes the
    recovery point (12) segment 12 is still marked lost: Linux leaves
    Recovery and enters it again on that ACK (tcp_fastretrans_alert: lost_out
    makes tcp_time_to_recover true), so BBR sees no exit -- its window is
    neither restored nor cut by a new round of packet conservation. The
    replay had left recovery and, at 14 % loss, cut again at the next loss:
    its window ended at 97 segments (median) where the kernel's tcp_info
    reads 151 (docs/whatif.md, sixth round)."""
    class Watched(Transfer):
        def _on_ack(self, arg):
            super()._on_ack(arg)
            self.states.append((self.cum, self.in_recovery, self.recovery_point))

    c = Conn(cc="bbr")
    c.srtt, c.rttvar, c.min_rtt = RTT, RTT / 2, RTT
    path = Path(rtt=RTT, rate=1e9, queue_bytes=10_000_000, loss=0.5)
    tr = Watched(c, path, 40, MSS, Scripted([0.99, 0.99, 0.0] + [0.99] * 9 + [0.0, 0.0]))
    tr.states = []
    tr.run()
    cum, recovering, point = next(s for s in tr.states if s[0] >= 12)
    assert recovering and point > 12


def _arrivals(gaps_ms, t0=0.0, size=MSS):
    ts = t0 + np.concatenate(([0.0], np.cumsum(gaps_ms))) / 1e3
    return ts, np.full(len(ts), size)


def test_trains_paced_slower_than_the_flows_own_arrivals_are_the_senders_not_the_path():
    """A sender pacing one segment every 13 ms makes trains of 0.92 Mbit/s
    (the warm 14 % chapter-case runs: BBR holding a low estimate); another
    flow of the same path delivered 60 segments in one round trip. The
    path carried at least that, so the trains' rate is unknown, not 0.92 --
    while trains at the bottleneck's spacing stay the estimate."""
    from tracekit.whatif import pathrate
    paced = {("c", k): _arrivals([13.0] * 11, t0=k) for k in range(3)}
    burst = _arrivals([1.0, 2.3] * 29 + [1.0], t0=10.0)  # 60 segments in 97 ms, no train
    gaps = {**paced, ("c", 9): burst}
    floor = 59 * (MSS + 52) / (0.2 + 0.004)
    assert pathrate.rate_floor(gaps, 0.2, 0.004) == pytest.approx(floor)
    src, est = {}, {}
    with pytest.raises(TracekitError, match=r"the sender's.*at least 3\.47 Mbit/s"):
        pathrate.rate(gaps, MSS, 0.2, 0.004, {}, src, est)
    assert est["rate_train_mbps"] == pytest.approx((MSS + 52) * 8 / 0.013 / 1e6)
    assert "rate_mbps" not in est
    # trains at the bottleneck's spacing (W: 50 Mbit/s) are above the floor: the estimate
    at_rate = {("c", k): _arrivals([W * 1e3] * 11, t0=k) for k in range(3)}
    rate = pathrate.rate({**at_rate, ("c", 9): burst}, MSS, 0.2, 0.004, {}, {}, {})
    assert rate == pytest.approx(RATE)
    # a label still wins, with the trace's reading beside it
    assert pathrate.rate(gaps, MSS, 0.2, 0.004, {"bottleneck_mbps": "333"}, {}, {}) == 333e6 / 8


def _trains_by_definition(gaps, mss):
    """pathrate.trains as its docstring defines it: a train grows while the
    next gap is within 10 % of the median of its gaps so far."""
    out = []
    for ts, size in gaps.values():
        d = np.diff(ts)
        ok = (size >= mss)[1:] & (size >= mss)[:-1] & (d > 0)
        i = 0
        while i < len(d):
            if not ok[i]:
                i += 1
                continue
            j = i
            while j + 1 < len(d) and ok[j + 1] and \
                    abs(d[j + 1] - np.median(d[i:j + 1])) <= 0.1 * np.median(d[i:j + 1]):
                j += 1
            if j - i + 1 >= 8:
                out.append((float(np.median(d[i:j + 1])), j - i + 2))
            i = j + 1
    return out


def test_trains_keep_their_median_as_they_grow_and_a_bulk_transfer_is_one_train():
    """The trains' running median is kept by two heaps (the median of each
    prefix anew made a 16,000-segment train take 2.6 s, quadratic): the
    same trains as the definition on 500 random flows (noise, outliers,
    zero gaps, short segments), and a 200,000-segment bulk train -- a 290 MB
    download at the bottleneck's spacing -- is one train."""
    from tracekit.whatif import pathrate
    rng = np.random.default_rng(18)
    found = 0
    for _ in range(500):
        n = int(rng.integers(2, 120))
        d = rng.choice([1e-4, 2.4e-4, 1.2e-3]) * (1 + rng.choice([0, .02, .05, .1, .3])
                                                  * rng.standard_normal(n))
        d[rng.random(n) < .05] *= rng.choice([3.0, 10.0, 0.2])
        d[rng.random(n) < .01] = 0
        ts = np.concatenate(([0.0], np.cumsum(d)))
        size = np.where(rng.random(n + 1) < .05, 500, MSS)
        gaps = {("c", 1): (ts, size), ("c", 2): (ts[:n // 2 + 1], size[:n // 2 + 1])}
        expected = _trains_by_definition(gaps, MSS)
        assert pathrate.trains(gaps, MSS) == expected
        found += len(expected)
    assert found > 1000  # (the flows hold trains to compare, not only gaps)
    n = 200_000
    ts = np.cumsum(np.full(n, 2.4e-4) * (1 + .01 * rng.standard_normal(n)))
    (spacing, length), = pathrate.trains({("c", 1): (ts, np.full(n, MSS))}, MSS)
    assert length == n and spacing == pytest.approx(2.4e-4, rel=1e-3)


def test_a_bunch_released_after_a_stall_is_not_taken_for_a_faster_path():
    """A path that stalls after its bottleneck (the delay line of set 7 at
    40 ms, BBR at 15 Mbit/s: the forwarder not scheduled for 9.7 ms, then
    eleven segments within 0.3 ms) puts more in one round trip than the
    bottleneck carried: the flows' arrivals read 16.7 Mbit/s against the
    trains' 15.07, and the rate was refused. The bunch fits in the silence
    before it at the trains' rate, so the floor does not contradict them;
    arrivals as fast with no silence before them still do (the test above)."""
    from tracekit.whatif import pathrate
    rtt = 20 * W  # (a short round trip: the bunch a large share of it)
    at_rate = {("c", k): _arrivals([W * 1e3] * 11, t0=k) for k in range(3)}
    bunch = [0.003, 0.02, 0.005, 0.1, 0.007, 0.025, 0.003, 0.05, 0.004, 0.06]  # ms, as seen
    stalled = _arrivals([W * 1e3] * 10 + [W * 1e3 * 12] + bunch + [W * 1e3] * 60, t0=9)
    gaps = {**at_rate, ("c", 9): stalled}
    assert pathrate.rate_floor(gaps, rtt, 0.0) > RATE * 1.2  # read as it arrived
    assert pathrate.rate_floor(gaps, rtt, 0.0, RATE) <= RATE
    assert pathrate.rate(gaps, MSS, rtt, 0.0, {}, {}, {}) == pytest.approx(RATE)
    ts, size = stalled
    moved = pathrate.unheld(ts, size + 52.0, RATE)
    assert np.all(np.diff(moved) >= W * 0.999)  # spread back at the bottleneck's spacing
    assert moved[0] == ts[0] and moved[-1] == ts[-1]
    # segments of mixed sizes: each moved back by its successor's serialisation
    rng = np.random.default_rng(5)
    packet = rng.integers(100, 1500, len(ts)).astype(float)
    want = ts.copy()
    for j in range(len(ts) - 2, -1, -1):
        want[j] = min(ts[j], want[j + 1] - packet[j + 1] / RATE)
    want = np.maximum.accumulate(np.maximum(np.maximum(want, ts - pathrate.MAX_HOLD), ts[0]))
    assert np.allclose(pathrate.unheld(ts, packet, RATE), want, rtol=0, atol=1e-9)
    # a sender's pause is no stall: one segment a second before a burst
    # faster than paced trains does not let the burst into that second
    paced = {("c", k): _arrivals([13.0] * 11, t0=k) for k in range(3)}
    burst = _arrivals([1000.0] + [1.0, 2.3] * 29 + [1.0], t0=10.0)
    with pytest.raises(TracekitError, match="the sender's"):
        pathrate.rate({**paced, ("c", 9): burst}, MSS, 0.2, 0.004, {}, {}, {})
    # a bunch longer than its silence: what the silence cannot hold stays bunched
    long = _arrivals([W * 1e3] * 10 + [W * 1e3 * 3] + bunch * 2 + [W * 1e3] * 60, t0=9)
    with pytest.raises(TracekitError, match="the sender's"):
        pathrate.rate({**at_rate, ("c", 9): long}, MSS, rtt, 0.0, {}, {}, {})


def test_a_stall_on_a_path_made_by_hand_does_not_refuse_its_rate(tmp_path, monkeypatch):
    """The same on a capture (tests/data/whatif/delay-line, set 7: BBR, 15
    Mbit/s, a 50 kB queue, 1 % random loss, RTT 40 ms; six responses on one
    connection, captured at the client): the delay line stalled 9.7 ms and
    then sent eleven segments within 0.3 ms. The trains say 15.07 Mbit/s;
    the arrivals as they came say at least 16.8 and refused it; with the
    stall's bunch put back, at least 14.97."""
    from tracekit.whatif import calibrate, pathrate
    with _rtt_store(tmp_path, "c-bbr-rtt{}-persistent-1", (40,), "persistent") as s:
        cal = calibrate.calibrate(s.con, {"rtt_ms": "40"})
        assert cal.rate_Bps * 8 / 1e6 == pytest.approx(15.07, abs=0.05)
        assert cal.estimates["rate_floor_mbps"] < 15.07
        monkeypatch.setattr(pathrate, "unheld", lambda ts, packet, rate: ts)
        with pytest.raises(TracekitError, match=r"the sender's.*at least 16\.8"):
            calibrate.calibrate(s.con, {"rtt_ms": "40"})


def test_jitter_is_read_from_the_spread_of_the_handshakes():
    """The replay's jitter (uniform [0, j/2) each way) makes the handshake
    RTT's excess triangular on [0, j): its interquartile range is
    j (1 - 1/sqrt(2)); quartiles placed exactly give j back."""
    from tracekit.whatif import pathrate
    j = 0.004
    # the triangle's quantiles at (i + 0.5) / n: an ideal sample of 40 handshakes
    u = (np.arange(40) + 0.5) / 40
    x = np.where(u < 0.5, j / 2 * np.sqrt(2 * u), j - j / 2 * np.sqrt(2 * (1 - u)))
    est = {}
    got = pathrate.jitter(0.2 + x, {}, {}, est)
    assert got == pytest.approx(j, rel=0.03)
    assert pathrate.jitter(np.full(40, 0.2), {}, {}, {}) == 0.0
    src = {}
    assert pathrate.jitter(0.2 + x[:7], {}, src, {}) == 0.0 and "fewer than 8" in src["jitter_ms"]
    assert pathrate.jitter(0.2 + x, {"jitter_ms": "4"}, {}, {}) == 0.004


def test_bbr_counts_a_responses_lossy_tail_towards_leaving_startup_as_linux():
    """Linux marks a connection application-limited only when the
    application writes (tcp_rate_check_app_limited, from tcp_sendmsg): a
    response written at once is limited for its first flight only, so the
    rounds that recover its lost segments after all of it was sent count
    towards BBR's full-bandwidth check. The replay had taken every round
    begun after the last new segment as application-limited, so at 14 %
    loss a 245-segment response never counted them. The transfer itself
    does not change; the state the next response starts from does."""
    from tracekit.whatif import tcp

    def one(seed):
        c = Conn(cc="bbr")
        c.srtt, c.rttvar, c.min_rtt = 0.2, 0.1, 0.2
        path = Path(rtt=0.2, rate=333e6 / 8, queue_bytes=8_325_000, loss=0.14)
        t = Transfer(c, path, 245, MSS, np.random.default_rng(seed)).run()
        return t, c.bbr_mode, c.full_bw_rounds

    runs = [one(seed) for seed in range(12)]
    assert sum(1 for _, _, k in runs if k >= 1) >= 10  # the tail's rounds counted
    assert runs[1][1] == "probe"  # three of them without 25 % growth: out of Startup
    tcp.APP_LIMITED_AT_WRITE = False
    try:
        before = [one(seed) for seed in range(12)]
    finally:
        tcp.APP_LIMITED_AT_WRITE = True
    assert [t for t, _, _ in before] == [t for t, _, _ in runs]
    assert all(m == "startup" and k == 0 for _, m, k in before)


def test_hystart_ends_cubic_slow_start_where_the_kernel_did():
    """lossbased-dev's warm-up (50 ms, 25 Mbit/s, a 256 kB queue, 245
    segments): the kernel's CUBIC leaves it at ssthresh 134, cwnd 140
    (tcp_info). HyStart's ACK train: in the round that starts at 80, ACKs
    0.48 ms apart pass half of delay_min + 1 ms (25.6 ms) at about the 53rd,
    so ssthresh = 80 + 53; Reno, without HyStart, slow-starts to 255."""
    def warm(cc):
        c = Conn(cc=cc)
        c.srtt, c.rttvar, c.min_rtt = 0.05, 0.025, 0.05
        path = Path(rtt=0.05, rate=25e6 / 8, queue_bytes=256_000)
        Transfer(c, path, 245, MSS, Scripted([])).run()
        return c
    cubic, reno = warm("cubic"), warm("reno")
    assert 130 <= cubic.ssthresh <= 136 and cubic.ssthresh <= cubic.cwnd <= 145
    assert cubic.cubic.found
    assert reno.cwnd == 255 and reno.ssthresh == 1e9


def test_a_lone_last_segment_is_acknowledged_after_the_delayed_ack_timer():
    """Past quickack mode (16 ACKs on a fresh connection) the client holds
    the ACK of an odd in-order segment for TCP_DELACK_MIN (40 ms) and ACKs
    every second at once; above a hole it sends the first 3 duplicate ACKs
    at once, then compresses SACKs for min(1 ms, RTT / 20), one timer at a
    time (whatif/delack.py)."""
    from tracekit.whatif import delack
    acks = delack.Acks(fresh=False)
    assert acks.now(True, False, False) == delack.DELACK  # the timer
    assert acks.now(True, False, False) is None or acks.pending == 2
    acks.sent()
    fresh, got = delack.Acks(fresh=True), []
    for _ in range(19):  # each immediate ACK sent before the next arrival
        got.append(fresh.now(True, False, False))
        if got[-1] == 0:
            fresh.sent()
    assert got == [0] * 16 + [delack.DELACK, 0, delack.DELACK]  # then every second
    warm = delack.Acks(fresh=False)
    # above a hole: the first 3 duplicate ACKs at once, then compressed
    got = [warm.now(False, False, False, ofo=True, rcv_nxt=5, rtt=0.05) for _ in range(5)]
    assert got[:3] == [0, 0, 0] and got[3] == min(delack.COMPRESS, 0.05 / 20) and got[4] is None


def test_a_predicted_time_never_goes_below_what_the_target_can_take():
    """A dozen lossy requests (measured 0.3-2.3 s) less a replayed saving of
    about 1.5 s: the resampled difference reaches below zero, an impossible
    time. The prediction and its interval stop at the fastest replayed
    request at the target (0.20 s here); the saving keeps its own interval."""
    from tracekit.whatif import engine
    rng = np.random.default_rng(3)
    measured = np.linspace(0.3, 2.3, 12)
    source = 1.6 + rng.exponential(0.4, (12, 20))
    target = 0.20 + rng.exponential(0.02, (12, 20))
    r = engine.WhatIf({}, {}, {}, None, measured, source, target)
    engine._intervals(r)
    raw = float(np.median(measured)) - r.saving
    assert raw < r.floor == pytest.approx(float(target.min()))
    assert r.predicted == r.floor
    lo, hi = r.intervals["predicted"]
    assert lo >= r.floor > 0 and hi >= lo
    assert r.intervals["saving"][0] > 1.0  # the saving itself is not clipped


def test_a_cells_chance_is_how_often_the_truth_is_within_a_measured_saving():
    """Experiments simulated from known request times (a skewed lossy group of
    12 against a tight one), so the true saving is known: how often it lies
    within the tolerance of one experiment's measured saving is counted over
    many experiments, and each experiment's own `chance` (from resampling
    only its measured requests) must estimate that on average. A replay
    drawn from the true times is a perfect model: its 95 % interval of a
    repeat holds the measured saving about 95 % of the time. (Resampled
    medians of a dozen requests spread less than the truth's: the estimate
    errs high, by 0.01-0.10 here over seeds 1-3 and 31.)"""
    from tracekit.whatif import engine
    rng = np.random.default_rng(31)
    lossy = lambda size: 1.0 + rng.exponential(0.4, size)  # noqa: E731
    tight = lambda size: 0.5 + rng.exponential(0.02, size)  # noqa: E731
    truth = (1.0 + 0.4 * np.log(2)) - (0.5 + 0.02 * np.log(2))  # medians of the two
    hits, chances, covered = [], [], []
    for _ in range(120):
        a, b = lossy(12), tight(12)
        r = engine.WhatIf({}, {}, {}, None, a, lossy((12, 40)), tight((12, 40)), measured_target=b)
        engine._intervals(r)
        hits.append(bool(engine._close(truth, r.measured_saving)))
        chances.append(r.chance)
        covered.append(r.covered)
    assert 0.2 < np.mean(hits) < 0.6  # a dozen such requests: far from decidable at 10 %
    assert np.mean(hits) - 0.03 <= np.mean(chances) <= np.mean(hits) + 0.15
    assert np.mean(covered) >= 0.85
    # two tight groups: any repeat lands within 10 %
    r = engine.WhatIf({}, {}, {}, None, tight(12) + 1.0, tight((12, 40)), tight((12, 40)),
                      measured_target=tight(12))
    engine._intervals(r)
    assert r.chance == 1.0


def _calibration(fresh=(True, True, True), loss=0.03, burst=0.4):
    from tracekit.whatif.calibrate import Calibration, Request
    reqs = [Request(f"r{i}", "run-1", i, 1.0, 300_000 + 10_000 * i, f, 0 if f else 1)
            for i, f in enumerate(fresh)]
    return Calibration(reqs, rtt_s=0.08, rate_Bps=20e6 / 8, loss_down=loss, burst=burst,
                       loss_up=0.0, queue_bytes=100_000, congestion="cubic", initcwnd=10,
                       pacing=False, mss=1448, processing_s=0.05, server_s=0.0, connect_s=0.0,
                       reuse_s=0.0)


def test_a_reading_the_lab_cannot_set_is_refused_by_the_emulation():
    """HyStart read off (CUBIC's slow starts ran into the queue) cannot be
    emulated: tcp_cubic's switch is the whole machine's, so --emulate says
    so instead of running the kernel's HyStart under that name."""
    from tracekit.whatif import emulate, replayer
    s = replayer.Setting(0.1, 2e6, 0, 0, 0, 1e5, 0, "cubic", 10, False, 0, None, 0, 0)
    assert emulate._settings(s, "fresh", 0)["congestion"] == "cubic"
    s.hystart = False
    with pytest.raises(TracekitError, match="HyStart"):
        emulate._settings(s, "fresh", 0)


def test_the_emulations_experiment_carries_the_calibration(monkeypatch, tmp_path):
    """The lab experiment `--emulate` runs: one factor, `arm`, whose levels
    carry the source's and the target's settings. Bursty loss becomes the
    lab's Gilbert-Elliott chain: driven through the lab's own model of its
    forwarder (lab.wan.Link, the same draws as forwarder.c), it loses 3 % of
    200,000 packets with P(lost | previous lost) = 0.4, as calibrated."""
    from tracekit.lab import experiment as ex
    from tracekit.lab import wan
    from tracekit.whatif import emulate, engine
    r = engine.WhatIf({}, {}, {"path": "tunnel-arq", "rtt_ms": 40}, _calibration(),
                      np.ones(3), np.ones((3, 4)), np.ones((3, 4)))
    sp = emulate.spec(r, trials=2, requests=3)
    assert sp["response_bytes"] == 310_000 and sp["factors"] == {"arm": ["source", "target"]}
    src, tgt = (ex.settings_of(sp, {"arm": a}) for a in ("source", "target"))
    assert (src["rtt_ms"], src["rate_mbps"], src["queue_bytes"]) == (80.0, 20.0, 100_000)
    assert (src["congestion"], src["initcwnd"], src["processing_ms"]) == ("cubic", 10, 50.0)
    assert src["connection"] == "fresh" and src["path"] == "direct"
    assert (tgt["rtt_ms"], tgt["path"], tgt["fec"]) == (40.0, "tunnel", "none")
    link = wan.Link(ex._path_spec(src, 1).down, wan.Rng(7))
    lost = np.array([link.admit(i * 1e-3, 1500)[0] is None for i in range(200_000)])
    assert lost.mean() == pytest.approx(0.03, abs=0.003)
    assert lost[1:][lost[:-1]].mean() == pytest.approx(0.4, abs=0.03)
    # a persistent group keeps its warm-up; what the lab cannot do is refused
    warm = engine.WhatIf({}, {}, {"loss_down": 0.0}, _calibration((False,) * 3), np.ones(3),
                         np.ones((3, 4)), np.ones((3, 4)))
    arms = emulate.spec(warm)["levels"]["arm"]
    assert arms["source"]["warmup"] == 1 and arms["target"]["loss_down"] == 0.0
    # the comparison: a tight pair agrees; a spread one holds the replay only in its interval
    e = emulate.Emulation(sp, "", np.full(8, 0.5), np.full(8, 0.3), 0.205, 0.49)
    assert e.saving == pytest.approx(0.2) and e.agree and e.source_error == pytest.approx(1 / 49)
    spread = np.array([0.45, 0.5, 0.6, 1.5, 1.7, 2.0, 2.2, 2.5])  # median 1.6
    e = emulate.Emulation(sp, "", spread, np.full(8, 0.4), 0.9, 1.6)
    assert not e.agree and e.replay_inside and e.interval[0] < 0.9 < 1.2 < e.interval[1]
    # runs made by hand on one connection: the first request opens it (warmup 0)
    opened = engine.WhatIf({}, {}, {"loss_down": 0.0}, _calibration((True, False, False)),
                           np.ones(3), np.ones((3, 4)), np.ones((3, 4)))
    arms = emulate.spec(opened)["levels"]["arm"]
    assert arms["source"]["connection"] == "persistent" and arms["source"]["warmup"] == 0
    assert arms["target"]["warmup"] == 0
    mixed = _calibration((True, False, True))  # a fresh request after a warm one
    for cal, target in ((_calibration(), {"pacing": "fq"}), (mixed, {"loss_down": 0.0})):
        r = engine.WhatIf({}, {}, target, cal, np.ones(3), np.ones((3, 4)), np.ones((3, 4)))
        with pytest.raises(TracekitError):
            emulate.spec(r)
    # without root: the lab's one line, before anything is made
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(TracekitError, match="needs root"):
        emulate.run(warm, str(tmp_path / "emulation"))
    assert not (tmp_path / "emulation").exists()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("tcpdump"),
                    reason="the emulation runs the lab (root, tcpdump)")
def test_the_emulation_reruns_the_calibrated_path_with_the_kernels_tcp(suite, tmp_path):
    """--set rtt_ms=50 from the lossless fresh counterfactual runs (100 ms,
    50 Mbit/s): one round of 4 requests each way in the lab. The emulated
    group reproduces the measured one within 10 % (the calibrated path and
    workload are the group's), the saving is at least the three round trips
    every request loses 50 ms on (handshake, request, first flight), and the
    replay's saving agrees with the kernel's within max(10 %, 10 ms)."""
    import tracekit
    from tracekit import api
    with tracekit.open(suite[2], read_only=True) as store:
        (g, r), = store.whatif({"rtt_ms": 50}, {"experiment": "counterfactual",
                                                "connection": "fresh"}, {"loss_down": 0.0},
                               draws=40)
    (_, e), = api.whatif_emulate([(g, r)], tmp_path, trials=1, requests=4)
    arms = e.spec["levels"]["arm"]
    assert arms["target"]["rtt_ms"] == 50.0 and arms["source"]["rtt_ms"] == pytest.approx(
        r.calibration.rtt_s * 1e3, abs=0.01)
    assert len(e.source_s) == len(e.target_s) == 4
    assert abs(e.source_error) < 0.10, (np.median(e.source_s), e.measured_source_s)
    assert e.saving > 3 * 0.050
    assert e.agree, (e.saving, e.replay_saving)


def test_a_capture_alone_labelled_with_the_factors_name_is_a_group(tmp_path):
    """Requests found in a capture alone (no event log: no run, no request id)
    are each a request of the group, not one for all of them, and a level
    labelled under the factor's own name (rate_mbps, as `whatif --help` lists
    it) matches --from as the lab's bottleneck_mbps does; without a run label
    a capture's requests are one run, replayed in order."""
    import tracekit
    from tracekit.whatif.calibrate import calibrate, load_requests
    db = str(tmp_path / "one.duckdb")
    with tracekit.open(db) as s:
        s.ingest([os.path.join(ROOT, "captures", "http-fresh-vs-persistent.pcap")],
                 labels={"rate_mbps": "20", "loss": "0"})
        s.analyze()
        (n,), = s.con.execute("SELECT count(*) FROM requests WHERE duration_ns > 0 "
                              "AND bytes_down > 0 AND run IS NULL AND request IS NULL").fetchall()
        assert n == 6
        assert len(load_requests(s.con, {})) == n
        assert len(load_requests(s.con, factors.as_labels({"rate_mbps": 20.0}))) == n
        assert len(load_requests(s.con, factors.as_labels({"loss_down": 0.0}))) == n
        assert not len(load_requests(s.con, factors.as_labels({"rate_mbps": 21.0})))
        cal = calibrate(s.con, factors.as_labels({"rate_mbps": 20.0}))
        assert len(cal.requests) == n and cal.sources["rate_mbps"] == "label rate_mbps"
        assert [q.index for q in cal.requests] == list(range(n))
        (g, r), = s.whatif({"rate_mbps": 40}, source={"rate_mbps": 20}, draws=8)
        assert len(r.measured_source) == n and r.replay_source.shape[0] == n
        for by in ((), ("connection",)):  # nothing to group: one line, not an empty table
            with pytest.raises(TracekitError, match=r"^no requests match rate_mbps=21\.0"):
                s.whatif({"rate_mbps": 40}, source={"rate_mbps": 21}, by=by, draws=8)


def _pcap_head(src, dst, drop_last):
    """A copy of the pcap `src` without its last `drop_last` packets."""
    import pathlib
    import struct
    data = pathlib.Path(src).read_bytes()
    little = data[:4] == b"\xd4\xc3\xb2\xa1"
    at, ends = 24, []
    while at + 16 <= len(data):
        incl, = struct.unpack_from("<I" if little else ">I", data, at + 8)
        at += 16 + incl
        ends.append(at)
    pathlib.Path(dst).write_bytes(data[:ends[-1 - drop_last]])


def test_a_response_cut_by_the_captures_end_is_flagged_and_left_out(tmp_path):
    """A capture stopped while the last response was still arriving (the
    committed tbf40 capture less its last 150 packets) shows that request
    with 196 kB of its 300 kB and a third less time: requests flags it (the
    last exchange of a flow that never closed, its last packet at the
    capture's end) and whatif leaves it out, saying so; the whole capture's
    last request, whose connection closed, is not flagged."""
    import tracekit
    from tracekit.whatif.calibrate import calibrate, load_requests
    here = os.path.join(ROOT, "tests", "data", "whatif", "tbf-router")
    cut = str(tmp_path / "tbf40-cut.pcap")
    _pcap_head(os.path.join(here, "tbf40-fresh.pcap"), cut, 150)
    with tracekit.open(str(tmp_path / "cut.duckdb")) as s:
        s.ingest([cut], labels={"rate_mbps": "40", "whole": "no"})
        s.ingest([os.path.join(here, "tbf40-fresh.pcap")], labels={"rate_mbps": "40", "whole": "yes"})
        s.analyze()
        rows = s.con.execute("""SELECT labels['whole'], bytes_down, cut_by_capture_end
            FROM requests ORDER BY capture_id, flow_id""").fetchall()
        assert [r[2] for r in rows] == [False] * 3 + [True] + [False] * 4
        assert rows[3][1] < 0.7 * rows[0][1] and rows[7][1] == rows[0][1]
        df = load_requests(s.con, {"whole": "no"})
        assert len(df) == 3 and df.attrs["cut"] == ["cap1:3:1"]
        assert len(load_requests(s.con, {"whole": "yes"})) == 4
        cal = calibrate(s.con, {"whole": "no"})
        assert len(cal.requests) == 3
        assert "1 more left out, cut by the capture's end (cap1:3:1)" in cal.sources["requests"]


def _rtt_store(tmp_path, name, rtts, connection):
    """A store of delay-line captures `name` (a format of the RTT) at `rtts`,
    labelled as a user would: rtt_ms and connection."""
    import tracekit
    here = os.path.join(ROOT, "tests", "data", "whatif", "delay-line")
    s = tracekit.open(str(tmp_path / "rtt.duckdb"))
    for rtt in rtts:
        s.ingest([os.path.join(here, name.format(rtt) + ".pcap")],
                 labels={"rtt_ms": str(rtt), "connection": connection})
    s.analyze()
    return s


def _delay_line_store(tmp_path, end):
    """A store of the delay line's 40 and 120 ms fresh runs as captured at
    one end ("c" or "s"), labelled as a user would (rtt_ms, connection)."""
    return _rtt_store(tmp_path, end + "-rtt{}-fresh-0", (40, 120), "fresh")


def test_drops_at_a_full_queue_are_the_queues_and_its_size_is_the_longest_wait(
        tmp_path, monkeypatch):
    """On a path made by hand (tests/data/whatif/delay-line: 40 or 120 ms, 20
    Mbit/s, a 100 kB drop-tail queue, BBR) the fresh responses at 40 ms lose
    9-10 segments each where BBR's startup overflows the queue. The server's
    TCP timestamps against the client's clock show each of them lost at a
    full queue, and the longest wait (40 ms) times the rate is the queue: the
    calibration reads loss 0 and 100 kB (the emulator's), and the 40 -> 120
    ms saving is predicted within the tolerance. Read as random loss (1.9 %,
    the reading off) with the queue from the flights, it misses by far."""
    from tracekit.whatif import queueing
    with _delay_line_store(tmp_path, "c") as s:
        (g, r), = s.whatif({"rtt_ms": 120}, source={"rtt_ms": 40}, draws=24)
        assert r.calibration.loss_down == 0.0
        assert r.calibration.head_bytes == 204  # Python's http.server: the header alone first
        assert abs(r.calibration.queue_bytes - 100_000) < 3_000
        assert "full queue" in r.calibration.sources["loss_down"]
        measured = float(np.median(r.measured_source) - np.median(r.measured_target))
        assert measured == pytest.approx(-0.448, abs=0.005)
        assert abs(r.saving - measured) <= max(0.1 * abs(measured), 0.010)
        # without the stamps' reading: the runs of drops alone
        monkeypatch.setattr(queueing, "read", lambda *a, **k: {})
        (g, r), = s.whatif({"rtt_ms": 120}, source={"rtt_ms": 40}, draws=24)
        assert r.calibration.loss_down > 0.01 and r.calibration.queue_bytes > 200_000
        assert abs(r.saving - measured) > 0.1 * abs(measured)


def _logged(name, reason):
    """The drops the delay line logged with this cause ("queue", "random",
    "burst"), {(client port, raw sequence number)}, of
    tests/data/whatif/delay-line/drops-NAME.jsonl."""
    path = os.path.join(ROOT, "tests", "data", "whatif", "delay-line", f"drops-{name}.jsonl")
    with open(path) as f:
        return {(d["dport"], d["seq"]) for d in map(json.loads, f) if d["reason"] == reason}


def _one_capture(tmp_path, name):
    """A store of one delay-line capture, analysed, and its flows' {flow:
    (client port, server ISN)}: what maps a reading's segments to the log."""
    import tracekit
    s = tracekit.open(str(tmp_path / f"{name}.duckdb"))
    s.ingest([os.path.join(ROOT, "tests", "data", "whatif", "delay-line", f"{name}.pcap")])
    s.analyze()
    flows = s.con.execute("""SELECT f.flow_id, f.client_port, p.tcp_seq FROM flows f
        JOIN packets p ON p.capture_id = f.capture_id AND p.flow_id = f.flow_id
        WHERE NOT p.from_client AND p.tcp_flags & 2 = 2""").fetchall()
    return s, {f: (port, isn) for f, port, isn in flows}


def _raw(flows, got):
    """{(client port, raw seq)} of a reading's {(capture, flow): relative seqs}."""
    return {(flows[f][0], (flows[f][1] + q) % (1 << 32)) for (_, f), v in got.items() for q in v}


def test_each_drop_the_delay_line_logged_at_its_full_queue_is_read_as_the_queues(tmp_path):
    """Ground truth drop by drop (tests/data/whatif/delay-line, CUBIC at 90
    ms: 97 drops, the delay line's log names each and its cause): every one
    the client can see as a loss (95: a response's last two segments dropped
    leave no hole behind them, and arrive as if late) is read as the
    queue's. CUBIC overflows the queue at the end of its window, so the
    segment after a lost one is sent a round trip later into a drained
    queue; the one before it waited the queue's 40 ms (read by the segment
    after, few were)."""
    from tracekit.whatif import queueing
    s, raw = _one_capture(tmp_path, "c-cubic-rtt90-fresh-0")
    with s:
        reading = queueing.read(s.con, {(1, f): "client" for f in raw})
        full, waits = queueing.overflowed(reading)
        read, seen = _raw(raw, full), _raw(raw, {k: v[2] for k, v in reading.items()})
    logged = _logged("cubic-rtt90-fresh-0", "queue")
    assert len(logged) == 97 and len(seen) == 95 and seen <= logged
    assert read == seen
    assert all(0.038 < w < 0.042 for w in waits)


def test_a_burst_of_random_loss_is_not_taken_for_the_queue(tmp_path, monkeypatch):
    """Ground truth drop by drop, loss in bursts (tests/data/whatif/delay-line,
    set 18: a Gilbert-Elliott channel before a 70 kB queue, CUBIC at 100 ms,
    six responses on one connection; the log names each drop's cause): the
    69 drops of warm windows overflowing the queue are read as the queue's,
    the other 23 segments the bursts took as random loss -- 13 of them in
    runs of three or more, which a rule by runs alone took for the queue's
    (set 18 read 0.44-0.90 % of random loss against 1.3-2.1 % logged,
    docs/whatif.md). Where the sender's stamps time the flow, the segment
    before a run says whether the queue was full."""
    from tracekit.whatif import losses, queueing
    name = "g1-rtt100-ge-persistent-1"
    s, raw = _one_capture(tmp_path, f"c-{name}")
    flows = [(1, f) for f in raw]

    def read(reading):
        est = {}
        losses.read(s.con, flows, {}, est, {k: v[1] for k, v in reading.items()},
                    {k: v[3] for k, v in reading.items()}, reading.keys())
        return est

    with s:
        reading = queueing.read(s.con, {k: "client" for k in flows})
        (largest, full, lost, share, events), = reading.values()
        queue, burst = _logged(name, "queue"), _logged(name, "burst")
        assert len(queue) == 69 and len(burst) == 24
        assert _raw(raw, {k: lost for k in reading}) == queue | burst
        assert _raw(raw, {k: full for k in reading}) == queue
        # three warm windows overflowed, eleven bursts: one witness each
        assert events == (14, 3) and share < 0.05
        est = read(reading)
        # (one segment lost at the queue, and its first retransmission in a burst)
        assert len(queue & burst) == 1
        assert est["queue_drops"] == 69 and est["loss_segments"] == 23
        monkeypatch.setattr(losses, "RUNS_BY_WITNESS", False)
        assert read(reading)["queue_drops"] == 69 + 13


def test_a_flow_that_never_waited_is_judged_against_the_queue_its_group_held(tmp_path):
    """Ground truth drop by drop (tests/data/whatif/delay-line, set 22's L1: a
    Gilbert-Elliott channel before a 100 kB queue at 20 Mbit/s, CUBIC at 50
    ms, six fresh connections; the log names 25 drops, every one a burst's).
    Two responses lost ten segments each in their first flights, before they
    had queued 4 ms (the sender's clock ticks every 1 ms: too coarse alone to
    tell a full queue from an empty one); the other four held 23-29 ms. Read
    against that, their losses are random and in bursts; left unread, the
    rule by runs took 13 of them for the queue's (and the four runs of the
    group together, read so, no random loss at all: docs/whatif.md,
    twenty-second round)."""
    from tracekit.whatif import losses, queueing
    name = "l1-rtt50-ge-fresh-0"
    s, raw = _one_capture(tmp_path, f"c-{name}")
    flows = [(1, f) for f in raw]
    with s:
        reading = queueing.read(s.con, {k: "client" for k in flows})
        assert len(reading) == 6 and queueing.held(reading) > 0.025
        shallow = [k for k, v in reading.items() if v[0] < 0.004]
        assert len(shallow) == 2 and all(len(reading[k][2]) == 10 for k in shallow)
        assert not any(v[1] for v in reading.values())
        est = {}
        losses.read(s.con, flows, {}, est, {}, {}, reading.keys())
        lost = _raw(raw, {k: v[2] for k, v in reading.items()})
        assert lost == _logged(name, "burst") and not _logged(name, "queue")
        assert (est["queue_drops"], est["loss_segments"]) == (0, 25)
        est = {}
        losses.read(s.con, flows, {}, est, {}, {}, [k for k in flows if k not in shallow])
        assert est["queue_drops"] == 13  # (those in runs of three or more)


def test_a_full_queue_is_tested_by_loss_event_not_by_segment():
    """A run of drops has one witness: eight segments lost behind one
    segment that waited at the top of the queue are one event at a full
    queue, not eight. Three flows, each with one such run and three single
    losses elsewhere, where a fifth of the segments arrived at a full queue:
    3 events of 12 at a full queue is what random loss does (2.4 expected);
    24 segments of 33 would be one chance in billions."""
    from tracekit.whatif import queueing
    reading = {(1, f): (0.04, set(range(8)), set(range(8)) | {100, 200, 300}, 0.2, (4, 1))
               for f in range(3)}
    assert queueing.overflowed(reading) == ({}, [])
    by_segment = queueing._tail(33, 0.2, 24)
    assert by_segment < 1e-9


@pytest.mark.parametrize("name, dropped, plateau, chain", [
    ("s-reno30-fresh-0", 348, 348, 235),        # drops every other segment for 43 ms
    ("s-cub120-persistent-0", 128, 0, 128),     # two ACKs held 82-92 ms, the queue 47
])
def test_at_a_server_every_drop_the_delay_line_logged_is_read_as_the_queues(
        tmp_path, monkeypatch, name, dropped, plateau, chain):
    """Ground truth at the server's capture (tests/data/whatif/delay-line,
    set 4: Reno at 30 ms, whose slow start overshoots a 120 kB queue and
    loses every other segment for 43 ms, more than a round trip; CUBIC at
    120 ms on one connection, each warm response's burst cut by a 60 kB
    queue): every drop the delay line logged is read as the queue's. Two
    rules make it so, each shown by its absence: an episode goes on while
    its drops come a few segments apart (cut at one round trip from its
    first, the Reno run's later drops had no ACK to time and read as random:
    235 of 348) -- where the client does not SACK: the segments behind a
    hole are timed by the SACK block they end, which reads them all alone --
    and the queue's depth is the wait three ACKs reach, not the longest (two
    ACKs the client held 82 and 92 ms put every drop below a full queue: 0
    of 128)."""
    from tracekit.whatif import queueing
    logged = _logged(name[2:], "queue")
    assert len(logged) == dropped
    s, raw = _one_capture(tmp_path, name)
    with s:
        def read():
            return _raw(raw, queueing.overflowed(
                queueing.read(s.con, {(1, f): "server" for f in raw}))[0])
        assert read() == logged
        with monkeypatch.context() as m:
            m.setattr(queueing, "_plateau", lambda wait: float(np.max(wait)))
            assert len(read()) == plateau
        monkeypatch.setattr(queueing, "CHAIN", -1)
        assert read() == logged
        monkeypatch.setattr(queueing, "SACK_TIMED", False)
        assert len(read() & logged) == chain


def test_an_ack_the_client_held_does_not_time_the_queue_at_a_server(tmp_path):
    """Reno at 150 ms, 8 Mbit/s, a 40 kB queue, six 250 kB responses on one
    connection, captured at the server (tests/data/whatif/delay-line, set
    8; 61 drops, each logged as the queue's): each warm response bursts its
    window into the queue, which drops a run of segments; the segment
    before the run waits the queue's 40 ms, and nothing follows it for 72
    ms, so the client's delayed-ACK timer holds its ACK 44 ms more -- an 82
    ms wait, once a response, five times alike: the largest wait three ACKs
    reach. No FIFO queue lets one segment wait 44 ms longer than the one
    before it: at the bottleneck's rate the round trip is capped where the
    bytes between them allow, and the queue reads 40.1 ms, every drop its."""
    from tracekit.whatif import queueing
    logged = _logged("reno-rtt150-persistent-0", "queue")
    assert len(logged) == 61
    s, raw = _one_capture(tmp_path, "s-reno-rtt150-persistent-0")
    with s:
        flows = {(1, f): "server" for f in raw}
        for rate, largest, read in ((8e6 / 8, 0.0401, 61), (None, 0.0813, 44)):
            reading = queueing.read(s.con, flows, rate)
            (wait,) = [v[0] for v in reading.values()]
            assert wait == pytest.approx(largest, abs=0.0005)
            assert len(_raw(raw, queueing.overflowed(reading)[0]) & logged) == read


def test_drops_behind_an_open_hole_are_timed_by_their_sacks(tmp_path, monkeypatch):
    """BBR at 100 ms, 15 Mbit/s, a 50 kB queue and 1 % random loss, six
    400 kB responses on one connection, captured at the server
    (tests/data/whatif/delay-line, set 7; the delay line logged 361
    segments dropped at its queue and 20 at random, 6 of them both). A
    random drop opens a hole; BBR keeps the queue full through the recovery
    and overflows it there, and the segments that arrive behind the hole
    are SACKed, not ACKed: timed by the SACK block they end, every queue
    drop is read as the queue's (by ACKs alone 136 of 361). A random drop
    at a full queue looks the same (6 of the 14 random only; the client's
    stamps see it so too), so the random rate is read over the segments
    that did not arrive at a full queue: 0.64 %, the log's 1.04 % (over all
    of them 0.48 %)."""
    from tracekit.whatif import queueing
    logs = os.path.join(ROOT, "tests", "data", "whatif", "delay-line",
                        "drops-bbr-rtt100-persistent-0.jsonl")
    with open(logs) as f:
        drops = [d for d in map(json.loads, f) if d["payload_len"] > 0]
    rand = {(d["dport"], d["seq"]) for d in drops if d["reason"] == "random"}
    logged = {(d["dport"], d["seq"]) for d in drops if d["reason"] == "queue"}
    assert len(logged) == 361 and len(rand) == 20
    s, raw = _one_capture(tmp_path, "s-bbr-rtt100-persistent-0")
    with s:
        def read():
            return _raw(raw, queueing.overflowed(queueing.read(
                s.con, {(1, f): "server" for f in raw}, 15e6 / 8))[0])
        got = read()
        assert got & logged == logged
        assert len((got & rand) - logged) == 6  # of 14 dropped at random only
        monkeypatch.setattr(queueing, "SACK_TIMED", False)
        assert len(read() & logged) == 136
    # the random rate over the segments that did not arrive at a full queue
    from tracekit.whatif import calibrate
    monkeypatch.setattr(queueing, "SACK_TIMED", True)
    with _rtt_store(tmp_path, "s-bbr-rtt{}-persistent-0", (100,), "persistent") as s:
        est = calibrate.calibrate(s.con, {"rtt_ms": "100"}, {"rate_mbps": 15}).estimates
        hidden = est["segments_at_full_queue"]
        assert 300 < hidden < 500
        assert est["loss_down"] == pytest.approx(est["loss_segments"] / (est["segments"] - hidden))
        logged_rate = 20 / 1923  # the delay line's random drops over its draws
        plain = est["loss_segments"] / est["segments"]
        assert abs(est["loss_down"] - logged_rate) < abs(plain - logged_rate)


def test_a_flow_whose_queue_grows_still_reads_its_senders_clock(tmp_path, monkeypatch):
    """The client's reading of the queue takes the server's clock rate from
    a flow's ticks over its seconds (tests/data/whatif/delay-line, set 5:
    Reno, 4 Mbit/s, a 60 kB queue, RTT 60 ms, six fresh 300 kB responses,
    49 drops each). Each flow builds a 120 ms queue in its 0.78 s, so its
    last segment arrives that much later than its stamp says and the ratio
    is 15 % off Linux's 1,000 Hz: within 10 %, as it was, no flow was read
    and the drops were taken for 23 % random loss; within 25 % (the nearest
    rates are 2.5x apart) every logged drop the client sees as a loss is
    read as the queue's (a response's last segments lost leave no hole
    behind them) and the queue's wait is its 120 ms."""
    from tracekit.whatif import queueing
    logged = _logged("reno4m-fresh-0", "queue")
    assert len(logged) == 294
    s, raw = _one_capture(tmp_path, "c-reno4m-fresh-0")
    with s:
        def read():
            reading = queueing.read(s.con, {(1, f): "client" for f in raw})
            full, waits = queueing.overflowed(reading)
            return (_raw(raw, full), _raw(raw, {k: v[2] for k, v in reading.items()})), waits
        (got, seen), waits = read()
        assert seen <= logged and len(seen) >= 280 and got == seen
        assert len(waits) == 6 and all(0.115 < w < 0.125 for w in waits)
        monkeypatch.setattr(queueing, "CLOCK_SLACK", 0.1)
        (got, seen), waits = read()
        assert got == seen == set() and waits == []


def test_at_the_servers_capture_a_request_is_a_round_trip_shorter_and_the_acks_show_the_queue(
        tmp_path):
    """The same runs captured at the server (tests/data/whatif/delay-line): a
    request there runs from its SYN's arrival to its last byte's departure,
    about a round trip less than the client's (370.8 against 413.3 ms at 40
    ms), and the server's time is its request-to-response (0.9 ms), not that
    less an RTT. The ACKs' round trips show the queue (their longest wait)
    and that the drops were the queue's. The replay of the measured group
    matches it (without the vantage it is a round trip, 11 %, slow), and the
    40 -> 120 ms saving is within the tolerance. The rate is stated: a
    server's capture cannot see the bottleneck behind it."""
    with _delay_line_store(tmp_path, "s") as s:
        with pytest.raises(TracekitError, match="--assume rate_mbps=N"):
            s.whatif({"rtt_ms": 120}, source={"rtt_ms": 40}, draws=24)
        (g, r), = s.whatif({"rtt_ms": 120}, source={"rtt_ms": 40}, draws=24,
                           assume={"rate_mbps": 20})
        cal = r.calibration
        assert cal.vantage == "server" and cal.processing_s < 0.003
        assert cal.loss_down == 0.0 and abs(cal.queue_bytes - 100_000) < 5_000
        measured = float(np.median(r.measured_source))
        assert measured == pytest.approx(0.371, abs=0.003)
        assert float(np.median(r.replay_source)) == pytest.approx(measured, rel=0.03)
        saving = measured - float(np.median(r.measured_target))
        assert abs(r.saving - saving) <= max(0.1 * abs(saving), 0.010)


def test_at_a_server_a_request_ends_as_its_last_segment_leaves_not_as_it_arrives(
        tmp_path, monkeypatch):
    """A server's capture sees a response end when its last segment leaves,
    which is before the client has it by a half round trip and what the
    segment waits in the queue (tests/data/whatif/delay-line: Reno at 30 ms,
    16 Mbit/s, a 120 kB queue, six 500 kB responses on one connection: the
    warm ones end 245, 242, 237, 234, 230 ms after their request arrives, as
    the queue the sender keeps grows). The replay ends each where its last
    segment leaves: the last four within 2 % each (the first 9 % fast:
    its queue is not yet the one the kernel keeps); ending them a round trip
    before the client's end, as before, replays a flat 260 ms, 6-13 % slow."""
    import tracekit
    from tracekit.whatif import replayer
    here = os.path.join(ROOT, "tests", "data", "whatif", "delay-line")
    with tracekit.open(str(tmp_path / "s.duckdb")) as s:
        s.ingest([os.path.join(here, "s-reno30-persistent-0.pcap")],
                 labels={"rtt_ms": "30", "connection": "persistent"})
        s.analyze()

        def warm():
            (g, r), = s.whatif({"rtt_ms": 30}, source={"rtt_ms": 30}, draws=24,
                               assume={"rate_mbps": 16})
            assert r.calibration.vantage == "server"
            m = r.measured_source[1:]
            assert m == pytest.approx([0.245, 0.242, 0.237, 0.234, 0.230], abs=0.002)
            return np.abs(np.median(r.replay_source, axis=1)[1:] - m) / m
        err = warm()
        assert err[1:].max() < 0.02 and err[0] < 0.1
        monkeypatch.setattr(replayer, "SERVER_LAST_SEND", False)
        err = warm()
        assert err.min() > 0.05, err


def test_a_burst_the_bottleneck_spaces_is_not_read_as_pacing(tmp_path):
    """The congestion control from the second flight's spread: BBR paces it
    over more of the round trip than the bottleneck alone would spread a
    burst (tests/data/whatif/delay-line: BBR at 40 ms, 20 Mbit/s: 0.47 RTT
    against 0.22), CUBIC sends it as a burst the bottleneck spaces (CUBIC at
    30 ms, 12 Mbit/s: 0.46 RTT against 0.46, read as BBR before the
    bottleneck's spacing was counted)."""
    import tracekit
    from tracekit.whatif.calibrate import calibrate
    here = os.path.join(ROOT, "tests", "data", "whatif", "delay-line")
    with tracekit.open(str(tmp_path / "cc.duckdb")) as s:
        for name, cc in (("c-rtt40-fresh-0", "bbr"), ("c-cubic-rtt30-fresh-0", "cubic")):
            s.ingest([os.path.join(here, f"{name}.pcap")], labels={"cc_truth": cc})
        s.analyze()
        for cc in ("bbr", "cubic"):
            cal = calibrate(s.con, {"cc_truth": cc})
            assert cal.congestion == cc, cal.sources["congestion"]
            assert cal.sources["congestion"].startswith("second flight spread over")


def test_a_queue_never_filled_is_guessed_no_shallower_than_the_waits_it_held(
        tmp_path, monkeypatch):
    """A CUBIC server at 30 ms (tests/data/whatif/delay-line, set 7: 12
    Mbit/s, an 80 kB queue, 0.5 % random loss, two rounds of six fresh 300 kB
    responses, captured at the server): no response filled the queue, so
    its size is a guess -- but the ACKs' round trips show segments waiting
    31 ms in it, so it holds at least 46 kB. The guess was 0.4 BDP (18
    kB), which the trace contradicts, and the replay at 90 ms overflowed it
    (the saving 30 -> 90 ms predicted -412 ms, measured -296); guessed at
    the waits it held, within the tolerance. Until the twenty-fifth round
    the group's own replay at 46 kB was slower than its times and the guess
    was raised 1.5 times (engine._queue_reading, fifteenth round); with the
    response's header sent apart (Python's http.server, read from the
    capture) it fits and is kept. Without the waits the 0.4 BDP guess was
    raised too, refuted by the group's own replay; with the header apart
    that replay fits it as well (9.4 % by rank, MISFIT 10 %) and the saving
    misses: the waits are what read this queue."""
    from tracekit.whatif import queueing
    with _rtt_store(tmp_path, "s-cub-rtt{}-fresh-0", (30, 90), "fresh") as s:
        for rtt in (30, 90):
            s.ingest([os.path.join(ROOT, "tests", "data", "whatif", "delay-line",
                                   f"s-cub-rtt{rtt}-fresh-1.pcap")],
                     labels={"rtt_ms": str(rtt), "connection": "fresh"})
        s.analyze()
        (g, r), = s.whatif({"rtt_ms": 90}, source={"rtt_ms": 30}, draws=24,
                           assume={"rate_mbps": 12})
        cal = r.calibration
        held = cal.estimates["queue_held_ms"]
        assert 30.0 < held < 31.5
        assert cal.head_bytes == 204 and "queue_guess_bytes" not in cal.estimates  # kept
        assert cal.queue_bytes == pytest.approx(held / 1e3 * 12e6 / 8, rel=0.01)
        assert r.measured_saving == pytest.approx(-0.296, abs=0.005)
        assert r.within
        monkeypatch.setattr(queueing, "held", lambda reading: 0.0)
        (g, r), = s.whatif({"rtt_ms": 90}, source={"rtt_ms": 30}, draws=24,
                           assume={"rate_mbps": 12})
        # 0.4 BDP: not refuted by the group's own replay since the header went apart
        assert "queue_guess_bytes" not in r.calibration.estimates
        assert r.calibration.queue_bytes < 20_000 and not r.within


def test_a_burst_whose_warm_window_halves_is_read_as_reno(tmp_path, monkeypatch):
    """A burst is CUBIC's or Reno's, and a flight does not say which
    (tests/data/whatif/delay-line: the server Reno, 16 Mbit/s, a 120 kB queue,
    six 500 kB responses on one connection at 30 and 100 ms). At 100 ms each
    response starts with the whole window in one burst and the queue takes
    part of it; replayed as CUBIC (717/1024 of the window after each loss)
    the group's requests miss by 15 %, without HyStart by 10 %, as Reno
    (half) by under 1 %: the calibration reads Reno, says why, and the
    100 -> 30 ms saving (433 ms) is within the tolerance; read as CUBIC it
    is 273 ms."""
    from tracekit.whatif import engine
    with _rtt_store(tmp_path, "c-reno{}-persistent-0", (30, 100), "persistent") as s:
        (g, r), = s.whatif({"rtt_ms": 30}, source={"rtt_ms": 100}, draws=24)
        cal = r.calibration
        assert cal.congestion == "reno"
        assert "as Reno by 0." in cal.sources["congestion"]
        measured = float(np.median(r.measured_source))
        assert abs(float(np.median(r.replay_source)) - measured) < 0.02 * measured
        saving = measured - float(np.median(r.measured_target))
        assert saving == pytest.approx(0.433, abs=0.005)
        assert abs(r.saving - saving) <= max(0.1 * saving, 0.010)
        monkeypatch.setattr(engine, "MISFIT", float("inf"))  # the burst read as CUBIC kept
        (g, kept), = s.whatif({"rtt_ms": 30}, source={"rtt_ms": 100}, draws=24)
        assert kept.calibration.congestion == "cubic"
        assert abs(kept.saving - saving) > 0.2 * saving
    # tools/whatif_swap.py takes its calibrations apart as the engine makes them
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "whatif_swap.py"),
                          "--db", str(tmp_path / "rtt.duckdb"), "--where", "connection=persistent",
                          "--factor", "rtt_ms", "--levels", "100,30", "--draws", "8"],
                         capture_output=True, text=True, check=True).stdout
    assert "| congestion | reno | " in out


def test_a_slow_start_hystart_did_not_end_is_read_from_the_warm_requests(tmp_path, monkeypatch):
    """A CUBIC server at 150 ms (tests/data/whatif/delay-line, set 3: 8
    Mbit/s, an 80 kB queue, six 400 kB responses on one connection, captured
    at the server) whose HyStart did not end the first response's slow start
    (the client's ACK train broke 3.7 ms short of it: docs/whatif.md, twelfth
    round): the window it left bursts into the queue at each warm response
    (95, 54, 27, 7 drops). Replayed with HyStart the group misses its
    requests by 10.7 %, without it by 1.0 %, as Reno by 8.6 %: the
    calibration read HyStart off (CUBIC still) and the 150 -> 50 ms saving
    (349 ms) was within the tolerance; with HyStart it was 471. Since the
    twenty-fifth round (the response's header sent apart, CUBIC's epoch kept
    across the idle, each checked against the kernel's tcp_probe trace on
    other paths) the group fits neither: 10.5 % with HyStart, 14.2 % without
    (the header alone 8.9 %): the warm bursts at 150 ms replay slow, as set
    28's S2's (docs/whatif.md, "What it does not do"). HyStart stays on and
    the saving is 21 % over (423 ms): a known gap, held here from growing;
    the reading itself is tested on its own below."""
    from tracekit.whatif import engine
    with _rtt_store(tmp_path, "s-cub{}-persistent-0", (50, 150), "persistent") as s:
        (g, r), = s.whatif({"rtt_ms": 50}, source={"rtt_ms": 150}, draws=24,
                           assume={"rate_mbps": 8})
        cal = r.calibration
        assert cal.congestion == "cubic" and cal.hystart and cal.head_bytes == 204
        assert ("hystart", "on", cal.sources.get("hystart", "CUBIC's, as Linux has it")) \
            in engine.explain(cal)
        saving = float(np.median(r.measured_source) - np.median(r.measured_target))
        assert saving == pytest.approx(0.349, abs=0.005)
        assert 0.1 * saving < r.saving - saving <= 0.25 * saving


def test_a_slow_start_hystart_did_not_end_is_not_taken_for_reno(monkeypatch):
    """Reno has no HyStart, so a CUBIC sender whose HyStart did not end its
    slow start (the ACK train broken by a few ms: docs/whatif.md, twelfth
    round) replays closer as Reno than as CUBIC; it is read as Reno only
    where Reno fits twice as well as CUBIC without HyStart too, and fits:
    a Reno less wrong than CUBIC where both miss is not read as Reno. Where
    CUBIC without HyStart fits, that is the reading."""
    from dataclasses import replace as _replace
    from tracekit.whatif import engine, replayer
    from tracekit.whatif.calibrate import Calibration
    cal = Calibration([], 0.1, 2e6, 0.0, 0.0, 0.0, 1e5, "cubic", 10, False, 1448, 0.0, 0.0,
                      0.0, 0.0, sources={"congestion": "a burst (CUBIC)",
                                         "congestion_read": "burst"})
    measured = np.array([1.0, 1.0, 1.0])
    fits = {}

    def replay(c, s, draws, seed):
        key = "reno" if s.cc == "reno" else ("cubic" if s.hystart else "plain")
        return np.full((3, 4), 1.0 + fits[key])
    monkeypatch.setattr(engine, "replay", replay)
    monkeypatch.setattr(engine, "setting", lambda c, ch: replayer.Setting(
        0.1, 2e6, 0, 0, 0, 1e5, 0, c.congestion, 10, False, 0, None, 0, 0, hystart=c.hystart))
    for cubic, plain, reno, read, hystart in (
            (0.18, 0.004, 0.003, "cubic", False), (0.18, 0.10, 0.003, "reno", True),
            (0.18, 0.07, 0.07, "cubic", True),  # neither fits: as read
            (0.02, 0.02, 0.001, "cubic", True)):  # CUBIC fits: not questioned
        fits.update(cubic=cubic, plain=plain, reno=reno)
        got, _ = engine._congestion_reading(cal, measured, replay(cal, engine.setting(cal, {}),
                                                                    4, 0), 4, 0)
        assert (got.congestion, got.hystart) == (read, hystart)
    read = _replace(cal, sources={"congestion": "label congestion"})
    fits.update(cubic=0.18, plain=0.004, reno=0.003)  # a label is not questioned either
    assert engine._congestion_reading(read, measured, replay(read, engine.setting(read, {}), 4, 0),
                                      4, 0)[0] is read


def test_drops_a_short_path_recovers_at_once_are_read_as_the_queues(tmp_path, monkeypatch):
    """On a path made by hand (tests/data/whatif/tbf-router: a token bucket on a
    router, a 25 us round trip) a third of the segments are retransmitted and
    the transfers still run at the bucket's rate. The one-way delay shows
    each lost at a full queue (52.6 ms deep: whatif/queueing.py), and the
    10 -> 40 Mbit/s saving is predicted within the tolerance. Where that
    reading is not there (the sender's clock taken within 10 %, as before
    the thirteenth round: these flows build their queue fast) they read as
    random loss, and the replay of the 10 Mbit/s group takes seconds
    against its 0.24 s measured; the engine reads them as the queue's drops
    instead, says so, and is within again (it misses by far with the random
    reading kept)."""
    import tracekit
    from tracekit.whatif import engine, queueing
    here = os.path.join(ROOT, "tests", "data", "whatif", "tbf-router")
    db = str(tmp_path / "tbf.duckdb")
    with tracekit.open(db) as s:
        for mbit in (10, 40):
            s.ingest([os.path.join(here, f"tbf{mbit}-fresh.pcap")], labels={"rate_mbps": str(mbit)})
        s.analyze()
        (g, r), = s.whatif({"rate_mbps": 40}, source={"rate_mbps": 10}, draws=100)
        assert r.calibration.loss_down == 0 and r.within
        assert "full queue: the queue's" in r.calibration.sources["loss_down"]
        monkeypatch.setattr(queueing, "CLOCK_SLACK", 0.1)
        (g, r), = s.whatif({"rate_mbps": 40}, source={"rate_mbps": 10}, draws=100)
        cal = r.calibration
        assert cal.estimates["loss_down_as_random"] > 0.2 and cal.loss_down == 0
        assert cal.sources["loss_down"].startswith("0: the ") and "queue's drops" in cal.sources["loss_down"]
        measured = float(np.median(r.measured_source))
        assert abs(float(np.median(r.replay_source)) - measured) < 0.1 * measured
        assert r.measured_saving > 0.15 and r.within
        monkeypatch.setattr(engine, "REFUTED", float("inf"))  # the random reading kept
        (g, kept), = s.whatif({"rate_mbps": 40}, source={"rate_mbps": 10}, draws=100)
        assert kept.calibration.loss_down > 0.2 and not kept.within


def test_a_group_named_twice_for_one_factor_is_named_once():
    """--where rate_mbps=8 --from rate_mbps=8: the group is the where's and the
    source's labels (the source's under the lab's name, bottleneck_mbps); a
    helper's --explain read "rate_mbps=8, connection=persistent, rate_mbps=8.0".
    Two values for one factor are both said (no group matches them)."""
    from tracekit.whatif.factors import as_labels, describe
    group = {"rate_mbps": "8", "connection": "persistent", **as_labels({"rate_mbps": 8.0})}
    assert describe(group) == "rate_mbps=8, connection=persistent"
    assert describe({"rate_mbps": "8", **as_labels({"rate_mbps": 24.0})}) == "rate_mbps=8, rate_mbps=24.0"
    assert describe({}) == "the store"
