"""Small captures read ahead and decoded together (tracekit/pipeline/reading.py)
store exactly what each read alone stores: every table, row for row."""

import hashlib
import shutil
from pathlib import Path

import pytest
from conftest import SHARED

from tracekit.pipeline import reading
from tracekit.pipeline.captures import load_captures
from tracekit.store.db import connect

DATA = Path(__file__).resolve().parent / "data" / "pcap"

TABLES = {  # (table, its order) -- captures without its ingest time
    "packets": "capture_id, frame",
    "flows": "capture_id, flow_id",
    "payloads": "ALL",
    "interfaces": "capture_id, interface_id",
    "captures": "capture_id",
}


def _inputs(tmp_path):
    files = sorted(p for p in DATA.iterdir() if p.suffix in (".pcap", ".pcapng"))
    if SHARED.is_dir():  # (a shared capture also kept in tests/data is left out: one duplicate only)
        ours = {hashlib.sha256(p.read_bytes()).digest() for p in files}
        files += sorted(p for p in SHARED.iterdir() if p.suffix in (".pcap", ".pcapng")
                        and p.stat().st_size <= reading.SMALL_FILE
                        and hashlib.sha256(p.read_bytes()).digest() not in ours)
    cut = tmp_path / "cut.pcap"  # a file that ends inside a record: read up to it
    data = (DATA / "ndpi-whois.pcapng").read_bytes()
    cut.write_bytes(data[:len(data) * 2 // 3])
    twice = tmp_path / "again.pcap"  # the same bytes as an earlier file: a duplicate
    shutil.copy(DATA / "nflog.pcap", twice)
    return [str(p) for p in files[:12]] + [str(cut)] + [str(p) for p in files[12:]] + [str(twice)]


def _store(tmp_path, name, paths):
    con = connect(tmp_path / f"{name}.duckdb")
    summaries = load_captures(con, paths)
    out = {}
    for table, order in TABLES.items():
        rel = con.table(table)
        cols = [c for c in rel.columns if c not in ("ingested_at",)]
        out[table] = con.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY {order}").fetchall()
    con.close()
    return summaries, out


def test_small_files_decoded_together_store_what_each_alone_stores(tmp_path, monkeypatch):
    paths = _inputs(tmp_path)
    groups = list(reading.small_file_groups(paths, 1 << 25))
    assert max(len(g) for g in groups) > 10  # most of them read ahead together
    together, rows = _store(tmp_path, "together", paths)
    monkeypatch.setattr(reading, "SMALL_FILE", 0)  # every file alone
    assert all(len(g) == 1 for g in reading.small_file_groups(paths, 1 << 25))
    alone, expected = _store(tmp_path, "alone", paths)
    assert len(expected["packets"]) > 1_000 and len(expected["captures"]) == len(paths) - 1
    for table in TABLES:
        assert rows[table] == expected[table], table
    assert [(s.outcome, s.packets, s.flows, s.decode_status, s.read_stop) for s in together] == \
        [(s.outcome, s.packets, s.flows, s.decode_status, s.read_stop) for s in alone]
    assert together[-1].outcome == "duplicate" and together[12].read_stop is not None


def test_a_bad_file_among_small_ones_fails_the_ingest_and_names_it(tmp_path):
    paths = _inputs(tmp_path)[:5]
    bad = tmp_path / "notes.pcap"
    bad.write_text("not a capture\n")
    con = connect(tmp_path / "s.duckdb")
    with pytest.raises(Exception, match="notes.pcap is not a pcap or pcapng capture"):
        load_captures(con, paths[:3] + [str(bad)] + paths[3:])
    assert con.execute("SELECT count(*) FROM packets").fetchone() == (0,)
    con.close()


def test_small_files_make_one_table_per_group_not_one_per_file(tmp_path, monkeypatch):
    """A table costs ~90 array constructions whatever its rows: the packets and
    flows of a group of small files are put to the writer as one table each
    (the rows are the same: the test above)."""
    from tracekit.store import writer

    paths = _inputs(tmp_path)[:-1]  # (no duplicate: it flushes early, by design)
    groups = list(reading.small_file_groups(paths, 1 << 25))
    puts = []
    put = writer.AppendWriter.put
    monkeypatch.setattr(writer.AppendWriter, "put",
                        lambda self, target, table: (puts.append(target), put(self, target, table)))
    con = connect(tmp_path / "g.duckdb")
    load_captures(con, paths)
    con.close()
    assert len(paths) > 2 * len(groups)
    assert puts.count("packets") == len(groups) and puts.count("flows") == len(groups)
