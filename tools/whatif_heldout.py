"""The what-if engine against a held-out set: every one-factor change a store's labels allow.

A held-out set (docs/whatif.md, "Held out") is runs made outside the lab --
e.g. with tests/data/whatif/delay-line's scripts -- ingested as a user would,
each capture with its factor labels only (`--label rtt_ms=40 --label
connection=fresh`). For each factor named, each level of the other factors
and each ordered pair of its levels (A -> B), the requests at A calibrate
the model and B is --set; the predicted saving is set beside the measured
one (difference of medians). Within: |predicted - measured| <= max(10 % of
measured, 10 ms), as everywhere in the what-if's evidence.

    python tools/whatif_heldout.py STORE [STORE ...] [--factors rtt_ms,connection]
        [--draws 100] [--seed N] [--assume rate_mbps=12] [--json]

One row per cell (markdown; --json: one object a line), then the count
within and the median |error|. It imports tracekit from the tree it sits in,
so `python /tmp/base/tools/whatif_heldout.py STORE` scores an older tree on
the same store: run both in one session and set the columns side by side.
"""

import argparse
import itertools
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _pairs(text):
    out = {}
    for item in filter(None, (text or "").split(",")):
        k, _, v = item.partition("=")
        out[k.strip()] = v.strip()
    return out


def levels(con, factor):
    """The levels of a label in the store, numeric ones in numeric order."""
    rows = con.execute("SELECT DISTINCT labels[?] FROM requests", [factor]).fetchall()
    values = [r[0] for r in rows if r[0] is not None]
    try:
        return sorted(values, key=float)
    except ValueError:
        return sorted(values)


def cells(con, factors):
    """(factor, A, B, {other factor: level}) for every one-factor change."""
    lv = {f: levels(con, f) for f in factors}
    for f in factors:
        others = [o for o in factors if o != f]
        for combo in itertools.product(*(lv[o] for o in others)):
            at = dict(zip(others, combo))
            for a, b in itertools.permutations(lv[f], 2):
                yield f, a, b, at


def score(store_path, factors, draws, assume, seed=None):
    """[row dict] of one store."""
    import tracekit
    with tracekit.open(store_path) as store:
        return _score(store, os.path.splitext(os.path.basename(store_path))[0], factors, draws,
                      assume, seed)


def _score(store, name, factors, draws, assume, seed=None):
    from tracekit.core.errors import TracekitError
    out = []
    for f, a, b, at in cells(store.con, factors):
        row = {"store": name, "change": f"{f} {a} -> {b}",
               "at": ", ".join(f"{k}={v}" for k, v in at.items())}
        try:
            [(_, r)] = store.whatif({f: b}, where=at, source={f: a}, draws=draws,
                                    assume=assume or None, seed=seed)
        except (TracekitError, ValueError) as e:
            row.update(refused=str(e).splitlines()[0][:100])
            out.append(row)
            continue
        m = r.measured_saving
        row.update(measured_ms=None if m is None else round(m * 1e3, 1),
                   predicted_ms=round(r.saving * 1e3, 1),
                   replayed_ms=round(float(np.median(r.replay_source)) * 1e3, 1),
                   source_ms=round(float(np.median(r.measured_source)) * 1e3, 1),
                   error=None if not m else round(abs(r.saving - m) / abs(m), 3),
                   within=r.within, chance=None if r.chance is None else round(r.chance, 2),
                   covered=r.covered, covered_replay=_inside(m, r.intervals.get(
                       "saving_replay", r.intervals.get("saving"))),
                   congestion=getattr(r.calibration, "congestion", None))
        out.append(row)
    return out


def _inside(m, interval):
    """The measured saving m (s) inside an interval (s), None without either."""
    if m is None or interval is None:
        return None
    return bool(interval[0] <= m <= interval[1])


def summary(rows):
    scored = [r for r in rows if r.get("within") is not None]
    errors = [r["error"] for r in rows if r.get("error") is not None]
    refused = sum(1 for r in rows if "refused" in r)
    med = f"{100 * float(np.median(errors)):.1f} %" if errors else "--"
    covered = sum(1 for r in scored if r.get("covered"))
    replay = sum(1 for r in scored if r.get("covered_replay"))
    return (f"{sum(1 for r in scored if r['within'])} of {len(rows)} within "
            f"(refused {refused}); median |error| {med}; the measured saving inside the "
            f"predicted 95 % interval in {covered} (the replay's own, without what the runs "
            f"could not tell: {replay})")


def markdown(rows):
    lines = ["| store | change | at | measured | predicted | error | within | chance | sender |",
             "| --- | --- | --- | ---: | ---: | ---: | --- | ---: | --- |"]
    for r in rows:
        if "refused" in r:
            lines.append(f"| {r['store']} | {r['change']} | {r['at']} | | refused: {r['refused']} "
                         f"| | no | | |")
            continue
        err = "--" if r["error"] is None else f"{100 * r['error']:.0f} %"
        measured = "--" if r["measured_ms"] is None else f"{r['measured_ms']:+.0f}"
        within = {True: "yes", False: "no", None: "--"}[r["within"]]
        lines.append(f"| {r['store']} | {r['change']} | {r['at']} | {measured} "
                     f"| {r['predicted_ms']:+.0f} | {err} | {within} "
                     f"| {r['chance']} | {r['congestion']} |")
    return "\n".join(lines)


def _seed(text):
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: a seed is a whole number >= 0")
    return int(text)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stores", nargs="+")
    ap.add_argument("--factors", default="rtt_ms,connection")
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--seed", type=_seed, default=None, help="the replays' draws (default: the engine's)")
    ap.add_argument("--assume", default="", help="k=v,... stated to every store")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    factors = [f for f in a.factors.split(",") if f]
    rows = []
    for s in a.stores:
        got = score(s, factors, a.draws, _pairs(a.assume), a.seed)
        rows += got
        if a.json:
            for r in got:
                print(json.dumps(r), flush=True)
    if not a.json:
        print(markdown(rows))
    print(summary(rows), file=sys.stderr if a.json else sys.stdout)


if __name__ == "__main__":
    main()
