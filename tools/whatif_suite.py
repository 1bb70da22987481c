"""The what-if engine against the lab's committed counterfactual runs.

For each experiment (experiments/<name>.toml, its runs in captures/), every
pair of cells that differ in one factor (the direct path only: the replay
has no tunnel) is predicted both ways: the requests of one cell calibrate
the model, the other cell's level is --set (with the settings the
experiment's [levels] give that level: persistent brings warmup,
slow_start_after_idle and congestion), and the predicted saving is set
beside the measured one (difference of medians, with its bootstrap 95 %
interval). Within: |predicted - measured| <= max(10 % of measured, 10 ms).
Beside each cell, its `chance` (how often even the true saving would be
within the tolerance of a measured saving like this one, from the measured
groups' own spread: engine.WhatIf.chance) and whether the measured saving
lies inside the replay's 95 % interval of a repeat of the experiment.

    python tools/whatif_suite.py [--experiments counterfactual,cross-region]
        [--draws 400] [--store-dir out/whatif-suite] [--runs DIR:EXPERIMENT ...]
        [--tunnels] [--emulate ROUNDS [--emulate-dir DIR]]

The runs are ingested into a store per experiment under --store-dir (made
once, kept), client captures and event logs only, as a user would.
--runs DIR:EXPERIMENT takes runs made elsewhere (a held-out check): DIR
holds <experiment>.runs.json (or the lab's runs folder) and EXPERIMENT names
its toml (a path). --tunnels predicts, instead, each experiment's tunnel
paths from its direct runs (`--set path=tunnel`, whatif/tunnel.py), the
tunnel runs ingested beside them.
"""

import argparse
import itertools
import json
import os
import sys
import tomllib

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

RUNS = {"counterfactual": "captures/lab", "cross-region": "captures/lab",
        "chapter-case": "captures/chapter-case"}
COMPANIONS = ("warmup", "slow_start_after_idle", "congestion", "initcwnd", "pacing")


def experiment(path):
    with open(path, "rb") as f:
        return tomllib.load(f)


def _filtered_manifest(runs_json, out_dir, tunnels=False):
    """A runs.json of the direct path's runs (and the tunnel's, with
    `tunnels`), client files only, in out_dir (symlinks to the run folders):
    what the suite ingests."""
    with open(runs_json) as f:
        runs = json.load(f)
    keep = [r for r in runs if tunnels
            or r["factors"].get("path", r["settings"].get("path")) == "direct"]
    base = os.path.dirname(os.path.abspath(runs_json))
    os.makedirs(out_dir, exist_ok=True)
    for r in keep:
        r["files"] = {k: v for k, v in r["files"].items() if k in ("client_capture", "client_log",
                                                                    "server_log")}
        link = os.path.join(out_dir, r["run"])
        if not os.path.exists(link):
            os.symlink(os.path.join(base, r["run"]), link)
    path = os.path.join(out_dir, "runs.json")
    with open(path, "w") as f:
        json.dump(keep, f)
    return path


def store_for(name, runs_json, store_dir, tunnels=False):
    """The path of a store holding the experiment's direct runs (and its tunnel
    runs, with `tunnels`), analysed."""
    from tracekit import api
    tag = f"{name}-tunnels" if tunnels else name
    db = os.path.join(store_dir, f"{tag}.duckdb")
    if os.path.exists(db):
        return db
    manifest = _filtered_manifest(runs_json, os.path.join(store_dir, f"{tag}-runs"), tunnels)
    if os.path.exists(db + ".part"):
        os.remove(db + ".part")
    api.ingest(db + ".part", manifests=[manifest])
    api.analyze(db + ".part")
    os.replace(db + ".part", db)
    return db


def cells(exp, tunnels=False):
    """[(where, source, target)]: every one-factor change between the
    experiment's cells (the direct path), both ways; with `tunnels`, only
    the changes from the direct path to each tunnel path instead (one way:
    the calibration reads a direct path's TCP)."""
    if tunnels:
        return _tunnel_cells(exp)
    factors = {k: v for k, v in exp.get("factors", {}).items() if k != "path"}
    levels = exp.get("levels", {})
    base = {"experiment": exp["name"]}
    if "path" in exp.get("factors", {}):
        base["path"] = "direct"
    out = []
    names = list(factors)
    for f in names:
        others = [n for n in names if n != f]
        for combo in itertools.product(*(factors[o] for o in others)):
            where = {**base, **{o: str(v) for o, v in zip(others, combo)}}
            for a, b in itertools.permutations(factors[f], 2):
                target = {f: b}
                target.update({k: v for k, v in levels.get(f, {}).get(str(b), {}).items()
                               if k in COMPANIONS})
                out.append((where, {f: a}, target))
    return out


def _tunnel_cells(exp):
    factors = {k: v for k, v in exp.get("factors", {}).items() if k != "path"}
    out = []
    for combo in itertools.product(*factors.values()):
        where = {"experiment": exp["name"], **{k: str(v) for k, v in zip(factors, combo)}}
        for b in exp["factors"].get("path", ()):
            if b != "direct":
                out.append((where, {"path": "direct"}, {"path": b}))
    return out


def run_cells(db, exp, draws, tunnels=False, assume=None):
    import tracekit
    rows = []
    with tracekit.open(db, read_only=True) as store:
        for where, source, target in cells(exp, tunnels):
            (_, r), = store.whatif(target, where, source, draws=draws, assume=assume)
            rows.append((where, source, target, r))
    return rows


def row_text(where, source, target, r):
    m = r.measured_saving
    lo, hi = r.intervals.get("measured_saving", (float("nan"), float("nan")))
    err = r.saving - m
    rel = abs(err) / abs(m) if m else float("nan")
    fixed = ", ".join(f"{k}={v}" for k, v in sorted(where.items())
                      if k not in ("experiment", "path"))
    (f, a), = source.items()
    change = f"{f} {a} -> {target[f]}"
    return (f"| {where['experiment']} | {change} | {fixed} | {m * 1e3:,.1f} "
            f"({lo * 1e3:,.0f}..{hi * 1e3:,.0f}) | {r.saving * 1e3:,.1f} | {err * 1e3:+,.1f} "
            f"| {rel * 100:.0f} % | {'yes' if r.within else 'no'} | {_share(r.chance)} "
            f"| {'yes' if r.covered else 'no'} |"), abs(err), rel


def _share(x):
    return "" if x is None else f"{x * 100:.0f} %"


def summary(results):
    """(within, cells, median abs relative error) of [(where, source, target, WhatIf)]."""
    within = sum(1 for *_, r in results if r.within)
    rels = [abs(r.saving - r.measured_saving) / abs(r.measured_saving)
            for *_, r in results if r.measured_saving]
    return within, len(results), float(np.median(rels)) if rels else float("nan")


def noise(results):
    """(expected, covered, cells): what a perfect prediction would score (the
    sum of the cells' chances: how often the true saving is within the
    tolerance of a measured one, from the measured groups' own spread) and
    how many measured savings lay inside the replay's 95 % interval."""
    measured = [r for *_, r in results if r.chance is not None]
    return (float(sum(r.chance for r in measured)), sum(1 for r in measured if r.covered),
            len(measured))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiments", default="counterfactual,cross-region,chapter-case")
    ap.add_argument("--draws", type=int, default=400)
    ap.add_argument("--store-dir", default=os.path.join(ROOT, "out", "whatif-suite"))
    ap.add_argument("--runs", action="append", default=[], metavar="DIR:EXPERIMENT_TOML")
    ap.add_argument("--assume", default="", metavar="FACTOR=VALUE[,...]",
                    help="values stated instead of calibrated (e.g. queue_bytes=256000)")
    ap.add_argument("--emulate", type=int, default=0, metavar="ROUNDS",
                    help="also re-run each cell's calibration in the lab (root), ROUNDS rounds "
                         "of 4 requests an arm, and print the emulated savings beside")
    ap.add_argument("--emulate-dir", default=os.path.join(ROOT, "out", "whatif-emulation"))
    ap.add_argument("--tunnels", action="store_true",
                    help="the changes from the direct path to each tunnel path instead")
    args = ap.parse_args(argv)
    os.makedirs(args.store_dir, exist_ok=True)
    todo = []
    for name in filter(None, args.experiments.split(",")):
        toml = os.path.join(ROOT, "experiments", f"{name}.toml")
        todo.append((name, os.path.join(ROOT, RUNS[name], f"{name}.runs.json"), toml))
    for spec in args.runs:
        d, toml = spec.split(":", 1)
        name = experiment(toml)["name"]
        todo.append((name, os.path.join(d, f"{name}.runs.json")
                     if os.path.exists(os.path.join(d, f"{name}.runs.json"))
                     else os.path.join(d, "runs.json"), toml))
    print("| experiment | change | fixed | measured saving ms (95 %) | predicted ms | error ms "
          "| error | within | chance | in interval |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: | --- |")
    results = []
    for name, runs_json, toml in todo:
        exp = experiment(toml)
        if args.tunnels and "path" not in exp.get("factors", {}):
            continue
        db = store_for(name, runs_json, args.store_dir, args.tunnels)
        assume = dict(p.split("=", 1) for p in filter(None, args.assume.split(",")))
        for row in run_cells(db, exp, args.draws, args.tunnels, assume or None):
            results.append(row)
            print(row_text(*row)[0], flush=True)
    within, n, med = summary(results)
    print(f"\n{within} of {n} cells within max(10 %, 10 ms); median absolute error "
          f"{med * 100:.1f} %")
    expected, covered, m = noise(results)
    print(f"a perfect prediction would be within in {expected:.1f} of {m} (the measured "
          f"groups' own spread: `chance`); the measured saving inside the predicted 95 % "
          f"interval in {covered} of {m}")
    if args.emulate:
        emulated(results, args.emulate, args.emulate_dir)
    return results


def emulated(results, rounds, workdir):
    """Each cell's calibration re-run in the lab (whatif/emulate.py): a table of
    the emulated saving beside the measured and the replayed one."""
    from tracekit import api
    from tracekit.whatif.engine import _close
    print("\n| experiment | change | fixed | measured saving ms | replayed ms | emulated ms (95 %) "
          "| emulated error | emulated within | replay agrees | replay in its 95 % | source |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- | --- | ---: |")
    out = []
    for i, (where, source, target, r) in enumerate(results, 1):
        (_, e), = api.whatif_emulate([(where, r)], os.path.join(workdir, f"cell-{i}"), rounds, 4)
        m = r.measured_saving
        lo, hi = e.interval
        close = bool(_close(e.saving, m))
        out.append((close, e.agree, e.replay_inside))
        (f, a), = source.items()
        fixed = ", ".join(f"{k}={v}" for k, v in sorted(where.items())
                          if k not in ("experiment", "path"))
        print(f"| {where['experiment']} | {f} {a} -> {target[f]} | {fixed} | {m * 1e3:,.1f} "
              f"| {r.saving * 1e3:,.1f} | {e.saving * 1e3:,.1f} ({lo * 1e3:,.0f}..{hi * 1e3:,.0f}) "
              f"| {abs(e.saving - m) / abs(m) * 100:.0f} % | {'yes' if close else 'no'} "
              f"| {'yes' if e.agree else 'no'} | {'yes' if e.replay_inside else 'no'} "
              f"| {e.source_error * 100:+.1f} % |", flush=True)
    n = len(out)
    print(f"\nemulated within max(10 %, 10 ms) of the measured saving in "
          f"{sum(c for c, _, _ in out)} of {n}; the replay agrees with the emulation in "
          f"{sum(a for _, a, _ in out)} of {n}, inside its 95 % interval in "
          f"{sum(i for *_, i in out)} of {n}")
    return out


if __name__ == "__main__":
    main()
