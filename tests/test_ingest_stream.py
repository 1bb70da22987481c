"""A capture read from a stream (`tracekit ingest -`, /dev/stdin, a pipe):
what tshark reads of the same bytes, whole or not at all, nothing left behind."""

import hashlib
import os
import shutil
import signal
import struct
import subprocess
import sys

import duckdb
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "captures")
TRACEKIT = [sys.executable, "-m", "tracekit.cli"]
PCAP = os.path.join(SAMPLES, "http-fresh-vs-persistent.pcap")  # 267 kB, 1,000-odd packets
PCAPNG = os.path.join(SAMPLES, "udp-echo.pcapng")


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _tshark_frames(data):
    """Frames tshark reads from the same bytes on its own standard input."""
    r = subprocess.run(["tshark", "-n", "-r", "-", "-T", "fields", "-e", "frame.number"],
                       input=data, capture_output=True, check=True)
    return len(r.stdout.split())


def _piped_ingest(sample, name, db):
    """`cat sample | tracekit ingest NAME`: a real pipe, as `tcpdump -w - |` gives."""
    cat = subprocess.Popen(["cat", sample], stdout=subprocess.PIPE)
    r = subprocess.run(TRACEKIT + ["ingest", name, "--db", str(db)], stdin=cat.stdout,
                       capture_output=True, text=True)
    cat.stdout.close()
    cat.wait()
    return r


@pytest.mark.skipif(not shutil.which("tshark"), reason="needs tshark")
@pytest.mark.parametrize("sample,name", [(PCAP, "-"), (PCAPNG, "/dev/stdin")])
def test_a_capture_piped_in_is_what_tshark_reads_and_is_named_stdin(tmp_path, sample, name):
    db = tmp_path / "s.duckdb"
    data = _read(sample)
    r = _piped_ingest(sample, name, db)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("<stdin>: ingested as capture 1: ")
    digest = hashlib.sha256(data).hexdigest()
    ext = "pcapng" if sample.endswith("pcapng") else "pcap"
    with duckdb.connect(str(db), read_only=True) as con:
        path, file_name, sha, size, packets = con.execute(
            "SELECT path, file_name, sha256, size_bytes, packets FROM captures").fetchone()
        rows = con.execute("SELECT count(*), max(frame) FROM packets").fetchone()
    assert (path, file_name, sha, size) == ("<stdin>", f"stdin-{digest[:12]}.{ext}", digest,
                                            len(data))
    frames = _tshark_frames(data)
    assert frames > 5 and packets == frames and rows == (frames, frames)
    assert sorted(os.listdir(tmp_path)) == ["s.duckdb"]  # no copy of the stream left
    # the same bytes again, from the file: already in the store (one hash for both)
    again = subprocess.run(TRACEKIT + ["ingest", sample, "--db", str(db)], capture_output=True,
                           text=True)
    assert "already in the store as capture 1" in again.stdout, again.stdout + again.stderr


def _last_whole_record_end(data):
    """Where the last complete record of a little-endian pcap (micro- or
    nanosecond) ends, from its record headers (incl_len at bytes 8..12 of each
    16-byte header)."""
    assert data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1")
    at = 24
    while at + 16 <= len(data):
        incl = struct.unpack_from("<I", data, at + 8)[0]
        if at + 16 + incl > len(data):
            break
        at += 16 + incl
    return at


def test_a_stream_cut_short_is_refused_whole_and_the_store_is_as_it_was(tmp_path):
    data = _read(PCAP)
    cut = data[:len(data) // 2]
    offset = _last_whole_record_end(cut)
    assert 24 < offset < len(cut)
    db = tmp_path / "s.duckdb"
    # into a new store (beside a small file: the two are read ahead together)
    r = subprocess.run(TRACEKIT + ["ingest", "-", PCAPNG, "--db", str(db)], input=cut,
                       capture_output=True)
    err = r.stderr.decode()
    assert r.returncode == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"tracekit: error: <stdin>: at byte offset {offset}: "), err
    assert "not ingested" in err
    assert os.listdir(tmp_path) == []  # no store, no copy of the stream
    # into a store that holds a capture: unchanged
    ok = subprocess.run(TRACEKIT + ["ingest", PCAPNG, "--db", str(db)], capture_output=True)
    assert ok.returncode == 0
    before = _contents(db)
    r = subprocess.run(TRACEKIT + ["ingest", "-", "--db", str(db)], input=cut,
                       capture_output=True)
    assert r.returncode == 2 and f"<stdin>: at byte offset {offset}: " in r.stderr.decode()
    assert _contents(db) == before
    assert sorted(os.listdir(tmp_path)) == ["s.duckdb"]


def _contents(db):
    with duckdb.connect(str(db), read_only=True) as con:
        return (con.execute("SELECT capture_id, sha256, packets FROM captures "
                            "ORDER BY 1").fetchall(),
                con.execute("SELECT count(*), sum(frame) FROM packets").fetchone())


def _spooling(pid, folder):
    """Whether process `pid` holds its copy of the stream open, an unnamed file in
    `folder` (state, not time)."""
    fds = f"/proc/{pid}/fd"
    try:
        return any(os.readlink(os.path.join(fds, fd)).startswith(str(folder) + "/")
                   and os.readlink(os.path.join(fds, fd)).endswith(" (deleted)")
                   for fd in os.listdir(fds))
    except OSError:
        return False

def _ctrl_c_reaches_it():
    """In the child before exec: SIGINT back to its default. A suite started in
    the background by a shell without job control (`nohup make test &`) has
    SIGINT ignored, the child would inherit that and never see the Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_a_stream_stopped_midway_leaves_the_store_and_its_folder_as_they_were(tmp_path, sig):
    """Ctrl-C (or kill -9) while the stream is still coming in: the store holds
    what it held, and no copy of the stream stays beside it."""
    db = tmp_path / "s.duckdb"
    ok = subprocess.run(TRACEKIT + ["ingest", PCAPNG, "--db", str(db)], capture_output=True)
    assert ok.returncode == 0
    before, listing = _contents(db), sorted(os.listdir(tmp_path))
    p = subprocess.Popen(TRACEKIT + ["ingest", "-", "--db", str(db)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=_ctrl_c_reaches_it)
    p.stdin.write(_read(PCAP)[:100_000])
    p.stdin.flush()
    while not _spooling(p.pid, tmp_path):  # (the stream stays open: it waits for more)
        assert p.poll() is None, p.communicate()
        os.sched_yield()
    p.send_signal(sig)
    _, err = p.communicate()
    if sig == signal.SIGINT:
        assert p.returncode == 130, err
        assert err.decode().strip() == ("tracekit: interrupted; the store is as it was "
                                        "before this command")
    else:
        assert p.returncode == -signal.SIGKILL
    assert sorted(os.listdir(tmp_path)) == listing
    assert _contents(db) == before
