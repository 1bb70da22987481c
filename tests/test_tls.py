"""TLS handshake messages against tshark 4.0.17's handshake oracle.

tshark lists, per frame, the types of the TLS handshake messages it could
read (plaintext ones; a message reassembled from several segments is listed
on the segment that completed it), the versions a ClientHello offers and a
ServerHello selects, and ALPN. tracekit must find the same messages in the
same frames, and the same versions and ALPN.
"""

import collections

import pytest
from conftest import needs_shared
from oracle import read_tsv

from tracekit.pipeline.analyze import analyze
from tracekit.pipeline.steps.tls import HANDSHAKE

pytestmark = needs_shared

TYPE = {name: typ for typ, name in HANDSHAKE.items()}
TYPE["hello_retry_request"] = 2
TLS_CAPTURES = ["ndpi__443-curl.pcap", "ndpi__alexa-app.pcapng", "ppp__many_interfaces-1.pcapng",
                "zeek__chrome-1250-tls-x25519-kyber.pcap", "zeek__tls13_wolfssl.pcap"]
VERSION = {"0x0301": "TLS 1.0", "0x0302": "TLS 1.1", "0x0303": "TLS 1.2", "0x0304": "TLS 1.3"}


@pytest.fixture(scope="module")
def analyzed(shared_db):
    con, ids = shared_db
    analyze(con)
    return con, ids


def _oracle(name):
    out = collections.Counter()
    for row in read_tsv(name, "handshake"):
        if row["tls.handshake.type"]:
            for t in row["tls.handshake.type"].split(","):
                out[(int(row["frame.number"]), int(t))] += 1
    return out


@pytest.mark.parametrize("name", TLS_CAPTURES)
def test_handshake_messages_in_the_same_frames(analyzed, name):
    con, ids = analyzed
    theirs = _oracle(name)
    assert theirs, "the oracle lists TLS handshake messages"
    rows = con.execute("SELECT frame, message FROM tls_messages WHERE capture_id = ?",
                       [ids[name]]).fetchall()
    ours = collections.Counter((frame, TYPE[m]) for frame, m in rows if m in TYPE)
    assert ours == theirs


@pytest.mark.parametrize("name", TLS_CAPTURES)
def test_versions_and_alpn(analyzed, name):
    con, ids = analyzed
    rows = {frame: (m, v, offered, alpn) for frame, m, v, offered, alpn in con.execute(
        "SELECT frame, message, version, offered_versions, alpn FROM tls_messages "
        "WHERE capture_id = ? AND message IN ('client_hello', 'server_hello')",
        [ids[name]]).fetchall()}
    checked = 0
    for row in read_tsv(name, "handshake"):
        types = row["tls.handshake.type"].split(",") if row["tls.handshake.type"] else []
        frame = int(row["frame.number"])
        versions = [VERSION[v] for v in row["tls.handshake.extensions.supported_version"].split(",")
                    if v in VERSION]
        if "1" in types:
            message, _, offered, alpn = rows[frame]
            assert (offered.split(",") if offered else []) == versions
            assert (alpn or "") == row["tls.handshake.extensions_alpn_str"]
            checked += 1
        elif "2" in types and versions:
            assert rows[frame][1] == versions[0]
            checked += 1
    assert checked >= 1


@pytest.mark.parametrize("name", TLS_CAPTURES)
def test_handshake_times_are_the_oracles_hello_frames(analyzed, name):
    """handshakes.start_ns / server_hello_ns are the times tshark gives the
    frames that completed the first ClientHello and the last ServerHello."""
    con, ids = analyzed
    from oracle import epoch_ns
    hellos = {}
    for row in read_tsv(name, "handshake"):
        types = row["tls.handshake.type"].split(",") if row["tls.handshake.type"] else []
        key = row["tcp.stream"]
        if "1" in types:
            hellos.setdefault((key, "ch"), epoch_ns(row["frame.time_epoch"]))
        if "2" in types:
            hellos[(key, "sh")] = epoch_ns(row["frame.time_epoch"])
    ours = con.execute("SELECT start_ns, server_hello_ns FROM handshakes "
                       "WHERE capture_id = ? AND protocol = 'tls'", [ids[name]]).fetchall()
    assert sorted(ch for ch, _ in ours) == sorted(v for (k, kind), v in hellos.items() if kind == "ch")
    assert sorted(sh for _, sh in ours if sh) == sorted(v for (k, kind), v in hellos.items() if kind == "sh")


def test_records_read_back_by_offset_equal_the_ingested_lengths(shared_db):
    """capture/records.py fetches records by file offset, pcap and pcapng alike."""
    from tracekit.readers.capture.records import read_records
    con, ids = shared_db
    for name in ("ndpi__443-curl.pcap", "ndpi__alexa-app.pcapng", "ppp__many_interfaces-1.pcapng"):
        path, fmt = con.execute("SELECT path, format FROM captures WHERE capture_id = ?",
                                [ids[name]]).fetchall()[0]
        rows = con.execute("SELECT file_offset, captured_bytes FROM packets WHERE capture_id = ? "
                           "ORDER BY frame DESC LIMIT 200", [ids[name]]).fetchall()
        data, start, caplen = read_records(path, fmt, [r[0] for r in rows])
        assert list(caplen) == [r[1] for r in rows]
        assert len(data) == sum(r[1] for r in rows)


def test_records_past_the_end_are_a_clear_error(shared_db, tmp_path):
    from tracekit.core.errors import CaptureFormatError
    from tracekit.readers.capture.records import read_records
    con, ids = shared_db
    path = con.execute("SELECT path FROM captures WHERE capture_id = ?",
                       [ids["ndpi__443-curl.pcap"]]).fetchall()[0][0]
    with pytest.raises(CaptureFormatError, match="record header expected"):
        read_records(path, "pcap", [10 ** 9])
