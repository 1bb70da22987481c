"""The tunnel arm sized for its path (tracekit.lab.tunnel.sized_for): parity
from the loss by the binomial tail, windows from the bandwidth-delay
product, and never a window that could overrun the bottleneck's queue."""

import math

import pytest

from tracekit.core.errors import TracekitError
from tracekit.lab.experiment import _tunnel_sizing, is_tunnel, load, settings_of
from tracekit.lab.tunnel import SEGMENT, sized_for


def group_fails(n, k, p):
    """P(more than n - k of n shards lost): the group cannot be rebuilt."""
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(n - k + 1, n + 1))


@pytest.mark.parametrize("loss, parity", [(0.14, 8), (0.036, 3)])
def test_parity_is_the_least_that_keeps_a_group_with_p_0_999(loss, parity):
    s = sized_for(loss, 333, 200, fec=True, queue_bytes=8_325_000)
    assert (s["datashard"], s["parityshard"]) == (10, parity)
    assert group_fails(10 + parity, 10, loss) <= 0.001 < group_fails(10 + parity - 1, 10, loss)


def test_windows_fill_the_pipe_and_fit_pipe_plus_queue():
    bdp = 333e6 / 8 * 0.2
    for loss in (0.14, 0.036):
        for fec in (True, False):
            s = sized_for(loss, 333, 200, fec=fec, queue_bytes=8_325_000)
            stretch = (10 + s["parityshard"]) / 10 if fec else 1.0
            wire = s["sndwnd"] * SEGMENT * stretch
            assert s["sndwnd"] == s["rcvwnd"]
            assert bdp <= wire <= bdp + 8_325_000
            assert ("no FEC" in s["sizing"]) is (not fec)


def test_a_window_that_would_overrun_the_queue_is_refused():
    with pytest.raises(TracekitError, match="overrun"):
        sized_for(0.14, 333, 200, fec=True, queue_bytes=100_000)


def test_the_chapter_case_experiment_sizes_its_tunnels(tmp_path):
    spec = load("experiments/chapter-case.toml")
    assert spec["trials"] >= 20
    fec = settings_of(spec, {"loss_down": 0.14, "path": "tunnel", "connection": "fresh"})
    arq = settings_of(spec, {"loss_down": 0.036, "path": "tunnel-arq", "connection": "fresh"})
    direct = settings_of(spec, {"loss_down": 0.14, "path": "direct", "connection": "fresh"})
    assert is_tunnel(fec) and is_tunnel(arq) and not is_tunnel(direct)
    assert _tunnel_sizing(fec)["parityshard"] == 8
    assert _tunnel_sizing(arq)["parityshard"] == _tunnel_sizing(arq)["datashard"] == 0
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\n[path]\nrtt_ms = 200\n[factors]\npath = ["direct", "tunnel"]\n'
                   '[levels.path.tunnel]\nfec = "auto"\n')
    with pytest.raises(TracekitError, match="rate_mbps"):
        _tunnel_sizing(settings_of(load(str(bad)), {"path": "tunnel"}))
