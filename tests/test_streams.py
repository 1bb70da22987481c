"""The `streams` table (analyses/streams.sql) on the chapter's example written
as tracekit's own stream events, and on other stacks' qlogs.

The example (docs/timing-model.md): an image of 5,000 bytes ready at 0 s and an
audio of 1,000 bytes ready at 2 s share a 1,000 B/s link; each 100 bytes is a
packet, logged when it has left (sender) and when it arrived (receiver, no
delay). With priority and a lost image packet (bytes 100-199) repaired at 7 s
the audio is complete at 3 s; under one connection-wide byte stream (HTTP/2)
it is deliverable at 7 s (4 s of head-of-line time), per stream at 3 s.
"""

import csv
import json
from pathlib import Path

import pytest
from conftest import SHARED, needs_shared

from tracekit import model
from tracekit.pipeline.analyze import analyze
from tracekit.pipeline.h2events import h2_events
from tracekit.pipeline.logs import load_logs
from tracekit.readers.events import read_log

BASE = 1_800_000_000_000_000_000
S = 1_000_000_000
PACKET = 100
DATA = Path(__file__).parent / "data" / "pcap"
H2 = DATA / "ndpi-http2.pcapng"   # nDPI's cleartext HTTP/2 capture, tshark's fields beside it


def example_events(connection, priority, connection_order, hole_repair_s=None):
    """Events of the example's pieces, cut into 100-byte packets."""
    pieces = model.link_schedule([5000, 1000], [0, 2], 1000, priority=priority)
    names = ["image", "audio"]
    ev = [{"ts": BASE + 2 * S, "kind": "stream_ready", "connection": connection, "stream_id": "audio"},
          {"ts": BASE, "kind": "stream_ready", "connection": connection, "stream_id": "image"}]
    conn_off = 0
    for p in pieces:
        for k in range(0, p.size, PACKET):
            sent = BASE + round((p.start + (k + PACKET) / 1000) * S)
            piece = {"connection": connection, "stream_id": names[p.stream], "offset": p.offset + k,
                     "length": PACKET}
            if connection_order:
                piece["conn_offset"] = conn_off
            conn_off += PACKET
            arrived = sent
            if hole_repair_s is not None and p.stream == 0 and p.offset + k == 100:
                arrived = BASE + hole_repair_s * S
            ev.append({"ts": sent, "kind": "stream_sent", **piece})
            ev.append({"ts": arrived, "kind": "stream_arrived", **piece})
    # the audio as eight timed chunks of 125 bytes, played from 3.5 s, 20 ms each
    for i in range(8):
        ev.append({"ts": BASE, "kind": "stream_chunk", "connection": connection, "stream_id": "audio",
                   "end_offset": 125 * (i + 1), "play_ns": BASE + round((3.5 + 0.02 * i) * S),
                   "duration_ns": 20_000_000})
    ev.append({"ts": BASE + 8 * S, "kind": "stream_read", "connection": connection, "stream_id": "audio"})
    return ev


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from tracekit.store.db import connect
    tmp = tmp_path_factory.mktemp("streams")
    con = connect(tmp / "t.duckdb")
    events = (example_events("fifo", None, True) + example_events("prio", [1, 0], True)
              + example_events("h2-hole", [1, 0], True, 7) + example_events("h3-hole", [1, 0], False, 7))
    events += h2_events(str(H2), 29518)
    path = tmp / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in sorted(events, key=lambda e: e["ts"])))
    logs = [read_log(str(path))]
    logs += [read_log(str(SHARED.parent / "logs" / n)) for n in QLOGS if (SHARED.parent / "logs" / n).exists()]
    load_logs(con, logs)
    analyze(con)
    yield con
    con.close()


def row(con, connection, stream):
    cur = con.execute("SELECT * FROM streams WHERE connection = ? AND stream_id = ?", [connection, stream])
    names = [d[0] for d in cur.description]
    return dict(zip(names, cur.fetchone()))


def sec(ns):
    return None if ns is None else (ns - BASE) / S


def test_fifo_and_priority_schedules_from_the_sender_side(store):
    fifo, prio = row(store, "fifo", "audio"), row(store, "prio", "audio")
    assert sec(fifo["last_sent_ns"]) == 6.0 and sec(prio["last_sent_ns"]) == 3.0
    assert sec(row(store, "fifo", "image")["last_sent_ns"]) == 5.0
    assert sec(row(store, "prio", "image")["last_sent_ns"]) == 6.0
    # FIFO: from its ready time (2 s) the audio waited 3 s while the image's 3,000 bytes went
    assert fifo["stream_queueing_ns"] == 3 * S and fifo["bytes_ahead"] == 3000
    assert prio["stream_queueing_ns"] == 0 and prio["bytes_ahead"] == 0
    assert sec(fifo["ready_ns"]) == 2.0 and fifo["bytes"] == 1000


def test_a_hole_holds_the_audio_only_under_connection_order(store):
    h2, h3 = row(store, "h2-hole", "audio"), row(store, "h3-hole", "audio")
    assert (h2["delivery"], h3["delivery"]) == ("connection", "stream")
    assert sec(h2["complete_ns"]) == sec(h3["complete_ns"]) == 3.0
    assert sec(h2["deliverable_ns"]) == 7.0 and sec(h3["deliverable_ns"]) == 3.0
    assert h2["hol_ns"] == 4 * S and h3["hol_ns"] == 0
    assert h2["held_by"] == "image" and h3["held_by"] is None
    assert h2["hol_blocking_ns"] == 4 * S and h3["hol_blocking_ns"] == 0
    image = row(store, "h2-hole", "image")
    assert sec(image["complete_ns"]) == 7.0 and image["hol_ns"] == 0
    # no hole: complete and deliverable agree
    assert row(store, "prio", "audio")["hol_ns"] == 0
    # the model says the same
    pieces = model.link_schedule([5000, 1000], [0, 2], 1000, priority=[1, 0])
    complete, deliverable = model.delivery_times(pieces, 2, holes=[(0, 100, 7.0)])
    assert (complete[1], deliverable[1]) == (sec(h2["complete_ns"]), sec(h2["deliverable_ns"]))


def test_on_time_seconds_of_the_audio_chunks(store):
    # played from 3.5 s: prioritised, every chunk is deliverable by 3 s (0.16 s on time);
    # FIFO, the audio arrives from 5.1 s: none; behind the hole under HTTP/2 (7 s): none
    assert row(store, "prio", "audio")["on_time_s"] == pytest.approx(0.16)
    assert row(store, "h3-hole", "audio")["on_time_s"] == pytest.approx(0.16)
    assert row(store, "fifo", "audio")["on_time_s"] == 0
    assert row(store, "h2-hole", "audio")["on_time_s"] == 0
    assert row(store, "prio", "audio")["chunks"] == 8
    assert sec(row(store, "prio", "audio")["read_ns"]) == 8.0


QLOGS = ("pcap2qlog-draft02-ngtcp2-29-dsb.qlog", "picoquic-qlog_trace_ref.qlog")


def _qlog_oracle(name):
    """Per (stream, packet_sent|packet_received): bytes and the first/last
    frame's time in the file's own units, read here with json alone."""
    doc = json.loads((SHARED.parent / "logs" / name).read_text())
    out = {}
    events = [dict(zip(t["event_fields"], e)) if t.get("event_fields") else e
              for t in doc["traces"] for e in t["events"]]
    for e in events:
        data = e.get("data") if isinstance(e.get("data"), dict) else {}
        for f in data.get("frames", []):
            if f.get("frame_type") != "stream":
                continue
            event = (e.get("name") or e.get("event")).rpartition(":")[2]
            key = (str(f.get("stream_id", f.get("id"))), event)
            end = int(f.get("offset", 0)) + int(f["length"])
            t = float(e.get("time", e.get("relative_time")))
            b, lo, hi = out.get(key, (0, t, t))
            out[key] = (max(b, end), min(lo, t), max(hi, t))
    return out


@needs_shared
@pytest.mark.parametrize("name, unit_ns, role", [(QLOGS[0], 1_000_000, "client"), (QLOGS[1], 1_000, "server")])
def test_other_stacks_qlogs_give_a_row_per_stream_and_direction(store, name, unit_ns, role):
    """pcap2qlog's ngtcp2 trace (a client's view, ms) and picoquic's (a server, us):
    bytes and first sent/arrived times equal the file's frames read with json."""
    oracle = _qlog_oracle(name)
    log_id = store.execute("SELECT log_id FROM event_logs WHERE file_name = ?", [name]).fetchone()[0]
    got = store.execute(
        "SELECT stream_id, direction, bytes, first_sent_ns, first_arrived_ns, complete_ns, hol_ns"
        " FROM streams WHERE connection IN (SELECT 'qlog:' || coalesce(fields->>'odcid', log_id || ':'"
        " || coalesce(fields->>'qlog_trace', '0')) FROM events WHERE log_id = ?)", [log_id]).fetchall()
    assert len(got) == len(oracle) > 0
    sent_dir = "c2s" if role == "client" else "s2c"
    t0 = {d: None for d in ("c2s", "s2c")}
    for stream, direction, size, first_sent, first_arrived, complete, hol in got:
        event = "packet_sent" if direction == sent_dir else "packet_received"
        b, lo, hi = oracle[(stream, event)]
        assert size == b
        first = first_sent if event == "packet_sent" else first_arrived
        t0[direction] = t0[direction] or (first - round(lo * unit_ns))
        assert first - round(lo * unit_ns) == t0[direction]   # same offset for every stream
        assert hol in (0, None)                             # per-stream delivery: no HOL


def test_the_stream_spans_are_registered_and_written_per_stream(store):
    from tracekit.core import spans
    columns = {d[0] for d in store.execute("SELECT * FROM streams LIMIT 0").description}
    assert {f"{s.name}_ns" for s in spans.STREAM_SPANS} <= columns
    assert not set(spans.STREAM_COLORS) & set(spans.NAMES)
    assert not set(spans.STREAM_COLORS.values()) & set(spans.COLORS.values())


def test_the_streams_view(store):
    from tracekit.pipeline.runner import run_analysis
    columns, rows = run_analysis(store, "views/streams", run=None)
    got = {(r[columns.index("connection")], r[columns.index("stream")]): dict(zip(columns, r)) for r in rows}
    h2 = got[("h2-hole", "audio")]
    assert (h2["complete_ms"], h2["deliverable_ms"], h2["hol_blocking_ms"]) == (3000, 7000, 4000)
    assert got[("fifo", "audio")]["queueing_ms"] == 3000 and got[("fifo", "audio")]["last_sent_ms"] == 6000


def test_http2_frames_in_the_tcp_byte_stream_agree_with_tshark():
    """Every frame tracekit cuts from nDPI's HTTP/2 capture is one tshark names:
    same packet time, stream id, type and length, in the same order."""
    with open(DATA / "ndpi-http2.pcapng.http2.tsv") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    expected = []
    for r in rows:
        t = int(r["frame.time_epoch"].replace(".", ""))
        for stream, typ, length in zip(*(r[k].split(",") for k in
                                          ("http2.streamid", "http2.type", "http2.length"))):
            expected.append((t, int(stream), int(typ), int(length)))
    got = [(e["ts"], int(e["stream_id"]), e["h2_type"], e["conn_length"] - 9)
           for e in h2_events(str(H2), 29518) if e["h2_type"] is not None]
    assert got == expected and len(got) == 12


def test_http2_streams_from_the_capture(store):
    """The POST's body (135 bytes, c2s) and the 201's (86, s2c) on stream 3, from
    tshark's DATA frames (type 0) above; one byte stream each way, so the
    delivery is the connection's; nothing was missing: no head-of-line time."""
    rows = store.execute("SELECT direction, bytes, delivery, first_sent_ns, complete_ns, deliverable_ns,"
                         " hol_blocking_ns FROM streams WHERE connection = 'h2:37824' ORDER BY direction").fetchall()
    up, down = rows
    assert up[:4] == ("c2s", 135, "connection", 1591863460344734491)
    assert down[:3] == ("s2c", 86, "connection")
    assert down[4] == down[5] == 1591863460346306008 and down[6] == 0


def test_the_streams_chart(store, tmp_path):
    pytest.importorskip("altair")
    from tracekit.presentation import plots
    chart, stem = plots.draw(store, "streams", stream="h2-hole")
    html, png = plots.save(chart, str(tmp_path / stem))
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    with open(html) as f:
        assert stem == "streams-h2-hole" and "hol_blocking" in f.read()


def test_tls13_traffic_keys_of_rfc8448():
    """RFC 8448 (Simple 1-RTT Handshake): the server's handshake traffic secret
    gives the write key and iv the RFC lists."""
    from tracekit.pipeline.tls13 import _expand_label
    secret = bytes.fromhex("b67b7d690cc16c4e75e54213cb2d37b4e9c912bcded9105d42befd59d391ad38")
    assert _expand_label(secret, b"key", 16, "sha256").hex() == "3fce516009c21727d0f2e4e86ee403bc"
    assert _expand_label(secret, b"iv", 12, "sha256").hex() == "5d313eb2671276ee13000b30"


def _tshark_streams(path):
    """{(direction, stream): (bytes, first frame ns, all bytes in ns)} from tshark's
    quic.stream fields (client port 41061 -> c2s), computed here per byte range."""
    with open(path) as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    frames = {}
    for r in rows:
        key = ("c2s" if r["udp.srcport"] == "41061" else "s2c", r["quic.stream.stream_id"])
        t = int(r["frame.time_epoch"].replace(".", ""))
        lo = int(r["quic.stream.offset"])
        frames.setdefault(key, []).append((t, lo, lo + int(r["quic.stream.length"])))
    out = {}
    for key, fr in frames.items():
        size = max(hi for _, _, hi in fr)
        first_copy = [min(t for t, lo, hi in fr if lo <= b < hi) for b in range(size)]
        out[key] = (size, min(t for t, _, _ in fr), max(first_copy) if size else None)
    return out


def test_a_quic_capture_s_streams_agree_with_tshark(tmp_path):
    """pcap2qlog's qlog of a QUIC capture with several streams (made from
    tshark's dissection with the capture's key log; tests/data/qlog/README.md)
    against tshark's own quic.stream fields of that dissection: the same
    streams each way, the same bytes; the first frame and the time all of a
    stream's bytes were in, within the qlog's 1 ms resolution."""
    from tracekit.store.db import connect
    con = connect(tmp_path / "t.duckdb")
    qlogs = Path(__file__).parent / "data" / "qlog"
    load_logs(con, [read_log(str(qlogs / "pcap2qlog-multi_stream.qlog"))])
    analyze(con)
    oracle = _tshark_streams(qlogs / "pcap2qlog-multi_stream.tshark.tsv")
    got = con.execute("SELECT direction, stream_id, bytes, coalesce(first_sent_ns, first_arrived_ns),"
                      " complete_ns, ended FROM streams").fetchall()
    assert {(d, s) for d, s, *_ in got} == set(oracle) and len(got) == 12
    for direction, stream, size, first, complete, ended in got:
        want_size, want_first, want_complete = oracle[(direction, stream)]
        assert size == want_size
        assert abs(first - want_first) < 1_000_000
        # HTTP/3's unidirectional streams (control, QPACK: ids 2 and 3 mod 4) never end
        # (RFC 9114, 6.2.1): no fin, so no time all of their bytes were in
        assert ended is (int(stream) % 4 < 2)
        if direction == "s2c" and ended:  # the client's side: arrivals
            assert abs(complete - want_complete) < 1_000_000
        elif not ended:
            assert complete is None
