"""tracekit.model on cases worked by hand from docs/timing-model.md's formulas."""

import math

import numpy as np
import pytest

from tracekit import model


def test_serial_time_of_the_motivating_case():
    # 354,640 bytes down at 333 Mbit/s, 200 ms RTT, 30 ms model, 100 bytes up at 333 Mbit/s:
    # 100 / 41.625e6 + 0.2 + 0.03 + 354640 / 41.625e6 = 0.0000024 + 0.23 + 0.0085199...
    rate = 333e6 / 8
    t = model.serial_time(100, rate, 0.2, 0.03, 354_640, rate)
    assert t == pytest.approx(0.2385223, abs=1e-7)
    assert model.serial_time(0, 0.0, 0.1, 0.0) == 0.1  # nothing to send costs nothing


def test_chunk_pipeline_waits_for_data_and_for_the_resource():
    # a = 0, 0, 5; m = 2, 2, 2; s = 3; d = 10
    # c: 2, 4, 7        (chunk 2 waits for its data at 5)
    # u: 5, 8, 11       (chunk 1 waits for the link until 5; chunk 2 for compute at 7 -> link free at 8)
    c, u, r = model.chunk_pipeline([0, 0, 5], 2, 3, 10)
    assert c.tolist() == [2, 4, 7] and u.tolist() == [5, 8, 11] and r.tolist() == [15, 18, 21]


def test_playback_schedule_matches_the_recurrence():
    # r = 0, 20, 40, 150, 160 ms, tau = 20, J = 30: p = 30, 50, 70, 150 (gap 60), 170
    p, gaps = model.playback_schedule([0, 20, 40, 150, 160], 20, 30)
    assert p.tolist() == [30, 50, 70, 150, 170]
    assert gaps.tolist() == [0, 0, 0, 60, 0]


def test_buffer_drain_time():
    # 2 s of 24 kHz 16-bit mono (96,000 bytes) at 48,000 B/s played, 40,000 B/s received
    assert model.buffer_drain_time(96_000, 48_000, 40_000) == 12.0
    assert model.buffer_drain_time(96_000, 48_000, 50_000) == math.inf


def test_windows_bdp_and_slow_start():
    assert model.window_limited_rate(65_535, 0.2) == pytest.approx(327_675)
    assert model.window_limited_rate(10e6, 0.2, path_rate=1e6) == 1e6
    assert model.bdp(333e6 / 8, 0.2) == pytest.approx(8_325_000)
    iw = 10 * 1448
    assert model.slow_start_bytes(iw, 5) == 14_480 * 31
    # 354,640 bytes: 4 rounds carry 217,200, 5 carry 448,880
    assert model.slow_start_rounds(354_640, iw) == 5
    assert model.slow_start_rounds(14_480 * 31, iw) == 5  # exactly 5 rounds' worth
    assert model.slow_start_rounds(0, iw) == 0


def test_mathis():
    # 1448 / 0.2 / sqrt(0.14) = 19,349.7 B/s; with C = sqrt(3/2): 23,698.6
    assert model.mathis_rate(1448, 0.2, 0.14) == pytest.approx(19_349.72, rel=1e-5)
    assert model.mathis_rate(1448, 0.2, 0.14, c=math.sqrt(1.5)) == pytest.approx(23_698.66, rel=1e-5)
    assert model.mathis_rate(1448, 0.2, 0) == math.inf


def test_retransmission_rounds_distribution():
    # k = 2 packets, p = 0.5: cdf(1) = 0.25, cdf(2) = 0.5625, cdf(3) = 0.765625
    r = model.retransmission_rounds(2, 0.5)
    assert [r.cdf(n) for n in (0, 1, 2, 3)] == [0.0, 0.25, 0.5625, 0.765625]
    # E[max of two geometric(1/2)] = 2 + 2 - 4/3 = 8/3
    assert r.mean == pytest.approx(8 / 3)
    assert r.quantile(0.5) == 2 and r.quantile(0.75) == 3 and r.quantile(0.99) == 8
    # 245 packets of a 354,640-byte response at 14% loss: cdf(n) = (1 - 0.14^n)^245
    # (1 - 0.14^5)^245 = 0.98691 < 0.99 <= (1 - 0.14^6)^245 = 0.99816: six rounds at p99
    big = model.retransmission_rounds(245, 0.14)
    assert big.cdf(5) == pytest.approx(0.98691, abs=1e-5) and big.cdf(6) == pytest.approx(0.99816, abs=1e-5)
    assert big.quantile(0.99) == 6


def test_retransmission_completion():
    # k = 2, p = 0.5, RTT 0.2, budget 0.24: mean 0.24 + (8/3 - 1) x 0.2; p99 0.24 + 7 x 0.2
    mean, p99 = model.retransmission_completion(2, 0.5, 0.2, 0.24, q=0.99)
    assert mean == pytest.approx(0.24 + (8 / 3 - 1) * 0.2)
    assert p99 == pytest.approx(0.24 + 7 * 0.2)


def test_fec_repair_symbols():
    # k = 1, p = 0.1, target 0.99: r = 1 gives P(<= 1 of 2 lost) = 1 - 0.01 = 0.99
    assert model.fec_repair_symbols(1, 0.1, target=0.99) == 1
    # k = 10, p = 0.1, target 0.999: P(Bin(15, 0.1) <= 5) = 0.99775 falls short,
    # P(Bin(16, 0.1) <= 6) = 0.99950 reaches it: r = 6
    def binom(n, r, p=0.1):
        return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(r + 1))
    assert binom(15, 5) == pytest.approx(0.99775, abs=1e-5) and binom(16, 6) == pytest.approx(0.99950, abs=1e-5)
    assert model.fec_repair_symbols(10, 0.1, target=0.999) == 6
    assert model.fec_repair_symbols(10, 0.0) == 0


def test_wire_bytes_split_replication_breakeven_retry_waste():
    # 354,640 bytes in 1448-byte segments: 245 packets x (52 + 52)
    assert model.wire_bytes(354_640, 1448, 52, 52) == 354_640 + 245 * 104
    assert model.wire_bytes(0, 1448, 52) == 0
    assert model.split_fraction(300, 100) == 0.75
    assert model.replication_failure(0.01, 0.1, 0.2) == pytest.approx(0.01 + 0.99 * 0.02)
    assert model.breakeven_uses(1.0, 0.3) == 4 and model.breakeven_uses(1.0, 0) == math.inf
    assert model.expected_retry_cost(2.0, 0.8) == 2.5
    assert model.static_batch_waste([10, 20, 40, 80]) == 1 - 150 / 320


def test_chunk_pipeline_agrees_with_the_loop_on_random_cases():
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = rng.integers(1, 30)
        a, m, s, d = (np.sort(rng.random(n) * 10), rng.random(n), rng.random(n), rng.random(n))
        c_prev = u_prev = -np.inf
        want = []
        for i in range(n):
            c_prev = max(a[i], c_prev) + m[i]
            u_prev = max(c_prev, u_prev) + s[i]
            want.append(u_prev + d[i])
        assert np.allclose(model.chunk_pipeline(a, m, s, d)[2], want)


def test_bound_from_flags_is_the_motivating_cases_budget():
    from click.testing import CliRunner

    from tracekit.cli import main
    r = CliRunner().invoke(main, ["bound", "--down-bytes", "354640", "--rtt-ms", "200", "--rate-mbps",
                                  "333", "--processing-ms", "30", "--format", "csv"])
    rows = dict(line.split(",")[:2] for line in r.output.splitlines()[1:])
    # 200 + 30 + 354,640 x 8 / 333e6 s = 238.52 ms: "about 240 ms" (docs/timing-model.md)
    assert float(rows["serial bound"]) == pytest.approx(238.52, abs=0.01)
    assert float(rows["download S_d/B_d"]) == pytest.approx(8.52, abs=0.01)
