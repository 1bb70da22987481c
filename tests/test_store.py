"""The store: transactions, de-duplication, locking, flows, bad input end to end."""

import os
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner
from conftest import SHARED, needs_shared, write
from pcapgen import epb, idb, pcap_bytes, shb
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether

from tracekit.cli import main
from tracekit.core.errors import NotACaptureError, TracekitError
from tracekit.pipeline import staging as ingest_module
from tracekit.pipeline.captures import load_captures
from tracekit.store.db import connect

C, S = "198.18.0.1", "198.19.0.2"


def frames(*packets):
    return [(1_700_000_000_000_000_000 + i * 1_000_000, bytes(p)) for i, p in enumerate(packets)]


def tcp(src, dst, sport, dport, flags, seq=0, ack=0, options=(), payload=b""):
    return Ether() / IP(src=src, dst=dst) / TCP(sport=sport, dport=dport, flags=flags, seq=seq,
                                                ack=ack, options=list(options)) / payload


def counts(con):
    out = {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
           for t in ("captures", "interfaces", "packets", "flows")}
    assert con.execute("SELECT count(*) FROM ingests_in_progress").fetchall() == [(0,)]
    return out


def test_port_reuse_after_fin_starts_a_new_flow(tmp_path, db):
    pkts = frames(
        tcp(C, S, 40000, 80, "S", seq=100), tcp(S, C, 80, 40000, "SA", seq=900, ack=101),
        tcp(C, S, 40000, 80, "A", seq=101, ack=901), tcp(C, S, 40000, 80, "FA", seq=101, ack=901),
        tcp(S, C, 80, 40000, "FA", seq=901, ack=102), tcp(C, S, 40000, 80, "A", seq=102, ack=902),
        tcp(C, S, 40000, 80, "S", seq=5000),  # same ports again: a new connection
        tcp(S, C, 80, 40000, "SA", seq=7000, ack=5001),
        tcp(C, S, 40000, 80, "S", seq=5000),  # a retransmitted SYN is not a new flow
    )
    load_captures(db, [write(tmp_path, "reuse.pcap", pcap_bytes(pkts))])
    rows = db.execute("SELECT frame, flow_id, from_client FROM packets ORDER BY frame").fetchall()
    assert [r[1] for r in rows] == [0, 0, 0, 0, 0, 0, 1, 1, 1]
    assert [r[2] for r in rows] == [True, False, True, True, False, True, True, False, True]
    flows = db.execute("SELECT flow_id, syn_count, packets_c2s, packets_s2c, handshake_rtt_ns "
                       "FROM flows ORDER BY flow_id").fetchall()
    assert flows == [(0, 1, 4, 2, 2_000_000), (1, 2, 2, 1, None)]


def test_client_is_syn_ack_receiver_when_the_syn_is_missing(tmp_path, db):
    pkts = frames(tcp(S, C, 80, 40001, "SA", seq=1, ack=2), tcp(C, S, 40001, 80, "A", seq=2, ack=2))
    load_captures(db, [write(tmp_path, "synack.pcap", pcap_bytes(pkts))])
    assert db.execute("SELECT client_addr, client_port, server_port FROM flows").fetchall() == [
        (C, 40001, 80)]


def test_udp_client_is_the_first_sender(tmp_path, db):
    pkts = frames(Ether() / IP(src=S, dst=C) / UDP(sport=53, dport=5353),
                  Ether() / IP(src=C, dst=S) / UDP(sport=5353, dport=53) / b"xyz")
    load_captures(db, [write(tmp_path, "udp.pcap", pcap_bytes(pkts))])
    assert db.execute("SELECT protocol, client_addr, client_port, payload_bytes_s2c, syn_count "
                      "FROM flows").fetchall() == [("udp", S, 53, 3, None)]


def test_window_scaling_needs_both_sides(tmp_path, db):
    pkts = frames(
        tcp(C, S, 40002, 80, "S", options=[("WScale", 7)]),
        tcp(S, C, 80, 40002, "SA", options=[("WScale", 2)]),
        tcp(C, S, 40002, 80, "A"), tcp(S, C, 80, 40002, "A"))
    load_captures(db, [write(tmp_path, "ws.pcap", pcap_bytes(pkts))])
    rows = db.execute("SELECT tcp_window_shift, tcp_window, tcp_window_bytes FROM packets "
                      "ORDER BY frame").fetchall()
    assert rows == [(-1, 8192, 8192), (-1, 8192, 8192), (7, 8192, 8192 << 7), (2, 8192, 8192 << 2)]


def test_same_file_twice_adds_nothing_and_replace_reingests(tmp_path):
    path = write(tmp_path, "a.pcap", pcap_bytes(frames(tcp(C, S, 1, 2, "S"))))
    db = str(tmp_path / "t.duckdb")
    runner = CliRunner()
    r1 = runner.invoke(main, ["ingest", str(path), "--db", db])
    assert r1.exit_code == 0
    r2 = runner.invoke(main, ["ingest", str(path), "--db", db])
    assert r2.exit_code == 0
    assert r2.output.splitlines()[0] == (
        "a.pcap: already in the store as capture 1 (same sha256); nothing added. "
        "Use --replace to ingest it again.")
    r3 = runner.invoke(main, ["ingest", str(path), "--db", db, "--replace"])
    assert r3.output.splitlines()[0] == (
        "a.pcap: ingested as capture 2, replacing capture 1: 1 packet, 1 flow, none skipped")
    con = connect(db, read_only=True)
    assert counts(con) == {"captures": 1, "interfaces": 1, "packets": 1, "flows": 1}
    assert con.execute("SELECT DISTINCT capture_id FROM packets").fetchall() == [(2,)]


def test_same_file_twice_in_one_call_is_added_once(tmp_path, db):
    path = write(tmp_path, "a.pcap", pcap_bytes(frames(tcp(C, S, 1, 2, "S"))))
    first, second = load_captures(db, [path, path])
    assert (first.outcome, second.outcome, second.duplicate_of) == ("ingested", "duplicate", 1)
    assert counts(db) == {"captures": 1, "interfaces": 1, "packets": 1, "flows": 1}


def test_rows_of_a_crashed_ingest_are_removed_by_the_next(tmp_path, db):
    """A killed ingest leaves appended rows under an id listed in ingests_in_progress."""
    good = write(tmp_path, "good.pcap", pcap_bytes(frames(tcp(C, S, 1, 2, "S"))))
    load_captures(db, [good])
    db.execute("INSERT INTO ingests_in_progress VALUES (2, '/x.pcap', now())")
    db.execute("INSERT INTO store.packets (capture_id, frame, ts_ns, file_offset, captured_bytes, "
               "wire_bytes, truncated) VALUES (2, 1, 0, 24, 60, 60, false)")
    # rows of an unfinished ingest are invisible to every query meanwhile
    assert db.execute("SELECT count(*) FROM packets WHERE capture_id = 2").fetchall() == [(0,)]
    other = write(tmp_path, "other.pcap", pcap_bytes(frames(tcp(C, S, 3, 4, "S"))))
    load_captures(db, [other])
    assert db.execute("SELECT capture_id, count(*) FROM packets GROUP BY 1 ORDER BY 1").fetchall() \
        == [(1, 1), (2, 1)]
    assert db.execute("SELECT file_name FROM captures ORDER BY 1").fetchall() == [
        ("good.pcap",), ("other.pcap",)]
    assert db.execute("SELECT count(*) FROM ingests_in_progress").fetchall() == [(0,)]


def test_failed_ingest_leaves_the_database_exactly_as_before(tmp_path, db):
    good = write(tmp_path, "good.pcap", pcap_bytes(frames(tcp(C, S, 1, 2, "S"))))
    load_captures(db, [good])
    before = counts(db)
    other = write(tmp_path, "other.pcap", pcap_bytes(frames(tcp(C, S, 3, 4, "S"))))
    bad = write(tmp_path, "bad.pcap", b"not a capture at all")
    with pytest.raises(NotACaptureError):
        load_captures(db, [other, bad])
    assert counts(db) == before


def test_failure_in_the_middle_of_a_file_rolls_back(tmp_path, db, monkeypatch):
    pkts = frames(*[tcp(C, S, 1000 + i, 80, "S") for i in range(20)])
    path = write(tmp_path, "mid.pcap", pcap_bytes(pkts))
    calls = []
    from tracekit.pipeline import reading
    real = reading.decode_packets

    def failing(*args, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise TracekitError("disk on fire")
        return real(*args, **kw)

    monkeypatch.setattr(reading, "decode_packets", failing)
    monkeypatch.setattr(ingest_module, "INSERT_ROWS", 2)  # rows reach DuckDB before the failure
    with pytest.raises(TracekitError, match="disk on fire"):
        load_captures(db, [path], batch_packets=4)
    assert counts(db) == {"captures": 0, "interfaces": 0, "packets": 0, "flows": 0}


def test_locked_database_gives_a_clear_message(tmp_path):
    db = str(tmp_path / "locked.duckdb")
    connect(db).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import duckdb, sys, time
            con = duckdb.connect({db!r})
            print("ready", flush=True)
            sys.stdin.read()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        path = write(tmp_path, "a.pcap", pcap_bytes(frames(tcp(C, S, 1, 2, "S"))))
        r = CliRunner().invoke(main, ["ingest", str(path), "--db", db])
        assert r.exit_code == 2
        assert r.output.strip() == (
            f"tracekit: error: {db} is in use by another process (PID {holder.pid}); "
            f"close that process or choose another database with --db")
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
        holder.stdout.close()


def test_truncated_last_record_is_reported_and_the_rest_kept(tmp_path):
    data = pcap_bytes(frames(*[tcp(C, S, 1, 2, "A", seq=i) for i in range(3)]))
    path = write(tmp_path, "cut.pcap", data[:-5])
    db = str(tmp_path / "t.duckdb")
    r = CliRunner().invoke(main, ["ingest", str(path), "--db", db])
    assert r.exit_code == 0
    record = 16 + 54
    assert (f"tracekit: warning: {path}: truncated at byte offset {24 + 2 * record}: the last "
            f"record is cut short: 65 of 70 bytes present (the file ends inside record 3); "
            f"the 2 packets before it were ingested") in r.output
    con = connect(db, read_only=True)
    assert con.execute("SELECT packets, read_stop, read_stop_offset FROM captures").fetchall() == [
        (2, "truncated", 24 + 2 * record)]


def test_impossible_record_length_keeps_records_before_it(tmp_path):
    data = bytearray(pcap_bytes(frames(*[tcp(C, S, 1, 2, "A", seq=i) for i in range(3)])))
    at = 24 + 16 + 54
    data[at + 8:at + 12] = (0x7FFFFFFF).to_bytes(4, "little")
    path = write(tmp_path, "corrupt.pcap", bytes(data))
    db = str(tmp_path / "t.duckdb")
    r = CliRunner().invoke(main, ["ingest", str(path), "--db", db])
    assert r.exit_code == 0
    assert (f"corrupt at byte offset {at}: record 2 claims 2147483647 captured bytes, more than "
            f"the largest possible (262144); the file is corrupt from here and the rest was not "
            f"read; the 1 packets before it were ingested") in r.output
    assert connect(db, read_only=True).execute("SELECT count(*) FROM packets").fetchall() == [(1,)]


def test_unknown_link_type_is_named_and_other_interfaces_decoded(tmp_path):
    eth = bytes(tcp(C, S, 1, 2, "S"))
    data = shb() + idb(147) + idb(1) + epb(0, 1, b"\x00" * 20) + epb(1, 2, eth)
    path = write(tmp_path, "mixed.pcapng", data)
    db = str(tmp_path / "t.duckdb")
    r = CliRunner().invoke(main, ["ingest", str(path), "--db", db])
    assert r.exit_code == 0
    assert (f"tracekit: warning: {path}: link type 147 is not decoded: its packets are stored "
            f"undecoded (decode_status link_type_unsupported, 1 in this file); other interfaces "
            f"were decoded") in r.output
    con = connect(db, read_only=True)
    assert con.execute("SELECT interface_id, decode_status, flow_id FROM packets ORDER BY frame"
                       ).fetchall() == [(0, "link_type_unsupported", None), (1, None, 0)]
    assert con.execute("SELECT link_type_name, packets FROM interfaces ORDER BY interface_id"
                       ).fetchall() == [("link type 147", 1), ("Ethernet", 1)]


def test_empty_capture_is_zero_packets(tmp_path):
    path = write(tmp_path, "empty.pcap", pcap_bytes([]))
    db = str(tmp_path / "t.duckdb")
    r = CliRunner().invoke(main, ["ingest", str(path), "--db", db])
    assert r.exit_code == 0
    assert r.output.splitlines()[0] == "empty.pcap: ingested as capture 1: 0 packets, 0 flows, none skipped"


@needs_shared
@pytest.mark.parametrize("name", ["ndpi__alexa-app.pcapng", "zeek__206_example_a.pcap"])
def test_compiled_and_python_kernels_store_the_same_rows(tmp_path, monkeypatch, name):
    """The numba-compiled and the plain-Python run of each kernel agree exactly."""
    dbs = []
    for mode in ("never", "always"):
        monkeypatch.setenv("TRACEKIT_JIT", mode)
        con = connect(tmp_path / f"{mode}.duckdb")
        load_captures(con, [SHARED / name])
        con.close()
        dbs.append(str(tmp_path / f"{mode}.duckdb"))
    con = connect(dbs[0], read_only=True)
    con.execute(f"ATTACH '{dbs[1]}' AS other (READ_ONLY)")
    for table in ("packets", "flows"):
        assert _same_rows(con, table, f"other.{table}"), table


@needs_shared
@pytest.mark.parametrize("batch", [1, 7, 100000])
def test_batch_size_never_changes_the_tables(tmp_path, batch):
    path = SHARED / "zeek__206_example_a.pcap"
    ref = connect(tmp_path / "ref.duckdb")
    load_captures(ref, [path])
    ref.close()
    con = connect(tmp_path / f"b{batch}.duckdb")
    load_captures(con, [path], batch_packets=batch, chunk_bytes=4096)
    con.execute(f"ATTACH '{tmp_path / 'ref.duckdb'}' AS ref (READ_ONLY)")
    for table in ("packets", "flows"):
        assert _same_rows(con, table, f"ref.{table}"), table


def test_store_is_a_plain_duckdb_file(tmp_path):
    """Any DuckDB client opens it: here the duckdb module with no tracekit code."""
    path = write(tmp_path, "a.pcap", pcap_bytes(frames(tcp(C, S, 1, 2, "S"))))
    db = tmp_path / "plain.duckdb"
    con = connect(db)
    load_captures(con, [path])
    con.close()
    out = subprocess.run([sys.executable, "-c", f"import duckdb; print(duckdb.connect({str(db)!r}, "
                          f"read_only=True).execute('SELECT src_addr, tcp_flags FROM packets').fetchall())"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"[('{C}', 2)]"


def test_a_sqlite_file_is_refused_and_left_alone(tmp_path):
    """A SQLite file given as --db: refused by its header before DuckDB opens it
    (DuckDB would try to download its SQLite extension); not a byte changes."""
    import sqlite3

    from tracekit.core.errors import StoreError
    from tracekit.store.db import connect

    path = tmp_path / "other.db"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE t (a)")
    before = path.read_bytes()
    with pytest.raises(StoreError, match=r"other\.db: a SQLite database .* choose another --db"):
        connect(path)
    assert path.read_bytes() == before


def test_a_duckdb_file_of_another_program_is_refused_before_writing(tmp_path):
    import duckdb

    from tracekit.core.errors import StoreError
    from tracekit.store.db import connect

    path = tmp_path / "theirs.duckdb"
    c = duckdb.connect(str(path))
    c.execute("CREATE TABLE orders (id INTEGER)")
    c.close()
    with pytest.raises(StoreError, match=r"another program \(tables: orders\)"):
        connect(path)
    c = duckdb.connect(str(path), read_only=True)
    assert c.execute("SELECT table_name FROM duckdb_tables()").fetchall() == [("orders",)]
    assert c.execute("SELECT count(*) FROM duckdb_schemas() WHERE schema_name = 'store'"
                     ).fetchall() == [(0,)]


def test_a_file_duckdb_would_name_store_is_refused_before_it_is_made(tmp_path):
    """DuckDB names a database after its file up to the first dot; named `store`, every
    `store.packets` of the views was ambiguous: `tracekit ingest --db store.duckdb` ended in
    "internal error: BinderException". Now one line naming the file, and no file left."""
    from tracekit.core.errors import StoreError

    capture = write(tmp_path, "c.pcap", pcap_bytes(frames(tcp(C, S, 40000, 80, "S"))))
    for name in ("store.duckdb", "Store.db", "store"):
        result = CliRunner().invoke(main, ["ingest", "--db", str(tmp_path / name), str(capture)])
        assert result.exit_code != 0
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and name in lines[0] and "choose another name" in lines[0], lines
        assert "internal error" not in result.output
        assert not (tmp_path / name).exists()
    with pytest.raises(StoreError, match="choose another name"):
        connect(tmp_path / "store.duckdb", read_only=True)
    connect(tmp_path / "my-store.duckdb").close()  # (only the name itself is DuckDB's trouble)
    connect(tmp_path / "store-a.duckdb").close()


def test_extensions_are_never_fetched():
    from tracekit.store.db import connect
    con = connect(":memory:")
    settings = dict(con.execute(
        "SELECT name, value FROM duckdb_settings() WHERE name IN "
        "('autoinstall_known_extensions', 'autoload_known_extensions')").fetchall())
    assert settings == {"autoinstall_known_extensions": "false",
                        "autoload_known_extensions": "false"}


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a read-only filesystem needs root")
def test_a_store_on_read_only_media_is_readable_by_sql(tmp_path):
    """tracekit sql opens a store it cannot write read-only (root ignores file
    modes, so the store sits on a tmpfs remounted read-only)."""
    import subprocess

    from click.testing import CliRunner

    from tracekit.cli import main
    good = write(tmp_path, "good.pcap", pcap_bytes(frames(tcp(C, S, 1, 2, "S"))))
    mnt = tmp_path / "ro"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], check=True)
    try:
        db = mnt / "t.duckdb"
        r = CliRunner().invoke(main, ["ingest", str(good), "--db", str(db)])
        assert r.exit_code == 0, r.output
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        r = CliRunner().invoke(main, ["sql", "SELECT count(*) AS n FROM packets", "--db", str(db),
                                      "--format", "csv"])
        assert r.exit_code == 0, r.output
        assert r.output.splitlines() == ["n", "1"]
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def _same_rows(con, a, b):
    """The same multiset of rows both ways (a row lost on either side fails)."""
    return con.execute(f"""
        SELECT (SELECT count(*) FROM (SELECT * FROM {a} EXCEPT ALL SELECT * FROM {b})) = 0
           AND (SELECT count(*) FROM (SELECT * FROM {b} EXCEPT ALL SELECT * FROM {a})) = 0
           AND (SELECT count(*) FROM {a}) = (SELECT count(*) FROM {b})""").fetchall()[0][0]


def test_ingest_does_not_import_pandas(tmp_path):
    """A fixed cost of every ingest: pyarrow's array() imports pandas (0.65-1 s)
    to probe its argument. Ingest builds its Arrow arrays from numpy buffers
    and its catalogue rows in SQL; a TLS capture exercises the kept payloads,
    an event log the logs' normalisation (its line numbers read from Arrow)."""
    tls = os.path.join(os.path.dirname(__file__), "data", "pcap", "tls12-long-handshake.pcap")
    log = os.path.join(os.path.dirname(__file__), os.pardir, "captures",
                       "streaming-stalls-client-events.jsonl")
    code = textwrap.dedent(f"""
        import sys
        from tracekit.store.db import connect
        from tracekit.pipeline.captures import load_captures
        from tracekit.readers.events import read_logs
        from tracekit.pipeline.logs import load_logs
        con = connect({str(tmp_path / 's.duckdb')!r})
        load_captures(con, [{tls!r}], labels={{"path": "direct"}})
        load_logs(con, read_logs([{log!r}]))
        kept = con.execute("SELECT count(*) FROM payloads").fetchone()[0]
        events = con.execute("SELECT count(*) FROM events").fetchone()[0]
        print(kept, events, "pandas" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    kept, events, pandas = out.stdout.split()
    assert int(kept) > 0 and int(events) > 100 and pandas == "False"
