"""tracekit.model's agent closed forms reproduce every number of the chapter
(issue #28, docs/agents.md): 20 rounds of a screenshot agent, 0.3 s of
edge work, a 6.4 Mbit screenshot, three tiers."""

import numpy as np
import pytest

from tracekit import model

MBIT = 1e6
SHOT = 6.4 * MBIT
TIERS = {  # setup, model, rtt, uplink
    "local": dict(setup_s=0.0, model_s=2.90, rtt_s=0.0, uplink_bps=float("inf")),
    "nearby": dict(setup_s=0.27, model_s=0.137, rtt_s=0.02, uplink_bps=80 * MBIT),
    "cloud": dict(setup_s=0.14, model_s=0.073, rtt_s=0.20, uplink_bps=6.4 * MBIT),
}


def task(tier, **change):
    args = dict(TIERS[tier], **change)
    return model.agent_task_time(20, 0.3, args["model_s"], args["rtt_s"], SHOT,
                                 args["uplink_bps"], setup_s=args["setup_s"])


def test_task_time_on_three_tiers():
    assert task("local") == pytest.approx(64.0)  # 20 x (0.3 + 2.90)
    assert task("nearby") == pytest.approx(11.01)  # 0.27 + 20 x 0.537
    assert task("cloud") == pytest.approx(31.6)  # 0.14 + 20 x 1.573
    assert round(task("nearby"), 1) == 11.0 and round(task("cloud"), 1) == 31.6


def test_cloud_against_its_uplink_and_the_deadline():
    # T(b) = 11.6 + 128 / b (b in Mbit/s)
    for b in (3.5, 4.0, 6.4, 100.0):
        assert task("cloud", uplink_bps=b * MBIT) == pytest.approx(11.6 + 128 / b)
    assert round(task("cloud", uplink_bps=4 * MBIT), 1) == 43.6
    assert round(task("cloud", uplink_bps=3.5 * MBIT), 1) == 48.2
    need = model.uplink_for_deadline(45.0, 20, 0.3, 0.073, 0.20, SHOT, setup_s=0.14)
    assert need == pytest.approx(128 / 33.4 * MBIT)  # 3.832 Mbit/s
    assert round(need / MBIT, 1) == 3.8
    assert task("cloud", uplink_bps=need) == pytest.approx(45.0)
    # the local tier is out at any rate; an instant upload never beats the workstation
    assert model.uplink_for_deadline(45.0, 20, 0.3, 2.90, 0.0, SHOT) == float("inf")
    assert task("local") > 45
    assert task("cloud", uplink_bps=float("inf")) == pytest.approx(11.6)
    assert task("cloud", uplink_bps=float("inf")) > task("nearby")
    assert model.uplink_for_deadline(11.0, 20, 0.3, 0.073, 0.20, SHOT, setup_s=0.14) == float("inf")


def test_variable_rates_cost_more_than_their_mean():
    alternating = [6 * MBIT] * 10 + [10 * MBIT] * 10
    varied = task("cloud", uplink_bps=alternating)
    steady = task("cloud", uplink_bps=8 * MBIT)
    assert varied == pytest.approx(11.6 + 10 * 6.4 / 6 + 10 * 6.4 / 10)  # 28.667
    assert round(varied, 1) == 28.7 and round(steady, 1) == 27.6
    with pytest.raises(ValueError, match="3 uplink rates for 20 rounds"):
        task("cloud", uplink_bps=[1, 2, 3])


def test_redo_after_disconnect():
    cloud_round = 0.3 + 0.073 + 0.20 + 1.0  # 1.573
    nearby_round = 0.3 + 0.137 + 0.02 + 0.08  # 0.537, "0.54 s a round"
    committed = task("cloud") + model.redo_after_disconnect(cloud_round, 1, 1.0)
    uncommitted = task("cloud") + model.redo_after_disconnect(cloud_round, 10, 1.0)
    assert round(committed, 1) == 34.2 and round(uncommitted, 1) == 48.3
    assert uncommitted > 45 > committed
    # the workstation after the same event with all ten rounds to redo
    assert round(task("nearby") + model.redo_after_disconnect(nearby_round, 10, 1.0), 1) == 17.4
    # one round's time per lost round, as a list
    assert model.redo_after_disconnect([1.0, 2.5], 2, 0.5) == pytest.approx(4.0)


def test_server_kept_state_saves_little_transfer():
    # 66 KB resent a round against 10 KB of session state at 333 Mbit/s: 1.345 ms
    saving = model.transfer_saving(66_000, 10_000, 333e6)
    assert saving == pytest.approx(56_000 * 8 / 333e6)
    assert round(saving * 1e3, 1) == 1.3


def test_block_bootstrap_keeps_slow_stretches_together():
    # 20 slow rounds then 80 fast ones: tasks of 10 rounds drawn in blocks of 10
    # are either all slow or mostly fast; independent draws are never all slow
    rounds = np.r_[np.full(20, 2.0), np.full(80, 1.0)]
    blocks = model.block_bootstrap_totals(rounds, 10, block=10, samples=2000, seed=1)
    independent = model.block_bootstrap_totals(rounds, 10, block=1, samples=2000, seed=1)
    assert blocks.max() == pytest.approx(20.0) and independent.max() < 18.0
    # 11 of the 100 (circular) block starts are wholly slow: P(T = 20) = 0.11
    assert np.mean(blocks == 20.0) == pytest.approx(0.11, abs=0.03)
    # both have the same mean (each round equally likely)
    assert blocks.mean() == pytest.approx(independent.mean(), rel=0.02)
    assert blocks.mean() == pytest.approx(12.0, rel=0.02)
    p = model.deadline_probability(rounds, 10, 15.0, block=10, samples=2000, seed=1)
    assert p == pytest.approx(1 - np.mean(blocks > 15.0), abs=1e-9)


def test_placement_moves_a_round_to_another_tier():
    cloud = dict(edge_s=0.3, model_s=0.073, rtt_s=0.2, upload_bits=SHOT, uplink_bps=6.4 * MBIT)
    measured = 1.573 + 0.010  # 10 ms the model does not explain stay with the round
    nearby = model.placement_round(measured, cloud, dict(model_s=0.137, rtt_s=0.02,
                                                         uplink_bps=80 * MBIT))
    assert nearby == pytest.approx(0.537 + 0.010)
