"""The round trip's spread of a group with too few handshakes of its own,
read from the store's runs on the same path (whatif/group.py): a
persistent group's four connections and their fresh twin's 24."""

import numpy as np
import pandas as pd
import pytest

from tracekit.whatif import group, pathrate

MS = 1_000_000


def _flows(rtts_ms, first_capture):
    return pd.DataFrame({"capture_id": np.arange(len(rtts_ms)) + first_capture,
                         "flow_id": 1, "handshake_rtt_ns": np.asarray(rtts_ms) * MS})


@pytest.fixture
def store(monkeypatch):
    """load_requests(where) of a store with a persistent group (4 flows at
    110.2-110.5 ms) and its fresh twin (24 flows) on the same path, loss_down=0;
    `asked` records each where."""
    rng = np.random.default_rng(26)
    own = [110.2, 110.3, 110.4, 110.5]
    twin = list(110.0 + rng.uniform(0, 0.6, 24))
    asked = []

    def load(con, where):
        asked.append(where)
        return _flows(own + twin, 0)  # (the group's own flows among them: counted once)
    monkeypatch.setattr(group, "load_requests", load)
    return _flows(own, 0), own + twin, asked


def test_a_persistent_group_reads_the_spread_of_its_path(store):
    own, path, asked = store
    labels = {"loss_down": "0.0", "connection": "persistent", "congestion": "cubic"}
    hs, whence = group.path_handshakes(None, own, labels, pathrate.MIN_HANDSHAKES)
    assert len(hs) == 28
    assert asked == [{"loss_down": "0.0"}]  # the endpoint's factors dropped, the path's kept
    assert sorted(hs / MS) == pytest.approx(sorted(path))
    assert whence == "the store's runs on the group's path (loss_down=0.0; 4 of the flows the group's)"
    src, est = {}, {}
    jitter = pathrate.jitter(hs.to_numpy(dtype=float) / 1e9, labels, src, est, whence)
    q25, q75 = np.percentile(path, [25, 75])
    assert jitter == pytest.approx((q75 - q25) / pathrate.TRIANGLE_IQR / 1e3)
    assert src["jitter_ms"].endswith("of " + whence) and jitter > 0.0003
    # the group's own four alone read none
    assert pathrate.jitter(own.handshake_rtt_ns.to_numpy() / 1e9, labels, {}, {}) == 0.0


def test_enough_of_its_own_or_no_path_to_share_keeps_the_groups(store):
    own, _, asked = store
    many = _flows(np.linspace(110, 111, 8), 100)
    assert group.path_handshakes(None, many, {"loss_down": "0"}, 8)[1] is None
    # nothing but the endpoint's factors in common: nothing says which runs share the path
    assert group.path_handshakes(None, own, {"connection": "persistent"}, 8)[1] is None
    assert group.path_handshakes(None, own[:0], {"loss_down": "0"}, 8)[1] is None  # no handshake
    assert asked == []


def test_runs_at_another_round_trip_are_another_path(monkeypatch):
    """The other runs' smallest handshake within SAME_RTT (10 %) of the
    group's 110.2 ms: 99.0 and 121.5 ms are not the group's path, 100.5 and
    120.0 are; too few of them (3 + 4 < 8) are not enough."""
    own = _flows([110.2, 110.3, 110.4, 110.5], 0)
    for other, n, taken in ((99.0, 24, False), (100.5, 24, True), (120.0, 24, True),
                            (121.5, 24, False), (110.2, 3, False)):
        monkeypatch.setattr(group, "load_requests",
                            lambda con, where, o=other, n=n: _flows([o] * n, 10))
        assert (group.path_handshakes(None, own, {"rtt_ms": "110"}, 8)[1] is not None) == taken
