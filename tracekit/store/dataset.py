"""A store as a Parquet dataset: written by `tracekit export --parquet DIR` or
by a run on a Dask cluster (tracekit/pipeline/cluster/), read back by `tracekit
import DIR`, and queried in place (`--store DIR`, `tracekit.open_dataset`).

Layout:

    DIR/_tables.json                   every table: its columns and types, in
                                       order, and whether it is per capture
    DIR/capture_id=3/packets.parquet   one folder per capture (hive-style), a
    DIR/capture_id=3/flows.parquet     file in it per per-capture table
    DIR/requests.parquet               a store-wide table, whole
    DIR/analysis_runs.parquet          (a per-capture table's rows that belong
                                       to no capture: the store-wide steps' runs)

Per-capture tables are the ones ingest and the per-capture analyses fill;
store-wide ones (requests, attribution, runs...) are built over every
capture and log at once. A capture's folder is written in DIR/_partial/ and
renamed into place when every file of it is complete: one rename, so a
reader (`capture_id=*` in a glob) sees all of a capture or nothing of it,
whatever killed the writer. A whole file is written beside and renamed over
the old one. Files of `_partial/` are never read, and the next writer clears
them.
"""

import contextlib
import glob
import json
import os
import shutil
import uuid

from ..core.errors import TracekitError
from .schema import STAGED, storage

MANIFEST = "_tables.json"
PARTIAL = "_partial"
MARKERS = ("ingests_in_progress", "analyses_in_progress")  # not data: never exported

# Parquet has no 128-bit integer: such columns go as DECIMAL(38, 0), exactly
WIDE = {"HUGEINT": "DECIMAL(38, 0)", "UHUGEINT": "DECIMAL(38, 0)"}


def quote(path):
    """A path as an SQL string literal."""
    return "'" + path.replace("'", "''") + "'"


def is_dataset(path):
    """A folder holding a dataset, or one to make (a path ending in '/')."""
    path = str(path)
    return os.path.isdir(path) or path.endswith(os.sep)


def tables(con):
    """[(name, {column: type} in order, staged)] of the store: every base table
    of `main` (analysis tables included) and every staged table (its view)."""
    names = [r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' "
        "AND database_name = current_database() AND NOT table_name LIKE '%\\_\\_building' ESCAPE '\\' "
        "ORDER BY 1").fetchall() if r[0] not in MARKERS]
    names += sorted(n for n in STAGED if n not in names)
    out = []
    for name in names:
        types = {r[0]: r[1] for r in con.execute(f"DESCRIBE {name}").fetchall()}
        out.append((name, types, name in STAGED))
    return out


def _select(types):
    return ", ".join(f'CAST("{c}" AS {WIDE[t]}) AS "{c}"' if t in WIDE else f'"{c}"'
                     for c, t in types.items())


def as_stored(types):
    """Columns read from Parquet back as the store's types ({column: type}):
    the inverse of what `to_parquet` writes."""
    return ", ".join(f'CAST("{c}" AS {t}) AS "{c}"' for c, t in types.items())


def to_parquet(con, name, types, path, where="true"):
    """Write the columns `types` of table `name` (rows matching `where`) to one
    Parquet file (128-bit integers as DECIMAL(38, 0))."""
    con.execute(f"COPY (SELECT {_select(types)} FROM {name} WHERE {where}) TO {quote(path)} "
                f"(FORMAT PARQUET)")


def capture_dir(directory, capture_id):
    return os.path.join(directory, f"capture_id={int(capture_id)}")


def partial_path(directory, name):
    """A new, unused path in the dataset's _partial/ (never read; cleared by the
    next writer)."""
    os.makedirs(os.path.join(directory, PARTIAL), exist_ok=True)
    return os.path.join(directory, PARTIAL, f"{name}.{uuid.uuid4().hex}")


def write_capture(con, capture_id, directory, partitioned, before_publish=None,
                  replace=True):
    """Write one capture's rows of the per-capture tables ({name: {column: type}})
    as a new folder of `directory` and publish it, replacing an older one; with
    `replace` false a folder already published stays as it is (a task run
    again after its first run had published: the same rows) and this one is
    dropped."""
    target = capture_dir(directory, capture_id)
    part = partial_path(directory, f"capture_id={int(capture_id)}")
    os.makedirs(part)
    try:
        for name, types in partitioned.items():
            to_parquet(con, name, {c: t for c, t in types.items() if c != "capture_id"},
                       os.path.join(part, name + ".parquet"), f"capture_id = {int(capture_id)}")
        if before_publish:
            before_publish(capture_id)
        if not replace and os.path.exists(target):
            shutil.rmtree(part, ignore_errors=True)
        else:
            _publish_folder(part, target, directory)
    except BaseException:
        shutil.rmtree(part, ignore_errors=True)
        raise


def _publish_folder(part, target, directory):
    if os.path.exists(target):  # the capture analysed again: swap, then drop the old one
        old = partial_path(directory, "replaced")
        os.rename(target, old)
        os.rename(part, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(part, target)


def write_whole(con, name, types, directory, where="true"):
    """Write a table (its rows matching `where`) as DIR/<name>.parquet, atomically."""
    part = partial_path(directory, name) + ".parquet"
    try:
        to_parquet(con, name, types, part, where)
        os.replace(part, os.path.join(directory, name + ".parquet"))
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(part)
        raise


def write_manifest(directory, described, partitioned):
    """_tables.json from {name: {column: type}} and the names kept per capture."""
    manifest = {name: {"columns": list(types), "types": list(types.values()),
                       "partitioned": name in partitioned}
                for name, types in sorted(described.items())}
    part = partial_path(directory, "manifest") + ".json"
    with open(part, "w") as f:
        json.dump(manifest, f, indent=1)
    os.replace(part, os.path.join(directory, MANIFEST))


def read_manifest(directory):
    try:
        with open(os.path.join(directory, MANIFEST)) as f:
            return json.load(f)
    except OSError as e:
        raise TracekitError(f"{directory}: not a tracekit dataset ({MANIFEST}: "
                            f"{e.strerror})") from None
    except ValueError:
        raise TracekitError(f"{directory}: not a tracekit dataset ({MANIFEST} is not JSON)") from None


def clear_partial(directory):
    """Drop what killed writers left in _partial/ (call with the writer's lock held)."""
    shutil.rmtree(os.path.join(directory, PARTIAL), ignore_errors=True)


def export(con, directory, whole=()):
    """Write the store to `directory` (which must not exist); {table: rows}.
    `whole`: store-wide tables, written whole even if they carry a capture_id.

    What is exported is what the store's views show (an ingest or an analysis
    that was killed leaves rows the views hide; they are not exported)."""
    directory = os.path.abspath(directory)
    if os.path.exists(directory):
        raise TracekitError(f"{directory} already exists; export writes a new dataset")
    partial = directory + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    try:
        described = {name: types for name, types, _ in tables(con)}
        partitioned = {n: t for n, t in described.items() if "capture_id" in t and n not in whole}
        ids = [r[0] for r in con.execute("SELECT capture_id FROM captures ORDER BY 1").fetchall()]
        for name, types in partitioned.items():
            _export_partitions(con, name, types, partial)
        for cid in ids:
            os.makedirs(capture_dir(partial, cid), exist_ok=True)
        for name, types in described.items():
            if name not in partitioned:
                write_whole(con, name, types, partial)
            elif con.execute(f"SELECT count(*) FROM {name} WHERE capture_id NOT IN "
                             f"(SELECT capture_id FROM captures)").fetchall()[0][0]:
                write_whole(con, name, types, partial,
                            "capture_id NOT IN (SELECT capture_id FROM captures)")
        write_manifest(partial, described, partitioned)
        clear_partial(partial)
        counts = {name: con.execute(f"SELECT count(*) FROM {name}").fetchall()[0][0]
                  for name in described}
        os.rename(partial, directory)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return counts


def _export_partitions(con, name, types, directory):
    """One COPY per table, split by capture, then each capture's file moved into
    its folder (cheaper than a COPY per capture and table)."""
    spread = partial_path(directory, name)
    cols = _select(types)
    con.execute(f"COPY (SELECT {cols} FROM {name} WHERE capture_id IN (SELECT capture_id FROM "
                f"captures)) TO {quote(spread)} (FORMAT PARQUET, PARTITION_BY (capture_id))")
    if not os.path.isdir(spread):
        return  # no rows
    for folder in os.listdir(spread):
        files = sorted(glob.glob(os.path.join(spread, folder, "*.parquet")))
        target = os.path.join(directory, folder)
        os.makedirs(target, exist_ok=True)
        if len(files) == 1:
            os.rename(files[0], os.path.join(target, name + ".parquet"))
        else:  # DuckDB split a partition: one file per capture and table all the same
            listed = "[" + ", ".join(quote(f) for f in files) + "]"
            con.execute(f"COPY (SELECT * FROM read_parquet({listed})) TO "
                        f"{quote(os.path.join(target, name + '.parquet'))} (FORMAT PARQUET)")
    shutil.rmtree(spread)


def source(directory, name, entry):
    """SQL reading one table of the dataset, its columns in the store's order
    and of the store's types: its published capture folders and its whole file."""
    cols = as_stored(dict(zip(entry["columns"], entry["types"])))
    parts = []
    if entry["partitioned"]:
        files = os.path.join(directory, "capture_id=*", name + ".parquet")
        found = glob.glob(files)
        for path in found:
            check_parquet(path)
        if found:
            parts.append(f"SELECT {cols} FROM read_parquet({quote(files)}, hive_partitioning = "
                         f"true, union_by_name = true, hive_types = {{'capture_id': INTEGER}})")
    whole = os.path.join(directory, name + ".parquet")
    if os.path.exists(whole):
        check_parquet(whole)
        parts.append(f"SELECT {cols} FROM read_parquet({quote(whole)})")
    if not parts:  # no rows yet: the columns, no rows
        return "SELECT " + ", ".join(f'CAST(NULL AS {t}) AS "{c}"' for c, t in
                                     zip(entry["columns"], entry["types"])) + " WHERE false"
    return "\nUNION ALL ".join(parts)


def check_parquet(path):
    """Refuse, in one line naming it, a file of the dataset that is not Parquet
    (damaged or replaced from outside): its first and last four bytes and its
    footer's length, before DuckDB reads it."""
    problem = None
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            if size < 12:
                problem = f"{size} bytes, too short for Parquet"
            else:
                f.seek(0)
                head = f.read(4)
                f.seek(size - 8)
                tail = f.read(8)
                footer = int.from_bytes(tail[:4], "little")
                if head != b"PAR1":
                    problem = f"it begins {head.hex()}, not PAR1"
                elif tail[4:] != b"PAR1":
                    problem = f"it ends {tail[4:].hex()}, not PAR1: cut short or overwritten"
                elif footer > size - 12:
                    problem = f"a footer of {footer:,} bytes in a file of {size:,}"
    except OSError as e:
        problem = f"cannot read: {e.strerror}"
    if problem:
        raise TracekitError(f"{path}: not a Parquet file ({problem}): the dataset is damaged "
                            f"there; move that capture's folder away and ingest its file again")


DAMAGED = "_damaged"


def set_aside_damaged(directory):
    """Move what is not Parquet where Parquet belongs into DIR/_damaged/ (a
    capture's whole folder, or a whole table's file), so that the next writer
    works on what is sound: the captures set aside can be ingested again, the
    store-wide tables are rebuilt. Call with the writer's lock held; returns
    one note per thing moved."""
    notes = []
    for folder in sorted(glob.glob(os.path.join(directory, "capture_id=*"))):
        bad = _first_damaged(glob.glob(os.path.join(folder, "*.parquet")))
        if bad:
            notes.append(_move_aside(directory, folder, bad, "capture folder"))
    bad_whole = [p for p in glob.glob(os.path.join(directory, "*.parquet")) if _first_damaged([p])]
    for path in sorted(bad_whole):
        notes.append(_move_aside(directory, path, _first_damaged([path]), "table file"))
    return notes


def _first_damaged(paths):
    for path in sorted(paths):
        try:
            check_parquet(path)
        except TracekitError as e:
            return str(e).split(": the dataset is damaged")[0]
    return None


def _move_aside(directory, path, problem, what):
    aside = os.path.join(directory, DAMAGED)
    os.makedirs(aside, exist_ok=True)
    target = os.path.join(aside, f"{os.path.basename(path)}.{uuid.uuid4().hex[:8]}")
    os.rename(path, target)
    return (f"{problem}: its {what} was moved to {target} (ingest its capture again; "
            f"store-wide tables are rebuilt)")


def import_into(con, directory):
    """Fill an empty store from a dataset, in one transaction; {table: rows}."""
    directory = os.path.abspath(directory)
    manifest = read_manifest(directory)
    (held,), = con.execute("SELECT (SELECT count(*) FROM captures) + "
                           "(SELECT count(*) FROM event_logs)").fetchall()
    if held:
        raise TracekitError("import fills an empty store; this one holds captures or logs "
                            "(choose a new --db)")
    counts = {}
    con.execute("BEGIN")
    try:
        for name, entry in manifest.items():
            sql = source(directory, name, entry)
            staged = name in STAGED
            exists = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ? AND "
                                 "schema_name = ?", [name, "store" if staged else "main"]
                                 ).fetchall()[0][0]
            if exists:
                con.execute(f"DELETE FROM {storage(name)}")
                con.execute(f"INSERT INTO {storage(name)} BY NAME {sql}")
            else:
                con.execute(f"CREATE TABLE {name} AS {sql}")
            counts[name] = con.execute(f"SELECT count(*) FROM {name}").fetchall()[0][0]
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return counts


def open_views(con, directory, skip=()):
    """Views over a dataset's tables in `con` (any DuckDB connection)."""
    directory = os.path.abspath(directory)
    for name, entry in read_manifest(directory).items():
        if name not in skip:
            con.execute(f"CREATE OR REPLACE VIEW {name} AS {source(directory, name, entry)}")
    return con
