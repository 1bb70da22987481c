"""The rows `tracekit whatif` and `tracekit interactions` print, and the
groups (--by) the what-if runs over."""

import math

import numpy as np

from ..core.errors import TracekitError
from ..whatif.engine import explain, whatif
from ..whatif.replayer import DRAWS, SEED
from ..whatif.factors import as_labels, describe
from ..whatif.workers import on_progress as on_replay  # noqa: F401 (the CLI's progress line)


def groups(con, where, by):
    """[{name: value}] of each combination of the --by attributes (a label, else
    a field of the request's events, else a column: request_attributes.sql)
    among the requests matching where ([where] without --by)."""
    if not by:
        return [dict(where)]
    from ..whatif.calibrate import load_requests
    df = load_requests(con, where)
    combos = sorted({tuple(str(dict(att).get(b)) for b in by) for att in df.attributes})
    out = [{**where, **dict(zip(by, c))} for c in combos if "None" not in c]
    if not out:  # (an empty table would say nothing)
        named = f"{' and '.join(by)} (a label, an event field or a column)"
        raise TracekitError(f"no requests match {describe(where)}" + ("" if df.empty else
                            f" with {named} to group them by"))
    return out


def run(con, where, source, target, by=(), draws=DRAWS, assume=None, seed=None):
    """[(group, WhatIf)] over the --by groups (seed: the replays' draws; None the engine's)."""
    seed = SEED if seed is None else seed
    return [(g, whatif(con, g, source, target, draws=draws, assume=assume, seed=seed))
            for g in groups(con, {**where, **as_labels(source)}, by)]


def _ms(x):
    return None if x is None else round(x * 1e3, 1)


def _pair(x):
    """An interval in ms, rounded outwards: a value inside it is inside as printed
    (a point prediction of 258.5 ms at its lower edge read "259..347")."""
    return f"{math.floor(x[0] * 1e3):.0f}..{math.ceil(x[1] * 1e3):.0f}" if x else None


def rows(results, by=()):
    """(columns, rows) of what-if results; times in ms."""
    columns = [*by, "n", "measured_ms", "replayed_ms", "predicted_ms", "predicted_95",
               "saving_ms", "saving_95", "target_n", "target_ms", "measured_saving_ms",
               "error_ms", "within", "chance", "in_95"]
    out = []
    for g, r in results:
        m = r.measured_saving
        err = None if m is None else r.saving - m
        out.append([*(g.get(b) for b in by), len(r.measured_source),
                    _ms(float(np.median(r.measured_source))),
                    _ms(float(np.median(r.replay_source))), _ms(r.predicted),
                    _pair(r.intervals.get("predicted")), _ms(r.saving),
                    _pair(r.intervals.get("saving")),
                    None if r.measured_target is None else len(r.measured_target),
                    None if r.measured_target is None else _ms(float(np.median(r.measured_target))),
                    _ms(m), _ms(err), r.within,
                    None if r.chance is None else round(r.chance, 2), r.covered])
    return columns, out


def emulation_rows(pairs, by=()):
    """(columns, rows) of [(group, Emulation)] (whatif.emulate); times in ms."""
    columns = [*by, "emulated_n", "measured_ms", "emulated_ms", "source_error",
               "emulated_target_ms", "emulated_saving_ms", "emulated_95", "replay_saving_ms",
               "agree", "replay_in_95", "busy_runs", "runs"]
    out = []
    for g, e in pairs:
        out.append([*(g.get(b) for b in by), len(e.source_s), _ms(e.measured_source_s),
                    _ms(float(np.median(e.source_s))), f"{e.source_error * 100:+.1f} %",
                    _ms(float(np.median(e.target_s))), _ms(e.saving), _pair(e.interval),
                    _ms(e.replay_saving), e.agree, e.replay_inside, len(e.disturbed),
                    e.workdir])
    return columns, out


def explain_rows(results):
    """(columns, rows) of the calibration of each group; where the queue was
    guessed, the predicted saving at each queue of WhatIf.queue_savings (half,
    twice, the longest wait's: whatif/guesses.py), and where the sender
    was, the saving of each other sender the group fits as well."""
    out = []
    for g, r in results:
        label = describe(g)  # (as the user named it: rate_mbps, not the lab's bottleneck_mbps)
        out += [[label, k, v, s] for k, v, s in explain(r.calibration)]
        if r.workload:
            out.append([label, "target warmup", str(r.target.get("warmup", 1)), r.workload])
        if r.loss_shape:
            out.append([label, "target loss_burst", f"{r.target.get('loss_burst', 0.0):.3f}",
                        r.loss_shape])
        for q, saving in r.queue_savings:
            times = q / r.calibration.queue_bytes
            which = ("the longest wait's queue, " if times < 0.5 else "")  # (guesses.waited_queue)
            out.append([label, f"saving_ms at queue_bytes={q:.0f}", f"{saving * 1e3:.1f}",
                        f"the queue is a guess: the predicted saving at {which}{times:.2g}x it "
                        f"({r.saving * 1e3:.1f} ms at the guess)"])
        for name, misfit, saving in r.sender_savings:
            out.append([label, f"saving_ms as {name}", f"{saving * 1e3:.1f}",
                        f"the group's times fit {name} too (by {misfit:.1%}): the predicted "
                        f"saving were it the sender ({r.saving * 1e3:.1f} ms as read)"])
    return ["group", "parameter", "value", "from"], out


def interaction_rows(result):
    """(columns, rows) of a Shapley split (whatif.shapley.Split)."""
    rows_ = [["total", _ms(result.total), _pair(result.total_ci), None]]
    for f, v in result.shares.items():
        rows_.append([f, _ms(v), _pair(result.cis.get(f)), None])
    for pair, v in result.interactions.items():
        rows_.append([" x ".join(pair), _ms(v), _pair(result.cis.get(pair)), "interaction"])
    return ["factor", "share_ms", "share_95", "kind"], rows_
