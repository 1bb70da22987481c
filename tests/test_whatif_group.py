"""The round trip's spread of a group with too few handshakes of its own,
read from the store's runs on the same path (whatif/group.py): a
persistent group's four connections and their fresh twin's 24."""

import numpy as np
import pandas as pd
import pytest

from tracekit.whatif import group, pathrate

MS = 1_000_000


def _flows(rtts_ms, first_capture, per_run=1):
    """A flow a capture; `per_run` captures a run."""
    i = np.arange(len(rtts_ms))
    return pd.DataFrame({"capture_id": i + first_capture, "flow_id": 1,
                         "run": [f"{first_capture}-{k}" for k in i // per_run],
                         "handshake_rtt_ns": np.asarray(rtts_ms) * MS})


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
        return _flows(own + twin, 0, 4)  # (the group's own flows among them: counted once)
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
    """A run is the group's path where its smallest handshake is within
    SAME_RTT (2 %) of the group's 110.2 ms (2.2 ms: the group's own range,
    0.3 ms, is narrower): runs at 108.5 and 112.0 ms are, 107.9 and 112.5
    are not; too few of them (3 + 4 < 8) are not enough."""
    own = _flows([110.2, 110.3, 110.4, 110.5], 0)
    for other, n, taken in ((107.9, 24, False), (108.5, 24, True), (112.0, 24, True),
                            (112.5, 24, False), (110.2, 3, False)):
        monkeypatch.setattr(group, "load_requests",
                            lambda con, where, o=other, n=n: _flows([o] * n, 10))
        assert (group.path_handshakes(None, own, {"rtt_ms": "110"}, 8)[1] is not None) == taken


def test_a_store_of_several_paths_lends_only_the_groups_own(monkeypatch):
    """Labelled loss_down and connection only, a store holds fresh runs at
    65, 110 and 140 ms: a persistent group at 65 ms reads its spread from
    the 65 ms runs alone (0.5 ms), not from all three (75 ms apart)."""
    rng = np.random.default_rng(3)
    runs = [65 + rng.uniform(0, 0.5, 6), 110 + rng.uniform(0, 0.5, 6), 140 + rng.uniform(0, 0.5, 6)]
    monkeypatch.setattr(group, "load_requests",
                        lambda con, where: _flows(np.concatenate(runs), 10, 6))
    own = _flows([65.1, 65.2, 65.3, 65.4], 0)
    hs, whence = group.path_handshakes(None, own, {"loss_down": "0"}, 8)
    assert whence is not None and len(hs) == 10
    assert float(hs.max() - hs.min()) / MS < 0.5
