"""HTTP/2 streams' ends and what a capture cannot show (`tracekit h2-events`,
the `streams` table), on a crafted h2c connection at the client:

- stream 1: two DATA frames, the second with END_STREAM -- complete;
- stream 3: a DATA frame and no more (the capture stops before its end);
- stream 5: a DATA frame, then the client's RST_STREAM (it gave up).

Found by a held-out check against nghttp and tshark (a capture cut short,
a cancelled stream, one segment missing, a mid-connection start, a short
snaplen, two runs naming their connection alike): every one was read as
finished streams, or as junk, without a word.
"""

import json
import struct

import pytest
from click.testing import CliRunner

import tracekit
from pcapgen import pcap_bytes
from tcpsim import ACK, PSH, SYN, tcp_packet
from tracekit.cli import main

T0 = 1_800_000_000_000_000_000
MS = 1_000_000
C, S = (198, 18, 0, 1), (198, 19, 0, 1)
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
END_STREAM, END_HEADERS = 0x1, 0x4


def frame(typ, flags, stream, body):
    return struct.pack(">I", len(body))[1:] + bytes([typ, flags]) + struct.pack(">I", stream) + body


def data(stream, n, end=False):
    return frame(0, END_STREAM if end else 0, stream, b"x" * n)


def packets(requests_end=True, settings_ack=False, reset_after_end=False):
    """(ms, from client, flags, payload) of the connection, in order; variants: requests
    that do not end (a POST's body to come), a SETTINGS ACK before stream 1's last DATA,
    the server's RST_STREAM(NO_ERROR) of stream 1 after its END_STREAM (RFC 9113, 8.1)."""
    ends = END_STREAM if requests_end else 0
    request = b"".join(frame(1, END_HEADERS | ends, s, b"\x82") for s in (1, 3, 5))
    last = data(1, 1400, end=True)
    out = [(0, True, SYN, b""), (10, False, SYN, b""), (10.1, True, 0, b""),
           (10.2, True, PSH, PREFACE + frame(4, 0, 0, b"") + request),
           (20.3, False, PSH, frame(4, 0, 0, b"")),
           (21.0, False, PSH, data(1, 1400)),
           (22.0, False, PSH, (frame(4, 1, 0, b"") if settings_ack else b"") + last),
           (23.0, False, PSH, data(3, 1000)),
           (24.0, False, PSH, data(5, 500)),
           (25.0, True, PSH, frame(3, 0, 5, struct.pack(">I", 8)))]
    if reset_after_end:
        out.append((26.0, False, PSH, frame(3, 0, 1, struct.pack(">I", 0))))
    return out


def capture(path, keep=lambda i: True, snap=None, **variant):
    seq = {True: 1000, False: 5000}
    sent = {True: 0, False: 0}
    out = []
    for i, (ms, c2s, flags, payload) in enumerate(packets(**variant)):
        other = not c2s
        a, b, pa, pb = (C, S, 40000, 8080) if c2s else (S, C, 8080, 40000)
        pkt, wire = tcp_packet(a, b, pa, pb, seq[c2s] + sent[c2s], seq[other] + sent[other],
                               flags | (ACK if flags != SYN else 0), payload=payload,
                               snap=snap if payload else None)
        sent[c2s] += len(payload) + (1 if flags & SYN else 0)
        if keep(i):
            out.append((T0 + round(ms * MS), pkt, wire))
    path.write_bytes(pcap_bytes(out))
    return path


def streams(tmp_path, cap, *runs, connection=None):
    """Rows of `streams` after h2-events (once per run) and analyze; and the warnings."""
    db, warned = tmp_path / "s.duckdb", []
    for run in runs or (None,):
        out = tmp_path / f"{run}.jsonl"
        args = ["h2-events", str(cap), "--port", "8080", "--out", str(out)]
        args += ["--run", run] if run else []
        args += ["--connection", connection] if connection else []
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 0, r.output
        warned += [line for line in r.stderr.splitlines() if "warning" in line]
        if out.stat().st_size:  # (no event: an empty log, which ingest refuses)
            assert CliRunner().invoke(main, ["ingest", str(out), "--db", str(db)]).exit_code == 0
    if not db.exists():
        return [], warned
    assert CliRunner().invoke(main, ["analyze", "--db", str(db)]).exit_code == 0
    with tracekit.open(str(db), read_only=True) as s:
        rows = s.con.execute("""SELECT run, connection, stream_id, bytes, complete_ns, ended, reset
                                FROM streams WHERE direction = 's2c'""").fetchall()
    return rows, warned


def test_a_stream_is_complete_only_when_its_end_was_seen(tmp_path):
    rows, warned = streams(tmp_path, capture(tmp_path / "h2.pcap"))
    assert warned == []
    got = {r[2]: r[3:] for r in rows}
    assert got["1"] == (2800, T0 + 22 * MS, True, False)
    assert got["3"] == (1000, None, False, False)   # the capture stopped before its end
    assert got["5"] == (500, None, False, True)     # reset by the client


def test_a_reset_after_the_end_leaves_the_stream_complete(tmp_path):
    rows, _ = streams(tmp_path, capture(tmp_path / "h2.pcap", reset_after_end=True))
    assert {r[2]: r[3:] for r in rows}["1"] == (2800, T0 + 22 * MS, True, True)


def test_a_capture_cut_before_any_end_is_no_complete_stream(tmp_path):
    """Requests whose HEADERS do not end them (a POST, gRPC), the capture cut after the
    response's first DATA: no END_STREAM anywhere, yet h2-events marks the ends."""
    cap = capture(tmp_path / "cut.pcap", keep=lambda i: i <= 5, requests_end=False)
    rows, warned = streams(tmp_path, cap)
    assert warned == [] and [r[2:] for r in rows] == [("1", 1400, None, False, False)]


def test_a_byte_never_captured_is_said_and_nothing_after_it_is_read(tmp_path):
    cap = capture(tmp_path / "gap.pcap", keep=lambda i: i != 5)  # stream 1's first DATA
    rows, warned = streams(tmp_path, cap)
    assert len(warned) == 1 and "gap.pcap: connection h2:40000: byte 9 of the server's TCP byte " \
        "stream was never captured; the 4336 bytes after it are not read" in warned[0]
    assert rows == []


def test_a_capture_that_starts_mid_connection_reads_no_frames_and_says_so(tmp_path):
    cap = capture(tmp_path / "mid.pcap", keep=lambda i: i >= 6)  # from stream 1's last DATA
    rows, warned = streams(tmp_path, cap)
    assert rows == [] and len(warned) == 2
    assert all("byte stream does not start in the capture" in w for w in warned)


def test_a_capture_that_starts_at_a_settings_ack_reads_no_frames(tmp_path):
    cap = capture(tmp_path / "ack.pcap", keep=lambda i: i >= 6, settings_ack=True)
    rows, warned = streams(tmp_path, cap)
    assert rows == [] and len(warned) == 2
    assert any("server's byte stream does not start in the capture" in w for w in warned)


def test_payloads_cut_by_the_snaplen_are_named_and_read_as_nothing(tmp_path):
    rows, warned = streams(tmp_path, capture(tmp_path / "snap.pcap", snap=120))
    assert rows == []  # no junk stream out of the bytes after a cut payload
    assert warned and all("cut by the capture's snaplen" in w for w in warned)


def test_two_runs_naming_their_connection_alike_are_two_connections(tmp_path):
    cap = capture(tmp_path / "h2.pcap")
    rows, _ = streams(tmp_path, cap, "A", "B", connection="bench")
    assert sorted((r[0], r[1], r[2], r[4]) for r in rows) == [
        (run, "bench", s, t) for run in "AB" for s, t in
        (("1", T0 + 22 * MS), ("3", None), ("5", None))]
    r = CliRunner().invoke(main, ["streams", "--db", str(tmp_path / "s.duckdb"), "--format", "json"])
    shown = json.loads(r.stdout)
    assert {(x["run"], x["stream"], x["complete_ms"]) for x in shown if x["direction"] == "s2c"
            and x["stream"] == "1"} == {("A", "1", 1.0), ("B", "1", 1.0)}


def test_an_applications_marks_without_a_run_join_the_one_run_of_their_connection(tmp_path):
    """h2-events with --run, the server application's own log of when each stream was
    ready without one: the marks are that run's (keyed by run and name, they matched
    nothing)."""
    marks = tmp_path / "app.jsonl"
    marks.write_text("".join(json.dumps({"ts": T0 + round(ms * MS), "kind": "stream_ready",
                                         "connection": "bench", "direction": "s2c",
                                         "stream_id": s}) + "\n"
                             for s, ms in (("1", 20.5), ("3", 20.6))))
    cap = capture(tmp_path / "h2.pcap")
    db = tmp_path / "s.duckdb"
    r = CliRunner().invoke(main, ["h2-events", str(cap), "--port", "8080", "--out",
                                  str(tmp_path / "h2.jsonl"), "--run", "A", "--connection", "bench"])
    assert r.exit_code == 0, r.output
    for args in (["ingest", str(tmp_path / "h2.jsonl"), str(marks)], ["analyze"]):
        assert CliRunner().invoke(main, [*args, "--db", str(db)]).exit_code == 0
    with tracekit.open(str(db), read_only=True) as s:
        got = s.con.execute("""SELECT stream_id, ready_ns FROM streams WHERE direction = 's2c'
                               AND run = 'A' ORDER BY stream_id""").fetchall()
    assert got == [("1", T0 + 20_500_000), ("3", T0 + 20_600_000), ("5", None)]
