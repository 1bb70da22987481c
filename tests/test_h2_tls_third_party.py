"""HTTP/2 in TLS 1.3 that nobody here made: cryptohack.org's challenge capture
(one GET to tls3.cryptohack.org, a 200 with a 34-byte body) and its key log,
as published with lbirchler/tls-decryption (provenance in tests/data/pcap/README.md).

tracekit decrypts the records itself (tracekit/pipeline/tls13.py); the oracle
is tshark 4.0's own decryption of the same capture with the same key log, its
http2 fields in the `.http2.tsv` beside it."""

import csv
import json
from pathlib import Path

import pytest

from tracekit.core.errors import TracekitError
from tracekit.pipeline.analyze import analyze
from tracekit.pipeline.h2events import h2_events
from tracekit.pipeline.logs import load_logs
from tracekit.readers.events import read_log

DATA = Path(__file__).parent / "data" / "pcap"
CAPTURE = DATA / "cryptohack-tls13-h2.pcapng"
KEYLOG = DATA / "cryptohack-tls13-h2.keys"


def tshark_frames():
    """(packet time ns, stream id, type, length) of every HTTP/2 frame tshark names."""
    with open(str(CAPTURE) + ".http2.tsv") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    out = []
    for r in rows:
        if not r["http2.streamid"]:
            continue          # the client's connection preface: no frame
        t = int(r["frame.time_epoch"].replace(".", ""))
        for stream, typ, length in zip(*(r[k].split(",") for k in
                                          ("http2.streamid", "http2.type", "http2.length"))):
            out.append((t, int(stream), int(typ), int(length)))
    return out


def test_decrypted_frames_are_the_ones_tshark_decrypts():
    """Same packet time, stream, type and length for all nine frames, in order;
    without the key log there is nothing to read."""
    events = h2_events(str(CAPTURE), 443, keylog=str(KEYLOG))
    got = [(e["ts"], int(e["stream_id"]), e["h2_type"], e["conn_length"] - 9)
           for e in events if e["h2_type"] is not None]
    assert got == tshark_frames() and len(got) == 9
    preface = [e for e in events if e["h2_type"] is None]
    assert [(e["conn_offset"], e["conn_length"]) for e in preface] == [(0, 24)]


def test_the_response_body_as_a_stream_row(tmp_path):
    """Stream 1's body: 34 bytes in one DATA frame (tshark: frame 27), complete
    and deliverable when that packet arrived at the client, nothing held."""
    from tracekit.store.db import connect
    path = tmp_path / "h2.jsonl"
    events = h2_events(str(CAPTURE), 443, keylog=str(KEYLOG))
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    con = connect(tmp_path / "t.duckdb")
    load_logs(con, [read_log(str(path))])
    analyze(con)
    rows = con.execute("SELECT stream_id, direction, bytes, complete_ns, deliverable_ns, hol_blocking_ns"
                       " FROM streams WHERE direction = 's2c' AND bytes > 0").fetchall()
    last = max(t for t, _, typ, _ in tshark_frames() if typ == 0)
    assert rows == [("1", "s2c", 34, last, last, 0)]
    con.close()


def test_a_key_log_that_does_not_fit_is_refused_in_one_line(tmp_path):
    """Another connection's key log, or this one's with wrong secrets: one
    error naming the capture, not an empty result (a record that does not
    authenticate was silently the end of the stream before)."""
    lines = [line.split(" ") for line in KEYLOG.read_text().splitlines()]
    other = tmp_path / "other.keys"
    other.write_text("".join(f"{label} {'00' * 32} {secret}\n" for label, _, secret in lines))
    wrong = tmp_path / "wrong.keys"
    wrong.write_text("".join(f"{label} {random} {'77' * (len(secret) // 2)}\n" for label, random, secret in lines))
    with pytest.raises(TracekitError, match="cryptohack-tls13-h2.pcapng: the key log has no CLIENT_TRAFFIC_SECRET_0"):
        h2_events(str(CAPTURE), 443, keylog=str(other))
    with pytest.raises(TracekitError, match="the client's TLS record at byte 523 of its TCP byte stream does not decrypt"):
        h2_events(str(CAPTURE), 443, keylog=str(wrong))


def _edited(tmp_path, options=(), drop=()):
    import shutil
    import subprocess
    if not shutil.which("editcap"):
        pytest.skip("needs editcap (wireshark-common)")
    out = tmp_path / "edited.pcapng"
    subprocess.run(["editcap", *options, str(CAPTURE), str(out), *drop], check=True,
                   capture_output=True)
    return out


def test_a_record_never_captured_is_said_under_tls_too(tmp_path):
    """Frame 24 (the server's 668 bytes after its handshake flight) left out: the
    records behind it cannot be decrypted, and the note says where its TCP byte
    stream stops (before, the server's direction vanished without a word)."""
    notes = []
    events = h2_events(str(_edited(tmp_path, drop=["24"])), 443, keylog=str(KEYLOG),
                       notes=notes)
    assert len(notes) == 1 and "the server's TCP byte stream was never captured" in notes[0]
    assert "byte 4593 of" in notes[0] and "the 845 bytes after it" in notes[0]
    assert {e["direction"] for e in events} == {"c2s"}


def test_a_hello_cut_by_the_snaplen_is_named_as_such(tmp_path):
    with pytest.raises(TracekitError, match="cut by the capture's snaplen"):
        h2_events(str(_edited(tmp_path, options=["-s", "200"])), 443, keylog=str(KEYLOG))
