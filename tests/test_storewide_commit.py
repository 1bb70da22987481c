"""The store-wide tables put in place by renaming (pipeline/storewide.py): a kill
right after the commit leaves the new run's tables (DuckDB replays the renames
on the next open), nothing under a building name, and a store whose tables are
still plain tables of `main` (an older version, an import) is brought to the
views with the same rows as a store analysed afresh."""

import os
import subprocess

import duckdb

from test_faults import SAMPLES, TRACEKIT, _kill_when_held

TABLES = ("requests", "bounds", "request_phases", "attribution")
MORE = ('{"ts_ns": 1700000000000000000, "kind": "request_start", "request": "x1"}\n'
        '{"ts_ns": 1700000000050000000, "kind": "request_end", "request": "x1"}\n'
        '{"ts_ns": 1700000001000000000, "kind": "request_start", "request": "x2"}\n'
        '{"ts_ns": 1700000001020000000, "kind": "request_end", "request": "x2"}\n')

STOP_AFTER_COMMIT = """
import sys, threading
from pathlib import Path
from tracekit.pipeline import storewide
real, flag = storewide.StoreWide.commit, Path(sys.argv.pop(1))
def commit(self):
    real(self)
    flag.touch()
    threading.Event().wait()
storewide.StoreWide.commit = commit
from tracekit.cli import main
main()
"""


def _analysed(tmp_path, name):
    db = tmp_path / name
    files = [os.path.join(SAMPLES, f) for f in ("streaming-stalls-client.pcap",
                                                 "streaming-stalls-client-events.jsonl")]
    subprocess.run(TRACEKIT + ["ingest", *files, "--db", str(db)], check=True, capture_output=True)
    subprocess.run(TRACEKIT + ["analyze", "--db", str(db)], check=True, capture_output=True)
    return db


def _more(tmp_path, db):
    log = tmp_path / "more.jsonl"
    log.write_text(MORE)
    subprocess.run(TRACEKIT + ["ingest", str(log), "--db", str(db)], check=True, capture_output=True)


def _seen(db):
    """(requests of each table, {table: its kind in main}, names under a building name)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        counts = [con.execute(f"SELECT count(DISTINCT request_key) FROM {t}").fetchone()[0]
                  for t in TABLES]
        kinds = dict(con.execute("SELECT table_name, table_type FROM information_schema.tables "
                                 "WHERE table_schema = 'main' AND list_contains(?, table_name)",
                                 [list(TABLES)]).fetchall())
        building = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables "
                                              "WHERE table_name LIKE '%\\_\\_building' ESCAPE '\\'"
                                              ).fetchall()]
        return counts, kinds, building
    finally:
        con.close()


def test_killed_right_after_the_commit_the_next_open_shows_the_new_run(tmp_path):
    db = _analysed(tmp_path, "s.duckdb")
    before, kinds, _ = _seen(db)
    assert before[0] > 0 and len(set(before)) == 1 and set(kinds.values()) == {"VIEW"}
    _more(tmp_path, db)
    _kill_when_held(STOP_AFTER_COMMIT, tmp_path / "committed", db)
    # killed before the building tables are discarded: they were renamed, none is left
    # (a copy would leave them), and the replayed log shows the new run whole
    after, kinds, building = _seen(db)
    assert after == [before[0] + 2] * 4 and building == []
    assert set(kinds.values()) == {"VIEW"}
    r = subprocess.run(TRACEKIT + ["analyze", "--db", str(db)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert _seen(db)[:2] == (after, kinds)


def test_plain_tables_of_an_older_store_are_replaced_by_the_new_run(tmp_path):
    db = _analysed(tmp_path, "old.duckdb")
    con = duckdb.connect(str(db))
    for t in TABLES:  # as an older version (or an import) left them: tables of `main`
        con.execute(f"CREATE TABLE main.{t}__old AS SELECT * FROM main.{t}")
        con.execute(f"DROP VIEW main.{t}")
        con.execute(f"DROP TABLE store.{t}")
        con.execute(f"ALTER TABLE main.{t}__old RENAME TO {t}")
    con.close()
    before, kinds, _ = _seen(db)
    assert set(kinds.values()) == {"BASE TABLE"}
    _more(tmp_path, db)
    subprocess.run(TRACEKIT + ["analyze", "--db", str(db)], check=True, capture_output=True)
    after, kinds, building = _seen(db)
    assert after == [before[0] + 2] * 4 and building == [] and set(kinds.values()) == {"VIEW"}
    fresh = _analysed(tmp_path, "fresh.duckdb")
    _more(tmp_path, fresh)
    subprocess.run(TRACEKIT + ["analyze", "--db", str(fresh)], check=True, capture_output=True)
    con = duckdb.connect()
    con.execute(f"ATTACH '{db}' AS a (READ_ONLY)")
    con.execute(f"ATTACH '{fresh}' AS b (READ_ONLY)")
    for t in TABLES:
        for x, y in (("a", "b"), ("b", "a")):
            assert con.execute(f"SELECT count(*) FROM (FROM {x}.{t} EXCEPT ALL FROM {y}.{t})"
                               ).fetchone() == (0,), t
    con.close()
