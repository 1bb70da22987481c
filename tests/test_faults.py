"""Faults while writing: kill -9, Ctrl-C, a full disk, a failure half-way through a
command. After each, every query sees the store as it was before the command
(or with the command's whole work), and the next command works."""

import os
import random
import signal
import struct
import subprocess
import sys
import time

import duckdb
import pytest

from tracekit.store.db import connect

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "captures")
TRACEKIT = [sys.executable, "-m", "tracekit.cli"]


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """400,000 TCP packets over 50 connections (44 MB): ingest takes a second or two."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    pkts = [bytes(Ether() / IP(src="198.18.0.1", dst="198.18.0.2") /
                  TCP(sport=40000 + i % 50, dport=80, seq=1000 * i, flags="PA") / (b"x" * 40))
            for i in range(2000)]
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for i in range(400_000):
        p = pkts[i % 2000]
        out.append(struct.pack("<IIII", 1_700_000_000 + i // 1000, i % 1000 * 1000, len(p), len(p)) + p)
    path = tmp_path_factory.mktemp("big") / "big.pcap"
    path.write_bytes(b"".join(out))
    return path


def _state(db):
    """What any query sees, and what is left of unfinished work."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("""
            SELECT (SELECT count(*) FROM captures), (SELECT count(*) FROM store.packets),
                   (SELECT coalesce(sum(packets), 0) FROM captures),
                   (SELECT count(*) FROM event_logs), (SELECT count(*) FROM events)""").fetchone()
    finally:
        con.close()


def _reopen(db):
    connect(db).close()  # opening for writing removes what a killed command left


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kill_9_during_ingest_leaves_nothing(tmp_path, big, seed):
    db = tmp_path / "s.duckdb"
    subprocess.run(TRACEKIT + ["ingest", os.path.join(SAMPLES, "udp-echo.pcapng"), "--db", str(db)],
                   check=True, capture_output=True)
    before = _state(db)
    proc = subprocess.Popen(TRACEKIT + ["ingest", str(big), "--db", str(db)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(random.Random(seed).uniform(0.8, 2.5))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    _reopen(db)
    after = _state(db)
    if after[0] == before[0]:  # killed before the end: as before, and no orphan rows
        assert after == before
    else:  # it had committed: all of it
        assert after[0] == before[0] + 1 and after[1] == after[2] == before[1] + 400_000
    r = subprocess.run(TRACEKIT + ["ingest", str(big), "--db", str(db)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert _state(db)[1] == before[1] + 400_000


def test_ctrl_c_says_one_true_line(tmp_path, big):
    db = tmp_path / "s.duckdb"
    log = tmp_path / "e.jsonl"
    log.write_text('{"ts_ns": 1700000000000000000, "kind": "request_start", "request": "a"}\n')
    subprocess.run(TRACEKIT + ["ingest", os.path.join(SAMPLES, "udp-echo.pcapng"), "--db", str(db)],
                   check=True, capture_output=True)
    before = _state(db)
    proc = subprocess.Popen(TRACEKIT + ["ingest", str(big), str(log), "--db", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("the ingest finished before the signal (a fast machine)")
    assert proc.returncode == 130
    assert err.strip() == "tracekit: interrupted; the store is as it was before this command"
    assert _state(db) == before


def test_a_failing_log_leaves_the_captures_out_too(tmp_path):
    """One command, all or nothing: the capture went in before the log failed."""
    db = tmp_path / "s.duckdb"
    log = tmp_path / "late.jsonl"  # events in 2200: an offset of 80 years overflows
    log.write_text('{"ts_ns": 7258118400000000000, "kind": "request_start", "request": "a"}\n')
    r = subprocess.run(TRACEKIT + ["ingest", os.path.join(SAMPLES, "udp-echo.pcapng"), str(log),
                                   "--clock-offset", "2600000000s", "--db", str(db)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "moves its events outside 1677-2262" in r.stderr
    assert not db.exists()  # the store this command created is removed, not left half-made
    subprocess.run(TRACEKIT + ["ingest", os.path.join(SAMPLES, "http-fresh-vs-persistent.pcap"),
                               "--db", str(db)], check=True, capture_output=True)
    before = _state(db)
    r = subprocess.run(TRACEKIT + ["ingest", os.path.join(SAMPLES, "udp-echo.pcapng"), str(log),
                                   "--clock-offset", "2600000000s", "--db", str(db)],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert _state(db) == before


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_full_disk_is_one_line_and_the_store_is_as_before(tmp_path, big):
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], check=True)
    try:
        db = mnt / "s.duckdb"
        r = subprocess.run(TRACEKIT + ["ingest", str(big), "--db", str(db)],
                           capture_output=True, text=True)
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith("tracekit: error: no space left on the device writing")
        assert len(r.stderr.strip().splitlines()) == 1 and not db.exists()
        subprocess.run(TRACEKIT + ["ingest", os.path.join(SAMPLES, "udp-echo.pcapng"),
                                   "--db", str(db)], check=True, capture_output=True)
        before = _state(db)
        r = subprocess.run(TRACEKIT + ["ingest", str(big), "--db", str(db)],
                           capture_output=True, text=True)
        assert r.returncode == 2 and "no space left" in r.stderr
        assert _state(db) == before
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.mark.parametrize("at", [2.0])
def test_kill_9_during_analyze_hides_the_half_built_and_the_next_run_finishes(tmp_path, big, at):
    db = tmp_path / "s.duckdb"
    subprocess.run(TRACEKIT + ["ingest", str(big), "--db", str(db)], check=True, capture_output=True)
    proc = subprocess.Popen(TRACEKIT + ["analyze", "--db", str(db)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(at)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    con = duckdb.connect(str(db), read_only=True)
    # before it is reopened for writing: the views already hide what is half-built
    (rows,), = con.execute("SELECT count(*) FROM tcp_analysis").fetchall()
    assert rows in (0, 400_000)
    con.close()
    _reopen(db)
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM analyses_in_progress").fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM store.tcp_analysis").fetchone()[0] in (0, 400_000)
    con.close()
    r = subprocess.run(TRACEKIT + ["analyze", "--db", str(db)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM tcp_analysis").fetchone() == (400_000,)
    errors = con.execute("SELECT analysis, error FROM analysis_runs WHERE error IS NOT NULL").fetchall()
    assert errors == [], errors
    con.close()
