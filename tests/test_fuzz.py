"""Random and mutated captures: only TracekitError escapes, nothing is dropped silently."""

import io

import pytest
from conftest import SHARED, needs_shared
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pcapgen import epb, idb, pcap_bytes, shb

from tracekit.core.errors import TracekitError
from tracekit.pipeline.captures import load_captures
from tracekit.readers.capture import open_capture
from tracekit.store.db import connect

SEEDS = ["zeek__get.pcap", "ndpi__http2.pcapng", "zeek__retransmit-timeout.pcapng",
         "ppp__many_interfaces-1.pcapng", "tcpdump__quic_retry.pcap", "ppp__sll2.pcap"]


def _read_records(data, name):
    reader = open_capture(name, io.BytesIO(data))
    return sum(len(b) for b in reader.batches())


def _check(con, tmp_path, data, name):
    path = tmp_path / name
    path.write_bytes(data)
    try:
        expected = _read_records(data, name)
    except TracekitError:
        with pytest.raises(TracekitError):
            load_captures(con, [path])
        return
    (summary,) = load_captures(con, [path])
    if summary.outcome == "duplicate":
        return
    rows = con.execute("SELECT count(*), count(decode_status) FROM packets WHERE capture_id = ?",
                       [summary.capture_id]).fetchall()[0]
    assert rows[0] == summary.packets == expected  # ingested + skipped = records read
    assert rows[1] == sum(summary.decode_status.values())


@pytest.fixture(scope="module")
def fuzz_db(tmp_path_factory):
    con = connect(tmp_path_factory.mktemp("fuzz") / "fuzz.duckdb")
    yield con
    con.close()


def _seed_bytes():
    return {name: (SHARED / name).read_bytes() for name in SEEDS if (SHARED / name).exists()}


@needs_shared
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_mutated_real_captures(fuzz_db, tmp_path_factory, data):
    seeds = _seed_bytes()
    name = data.draw(st.sampled_from(sorted(seeds)))
    raw = bytearray(seeds[name])
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.one_of(st.none(), st.integers(0, len(raw))))
    if cut is not None:
        raw = raw[:cut]
    _check(fuzz_db, tmp_path_factory.mktemp("m"), bytes(raw), name)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(head=st.sampled_from([pcap_bytes([])[:24], pcap_bytes([], big_endian=True)[:24],
                             pcap_bytes([], nanoseconds=True)[:24], shb(), shb(">") + idb(1, e=">"),
                             shb() + idb(1) + idb(101)]),
       body=st.binary(max_size=600))
def test_random_bytes_after_a_valid_header(fuzz_db, tmp_path_factory, head, body):
    name = "r.pcapng" if head[:4] == b"\x0a\x0d\x0d\x0a" else "r.pcap"
    _check(fuzz_db, tmp_path_factory.mktemp("r"), head + body, name)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(packets=st.lists(st.binary(min_size=0, max_size=120), max_size=12),
       link=st.sampled_from([0, 1, 9, 12, 101, 108, 113, 228, 229, 276, 147]))
def test_random_packets_under_every_link_type(fuzz_db, tmp_path_factory, packets, link):
    """Well-framed records whose contents are random: decoders must not crash."""
    frames = [(i, p) for i, p in enumerate(packets)]
    _check(fuzz_db, tmp_path_factory.mktemp("p"), pcap_bytes(frames, link_type=link), "p.pcap")
    ng = shb() + idb(link) + b"".join(epb(0, i, p) for i, p in frames)
    _check(fuzz_db, tmp_path_factory.mktemp("q"), ng, "q.pcapng")


def test_only_tracekit_errors_escape_on_garbage(tmp_path):
    for blob in (b"", b"\xd4\xc3\xb2\xa1", b"\x0a\x0d\x0d\x0a" + b"\xff" * 40, b"\x00" * 100):
        p = tmp_path / "g.bin"
        p.write_bytes(blob)
        db = connect(tmp_path / "g.duckdb")
        with pytest.raises(TracekitError):
            load_captures(db, [p])
        db.close()
