"""Which calibrated value carries a differential prediction's error: swap them.

    python tools/whatif_swap.py --db STORE [--where experiment=chapter-case,path=direct,
        connection=persistent] [--factor loss_down] [--levels 0.14,0.036] [--draws 100]

Calibrates the group at each of the two levels of --factor (tracekit.whatif:
the same calibration the engine makes), prints both side by side (every
value and the trace's own estimates), then replays each level's cell with
its own calibration and with one value at a time taken from the other
level's calibration (common random numbers: every row of a cell draws the
same losses), and last the engine's differential prediction taken apart:

    predicted(target) = measured(source) - [replay(source) - replay(target)]
    error = [measured(source) - replay(source)]        (the source's residual)
          - [measured(target) - own replay(target)]    (the target's residual)
          + [replay(target) from the source's calibration
             - replay(target) from its own calibration, the level as stated]
          + [that - own replay(target) as calibrated]

(replays "as calibrated" use the calibration's own reading of the factor,
as the engine replays its source; the target is replayed at the level as
stated, as the engine does), so a value measured differently at the two
levels shows in the third term, the stated level against the trace's
reading of it in the fourth, and what the replay misses about the source's
runs in the first. Monte Carlo: the own replay with three other seeds.
"""

import argparse
import dataclasses
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Setting fields (the replay's inputs) and Calibration fields read beside them
SETTING = ("rtt", "rate", "loss", "burst", "loss_up", "queue", "jitter", "cc", "initcwnd",
           "pacing", "processing", "rcv_window")
CAL = ("server_s", "reuse_s", "mss", "requests")


def _median(cal, s, draws, seed=None):
    from tracekit.whatif.replayer import SEED, replay
    return float(np.median(replay(cal, s, draws, SEED if seed is None else seed)))


def swapped(cal, donor, name, draws):
    """Median replay of `cal` as calibrated with `name` taken from `donor`."""
    from tracekit.whatif.replayer import setting
    s = setting(cal, {})
    if name in SETTING:
        s = dataclasses.replace(s, **{name: getattr(setting(donor, {}), name)})
        return _median(cal, s, draws)
    return _median(dataclasses.replace(cal, **{name: getattr(donor, name)}), s, draws)


def _show(v):
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, list):
        return f"{len(v)} requests, prior {sorted({q.prior for q in v})}"
    if isinstance(v, tuple):
        return ", ".join(f"{x:.1f}" for x in v)
    return str(v)


def report(con, where, factor, levels, draws):
    from tracekit.whatif.engine import calibrated
    from tracekit.whatif.factors import as_labels
    cals = {lv: calibrated(con, {**where, **as_labels({factor: lv})}, draws)[0] for lv in levels}
    a, b = (cals[lv] for lv in levels)
    out = [f"| value | {levels[0]} | {levels[1]} | source ({levels[0]}) |",
           "| --- | --- | --- | --- |"]
    for f in dataclasses.fields(a):
        if f.name in ("sources", "estimates"):
            continue
        out.append(f"| {f.name} | {_show(getattr(a, f.name))} | {_show(getattr(b, f.name))} | "
                   f"{a.sources.get(f.name.split('_')[0], '')} |")
    for k in sorted(set(a.estimates) | set(b.estimates)):
        out.append(f"| trace:{k} | {_show(a.estimates.get(k, '--'))} | "
                   f"{_show(b.estimates.get(k, '--'))} | the trace's own estimate |")
    names = SETTING + CAL[:2]
    out += ["", "| cell replayed (as calibrated) | own calibration | Monte Carlo: seeds 27-29 | "
            + " | ".join(f"{n} from the other" for n in names) + " |",
            "| --- | ---: | --- | " + " | ".join("---:" for _ in names) + " |"]
    own = {}
    for lv in levels:
        cal, donor = cals[lv], cals[[x for x in levels if x != lv][0]]
        own[lv] = _median(cal, _setting(cal, factor, None), draws)
        mc = ", ".join(f"{_median(cal, _setting(cal, factor, None), draws, k) - own[lv]:+.3f}"
                       for k in (27, 28, 29))
        row = [f"{swapped(cal, donor, n, draws) - own[lv]:+.3f}" for n in names]
        out.append(f"| {factor}={lv} | {own[lv]:.3f} s | {mc} | " + " | ".join(row) + " |")
    out += ["", "| source -> target | measured source | replay source | residual | "
            "replay target (source's calibration, the level as stated) | target's own calibration "
            "at the stated level | swap term | its own calibrated value | stated vs calibrated | "
            "measured target | target residual | predicted | error |",
            "| --- |" + " ---: |" * 12]
    for src, tgt in (levels, levels[::-1]):
        cal = cals[src]
        ms = float(np.median([q.duration_s for q in cal.requests]))
        mt = float(np.median([q.duration_s for q in cals[tgt].requests]))
        rt = _median(cal, _setting(cal, factor, tgt), draws)
        stated = _median(cals[tgt], _setting(cals[tgt], factor, tgt), draws)
        pred = ms - (own[src] - rt)
        out.append(f"| {src} -> {tgt} | {ms:.3f} | {own[src]:.3f} | {ms - own[src]:+.3f} | "
                   f"{rt:.3f} | {stated:.3f} | {rt - stated:+.3f} | {own[tgt]:.3f} | "
                   f"{stated - own[tgt]:+.3f} | {mt:.3f} | {mt - own[tgt]:+.3f} | {pred:.3f} | "
                   f"{pred - mt:+.3f} ({pred / mt - 1:+.0%}) |")
    return "\n".join(out) + "\n"


def _setting(cal, factor, level):
    """The Setting as calibrated (level None), else with factor=level as stated."""
    from tracekit.whatif.replayer import setting
    return setting(cal, {} if level is None else {factor: float(level)})


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--where", default="experiment=chapter-case,path=direct,connection=persistent")
    ap.add_argument("--factor", default="loss_down")
    ap.add_argument("--levels", default="0.14,0.036")
    ap.add_argument("--draws", type=int, default=100)
    args = ap.parse_args(argv)
    import tracekit
    where = dict(p.split("=", 1) for p in args.where.split(",") if p)
    with tracekit.open(args.db, read_only=True) as store:
        sys.stdout.write(report(store.con, where, args.factor, args.levels.split(","),
                                args.draws))


if __name__ == "__main__":
    main(sys.argv[1:])
