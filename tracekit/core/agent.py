"""The closed forms of agent rounds (docs/agents.md), in SI units.

Seconds, bits, bits per second. A screenshot agent's rounds cannot overlap
(the next observation exists only after the action), so a task is the sum of
its rounds:

    T = setup + sum_i (edge + model + rtt + S / b_i)

`tracekit.model` exports these names (it is `core.model`, which imports them).
"""

import math

import numpy as np


def _rates(uplink_bps, rounds):
    rates = np.asarray(uplink_bps, dtype=float)
    if rates.ndim == 0:
        return np.full(int(rounds), float(rates))
    if len(rates) != rounds:
        raise ValueError(f"{len(rates)} uplink rates for {rounds} rounds: give one rate, "
                         f"or one per round")
    return rates


def agent_task_time(rounds, edge_s, model_s, rtt_s, upload_bits, uplink_bps, setup_s=0.0):
    """Task time of `rounds` sequential rounds:

        T = setup + rounds x (edge + model + rtt) + sum_i S / b_i

    `uplink_bps` is one rate (every round) or a sequence of one rate per
    round; an infinite rate makes the upload free. Since t = S / b, rounds at
    a varying rate take longer than rounds at their mean rate."""
    rates = _rates(uplink_bps, rounds)
    upload = float(np.sum(np.where(np.isinf(rates), 0.0, upload_bits / rates))) if rounds else 0.0
    return setup_s + rounds * (edge_s + model_s + rtt_s) + upload


def uplink_for_deadline(deadline_s, rounds, edge_s, model_s, rtt_s, upload_bits, setup_s=0.0):
    """The smallest constant uplink rate (bit/s) with which the task meets its
    deadline: solve D = setup + n (edge + model + rtt) + n S / b for b,

        b = n S / (D - setup - n (edge + model + rtt))

    inf when even an instant upload misses the deadline (the fixed part is
    already >= D); 0 when nothing is uploaded and the fixed part fits."""
    fixed = setup_s + rounds * (edge_s + model_s + rtt_s)
    room = deadline_s - fixed
    if room <= 0:
        return math.inf
    return rounds * upload_bits / room


def redo_after_disconnect(round_s, lost_rounds, reconnect_s):
    """Extra seconds a disconnect costs: the reconnect plus every round whose
    result was not committed and must run again,

        reconnect + lost_rounds x round_s

    (`round_s` one round's time, or a sequence of the lost rounds' times)."""
    if np.ndim(round_s) == 0:
        return reconnect_s + lost_rounds * round_s
    return reconnect_s + float(np.sum(round_s))


def transfer_saving(resent_bytes, state_bytes, rate_bps):
    """Seconds of transfer a round saves when the server keeps the session
    state instead of the client resending it: (resent - state) x 8 / rate.
    (The answer comes back either way, so it is not in the difference.)"""
    return (resent_bytes - state_bytes) * 8 / rate_bps


def block_bootstrap_totals(round_s, rounds, block=5, samples=4000, seed=0):
    """Totals of `rounds` rounds drawn from measured per-round times
    `round_s` (in their order) as whole stretches of `block` neighbouring
    rounds (a moving-block bootstrap): slow periods that span neighbouring
    rounds stay together, as they do in a task (circular: a block may wrap
    from the last measured round to the first, so every round is drawn as
    often). block=1 draws rounds
    independently. Returns `samples` totals (numpy array)."""
    times = np.asarray(round_s, dtype=float)
    if times.size == 0:
        raise ValueError("no measured rounds to resample")
    block = max(1, min(int(block), times.size))
    per_task = -(-int(rounds) // block)  # blocks needed, the last one cut
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, times.size, size=(samples, per_task))
    at = (starts[..., None] + np.arange(block)) % times.size  # circular: every round as likely
    picked = times[at].reshape(samples, -1)[:, :int(rounds)]
    return picked.sum(axis=1)


def deadline_probability(round_s, rounds, deadline_s, fixed_s=0.0, block=5, samples=4000,
                         seed=0):
    """P(T <= D) for a task of `rounds` rounds: T = fixed + the sum of
    `rounds` rounds resampled in blocks of neighbouring measured rounds
    (block_bootstrap_totals)."""
    totals = fixed_s + block_bootstrap_totals(round_s, rounds, block, samples, seed)
    return float(np.mean(totals <= deadline_s))


def placement_round(measured_round_s, measured, tier):
    """A measured round moved to another tier: the measured round minus the
    spans the tier changes, plus the tier's own,

        t' = t - (edge + model + rtt + S/b) + (edge' + model' + rtt' + S/b')

    `measured` and `tier` are dicts with edge_s, model_s, rtt_s, upload_bits,
    uplink_bps (a missing key of `tier` keeps the measured value); what the
    measured round holds beyond these (unexplained, action) stays."""
    def parts(d, base):
        get = (lambda k: d.get(k, base[k])) if base is not None else d.__getitem__
        rate = get("uplink_bps")
        upload = 0.0 if math.isinf(rate) else get("upload_bits") / rate
        return get("edge_s") + get("model_s") + get("rtt_s") + upload
    return measured_round_s - parts(measured, None) + parts(tier, measured)
