"""A store as a Parquet dataset, and back (`tracekit export --parquet DIR`,
`tracekit import DIR`), and a dataset opened for SQL (`tracekit.open_dataset`).

Layout: one folder per table; a table with a `capture_id` column is
partitioned hive-style (`packets/capture_id=3/data_0.parquet`), so a reader
that wants one capture reads one folder; the others are one file each.
`_tables.json` lists every table with its columns in order, whether it is
partitioned and whether it is a staged table (kept in the `store` schema
behind a view). The dataset is written into `DIR.partial` and renamed to
`DIR` when complete: a reader never sees half of one.

What is exported is what the store's views show (an ingest or an analysis
that was killed leaves rows the views hide; they are not exported).
"""

import json
import os
import shutil

from ..errors import TracekitError
from .schema import STAGED, storage

MANIFEST = "_tables.json"


def _quote(path):
    return "'" + path.replace("'", "''") + "'"


# Parquet has no 128-bit integer: such columns go as DECIMAL(38, 0), exactly
WIDE = {"HUGEINT": "DECIMAL(38, 0)", "UHUGEINT": "DECIMAL(38, 0)"}


def tables(con):
    """[(name, {column: type} in order, staged)] of the store: every base table
    of `main` (analysis tables included) and every staged table (its view)."""
    names = [r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' "
        "AND database_name = current_database() AND NOT table_name LIKE '%\\_\\_building' ESCAPE '\\' "
        "ORDER BY 1").fetchall()]
    names += sorted(n for n in STAGED if n not in names)
    out = []
    for name in names:
        types = {r[0]: r[1] for r in con.execute(f"DESCRIBE {name}").fetchall()}
        out.append((name, types, name in STAGED))
    return out


def _select(types):
    return ", ".join(f'CAST("{c}" AS {WIDE[t]}) AS "{c}"' if t in WIDE else f'"{c}"'
                     for c, t in types.items())


def export(con, directory):
    """Write the store to `directory` (which must not exist); {table: rows}."""
    directory = os.path.abspath(directory)
    if os.path.exists(directory):
        raise TracekitError(f"{directory} already exists; export writes a new dataset")
    partial = directory + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    manifest, counts = {}, {}
    try:
        for name, types, staged in tables(con):
            partitioned = "capture_id" in types
            (n,), = con.execute(f"SELECT count(*) FROM {name}").fetchall()
            counts[name] = n
            manifest[name] = {"columns": list(types), "types": list(types.values()),
                              "partitioned": partitioned, "staged": staged, "rows": n}
            query = f"SELECT {_select(types)} FROM {name}"
            target = os.path.join(partial, name)
            if partitioned:
                os.makedirs(target)
                if n:
                    con.execute(f"COPY ({query}) TO {_quote(target)} "
                                f"(FORMAT PARQUET, PARTITION_BY (capture_id), OVERWRITE_OR_IGNORE)")
            else:
                con.execute(f"COPY ({query}) TO {_quote(target + '.parquet')} "
                            f"(FORMAT PARQUET)")
        with open(os.path.join(partial, MANIFEST), "w") as f:
            json.dump(manifest, f, indent=1)
        os.rename(partial, directory)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return counts


def _manifest(directory):
    try:
        with open(os.path.join(directory, MANIFEST)) as f:
            return json.load(f)
    except OSError as e:
        raise TracekitError(f"{directory}: not a tracekit dataset ({MANIFEST}: "
                            f"{e.strerror})") from None
    except ValueError:
        raise TracekitError(f"{directory}: not a tracekit dataset ({MANIFEST} is not JSON)") from None


def _source(directory, name, entry):
    """SQL reading one table of the dataset, its columns in the store's order
    and of the store's types."""
    cols = ", ".join(f'CAST("{c}" AS {t}) AS "{c}"'
                     for c, t in zip(entry["columns"], entry["types"]))
    if entry["partitioned"]:
        files = os.path.join(directory, name, "**", "*.parquet")
        if not entry["rows"]:  # no partition written: the columns, no rows
            return "SELECT " + ", ".join(f'CAST(NULL AS {t}) AS "{c}"' for c, t in
                                         zip(entry["columns"], entry["types"])) + " WHERE false"
        return (f"SELECT {cols} FROM read_parquet({_quote(files)}, hive_partitioning = true, "
                f"hive_types = {{'capture_id': INTEGER}})")
    return f"SELECT {cols} FROM read_parquet({_quote(os.path.join(directory, name + '.parquet'))})"


def import_into(con, directory):
    """Fill an empty store from a dataset, in one transaction; {table: rows}."""
    directory = os.path.abspath(directory)
    manifest = _manifest(directory)
    (held,), = con.execute("SELECT (SELECT count(*) FROM captures) + "
                           "(SELECT count(*) FROM event_logs)").fetchall()
    if held:
        raise TracekitError("import fills an empty store; this one holds captures or logs "
                            "(choose a new --db)")
    counts = {}
    con.execute("BEGIN")
    try:
        for name, entry in manifest.items():
            source = _source(directory, name, entry)
            exists = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ? AND "
                                 "schema_name = ?", [name, "store" if entry["staged"] else "main"]
                                 ).fetchall()[0][0]
            if exists:
                con.execute(f"DELETE FROM {storage(name)}")
                con.execute(f"INSERT INTO {storage(name)} BY NAME {source}")
            else:
                con.execute(f"CREATE TABLE {name} AS {source}")
            counts[name] = entry["rows"]
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return counts


def open_views(con, directory):
    """Views over a dataset's tables in `con` (any DuckDB connection)."""
    directory = os.path.abspath(directory)
    for name, entry in _manifest(directory).items():
        con.execute(f"CREATE OR REPLACE VIEW {name} AS {_source(directory, name, entry)}")
    return con
