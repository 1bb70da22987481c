"""A store as a Parquet dataset and back: every table equal, row for row and
in both directions; partitions per capture; SQL over the dataset itself."""

import os

import duckdb
from click.testing import CliRunner

import tracekit
from tracekit.cli import main
from tracekit.store.dataset import tables


def _same(a, b, name, columns):
    cols = ", ".join(f'"{c}"' for c in columns)
    left = a.execute(f"SELECT {cols} FROM {name}").fetchall()
    right = b.execute(f"SELECT {cols} FROM {name}").fetchall()
    key = lambda r: tuple((x is None, repr(x)) for x in r)  # noqa: E731
    return sorted(left, key=key) == sorted(right, key=key)


def test_export_import_round_trip(demo_store, tmp_path):
    out = tmp_path / "ds"
    r = CliRunner().invoke(main, ["export", "--parquet", str(out), "--db", demo_store])
    assert r.exit_code == 0, r.output
    assert not (tmp_path / "ds.partial").exists()
    parts = sorted(os.listdir(out / "packets"))
    with duckdb.connect(demo_store, read_only=True) as src:
        n_captures = src.execute("SELECT count(*) FROM captures").fetchone()[0]
        listed = tables(src)
        with_capture_id = {name for name, in src.execute(
            "SELECT table_name FROM information_schema.columns WHERE column_name = 'capture_id' "
            "AND table_schema = 'main'").fetchall()}
    # a folder per table, Hive-partitioned by capture; store-wide tables whole;
    # bookkeeping outside the table folders
    assert parts == [f"capture_id={i}" for i in sorted(range(1, n_captures + 1), key=str)]
    for name in ("packets", "tcp_analysis", "captures"):
        assert os.listdir(out / name / "capture_id=3") == ["part-0.parquet"], name
    assert os.listdir(out / "requests") == ["part-0.parquet"]
    assert os.listdir(out / "attribution") == ["part-0.parquet"]
    assert sorted(os.listdir(out / "_records")) == sorted(f"{i}.json" for i in range(1, n_captures + 1))
    assert "requests" in with_capture_id and not (out / "_partial").exists()
    copy = str(tmp_path / "copy.duckdb")
    r = CliRunner().invoke(main, ["import", str(out), "--db", copy])
    assert r.exit_code == 0, r.output
    with duckdb.connect(demo_store, read_only=True) as a, duckdb.connect(copy, read_only=True) as b:
        for name, columns, _ in listed:
            assert _same(a, b, name, columns), name
    # the dataset answers SQL as it is, without importing
    with duckdb.connect(demo_store, read_only=True) as a:
        want = a.execute("SELECT capture_id, count(*) FROM packets GROUP BY 1 ORDER BY 1").fetchall()
    ds = tracekit.open_dataset(out)
    assert ds.sql("SELECT capture_id, count(*) FROM packets GROUP BY 1 ORDER BY 1").fetchall() == want


def test_export_refuses_an_existing_folder_and_import_a_full_store(demo_store, tmp_path):
    out = tmp_path / "ds"
    out.mkdir()
    r = CliRunner().invoke(main, ["export", "--parquet", str(out), "--db", demo_store])
    assert r.exit_code == 2 and "already exists" in r.output
    out.rmdir()
    assert CliRunner().invoke(main, ["export", "--parquet", str(out), "--db", demo_store]).exit_code == 0
    r = CliRunner().invoke(main, ["import", str(out), "--db", demo_store])
    assert r.exit_code == 2 and "fills an empty store" in r.output
    r = CliRunner().invoke(main, ["import", str(tmp_path), "--db", str(tmp_path / "n.duckdb")])
    assert r.exit_code == 2 and "not a tracekit dataset" in r.output
