"""TLS handshakes longer than the 64 KiB ingest keeps of every TLS connection.

A TLS 1.2 server's certificate chain can pass 64 KiB; what follows it
(ServerKeyExchange, ServerHelloDone, the server's Finished) was lost with
the rest of the region. Ingest now follows each direction's record headers
and keeps segments for as long as the records are plaintext handshake
records, then the first encrypted record whole.
"""

import json
import struct
from pathlib import Path

import duckdb
from click.testing import CliRunner
from pcapgen import pcap_bytes
from tcpsim import ACK, PSH, SYN, tcp_packet

from tracekit.cli import main
from tracekit.pipeline.steps.tls import HANDSHAKE
from tracekit.readers.decode.payloads import WINDOW

DATA = Path(__file__).parent / "data" / "pcap"


def analysed(tmp_path, path):
    db = str(tmp_path / "x.duckdb")
    r = CliRunner().invoke(main, ["ingest", str(path), "--db", db])
    assert r.exit_code == 0, r.output
    assert CliRunner().invoke(main, ["analyze", "--db", db]).exit_code == 0
    return duckdb.connect(db)


def test_a_certificate_chain_past_64_kib(tmp_path):
    """tls12-long-handshake.pcap (made here: OpenSSL 3.0 s_server and s_client,
    TLS 1.2, an 89 kB self-signed certificate, loopback with MTU 1500 and
    offloads off; see tests/data/pcap/README.md) against tshark 4.0.17's
    records and handshake types (the .tshark.json beside it)."""
    oracle = json.loads((DATA / "tls12-long-handshake.pcap.tshark.json").read_text())["frames"]
    con = analysed(tmp_path, DATA / "tls12-long-handshake.pcap")
    got = {}
    for frame, message in con.execute("SELECT frame, message FROM tls_messages").fetchall():
        got.setdefault(frame, []).append(message)
    # every handshake message tshark names is there, in the frame tshark names
    for row in oracle:
        for typ in row["handshake_types"]:
            assert HANDSHAKE[typ] in got.get(row["frame"], []), (row, got.get(row["frame"]))
    # ServerKeyExchange and ServerHelloDone start 89 kB into the server's stream
    (offset,) = con.execute("SELECT stream_offset FROM tls_messages "
                            "WHERE message = 'server_hello_done'").fetchone()
    assert offset > WINDOW
    # the certificate (tshark does not reassemble it) ends with the server's
    # last handshake record before the ServerKeyExchange's
    server_hs = [r["frame"] for r in oracle if r["from_server"] and r["record_types"] == [22]
                 and not r["handshake_types"]]
    assert got[server_hs[-1]] == ["certificate"]
    # the server's first encrypted record is kept whole, and nothing after it
    first_app = [r for r in oracle if r["from_server"] and 23 in r["record_types"]][0]
    assert "application_data" in got[first_app["frame"]]
    end = con.execute("""SELECT max(t.rel_seq + t.payload_bytes) FROM payloads k
        JOIN tcp_analysis t USING (capture_id, frame) WHERE NOT t.from_client""").fetchone()[0]
    app = con.execute("SELECT stream_offset FROM tls_messages WHERE direction = 's2c' AND "
                      "message = 'application_data'").fetchone()[0]
    assert end == 1 + app + 5 + first_app["record_lengths"][0]
    assert con.execute("SELECT bool_and(complete) FROM tls_messages").fetchone() == (True,)


def _record(ctype, body):
    return bytes([ctype, 3, 3]) + struct.pack(">H", len(body)) + body


def _handshake(htype, body):
    return bytes([htype]) + len(body).to_bytes(3, "big") + body


def test_a_record_header_split_between_two_segments(tmp_path):
    """Crafted: a 70 kB certificate in five records, one record header cut 2
    bytes in by a segment boundary, then ServerHelloDone and two application
    data records. Everything up to the end of the first application data
    record is kept and read; the second, past 64 KiB, is not kept."""
    c, s = [198, 18, 0, 1], [198, 19, 0, 1]
    hello = _record(22, _handshake(1, b"\x03\x03" + bytes(32) + b"\x00\x00\x02\x00\x2f\x01\x00"))
    cert = _handshake(11, bytes(70_000))
    server = _record(22, _handshake(2, b"\x03\x03" + bytes(32) + b"\x00\x00\x2f\x00"))
    records = [cert[k:k + 16384] for k in range(0, len(cert), 16384)]
    heads = []
    for r in records:
        heads.append(len(server))
        server += _record(22, r)
    server += _record(22, _handshake(14, b""))
    app_at = len(server)
    server += _record(23, bytes(3000)) + _record(23, bytes(20_000))
    cuts = sorted(set(range(0, len(server), 1400)) | {heads[2] + 2})
    packets, t = [], 1_000_000_000
    packets.append(tcp_packet(c, s, 40000, 443, 100, 0, SYN)[0])
    packets.append(tcp_packet(s, c, 443, 40000, 500, 101, SYN | ACK)[0])
    packets.append(tcp_packet(c, s, 40000, 443, 101, 501, ACK)[0])
    packets.append(tcp_packet(c, s, 40000, 443, 101, 501, PSH | ACK, payload=hello)[0])
    for a, b in zip(cuts, cuts[1:] + [len(server)]):
        packets.append(tcp_packet(s, c, 443, 40000, 501 + a, 101 + len(hello), ACK,
                                  payload=server[a:b])[0])
    path = tmp_path / "split.pcap"
    path.write_bytes(pcap_bytes([(t + k * 1000, p) for k, p in enumerate(packets)]))
    con = analysed(tmp_path, path)
    rows = con.execute("SELECT message, stream_offset, complete FROM tls_messages "
                       "WHERE direction = 's2c' ORDER BY stream_offset").fetchall()
    assert [r[0] for r in rows] == ["server_hello", "certificate", "server_hello_done",
                                    "application_data"]
    # (the stream read ends inside the second record, which is not kept: the
    # last row says the stream went on beyond what was read)
    assert rows[-1][1] == app_at and all(r[2] for r in rows[:-1]) and not rows[-1][2]
    end = con.execute("""SELECT max(t.rel_seq + t.payload_bytes) FROM payloads k
        JOIN tcp_analysis t USING (capture_id, frame) WHERE NOT t.from_client""").fetchone()[0]
    first_end = app_at + 5 + 3000
    assert first_end < end <= first_end + 1400  # up to the segment that holds its last byte
