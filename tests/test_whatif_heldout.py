"""tools/whatif_heldout.py, the scorer of held-out sets: which cells a
store's labels make, and how a set's score reads (docs/whatif.md, Held out)."""

import os
import sys

import duckdb

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import whatif_heldout  # noqa: E402


def _store(labels):
    con = duckdb.connect()
    con.execute("CREATE TABLE requests (labels MAP(VARCHAR, VARCHAR))")
    for d in labels:
        con.execute("INSERT INTO requests VALUES (?)", [d])
    return con


def test_every_one_factor_change_both_ways_at_each_level_of_the_others():
    con = _store([{"rtt_ms": r, "connection": c} for r in ("110", "40", "9")
                  for c in ("fresh", "persistent")] + [{"other": "x"}])
    assert whatif_heldout.levels(con, "rtt_ms") == ["9", "40", "110"]  # numbers in their order
    cells = list(whatif_heldout.cells(con, ["rtt_ms", "connection"]))
    # rtt: 3 x 2 ordered pairs at 2 connections; connection: 2 pairs at 3 rtts
    assert len(cells) == 12 + 6
    assert ("rtt_ms", "110", "9", {"connection": "persistent"}) in cells
    assert ("connection", "persistent", "fresh", {"rtt_ms": "40"}) in cells
    assert not any(a == b for _, a, b, _ in cells)


def test_a_cell_without_runs_at_its_target_prints_no_measurement():
    rows = [{"store": "s", "change": "rtt_ms 40 -> 110", "at": "", "measured_ms": None,
             "predicted_ms": -400.0, "error": None, "within": None, "chance": None,
             "congestion": "reno"},
            {"store": "s", "change": "rtt_ms 110 -> 40", "at": "", "refused": "rate unknown"}]
    table = whatif_heldout.markdown(rows).splitlines()
    assert table[2] == "| s | rtt_ms 40 -> 110 |  | -- | -400 | -- | -- | None | reno |"
    assert "refused: rate unknown" in table[3]


def test_the_score_counts_refusals_as_misses():
    rows = [{"within": True, "error": 0.05}, {"within": False, "error": 0.30},
            {"within": True, "error": 5.0}, {"refused": "rate unknown"}]
    rows[0].update(covered=True, covered_replay=False)
    rows[1].update(covered=True, covered_replay=True)
    assert whatif_heldout.summary(rows) == (
        "2 of 4 within (refused 1); median |error| 30.0 %; the measured saving inside the "
        "predicted 95 % interval in 2 (the replay's own, without what the runs could not "
        "tell: 1)")
