"""The chapter's table (docs/timing-model.md, the motivating case) beside the lab's, cell by cell.

    python tools/chapter_table.py --db lab.duckdb [--experiment chapter-case]

Reads an analysed store holding the runs of experiments/chapter-case.toml
and prints, per loss level, connection and path: the chapter's median (for
the 14 % period it reports), the lab's median with a bootstrap 95 %
interval; for the direct path the what-if engine's prediction (tracekit.whatif:
the cell predicted from the runs at the other loss level, --set loss_down,
and the replay of the cell's own runs) with its error against the lab's
median; the closed-form prediction of tracekit.model; and the attribution
spans (their median per request) that are not part of the serial budget --
the waiting -- with, for every cell that differs from the chapter by more
than 15 %, their total beside the chapter's time above the budget.
The README's chapter table is this script's output on captures/chapter-case.
"""

import argparse
import json
import math
import os
import sys

import numpy as np

from tracekit.core.model import (
    RetransmissionRounds,
    _binom_cdf,
    fec_repair_symbols,
    serial_time,
    slow_start_rounds,
)
from tracekit.lab.tunnel import DATA_SHARDS, GROUP_SURVIVAL, SEGMENT
from tracekit.presentation.ablation import ablation, bootstrap_median_ci
from tracekit.whatif import tunnel as kcp
from tracekit.whatif.engine import whatif

RTT = 0.200
RATE = 333e6 / 8
PROCESSING = 0.030
RESPONSE = 354_640
MSS = 1448
INITIAL_WINDOW = 10 * MSS
CHAPTER = {("fresh", "direct"): 1.19, ("fresh", "tunnel"): 0.30,
           ("persistent", "direct"): 0.24, ("persistent", "tunnel"): 0.24}
CHAPTER_LOSS = "0.14"  # the period the chapter's medians come from
DIFFERS = 0.15
PATHS = ("direct", "tunnel", "tunnel-arq")
DRAWS = 100  # replays per cell (seeded: the table is the same on every run)
CONNECTIONS = ("fresh", "persistent")


def budget():
    """The serial budget: R + T_c + S_d / B_d (no upload)."""
    return serial_time(0, math.inf, RTT, PROCESSING, RESPONSE, RATE)


def predicted(loss, connection, path):
    """Closed-form time of one request (tracekit.model), seconds.

    direct: the budget, plus a round trip to connect and the slow-start
    rounds past the first on a fresh connection, plus a round trip for every
    retransmission round past the first (RetransmissionRounds' mean over the
    response's segments). tunnel (FEC): the budget, plus a round trip for
    each group of DATA_SHARDS segments that loses more than its parity (the
    mean number of such groups, each repaired by one retransmission round).
    tunnel-arq: as direct's retransmission rounds, over KCP's segments; its
    connection is the tunnel's, already open.
    """
    t = budget()
    if path == "direct":
        if connection == "fresh":
            t += RTT + (slow_start_rounds(RESPONSE, INITIAL_WINDOW) - 1) * RTT
        segments = math.ceil(RESPONSE / MSS)
        return t + (RetransmissionRounds(segments, loss).mean - 1) * RTT
    segments = math.ceil(RESPONSE / SEGMENT)
    if path == "tunnel":
        parity = fec_repair_symbols(DATA_SHARDS, loss, GROUP_SURVIVAL)
        groups = math.ceil(segments / DATA_SHARDS)
        failed = 1 - _binom_cdf(DATA_SHARDS + parity, loss, parity)
        return t + min(1.0, groups * failed) * RTT
    return t + (RetransmissionRounds(segments, loss).mean - 1) * RTT


def engine(con, experiment, draws=DRAWS):
    """{(loss, connection): (predicted s, replayed s)} for the direct path: each
    cell predicted from the runs at the other loss level (the engine's
    differential prediction: that level's measured median less the replayed
    saving), and the replay of the cell's own runs (its calibration's median)."""
    losses = sorted({r[0] for r in con.execute(
        "SELECT DISTINCT labels['loss_down'] FROM requests "
        "WHERE labels['experiment'] = ? AND labels['path'] = 'direct'", [experiment]).fetchall()})
    out = {}
    for connection in CONNECTIONS:
        where = {"experiment": experiment, "path": "direct", "connection": connection}
        for source, target in ((losses[0], losses[1]), (losses[1], losses[0])):
            r = whatif(con, where, {"loss_down": float(source)}, {"loss_down": float(target)},
                       draws=draws)
            out.setdefault((target, connection), [None, None])[0] = r.predicted
            out.setdefault((source, connection), [None, None])[1] = float(
                np.median(r.replay_source))
    return out


def tunnel_engine(data, manifests, draws=400):
    """{(loss, connection, path): predicted s} for the tunnel paths: the
    response replayed through kcptun (whatif/tunnel.py) with each run's FEC
    sizing (its manifest) at the cell's loss, plus what the runs at the other
    loss level take beyond their replay (the request's trip, the server's
    time, the tunnel's own transit): a prediction from the other level."""
    sizing = {}
    for m in manifests:
        f = m["factors"]
        if m.get("tunnel"):
            sizing[(str(f["loss_down"]), f["path"])] = (m["tunnel"]["datashard"],
                                                        m["tunnel"]["parityshard"])
    replayed = {k: float(np.median(kcp.replay(RESPONSE, SEGMENT, d, p, float(k[0]), RTT, RATE,
                                              draws))) for k, (d, p) in sizing.items()}
    out = {}
    for (loss, connection, path), (durations, _) in data.items():
        other = [k for k in data if k[1:] == (connection, path) and k[0] != loss]
        if path == "direct" or not other or (loss, path) not in replayed:
            continue
        beyond = float(np.median(data[other[0]][0])) - replayed[(other[0][0], path)]
        out[(loss, connection, path)] = replayed[(loss, path)] + beyond
    return out


def cells(con, experiment):
    """{(loss, connection, path): (durations s, [{span: ns}], {span: irreducible})}."""
    out = {}
    for c in ablation(con, "path", by=("loss_down", "connection"), levels=list(PATHS),
                      where={"experiment": experiment}):
        loss, connection = c.by
        for arm in c.arms:
            out[(loss, connection, arm.level)] = (arm.durations / 1e9, arm.spans)
    irreducible = dict(con.execute(
        "SELECT span, bool_and(irreducible) FROM attribution GROUP BY span").fetchall())
    return out, irreducible


def table(con, experiment="chapter-case", runs_json=None):
    """The Markdown table (a string)."""
    data, irreducible = cells(con, experiment)
    predicted_by_engine = engine(con, experiment)
    runs_json = runs_json or os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "captures", experiment, f"{experiment}.runs.json")
    with open(runs_json) as f:
        through_tunnel = tunnel_engine(data, json.load(f))
    lines = ["| loss | connection | path | chapter | lab median (95 % CI) | n | engine "
             "(from the other loss) | error | replay (own runs) | closed form | error | "
             "vs chapter | the lab's waiting: largest spans, median per request |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for loss in sorted({k[0] for k in data}, key=float, reverse=True):
        for connection in CONNECTIONS:
            for path in PATHS:
                if (loss, connection, path) not in data:
                    continue
                durations, spans = data[(loss, connection, path)]
                median = float(np.median(durations))
                low, high = bootstrap_median_ci(durations)
                chapter = CHAPTER.get((connection, path)) if loss == CHAPTER_LOSS else None
                model = predicted(float(loss), connection, path)
                eng, own = (predicted_by_engine[(loss, connection)] if path == "direct"
                            else (through_tunnel.get((loss, connection, path)), None))
                row = [f"{float(loss):.1%}", connection, path,
                       f"{chapter:.2f} s" if chapter else "--",
                       f"{median:.2f} s ({low:.2f}-{high:.2f})", str(len(durations)),
                       f"{eng:.2f} s" if eng else "--",
                       f"{eng / median - 1:+.0%}" if eng else "--",
                       f"{own:.2f} s" if own else "--",
                       f"{model:.2f} s", f"{model / median - 1:+.0%}"]
                if chapter is None:
                    row += ["--", explain(spans, irreducible, None)]
                else:
                    off = median / chapter - 1
                    differs = abs(off) > DIFFERS
                    row += [f"{off:+.0%}" + ("" if differs else " (within 15 %)"),
                            explain(spans, irreducible, chapter - budget() if differs else None)]
                lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def explain(spans, irreducible, chapter_waiting_s, top=3):
    """The cell's largest waiting spans (not part of the serial budget), their
    median total, and beside it the chapter's time above the budget."""
    names = {n for s in spans for n in s if not irreducible.get(n, False)}
    medians = sorted(((float(np.median([s.get(n, 0) for s in spans])) / 1e9, n) for n in names),
                     reverse=True)
    shown = [(v, n) for v, n in medians if v >= 0.001][:top]
    if not shown:
        return "none over 1 ms"
    text = ", ".join(f"{n} {v * 1e3:.0f} ms" for v, n in shown)
    total = float(np.median([sum(v for n, v in s.items() if n in names) for s in spans])) / 1e9
    text += f"; all waiting {total * 1e3:.0f} ms"
    if chapter_waiting_s is not None:
        text += f" (the chapter's: {max(0.0, chapter_waiting_s) * 1e3:.0f} ms)"
    return text


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--experiment", default="chapter-case")
    args = ap.parse_args(argv)
    import tracekit
    with tracekit.open(args.db, read_only=True) as store:
        sys.stdout.write(table(store.con, args.experiment))
    print(f"\nserial budget {budget() * 1e3:.0f} ms; closed form: tools/chapter_table.py "
          "predicted(); engine: tracekit.whatif")


if __name__ == "__main__":
    main(sys.argv[1:])
