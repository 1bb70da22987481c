"""Underruns of a real streaming client, caused on purpose, found and charged.

A real server and client (tracekit.lab.streaming) stream 20 ms PCM chunks
over the emulated path with a client-side tcpdump; stalls are induced at
a known chunk of three streams: the path drops the chunk's segment three
times (transport), the server's model pauses (model), the client's reader
stops reading (local). The analyses must find exactly those underruns, at those chunks,
charged to those stages. A second run starves the stream with a bottleneck
below its bitrate: a rate deficit whose buffer-drain time and receive
ratio follow from the configured rate in closed form.
"""

import os
import shutil

import pytest

from tracekit.lab import streaming
from tracekit.lab.wan import Direction, EmulatedPath, PathSpec
from tracekit.pipeline.analyze import analyze
from tracekit.pipeline.captures import load_captures
from tracekit.pipeline.logs import load_logs
from tracekit.readers.events import read_log

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (network namespaces)"),
    pytest.mark.skipif(not shutil.which("tcpdump"), reason="tcpdump is not installed"),
]

FRAME_BYTES = streaming.HEADER.size + streaming.CHUNK_BYTES  # 968 on the wire per chunk
J_MS = 60


def load(db, files):
    load_captures(db, [files["capture"]])
    load_logs(db, [read_log(files["client_log"]), read_log(files["server_log"])])
    analyze(db)


def rows(con, sql):
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


STALL_AT, STALL_MS = 30, 300


def test_induced_stalls_are_found_where_they_were_caused(db, tmp_path):
    # three streams, one after the other on new connections, each starting
    # with the same 60 ms buffer and stalled once at chunk 30: the path drops
    # that chunk's segment three times in the first connection (transport);
    # the server's model pauses (model); the client's reader sleeps (local)
    streams = [{"request": "transport", "chunks": 60},
               {"request": "model", "chunks": 60, "pause": (STALL_AT, STALL_MS)},
               {"request": "local", "chunks": 60, "throttle": (STALL_AT, STALL_MS)}]
    down = Direction(delay_ms=10, drop_segments=((1 + STALL_AT * FRAME_BYTES, 3, 0),))
    with EmulatedPath(PathSpec(up=Direction(delay_ms=10), down=down, seed=3), str(tmp_path)) as path:
        files = streaming.record(path, str(tmp_path), streams, initial_buffer_ms=J_MS, run="stalls")
    load(db, files)
    got = {u["stream"]: u for u in rows(db, "SELECT * FROM underruns")}
    assert sorted(got) == ["local", "model", "transport"]  # one underrun each, no other
    for stream, u in got.items():
        assert u["next_seq"] == STALL_AT, stream
        assert (u["cause"], u["cause_basis"]) == (stream, "capture")
        assert u["run"] == "stalls"
    assert got["transport"]["detail"] == "in_network"
    # the stall outlasts the buffer: S ms after a 60 ms buffer starves for
    # S - 60 ms, in whole callbacks of 20 ms
    # (to 40 ms, plus what the disturbance probe saw the machine take meanwhile)
    for stream in ("model", "local"):
        u = got[stream]
        away = path.probe.held_back(u["onset_ns"], u["end_ns"]) / 1e6
        assert u["silence_ns"] / 1e6 == pytest.approx(STALL_MS - J_MS, abs=40 + away), (u, away)
    # the chunk the reader held back was at the host long before it was read
    local = got["local"]
    assert (local["arrived_ns"] - local["host_arrived_ns"]) / 1e6 > STALL_MS - J_MS
    with open(os.path.join(tmp_path, "drops.jsonl")) as f:
        assert sum(1 for _ in f) == 3  # the emulator's own account of the transport stall
    sessions = rows(db, "SELECT * FROM playback_sessions")
    assert {s["kind"] for s in sessions} == {"jitter"} and sum(s["underruns"] for s in sessions) == 3
    # the waiting-player recurrence predicts the callbacks' play times to
    # within one callback period (plus a late wake-up of the player thread:
    # 10 ms, or the longest the probe saw the machine away)
    median, worst = db.execute("SELECT median(play_error_ns), max(abs(play_error_ns)) "
                               "FROM playback").fetchall()[0]
    late = max(10, path.probe.summary()["max_late_ms"]) * 1e6
    assert 0 <= median <= 20e6 and worst <= 20e6 + late, (median, worst, late)


def test_a_bottleneck_below_the_bitrate_is_a_rate_deficit(db, tmp_path):
    rate_mbps = 0.34
    down = Direction(delay_ms=10, rate_mbps=rate_mbps, queue_bytes=1_000_000)
    with EmulatedPath(PathSpec(up=Direction(delay_ms=10), down=down, seed=5), str(tmp_path)) as path:
        files = streaming.record(path, str(tmp_path), [{"request": "deficit", "chunks": 100}],
                                 initial_buffer_ms=J_MS)
    load(db, files)
    (s,) = rows(db, "SELECT * FROM playback_sessions")
    # a chunk is 968 bytes of TCP payload + 52 of TCP/IP headers (timestamps
    # option) on the wire every 20 ms of audio
    ratio = rate_mbps * 1e6 / 8 / (FRAME_BYTES + 52) * 0.020
    assert s["kind"] == "rate_deficit"
    assert s["receive_ratio"] == pytest.approx(ratio, rel=0.01)
    drain_ms = J_MS / (1 - ratio)  # docs/timing-model.md: b / (playback rate - receive rate)
    assert s["drain_time_ns"] / 1e6 == pytest.approx(drain_ms, rel=0.02)
    callbacks = [r[0] for r in db.execute(
        "SELECT ts_ns FROM events WHERE kind = 'playback_callback' ORDER BY ts_ns").fetchall()]
    # the first underrun comes when the initial buffer has drained, to within a
    # callback period. The player takes a 20 ms frame per callback, but on a busy
    # machine its callbacks come late (period p > 20 ms), and while it waits more
    # arrives: the buffer lasts b0 / (1 - r p) callbacks, r the frames/s the link
    # delivers (the drain time is 1 / (1 - 0.83) = 6x as sensitive to p). So p is
    # measured over the run's callbacks, not assumed.
    period_s = (callbacks[-1] - callbacks[0]) / (len(callbacks) - 1) / 1e9
    frames_per_s = rate_mbps * 1e6 / 8 / (FRAME_BYTES + 52)
    lasts_ms = J_MS / 20 * period_s * 1e3 / (1 - frames_per_s * period_s)
    assert (s["first_underrun_ns"] - callbacks[0]) / 1e6 == pytest.approx(lasts_ms, abs=25)
    causes = {r["cause"] for r in rows(db, "SELECT cause FROM underruns")}
    assert causes == {"transport"}
