"""Deadlines and placement from measured agent rounds (the `agent_rounds`
and `tasks` tables): what `tracekit deadline` and `tracekit placement` print.

Deadline: P(T <= D) for a task of N rounds, T = setup + N rounds drawn from
the measured rounds (executions that were not superseded, in the order
they ran) in circular blocks of neighbouring rounds (core.agent); beside
it, when the store holds tasks of N rounds, the share of them that met D.

Placement: each measured round moved to another tier (its edge work,
model, round trip and upload replaced by the tier's; what else it held --
the action, unexplained time -- stays), then the same prediction per tier.
"""

import numpy as np

from ..core import agent as closed
from ..core.errors import TracekitError

CHAPTER_TIERS = (  # the chapter's case: setup_s, model_s, rtt_s, uplink_bps
    ("local device", 0.0, 2.90, 0.0, float("inf")),
    ("nearby workstation", 0.27, 0.137, 0.02, 80e6),
    ("cloud", 0.14, 0.073, 0.20, 6.4e6),
)


def measured_rounds(con, run=None):
    """Per measured round (in order): round, edge (edge + action), model,
    network, upload, unexplained seconds; and the median setup of the tasks."""
    rows = con.execute("""
        SELECT round_ns, edge_ns + action_ns, model_ns, network_ns, upload_ns
        FROM agent_rounds
        WHERE NOT superseded AND status = 'done' AND ($run IS NULL OR run = $run)
        ORDER BY start_ns""", {"run": run}).fetchall()
    if not rows:
        raise TracekitError("no agent rounds in the store" + (f" for run {run!r}" if run else "")
                            + " (round_start/round_end events with a task; tracekit analyze)")
    setup = con.execute("SELECT coalesce(median(setup_ns), 0) FROM tasks "
                        "WHERE $run IS NULL OR run = $run", {"run": run}).fetchone()[0]
    return np.asarray(rows, dtype=float) / 1e9, float(setup) / 1e9


def measured_share(con, rounds, deadline_s, run=None):
    """(tasks of `rounds` rounds without a disconnect, share of them within the deadline)."""
    n, met = con.execute("""
        SELECT count(*), count(*) FILTER (duration_ns <= $d)
        FROM tasks WHERE rounds = $n AND disconnects = 0 AND ($run IS NULL OR run = $run)""",
                         {"d": round(deadline_s * 1e9), "n": rounds, "run": run}).fetchone()
    return n, (met / n if n else None)


def deadline(con, rounds, deadline_s, run=None, block=5, samples=4000, seed=0,
             upload_bits=None, disconnect=None):
    """(columns, rows): the prediction, the measured share, the uplink the
    deadline needs when `upload_bits` is given, and with `disconnect` =
    (after round k, reconnect seconds) the task time after such a disconnect
    with rounds up to k-1 committed (one round lost) and with none (k lost),
    from the mean measured round (redo_after_disconnect)."""
    parts, setup = measured_rounds(con, run)
    p = closed.deadline_probability(parts[:, 0], rounds, deadline_s, setup, block, samples, seed)
    independent = closed.deadline_probability(parts[:, 0], rounds, deadline_s, setup, 1,
                                              samples, seed)
    n, share = measured_share(con, rounds, deadline_s, run)
    row = [rounds, deadline_s, len(parts), round(float(parts[:, 0].mean()), 4), round(setup, 4),
           round(p, 4), round(independent, 4), n, None if share is None else round(share, 4)]
    columns = ["rounds", "deadline_s", "measured_rounds", "mean_round_s", "setup_s",
               "p_meet_blocks", "p_meet_independent", "tasks", "share_met"]
    if upload_bits is not None:
        edge, model, rtt = (float(parts[:, k].mean()) for k in (1, 2, 3))
        need = closed.uplink_for_deadline(deadline_s, rounds, edge, model, rtt, upload_bits, setup)
        columns.append("uplink_needed_mbps")
        row.append(round(need / 1e6, 3) if np.isfinite(need) else None)
    if disconnect is not None:
        after, reconnect = disconnect
        mean_task = setup + rounds * float(parts[:, 0].mean())
        for lost in (1, after):
            row.append(round(mean_task + closed.redo_after_disconnect(
                float(parts[:, 0].mean()), lost, reconnect), 4))
        columns += ["task_s_committed", "task_s_uncommitted"]
    return columns, [row]


def moved(parts, tier):
    """Measured rounds (rows of measured_rounds) moved to `tier`: a dict of
    edge_s, model_s, rtt_s and upload_s or upload_bits + uplink_bps; a key
    left out keeps the measured span."""
    total, edge, model, rtt, upload = parts.T
    if "upload_s" in tier:
        new_upload = np.full_like(upload, tier["upload_s"])
    elif "uplink_bps" in tier:
        if "upload_bits" not in tier:
            raise TracekitError("a tier with an uplink rate needs the upload size (upload_bits)")
        b = tier["uplink_bps"]
        new_upload = np.full_like(upload, 0.0 if np.isinf(b) else tier["upload_bits"] / b)
    else:
        new_upload = upload
    return (total - (edge + model + rtt + upload) + tier.get("edge_s", edge)
            + tier.get("model_s", model) + tier.get("rtt_s", rtt) + new_upload)


def placement(con, tiers, rounds, deadline_s, run=None, block=5, samples=4000, seed=0):
    """(columns, rows): per tier, the mean moved round, the predicted task time
    (setup + rounds x mean round), P(T <= D), energy when power is given."""
    parts, setup = measured_rounds(con, run)
    out = []
    for name, tier in [("measured", {}), *tiers]:
        times = moved(parts, tier)
        fixed = tier.get("setup_s", setup)
        task = fixed + rounds * float(times.mean())
        p = closed.deadline_probability(times, rounds, deadline_s, fixed, block, samples, seed)
        power = tier.get("power_w")
        out.append([name, round(float(times.mean()), 4), round(task, 3), round(p, 4),
                    task <= deadline_s, None if power is None else round(power * task, 1)])
    return ["tier", "round_s", "task_s", "p_meet", "meets_mean", "energy_j"], out


def chapter_table(deadline_s=45.0, rounds=20, edge_s=0.3, upload_bits=6.4e6):
    """The chapter's local / nearby / cloud table from the closed forms."""
    rows = []
    for name, setup, model, rtt, rate in CHAPTER_TIERS:
        t = closed.agent_task_time(rounds, edge_s, model, rtt, upload_bits, rate, setup)
        need = closed.uplink_for_deadline(deadline_s, rounds, edge_s, model, rtt, upload_bits,
                                          setup)
        rows.append([name, round(model, 3), round(rtt, 3),
                     None if np.isinf(rate) else rate / 1e6, round(t, 1), t <= deadline_s,
                     None if np.isinf(need) else round(need / 1e6, 2)])
    return ["tier", "model_s", "rtt_s", "uplink_mbps", "task_s", "meets", "uplink_needed_mbps"], rows


def parse_tier(text):
    """`name:key=value,...` (keys edge_s, model_s, rtt_s, setup_s, upload_s,
    upload_bits, uplink_mbps, power_w) -> (name, dict in SI units)."""
    name, _, spec = text.partition(":")
    tier = {}
    for item in filter(None, spec.split(",")):
        key, _, value = item.partition("=")
        try:
            number = float(value)
        except ValueError:
            raise TracekitError(f"tier {name!r}: {item!r} is not KEY=NUMBER") from None
        if key == "uplink_mbps":
            tier["uplink_bps"] = number * 1e6
        elif key in ("edge_s", "model_s", "rtt_s", "setup_s", "upload_s", "upload_bits",
                     "power_w"):
            tier[key] = number
        else:
            raise TracekitError(f"tier {name!r}: unknown key {key!r} (edge_s, model_s, rtt_s, "
                                f"setup_s, upload_s, upload_bits, uplink_mbps, power_w)")
    if not name:
        raise TracekitError(f"a tier needs a name: {text!r} (NAME:key=value,...)")
    return name, tier
