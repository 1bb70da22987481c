"""Playback analyses against docs/timing-model.md on streams worked by hand.

Each stream is a log written the way a client and server would: chunk
arrivals at chosen times and a fixed-clock player (simulated here, the
analysis never sees the simulation) whose callbacks take what is buffered.
The expected recurrence, gaps, causes and buffer sizes are computed by hand
in the comments.
"""

import json

import pytest

from tracekit.pipeline.analyze import analyze
from tracekit.pipeline.logs import load_logs
from tracekit.readers.events import read_log

BASE = 1_800_000_000_000_000_000  # ns since the epoch
MS = 1_000_000
TAU = 20 * MS
FRAMES = 480
RATE = 24_000


def stream_events(stream, arrivals_ms, initial_ms, generated_ms=None, sent_ms=None,
                  callbacks_ms=None, stuck_ms=()):
    """Events of one stream. The player starts at r_0 + J and calls back every
    20 ms, taking up to 480 frames of what has arrived (chunk_arrived at or
    before the callback), except during `stuck_ms` windows (local stall)."""
    ev = []
    for seq, r in enumerate(arrivals_ms):
        g = generated_ms[seq] if generated_ms else r - 15
        s = sent_ms[seq] if sent_ms else g + 1
        ev.append({"ts": BASE + g * MS, "kind": "chunk_generated", "seq": seq})
        ev.append({"ts": BASE + s * MS, "kind": "chunk_sent", "seq": seq, "bytes": 968,
                   "stream_offset": seq * 968})
        ev.append({"ts": BASE + r * MS, "kind": "chunk_arrived", "seq": seq, "frames": FRAMES,
                   "sample_rate": RATE})
    start = arrivals_ms[0] + initial_ms
    ev.append({"ts": BASE + (start - 1) * MS, "kind": "playback_start", "initial_buffer_ms": initial_ms})
    played = 0
    total = FRAMES * len(arrivals_ms)
    t = start
    while played < total:
        have = FRAMES * sum(1 for r in arrivals_ms if r <= t) - played
        if any(a <= t < b for a, b in stuck_ms):
            have = 0
        take = min(FRAMES, have)
        played += take
        ev.append({"ts": BASE + t * MS, "kind": "playback_callback", "requested_frames": FRAMES,
                   "delivered_frames": take, "sample_rate": RATE})
        t += 20
    for e in ev:
        e.update(stream=stream, request=stream, run="hand")
    return sorted(ev, key=lambda e: e["ts"])


@pytest.fixture
def store(db, tmp_path):
    streams = [
        # A: chunk 3 arrives late; J = 30 ms.
        #   p = 30, 50, 70, max(150, 90) = 150 (gap 60), 170, 190, 210
        #   callbacks 90, 110, 130 starve: 3 x 20 ms = 60 ms of silence.
        #   Chunk 3 generated at 100 > onset 90: the model.
        #   J to avoid: r_3 - r_0 - T_3 = 150 - 0 - 60 = 90 ms.
        stream_events("A", [0, 20, 40, 150, 160, 170, 180], 30,
                      generated_ms=[-15, 5, 25, 100, 145, 155, 165]),
        # B: the same arrivals, chunk 3 generated at 50 and sent at 60: transport.
        stream_events("B", [0, 20, 40, 150, 160, 170, 180], 30,
                      generated_ms=[-15, 5, 25, 50, 145, 155, 165],
                      sent_ms=[-14, 6, 26, 60, 146, 156, 166]),
        # C: chunk 3 is in the application at 85 but the player gets nothing
        # from 90 to 130 (stuck): local. p_3 = max(85, 90) = 90: the recurrence
        # sees no gap there, but one at chunk 4: max(160, 110) = 160 (gap 50).
        stream_events("C", [0, 20, 40, 85, 160, 170, 180], 30, stuck_ms=[(90, 140)]),
        # D: a sustained deficit: a 20 ms chunk every 25 ms (ratio 0.8), J = 40 ms.
        #   Drain time J / (1 - 0.8) = 200 ms. The k-th callback (t = 40 + 20k)
        #   needs r_k = 25k <= 40 + 20k: true up to k = 8, so the first underrun
        #   is at t = 220, 180 ms after the start (one chunk short of 200).
        stream_events("D", [25 * i for i in range(20)], 40),
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for s in streams for e in s))
    load_logs(db, [read_log(str(path))])
    analyze(db)
    return db


def rows(con, sql, *params):
    cur = con.execute(sql, list(params))
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def test_recurrence_matches_the_hand_computation(store):
    got = rows(store, "SELECT seq, predicted_play_ns, predicted_gap_ns FROM playback "
                      "WHERE stream = 'A' ORDER BY seq")
    assert [(r["predicted_play_ns"] - BASE) // MS for r in got] == [30, 50, 70, 150, 170, 190, 210]
    assert [r["predicted_gap_ns"] // MS for r in got] == [0, 0, 0, 60, 0, 0, 0]
    c = rows(store, "SELECT predicted_gap_ns FROM playback WHERE stream = 'C' ORDER BY seq")
    assert [r["predicted_gap_ns"] // MS for r in c] == [0, 0, 0, 0, 50, 0, 0]


def test_played_times_come_from_the_callbacks(store):
    got = rows(store, "SELECT seq, played_ns FROM playback WHERE stream = 'A' ORDER BY seq")
    # callbacks at 30, 50, 70 play chunks 0-2; 90-130 starve; 150.. play 3-6
    assert [(r["played_ns"] - BASE) // MS for r in got] == [30, 50, 70, 150, 170, 190, 210]


@pytest.mark.parametrize("stream, cause, detail", [
    ("A", "model", None), ("B", "transport", "in_network"), ("C", "local", None)])
def test_each_underrun_is_charged_to_the_stage_that_held_the_next_chunk(store, stream, cause, detail):
    (u,) = rows(store, "SELECT * FROM underruns WHERE stream = ?", stream)
    assert (u["onset_ns"] - BASE) // MS == 90
    assert u["callbacks"] == 3 and u["silence_ns"] == 60 * MS and u["missing_frames"] == 3 * FRAMES
    assert u["next_seq"] == 3
    assert (u["cause"], u["detail"], u["cause_basis"]) == (cause, detail, "app_log")


def test_buffer_needed_and_session_kind(store):
    (a,) = rows(store, "SELECT * FROM underruns WHERE stream = 'A'")
    assert a["initial_buffer_to_avoid_ns"] == 90 * MS
    sessions = {r["stream"]: r for r in rows(store, "SELECT * FROM playback_sessions")}
    assert sessions["A"]["min_initial_buffer_ns"] == 90 * MS
    assert sessions["A"]["kind"] == "jitter" and sessions["A"]["silence_ns"] == 60 * MS
    d = sessions["D"]
    assert d["kind"] == "rate_deficit"
    assert d["receive_ratio"] == pytest.approx(0.8)
    assert d["drain_time_ns"] == 200 * MS  # 40 ms / (1 - 0.8)
    assert d["first_underrun_ns"] - BASE == 220 * MS  # 180 ms after the start: one chunk early
    # every later chunk arrives 5 ms later than the one before relative to the
    # audio clock: the last (19) is 19 * 5 = 95 ms behind
    assert d["min_initial_buffer_ns"] == 95 * MS


def test_on_time_seconds(store):
    """A chunk is on time when it arrived by r_0 + J + T_i (issue #27).
    A (J = 30): r_i - T_i = 0, 0, 0, 90, 80, 70, 60 ms: three chunks, 0.06 s.
    D (J = 40): r_i - T_i = 5 i ms: chunks 0..8, 0.18 s."""
    sessions = {r["stream"]: r for r in rows(store, "SELECT * FROM playback_sessions")}
    assert sessions["A"]["on_time_s"] == pytest.approx(0.06)
    assert sessions["D"]["on_time_s"] == pytest.approx(0.18)


def test_buffer_level_adds_arrivals_and_subtracts_playback(store):
    levels = rows(store, "SELECT ts_ns, event, level_ns, shortfall_ns FROM playback_buffer "
                         "WHERE stream = 'A' ORDER BY ts_ns, event")
    assert levels[-1]["level_ns"] == 0  # everything that arrived was played
    # at 40 ms three chunks have arrived and one was played at 30
    assert max(r["level_ns"] for r in levels) == 40 * MS
    assert sum(r["shortfall_ns"] for r in levels) == 60 * MS
