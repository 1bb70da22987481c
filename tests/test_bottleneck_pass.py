"""The bottleneck step (tracekit/pipeline/steps/bottleneck.py: a compiled pass
finds the pairs, DuckDB reduces them) gives the rows of its plain-SQL form
(tests/bottleneck_reference.sql, the step as it was: two `lag` windows over a
join of the per-packet analysis to `packets`), EXCEPT ALL both ways, on
crafted flows that reach each rule: no SYN captured (full size from the
largest payload), SACK blocks and duplicate ACKs after losses, timestamps
that go backwards, an MSS option below some segments' size; read whole and
in chunks of a few frames (slots reused, flows reduced in several batches),
and on the demo store."""

import struct
from pathlib import Path

import pytest
from pcapgen import pcap_bytes
from tcpsim import ACK, PSH, SYN, conversation, tcp_packet

import tracekit
from tracekit.pipeline.steps import bottleneck

REFERENCE = (Path(__file__).parent / "bottleneck_reference.sql").read_text()
T0 = 1_700_000_000_000_000_000


def _port(packets, new):
    """The conversation's client port 40000 -> `new` (a flow of its own)."""
    out = []
    for ts, frame, wire in packets:
        f = bytearray(frame)
        for at in (34, 36):
            if struct.unpack(">H", f[at:at + 2])[0] == 40000:
                f[at:at + 2] = struct.pack(">H", new)
        out.append((ts, bytes(f), wire))
    return out


def _mss_flow(port, start):
    """A download whose client announced MSS 1400 (full size 1340): runs of three
    1448-byte segments 30 us apart, then a 1380-byte one (full-sized by the MSS
    option, not by the largest payload), ACKed every other segment; seen at
    the client (it answers the SYN-ACK at once)."""
    c, s = (198, 18, 0, 9), (198, 19, 0, 9)
    out = []

    def put(t, from_client, seq, ack, flags, n=0, options=b""):
        src, dst, sp, dp = (c, s, port, 443) if from_client else (s, c, 443, port)
        out.append((t, *tcp_packet(src, dst, sp, dp, seq, ack, flags, n, options=options)))

    put(start, True, 1000, 0, SYN, options=b"\x02\x04" + struct.pack(">H", 1400))
    put(start + 10_000_000, False, 5000, 1001, SYN | ACK, options=b"\x02\x04" + struct.pack(">H", 1460))
    put(start + 10_050_000, True, 1001, 5001, ACK | PSH, 100)
    t, seq = start + 21_000_000, 5001
    for k in range(240):
        n = 1380 if k % 4 == 3 else 1448
        put(t, False, seq, 1101, ACK, n)
        seq += n
        if k % 2:
            put(t + 5_000, True, 1101, seq, ACK)
        t += 30_000
    return out


def _window_flow(port, start, host=7, burst=10):
    """A download seen from its middle (no SYN): six 1000-byte segments 1 ms
    apart (after an ACK of the client's: it is the client), then 210
    1448-byte ones, `burst` of them 2 us after the one before, the rest 100
    us (no ACK seen: a tie of the two sides' rates would leave the side to
    the aggregate's order). Its first full-sized segments are the largest
    payload's. burst=10: an initial window back to back, 4 x faster than
    the mode: the rate is not known. burst=5: six of the ten (a token
    bucket's burst), the rest at the mode: known, at that rate."""
    c, s = (198, 18, 0, host), (198, 19, 0, host)
    out, t, seq = [(start - 1_000, *tcp_packet(c, s, port, 443, 500, 9000, ACK))], start, 9000
    for k in range(216):
        n = 1000 if k < 6 else 1448
        out.append((t, *tcp_packet(s, c, 443, port, seq, 500, ACK, n)))
        seq += n
        t += 1_000_000 if k < 6 else 2_000 if k < 6 + burst else 100_000
    return out


def _capture(tmp_path):
    """One client-side capture of five flows, interleaved in time, and the
    lossy one seen at the server (its ACKs carry SACK blocks)."""
    lossy = conversation(1, 7, 450 * 1448, lose=(40, 41, 120, 300), gap_ns=20_000)["client"]
    clean = conversation(9, 3, 300 * 1448, gap_ns=25_000, start_ns=T0 + 2_000_000)["client"]
    packets = (_port(lossy, 40001) + _port(clean, 40002)[3:]  # no handshake seen
               + _port(conversation(5, 5, 200 * 1448, lose=(10,), gap_ns=40_000,
                                    start_ns=T0 + 5_000_000)["client"], 40003)
               + _mss_flow(40004, T0 + 1_000_000) + _window_flow(40005, T0 + 3_000_000)
               + _window_flow(40006, T0 + 4_000_000, host=8, burst=5))
    packets.sort(key=lambda p: p[0])
    for i in (200, 201, 450, 700, 701, 702):  # the capture's clock stepped back
        packets[i] = (packets[i - 1][0] - 7_000, *packets[i][1:])
    path = tmp_path / "flows.pcap"
    path.write_bytes(pcap_bytes(packets, nanoseconds=True))
    server = tmp_path / "server.pcap"
    server.write_bytes(pcap_bytes(_port(conversation(1, 7, 450 * 1448, lose=(40, 41, 120, 300),
                                                     gap_ns=20_000)["server"], 40001),
                                  nanoseconds=True))
    return [str(path), str(server)]


def _differences(con, table):
    ref = f"SELECT * FROM ({REFERENCE})"
    params = {"first": 0, "last": 1 << 30}
    only_step = con.execute(f"SELECT * FROM {table} EXCEPT ALL {ref}", params).fetchall()
    only_ref = con.execute(f"{ref} EXCEPT ALL SELECT * FROM {table}", params).fetchall()
    return only_step, only_ref


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bnpass")
    s = tracekit.open(str(tmp / "s.duckdb"))
    s.ingest(_capture(tmp))
    s.analyze()
    yield s.con
    s.close()


def test_the_pass_gives_the_rows_of_the_sql_on_crafted_flows(crafted):
    rows = crafted.execute("SELECT f.client_port, b.direction, b.side, b.pairs, b.rate_bps, "
                           "b.known, c.file_name FROM bottleneck b "
                           "JOIN flows f USING (capture_id, flow_id) JOIN captures c USING (capture_id) "
                           "ORDER BY ALL").fetchall()
    ports = {r[0] for r in rows}
    assert {40001, 40002, 40003, 40004, 40005, 40006} <= ports, rows  # every crafted flow has a row
    # the MSS flow, read from its arrivals: each of its 239 pairs is full-sized (by
    # the largest payload, 1448, only half of them; the clock's step may take one),
    # 1488 or 1420 IP bytes / 30 us
    mss = [r for r in rows if r[0] == 40004 and r[1] == "s2c"]
    assert len(mss) == 1 and mss[0][2] == "arrivals" and 235 <= mss[0][3] <= 239, rows
    assert 1420 * 8e9 / 30_000 <= mss[0][4] <= 1488 * 8e9 / 30_000, rows
    # no SYN: the initial window is found among the segments of the largest size
    window = [r for r in rows if r[0] == 40005 and r[1] == "s2c"]
    assert [(r[2], r[5]) for r in window] == [("arrivals", False)], rows
    assert window[0][4] == round(1488 * 8e9 / 100_000), rows
    # the same through a token bucket: half the window at once, the rest at the mode
    bucket = [r for r in rows if r[0] == 40006 and r[1] == "s2c"]
    assert [(r[2], r[5], r[4]) for r in bucket] == [
        ("arrivals", True, round(1488 * 8e9 / 100_000))], rows
    # at the server, ACK pairs: none with or after a SACK block
    server = [r for r in rows if r[6] == "server.pcap" and r[1] == "s2c"]
    assert [r[2] for r in server] == ["acks"] and server[0][3] < 440, rows
    assert _differences(crafted, "bottleneck") == ([], [])


@pytest.mark.parametrize("jit", ["never", "always"])
def test_in_chunks_of_a_few_frames_the_rows_are_the_same(crafted, monkeypatch, jit):
    """Small chunks: flows end and their slots are reused mid-capture, the
    ended flows are reduced in several batches, and the held pairs are moved
    into DuckDB (the bound for long flows) several times; the kernel as
    Python and compiled."""
    monkeypatch.setenv("TRACEKIT_JIT", jit)
    writer = crafted.cursor()
    writer.execute("DELETE FROM bottleneck")
    rows = 0
    for (cid,) in crafted.execute("SELECT capture_id FROM captures").fetchall():
        rows += bottleneck.build(crafted, writer, cid, chunk_frames=97, reduce_rows=50,
                                 spill_rows=300)["bottleneck"]
    assert rows == crafted.execute("SELECT count(*) FROM bottleneck").fetchall()[0][0] >= 6
    assert _differences(crafted, "bottleneck") == ([], [])


def test_the_demo_store_has_the_rows_of_the_sql(demo_store):
    with tracekit.open(str(demo_store), read_only=True) as s:
        (n,), = s.con.execute("SELECT count(*) FROM bottleneck").fetchall()
        assert n >= 50
        assert _differences(s.con, "bottleneck") == ([], [])
