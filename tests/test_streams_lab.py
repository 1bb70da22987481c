"""Two streams on one HTTP/2 connection in the lab (tracekit.lab.multiplex):
an image of 400,000 bytes and eight 20 ms audio chunks over the emulated
path (20 Mbit/s down, 10 ms each way), captured at both ends, FIFO and audio
first, and FIFO with one image segment dropped once just before the audio,
in cleartext (h2c) and in TLS 1.3 (decrypted with the client's key log).

Checked against what does not come from the `streams` table: the client's own
read of each stream (it logs stream_read when the h2 library hands it the
stream's end), tcpdump's reading of the client's capture (when the dropped
segment's repair arrived), the forwarder's drop log (which segment).
"""

import json
import shutil
import subprocess

import pytest
from conftest import LAB_MARKS

from tracekit.lab import multiplex
from tracekit.pipeline.analyze import analyze
from tracekit.pipeline.h2events import write_h2_events
from tracekit.pipeline.logs import load_logs
from tracekit.readers.events import read_log

pytestmark = LAB_MARKS
pytest.importorskip("h2")

# FIFO's byte layout does not depend on timing: after the server's SETTINGS and
# two HEADERS frames (100 bytes) the image goes in 25 DATA frames (24 x 16,393 +
# 6,793 bytes) to byte 400,325, then the audio. Relative sequence 395,001 is in
# the image's last frame: the audio's bytes all arrive while it is missing.
HOLE = 395_001
AUDIO, IMAGE = "3", "1"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from tracekit.store.db import connect
    tmp = tmp_path_factory.mktemp("mux")
    out, logs = {}, []
    for name, mode, hole, tls in (("fifo", "fifo", None, False), ("priority", "priority", None, False),
                                  ("fifo-hole", "fifo", HOLE, False), ("tls-fifo-hole", "fifo", HOLE, True)):
        files = multiplex.record(str(tmp / name), mode, hole=hole, play_ms=100, tls=tls)
        for side in ("client", "server"):
            frames = str(tmp / name / f"{side}-frames.jsonl")
            write_h2_events(files[f"{side}.pcap"], 9300, frames, side, files["connection"],
                            keylog=files.get("keys.log"))
            logs += [read_log(frames), read_log(files[f"{side}.jsonl"])]
        out[name] = files
    con = connect(tmp / "t.duckdb")
    load_logs(con, logs)
    analyze(con)
    yield con, out
    con.close()


def stream(con, connection, sid):
    cur = con.execute("SELECT * FROM streams WHERE connection = ? AND stream_id = ?", [connection, sid])
    return dict(zip([d[0] for d in cur.description], cur.fetchone()))


def test_deliverable_from_the_capture_is_when_the_client_read_the_stream(runs):
    con, _ = runs
    n = 0
    for connection in ("fifo", "priority", "fifo-hole", "tls-fifo-hole"):
        for sid in (AUDIO, IMAGE):
            s = stream(con, connection, sid)
            took = s["read_ns"] - s["ready_ns"]
            assert abs(s["read_ns"] - s["deliverable_ns"]) <= max(1_000_000, 0.05 * took), (connection, sid)
            assert s["read_ns"] >= s["deliverable_ns"]  # nothing is read before it arrived
            n += 1
    assert n == 8


def test_priority_sends_the_audio_before_the_image_ends_fifo_after(runs):
    con, _ = runs
    fifo = {sid: stream(con, "fifo", sid) for sid in (AUDIO, IMAGE)}
    prio = {sid: stream(con, "priority", sid) for sid in (AUDIO, IMAGE)}
    assert fifo[AUDIO]["first_sent_ns"] >= fifo[IMAGE]["last_sent_ns"]
    assert prio[AUDIO]["last_sent_ns"] < prio[IMAGE]["last_sent_ns"]
    # FIFO: the image's bytes (all but its last frame's tail) went while the audio waited
    assert fifo[AUDIO]["bytes_ahead"] > 350_000 and fifo[IMAGE]["bytes_ahead"] == 0
    # each chunk waited behind image bytes for longer under FIFO than with priority
    assert fifo[AUDIO]["stream_queueing_ns"] > prio[AUDIO]["stream_queueing_ns"]


@pytest.mark.parametrize("run", ["fifo-hole", "tls-fifo-hole"])
def test_hol_blocking_is_zero_without_loss_and_the_wait_for_the_repair_with_it(runs, run):
    """In TLS (decrypted with the client's key log) a byte is timed by its
    record: the record the repair completes is the one the audio waited for."""
    con, files = runs
    for connection in ("fifo", "priority"):
        for sid in (AUDIO, IMAGE):
            assert stream(con, connection, sid)["hol_blocking_ns"] == 0
    audio = stream(con, run, AUDIO)
    with open(files[run]["drops.jsonl"]) as f:
        drops = [json.loads(line) for line in f]
    assert len(drops) == 1
    seq = drops[0]["tcp_seq"]
    # when the repair reached the client, read by tcpdump from the client's capture
    text = subprocess.run(["tcpdump", "-r", files[run]["client.pcap"], "-nn", "-S", "-tt",
                           "--time-stamp-precision=nano", "tcp src port 9300"],
                          capture_output=True, text=True, check=True).stdout
    repair = next(line for line in text.splitlines() if f" seq {seq}:" in line)
    sec, frac = repair.split()[0].split(".")
    repaired_ns = int(sec) * 1_000_000_000 + int(frac)
    assert audio["complete_ns"] < repaired_ns == audio["deliverable_ns"]
    assert audio["hol_blocking_ns"] == repaired_ns - audio["complete_ns"] > 0
    assert audio["held_by"] == IMAGE


def _image_gaps_at(qlog_path, stream, at_ms):
    """Byte ranges of `stream` missing at the client at `at_ms` (qlog time)
    below the highest byte arrived by then, read from the client's qlog with json."""
    with open(qlog_path) as f:
        events = json.load(f)["traces"][0]["events"]
    got = sorted((fr["offset"], fr["offset"] + fr["length"]) for e in events
                 if e["name"] == "transport:packet_received" and e["time"] <= at_ms
                 for fr in e["data"].get("frames", [])
                 if fr.get("frame_type") == "stream" and fr["stream_id"] == stream)
    gaps, end = [], 0
    for lo, hi in got:
        if lo > end:
            gaps.append((end, lo))
        end = max(end, hi)
    return gaps


@pytest.mark.skipif(not shutil.which("gcc") and not shutil.which("cc"), reason="no C compiler")
def test_http3_hands_the_audio_over_when_complete_even_behind_an_image_hole(tmp_path):
    """HTTP/3 (aioquic) with 2 % random loss down (seed 1): each stream's
    deliverable time from the qlogs (= complete: per-stream order) is when the
    client read it, and no head-of-line time, although the image had bytes
    missing below ones already arrived when the audio was complete."""
    pytest.importorskip("aioquic")
    from tracekit.lab import multiplex_h3
    from tracekit.store.db import connect
    files = multiplex_h3.record(str(tmp_path / "h3"))
    con = connect(tmp_path / "t.duckdb")
    load_logs(con, [read_log(p) for p in files["client_qlog"] + files["server_qlog"]]
              + [read_log(files["client.jsonl"])])
    analyze(con)
    rows = con.execute("SELECT stream_id, delivery, complete_ns, deliverable_ns, read_ns, hol_blocking_ns,"
                       " first_sent_ns FROM streams WHERE read_ns IS NOT NULL ORDER BY stream_id").fetchall()
    assert [r[0] for r in rows] == ["0", "4"]   # the image, the audio
    for sid, delivery, complete, deliverable, read, hol, sent in rows:
        assert delivery == "stream" and complete == deliverable and hol == 0
        assert 0 <= read - deliverable <= max(1_000_000, 0.05 * (read - sent)), sid
    audio_done_ms = rows[1][2] / 1e6
    gaps = _image_gaps_at(files["client_qlog"][0], 0, audio_done_ms)
    if not gaps:
        pytest.skip("no image byte was missing when the audio was complete in this run")
    assert rows[1][4] < rows[0][2]   # the audio read before the image was complete
