"""The Parquet dataset read by other tools: each table's folder opened with
DuckDB, pandas, pyarrow.dataset and polars gives the rows of the DuckDB store
it was exported from (the demo store: HUGEINT sums, MAPs, lists, structs,
JSON, timestamps); no reader gets Decimal objects; the first layout is read
in place and refused for writing."""

import datetime
import decimal
import math
import os
import shutil

import duckdb
import pytest
from pandas import NA
from click.testing import CliRunner

from tracekit.cli import main
from tracekit.store.dataset import read_manifest

pl = pytest.importorskip("polars")


@pytest.fixture(scope="module")
def exported(demo_store, tmp_path_factory):
    out = tmp_path_factory.mktemp("readers") / "ds"
    r = CliRunner().invoke(main, ["export", "--parquet", str(out), "--db", demo_store])
    assert r.exit_code == 0, r.output
    return out


def norm(v):
    """One value as a comparable Python value, whichever reader produced it."""
    assert not isinstance(v, decimal.Decimal), v  # HUGEINT reached the reader as DECIMAL
    if v is None or v is NA or (isinstance(v, float) and math.isnan(v)):
        return None
    if hasattr(v, "to_pydatetime"):
        v = v.to_pydatetime()
    if isinstance(v, datetime.datetime):
        return round(v.timestamp() * 1e6)
    if hasattr(v, "tolist") and not isinstance(v, (bytes, str)):  # numpy scalars and arrays
        v = v.tolist()
    if isinstance(v, dict) and set(v) != {"key", "value"}:
        return tuple(sorted((k, norm(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        entries = [(e["key"], e["value"]) if isinstance(e, dict) and set(e) == {"key", "value"}
                   else e for e in v]
        if entries and all(isinstance(e, tuple) and len(e) == 2 for e in entries):  # a MAP
            return tuple(sorted((k, norm(x)) for k, x in entries))
        return tuple(norm(x) for x in v)
    if isinstance(v, float) and v.is_integer() and abs(v) < 2 ** 53:
        return int(v)
    if isinstance(v, bytearray | memoryview):
        return bytes(v)
    return v


def rows(records, columns):
    out = [tuple(norm(r[c]) for c in columns) for r in records]
    return sorted(out, key=lambda r: tuple((x is None, repr(x)) for x in r))


def readers(folder):
    import pandas as pd
    import pyarrow.dataset as pads
    pattern = os.path.join(folder, "**", "*.parquet")
    rel = duckdb.sql(f"SELECT * FROM read_parquet('{pattern}', hive_partitioning = true)")
    yield "duckdb", [dict(zip(rel.columns, r)) for r in rel.fetchall()]
    yield "pyarrow.dataset", pads.dataset(folder, partitioning="hive").to_table().to_pylist()
    # (numpy_nullable: the default backend makes an integer column with nulls
    # float64, which cannot hold a nanosecond timestamp exactly)
    yield "pandas", pd.read_parquet(folder, dtype_backend="numpy_nullable").to_dict("records")
    yield "polars", pl.read_parquet(pattern, hive_partitioning=True).to_dicts()


def test_every_table_reads_the_same_in_every_reader(exported, demo_store):
    manifest = read_manifest(str(exported))
    checked = 0
    with duckdb.connect(demo_store, read_only=True) as con:
        for name, entry in manifest.items():
            columns = entry["columns"]
            cols = ", ".join(f'"{c}"' for c in columns)
            want = rows([dict(zip(columns, r)) for r in
                         con.execute(f"SELECT {cols} FROM {name}").fetchall()], columns)
            folder = str(exported / name)
            if not want:
                continue  # (a table without rows may have no file: nothing to read)
            for reader, records in readers(folder):
                assert set(records[0]) == set(columns), (name, reader)
                got = rows(records, columns)
                assert got == want, (name, reader, len(got), len(want))
            checked += 1
    assert checked >= 20 and {"attribution", "packets", "events"} <= set(manifest)


def test_attribution_ns_are_integers_for_pandas(exported):
    import pandas as pd
    frame = pd.read_parquet(exported / "attribution")
    ns = [c for c in frame.columns if c.endswith("_ns") or c == "ns"]
    assert ns and all(frame[c].dtype.kind in "iuf" for c in ns), frame.dtypes[ns]


def test_the_first_layout_is_read_in_place_and_refused_for_writing(exported, tmp_path):
    """A dataset in the first layout (capture_id=N/TABLE.parquet), made from the
    new one: its rows read as they are; a writer refuses it in one line."""
    old = tmp_path / "old"
    shutil.copytree(exported, old)
    manifest = read_manifest(str(old))
    for name, entry in manifest.items():
        folder = old / name
        if entry["partitioned"]:
            for part in folder.glob("capture_id=*"):
                if part.name != "capture_id=0":
                    (old / part.name).mkdir(exist_ok=True)
                    for f in part.glob("*.parquet"):
                        f.rename(old / part.name / f"{name}.parquet")
            rest = folder / "capture_id=0"
            for f in rest.glob("*.parquet"):  # rows of no capture: whole, with their capture_id
                duckdb.sql(f"COPY (SELECT *, 0 AS capture_id FROM '{f}') TO "
                           f"'{old / (name + '.parquet')}' (FORMAT PARQUET)")
        else:
            for f in folder.glob("*.parquet"):
                f.rename(old / f"{name}.parquet")
        shutil.rmtree(folder)
    shutil.rmtree(old / "_records")
    sql = "SELECT count(*), count(DISTINCT capture_id) FROM packets"
    new = CliRunner().invoke(main, ["sql", sql, "--store", str(exported), "--format", "csv"])
    r = CliRunner().invoke(main, ["sql", sql, "--store", str(old), "--format", "csv"])
    assert r.exit_code == 0 and r.output == new.output, r.output
    r = CliRunner().invoke(main, ["analyze", "--store", str(old), "--workers", "1"])
    assert r.exit_code == 2, r.output
    (line,) = r.output.splitlines()
    assert "a dataset of the first layout (capture_id=N/TABLE.parquet) is read but not written" in line
