"""One source for each formula: the SQL analyses compute what tracekit.model
computes, value for value (the macros of core/model.py SQL_MACROS, and the
analyses that use them, on random inputs)."""

import json
import re

import duckdb
import numpy as np
import pytest

from tracekit import model
from tracekit.pipeline.analyze import analyze
from tracekit.pipeline.logs import load_logs
from tracekit.readers.events import read_log
from tracekit.store.db import analyses_dir

RNG = np.random.default_rng(2026)


@pytest.fixture(scope="module")
def sql():
    con = duckdb.connect()
    for statement in model.sql_macros():
        con.execute(statement)
    return con


def test_the_serial_bound_in_sql_is_serial_time(sql):
    for _ in range(200):
        up, down = (int(x) for x in RNG.integers(0, 10**8, 2))
        rate = float(RNG.uniform(1e3, 1e10))  # bytes per second
        rtt, tc = (float(x) for x in RNG.uniform(0, 2, 2))  # seconds
        (ns,), = sql.execute(
            "SELECT tk_serial_ns(tk_transfer_ns(?, ?), ?, ?, tk_transfer_ns(?, ?))",
            [up, rate, round(rtt * 1e9), round(tc * 1e9), down, rate]).fetchall()
        expected = model.serial_time(up, rate, rtt, tc, down, rate)
        assert abs(ns - expected * 1e9) <= 2  # two transfers and two times, each rounded


def test_an_unknown_term_is_left_out_of_the_sql_bound(sql):
    (ns,), = sql.execute("SELECT tk_serial_ns(tk_transfer_ns(1000, NULL), 5, NULL, 7)").fetchall()
    assert ns == 12


def test_slot_waste_in_sql_is_static_batch_waste(sql):
    for _ in range(200):
        tokens = [int(x) for x in RNG.integers(1, 500, int(RNG.integers(1, 33)))]
        (w,), = sql.execute("SELECT tk_slot_waste(?, ?, ?)",
                            [sum(tokens), len(tokens), max(tokens)]).fetchall()
        assert w == pytest.approx(model.static_batch_waste(tokens), abs=1e-12)


def test_the_playback_analysis_is_the_waiting_player_recurrence(db, tmp_path):
    """analyses/playback.sql's predicted play times on random streams equal
    model.playback_schedule's, to the nanosecond."""
    base = 1_800_000_000_000_000_000
    events, expected = [], {}
    for s in range(12):
        n = int(RNG.integers(2, 40))
        frames = int(RNG.choice([240, 480, 960]))
        tau_ns = frames * 1_000_000_000 // 24_000
        arrivals = np.sort(RNG.integers(0, 2_000, n)) * 1_000_000 + base  # ms apart at most
        j_ms = int(RNG.integers(0, 200))
        for seq, r in enumerate(arrivals):
            events.append({"ts": int(r), "kind": "chunk_arrived", "seq": seq, "frames": frames,
                           "sample_rate": 24_000, "stream": f"s{s}", "request": f"s{s}",
                           "run": "random"})
        events.append({"ts": int(arrivals[0]), "kind": "playback_start",
                       "initial_buffer_ms": j_ms, "stream": f"s{s}", "request": f"s{s}",
                       "run": "random"})
        p, _ = model.playback_schedule((arrivals - base).astype(float), tau_ns, j_ms * 1e6)
        expected[f"s{s}"] = [int(round(x)) + base for x in p]
    path = tmp_path / "random-streams.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    load_logs(db, [read_log(str(path))])
    analyze(db)
    for stream, want in expected.items():
        got = [r[0] for r in db.execute("SELECT predicted_play_ns FROM playback WHERE stream = ? "
                                        "ORDER BY seq", [stream]).fetchall()]
        assert got == want, stream


@pytest.mark.parametrize("macro", sorted(model.SQL_MACROS))
def test_every_macro_is_called_by_an_analysis(macro):
    """A formula's SQL form is the one the analyses use, not a copy beside them."""
    calls = [p.name for p in analyses_dir().glob("*.sql")
             if re.search(rf"\b{macro}\(", p.read_text())]
    assert calls, macro
