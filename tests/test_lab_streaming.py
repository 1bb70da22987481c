"""Underruns of a real streaming client, caused on purpose, found and charged.

A real server and client (tracekit.lab.streaming) stream 20 ms PCM chunks
over the emulated path with a client-side tcpdump; stalls are induced at
known chunks: the path drops one chunk's segment three times (transport),
the server's model pauses (model), the client's reader stops reading
(local). The analyses must find exactly those underruns, at those chunks,
charged to those stages. A second run starves the stream with a bottleneck
below its bitrate: a rate deficit whose buffer-drain time and receive
ratio follow from the configured rate in closed form.
"""

import os
import shutil

import pytest

from tracekit.analyze import analyze
from tracekit.events import read_log
from tracekit.lab import streaming
from tracekit.lab.wan import Direction, EmulatedPath, PathSpec
from tracekit.store.events import load_logs
from tracekit.store.ingest import load_captures

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


def test_induced_stalls_are_found_where_they_were_caused(db, tmp_path):
    drop_chunk, pause, throttle = 30, (90, 400), (150, 700)
    # chunk k's frame starts at relative sequence number 1 + k * 968
    down = Direction(delay_ms=10, drop_segments=((1 + drop_chunk * FRAME_BYTES, 3),))
    with EmulatedPath(PathSpec(up=Direction(delay_ms=10), down=down, seed=3), str(tmp_path)) as path:
        files = streaming.record(path, str(tmp_path), chunks=200, initial_buffer_ms=J_MS,
                                 pause=pause, throttle=throttle)
    load(db, files)
    got = rows(db, "SELECT * FROM underruns ORDER BY onset_ns")
    assert [(u["next_seq"], u["cause"], u["cause_basis"]) for u in got] == [
        (drop_chunk, "transport", "capture"), (pause[0], "model", "capture"),
        (throttle[0], "local", "capture")]
    transport, model, local = got
    assert transport["detail"] == "in_network"
    # each underrun grows the buffer by its silence (the player waits, then
    # gets the backlog at once), so a stall of S ms after buffer B starves
    # for S - B ms; callbacks every 20 ms round it to a multiple of 20
    buffer_ms = J_MS + transport["silence_ns"] / 1e6
    assert model["silence_ns"] / 1e6 == pytest.approx(pause[1] - buffer_ms, abs=40)
    buffer_ms += model["silence_ns"] / 1e6
    assert local["silence_ns"] / 1e6 == pytest.approx(throttle[1] - buffer_ms, abs=40)
    # the chunk a stall held back was at the host long before it was read
    assert (local["arrived_ns"] - local["host_arrived_ns"]) / 1e6 > 300
    (session,) = rows(db, "SELECT * FROM playback_sessions")
    assert session["kind"] == "jitter" and session["underruns"] == 3
    # the waiting-player recurrence predicts the callbacks' play times to
    # within one callback period (plus a late wake-up of the player thread)
    median, worst = db.execute("SELECT median(play_error_ns), max(abs(play_error_ns)) "
                               "FROM playback").fetchall()[0]
    assert 0 <= median <= 20e6 and worst <= 30e6


def test_a_bottleneck_below_the_bitrate_is_a_rate_deficit(db, tmp_path):
    rate_mbps = 0.34
    down = Direction(delay_ms=10, rate_mbps=rate_mbps, queue_bytes=1_000_000)
    with EmulatedPath(PathSpec(up=Direction(delay_ms=10), down=down, seed=5), str(tmp_path)) as path:
        files = streaming.record(path, str(tmp_path), chunks=100, initial_buffer_ms=J_MS)
    load(db, files)
    (s,) = rows(db, "SELECT * FROM playback_sessions")
    # a chunk is 968 bytes of TCP payload + 52 of TCP/IP headers (timestamps
    # option) on the wire every 20 ms of audio
    ratio = rate_mbps * 1e6 / 8 / (FRAME_BYTES + 52) * 0.020
    assert s["kind"] == "rate_deficit"
    assert s["receive_ratio"] == pytest.approx(ratio, rel=0.01)
    drain_ms = J_MS / (1 - ratio)  # DOMAIN.md §3: b / (playback rate - receive rate)
    assert s["drain_time_ns"] / 1e6 == pytest.approx(drain_ms, rel=0.02)
    first_callback = db.execute(
        "SELECT min(ts_ns) FROM events WHERE kind = 'playback_callback'").fetchall()[0][0]
    # the first underrun comes when the initial buffer has drained, to within
    # a callback period (the player asks in 20 ms steps)
    assert (s["first_underrun_ns"] - first_callback) / 1e6 == pytest.approx(drain_ms, abs=25)
    causes = {r["cause"] for r in rows(db, "SELECT cause FROM underruns")}
    assert causes == {"transport"}
