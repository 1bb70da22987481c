"""A store as a Parquet dataset: written by `tracekit export --parquet DIR` or
by a run on a Dask cluster (tracekit/pipeline/cluster/), read back by `tracekit
import DIR`, and queried in place (`--store DIR`, `tracekit.open_dataset`) or
by any Parquet reader (DuckDB, pandas, pyarrow.dataset, polars: one folder is
one table).

Layout:

    DIR/packets/capture_id=3/part-0.parquet  a per-capture table: one folder per
    DIR/flows/capture_id=3/part-0.parquet    table, Hive-partitioned by capture
    DIR/analysis_runs/capture_id=0/...       (capture 0: its rows of no capture,
                                             the store-wide steps' runs)
    DIR/requests/part-0.parquet              a store-wide table, whole
    DIR/_tables.json                         every table: its columns and the
                                             store's types, in order; per capture?
    DIR/_records/3.json                      capture 3 is published (written last);
                                             its files' checksums (store/checksum.py)
    DIR/_sums/                               the other files' checksums
    DIR/_partial/, DIR/_damaged/             never read

Bookkeeping is in files and folders whose names begin with `_` or `.`, outside
the table folders: readers of a folder (pyarrow.dataset, polars) skip them.
Types are the ones every reader maps: 128-bit integers (also inside MAPs and
lists) as BIGINT, JSON as text; the store's types come back on import.

A capture's files are written in DIR/_partial/ and moved into each table's
folder, then its record is written: tracekit reads only recorded captures, so
it sees all of a capture or nothing of it, whatever killed the writer; the
next writer removes what an unrecorded capture left. A capture analysed again
swaps `analysis_runs` last, so one cut short reads as stale and is analysed
again. A whole file is written beside and renamed over the old one.

A dataset of the first layout (DIR/capture_id=N/TABLE.parquet) is read as it
is and refused for writing.
"""

import contextlib
import glob
import json
import os
import re
import shutil
import uuid

from ..core.errors import TracekitError
from . import checksum
from .checksum import RECORDS, check_parquet
from .schema import STAGED, storage

MANIFEST = "_tables.json"
PARTIAL = "_partial"
DAMAGED = "_damaged"
PART = "part-{i}"  # a partition's files: part-0.parquet, part-1.parquet...
REST = 0  # the partition of a per-capture table's rows of no capture
MARKERS = ("ingests_in_progress", "analyses_in_progress")  # not data: never exported

# what every reader maps: no 128-bit integers (also inside MAPs, lists), JSON as text
PORTABLE = ((re.compile(r"\bU?HUGEINT\b"), "BIGINT"), (re.compile(r"\bJSON\b"), "VARCHAR"))


def quote(path):
    """A path as an SQL string literal."""
    return "'" + path.replace("'", "''") + "'"


def is_dataset(path):
    """A folder holding a dataset, or one to make (a path ending in '/')."""
    path = str(path)
    return os.path.isdir(path) or path.endswith(os.sep)


def tables(con):
    """[(name, {column: type} in order, staged)] of the store: every table of `main` (a
    store-wide one: a view of `store.<name>`) and every staged table (its view)."""
    names = [r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' "
        "AND database_name = current_database() AND NOT table_name LIKE '%\\_\\_building' ESCAPE '\\' "
        "UNION SELECT view_name FROM duckdb_views() v JOIN duckdb_tables() t ON t.table_name = "
        "v.view_name AND t.schema_name = 'store' AND t.database_name = v.database_name "
        "WHERE v.schema_name = 'main' AND v.database_name = current_database() AND NOT "
        "list_contains(?, v.view_name) ORDER BY 1", [list(STAGED)]).fetchall() if r[0] not in MARKERS]
    views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() "
                                       "WHERE database_name = current_database()").fetchall()}
    names += sorted(n for n in STAGED if n not in names and n in views)  # (a store made
    # before `tcp_events` existed has none: its wide tcp_analysis is exported as it is)
    return [(name, {r[0]: r[1] for r in con.execute(f"DESCRIBE {name}").fetchall()},
             name in STAGED) for name in names]


def portable(type_):
    """The type a column is written to Parquet as (see PORTABLE)."""
    for pattern, to in PORTABLE:
        type_ = pattern.sub(to, type_)
    return type_


def _select(types):
    return ", ".join(f'CAST("{c}" AS {portable(t)}) AS "{c}"' if portable(t) != t else f'"{c}"'
                     for c, t in types.items())


def as_stored(types):
    """Columns read from Parquet back as the store's types ({column: type}):
    the inverse of what `to_parquet` writes."""
    return ", ".join(f'CAST("{c}" AS {t}) AS "{c}"' for c, t in types.items())


def to_parquet(con, name, types, path, where="true"):
    """Write the columns `types` of table `name` (rows matching `where`) to one
    Parquet file (of the types every reader maps: `portable`)."""
    con.execute(f"COPY (SELECT {_select(types)} FROM {name} WHERE {where}) TO {quote(path)} "
                f"(FORMAT PARQUET)")


def first_layout(directory):
    """Whether `directory` holds a dataset of the first layout
    (DIR/capture_id=N/TABLE.parquet, whole tables as DIR/TABLE.parquet)."""
    return bool(glob.glob(os.path.join(directory, "capture_id=*"))
                or glob.glob(os.path.join(directory, "*.parquet")))


def refuse_first_layout(directory):
    if first_layout(directory):
        raise TracekitError(
            f"{directory}: a dataset of the first layout (capture_id=N/TABLE.parquet) is read "
            f"but not written; copy it to the new one: tracekit import {directory} --db "
            f"new.duckdb, then tracekit export --parquet NEWDIR --db new.duckdb")


def capture_dir(directory, capture_id, name):
    """The folder of one capture's rows of table `name`."""
    return os.path.join(directory, name, f"capture_id={int(capture_id)}")


def _record(directory, capture_id):
    return os.path.join(directory, RECORDS, f"{int(capture_id)}.json")


def recorded(directory):
    """The ids of the captures published in the dataset, in order."""
    try:
        names = os.listdir(os.path.join(directory, RECORDS))
    except FileNotFoundError:
        return []
    return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())


def _write_record(directory, capture_id, names, files=None):
    """Publish a capture: its record, with the checksums of its files (`files`,
    or those of its folders now)."""
    os.makedirs(os.path.join(directory, RECORDS), exist_ok=True)
    if files is None:
        folders = [capture_dir(directory, capture_id, n) for n in names]
        files = checksum.of_folders(directory, dict(zip(folders, folders)))
    part = partial_path(directory, "record") + ".json"
    with open(part, "w") as f:
        json.dump({"capture_id": int(capture_id), "tables": sorted(names), "files": files}, f)
    os.replace(part, _record(directory, capture_id))


def files(directory, name, partitioned):
    """The Parquet files tracekit reads of table `name`: the recorded captures'
    and the rest partition's, or the whole table's."""
    if not partitioned:
        return sorted(glob.glob(os.path.join(directory, name, "*.parquet")))
    out = []
    for cid in [REST, *recorded(directory)]:
        out += sorted(glob.glob(os.path.join(capture_dir(directory, cid, name), "*.parquet")))
    return out


def partial_path(directory, name):
    """A new, unused path in the dataset's _partial/ (never read; cleared by the
    next writer)."""
    os.makedirs(os.path.join(directory, PARTIAL), exist_ok=True)
    return os.path.join(directory, PARTIAL, f"{name}.{uuid.uuid4().hex}")


def write_capture(con, capture_id, directory, partitioned, before_publish=None,
                  replace=True):
    """Write one capture's rows of the per-capture tables ({name: {column: type}})
    into each table's folder and record it, replacing an older one; with
    `replace` false a capture already recorded stays as it is (a task run
    again after its first run had published: the same rows) and this one is
    dropped."""
    cid = int(capture_id)
    part = partial_path(directory, f"capture_id={cid}")
    os.makedirs(part)
    try:
        for name, types in partitioned.items():
            os.makedirs(os.path.join(part, name))
            to_parquet(con, name, {c: t for c, t in types.items() if c != "capture_id"},
                       os.path.join(part, name, PART.format(i=0) + ".parquet"),
                       f"capture_id = {cid}")
        if before_publish:
            before_publish(cid)
        if replace or not os.path.exists(_record(directory, cid)):
            new = checksum.of_folders(directory, {os.path.join(part, n): capture_dir(
                directory, cid, n) for n in partitioned})
            old = checksum.record_files(directory, cid)
            if old is not None:  # analysed again: old and new files are sound until recorded
                _write_record(directory, cid, partitioned, checksum.widen(old, new))
            # analysis_runs last: a swap cut short reads as a stale analysis
            for name in sorted(partitioned, key=lambda n: n == "analysis_runs"):
                _publish_folder(os.path.join(part, name), capture_dir(directory, cid, name),
                                directory)
            _write_record(directory, cid, partitioned, checksum.settle(old, new))
    finally:
        shutil.rmtree(part, ignore_errors=True)


def _publish_folder(part, target, directory):
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.exists(target):  # the capture analysed again: swap, then drop the old one
        old = partial_path(directory, "replaced")
        os.rename(target, old)
        os.rename(part, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(part, target)


def write_whole(con, name, types, directory, where="true"):
    """Write a store-wide table (its rows matching `where`) as
    DIR/<name>/part-0.parquet, atomically."""
    _write_file(con, name, types, directory, os.path.join(directory, name), where)


def write_rest(con, name, types, directory, where="true"):
    """Write a per-capture table's rows of no capture (matching `where`) as its
    partition capture_id=0, atomically."""
    _write_file(con, name, {c: t for c, t in types.items() if c != "capture_id"},
                directory, capture_dir(directory, REST, name), where)


def _write_file(con, name, types, directory, folder, where):
    part = partial_path(directory, name) + ".parquet"
    try:
        to_parquet(con, name, types, part, where)
        os.makedirs(folder, exist_ok=True)
        final, new = os.path.join(folder, PART.format(i=0) + ".parquet"), checksum.of(part)
        old = checksum.accepted(directory, final) if os.path.exists(final) else []
        if old is None:  # written before checksums: what is there now
            old = [checksum.of(final)]
        checksum.write_sums(directory, final, [new, *old], partial_path(directory, "sums"))
        os.replace(part, final)  # (a kill here: either file is sound)
        checksum.write_sums(directory, final, [new], partial_path(directory, "sums"))
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
    """Drop what killed writers left: _partial/, and the folders of captures
    never recorded (call with the writer's lock held). A dataset of the first
    layout is refused here, before any writer changes it."""
    refuse_first_layout(directory)
    shutil.rmtree(os.path.join(directory, PARTIAL), ignore_errors=True)
    keep = {f"capture_id={c}" for c in [REST, *recorded(directory)]}
    for folder in glob.glob(os.path.join(directory, "[!_.]*", "capture_id=*")):
        if os.path.basename(folder) not in keep:
            shutil.rmtree(folder, ignore_errors=True)


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
        for name, types in described.items():
            if name in partitioned:
                _export_partitions(con, name, types, partial)
            else:
                write_whole(con, name, types, partial)
        for cid in ids:
            _write_record(partial, cid, partitioned)
        for path in glob.glob(os.path.join(partial, "*", f"capture_id={REST}", "*.parquet")):
            checksum.write_sums(partial, path, [checksum.of(path)], partial_path(partial, "sums"))
        write_manifest(partial, described, partitioned)
        shutil.rmtree(os.path.join(partial, PARTIAL), ignore_errors=True)
        counts = {name: con.execute(f"SELECT count(*) FROM {name}").fetchall()[0][0]
                  for name in described}
        os.rename(partial, directory)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return counts


def _export_partitions(con, name, types, directory):
    """One COPY per table, Hive-partitioned by capture; rows of no capture in
    the partition capture_id=0."""
    cols = _select({c: t for c, t in types.items() if c != "capture_id"})
    os.makedirs(os.path.join(directory, name))
    con.execute(f"COPY (SELECT {cols}, CASE WHEN capture_id IN (SELECT capture_id FROM captures) "
                f"THEN capture_id ELSE {REST} END AS capture_id FROM {name}) "
                f"TO {quote(os.path.join(directory, name))} (FORMAT PARQUET, "
                f"PARTITION_BY (capture_id), OVERWRITE_OR_IGNORE, FILENAME_PATTERN '{PART}')")


def source(directory, name, entry, records=None):
    """SQL reading one table of the dataset, its columns in the store's order
    and of the store's types: its recorded captures and its whole file.
    `records`: a dict a caller reading many tables keeps (each record read once)."""
    if first_layout(directory):
        return _first_layout_source(directory, name, entry)
    cols = as_stored(dict(zip(entry["columns"], entry["types"])))
    found = files(directory, name, entry["partitioned"])
    records = {} if records is None else records
    for path in found:
        checksum.verify(directory, path, records)
    checksum.refuse_missing(directory, name, recorded(directory) if entry["partitioned"] else (),
                            found, records)
    if not found:
        return _no_rows(entry)
    listed = "[" + ", ".join(quote(f) for f in found) + "]"
    hive = (", hive_partitioning = true, union_by_name = true, hive_types = "
            "{'capture_id': INTEGER}" if entry["partitioned"] else "")
    logs = files(directory, "event_logs", False) if name == "events" else ()
    # a log's event_logs row is its record, written after its events: events
    # of a log a killed writer did not record are not read
    known = (f" WHERE log_id IN (SELECT log_id FROM read_parquet({quote(logs[0])}))"
             if logs else "")
    return f"SELECT {cols} FROM read_parquet({listed}{hive}){known}"


def _no_rows(entry):
    return "SELECT " + ", ".join(f'CAST(NULL AS {t}) AS "{c}"' for c, t in
                                 zip(entry["columns"], entry["types"])) + " WHERE false"


def _first_layout_source(directory, name, entry):
    cols = as_stored(dict(zip(entry["columns"], entry["types"])))
    parts = []
    if entry["partitioned"]:
        pattern = os.path.join(directory, "capture_id=*", name + ".parquet")
        found = glob.glob(pattern)
        for path in found:
            check_parquet(path)
        if found:
            parts.append(f"SELECT {cols} FROM read_parquet({quote(pattern)}, hive_partitioning = "
                         f"true, union_by_name = true, hive_types = {{'capture_id': INTEGER}})")
    whole = os.path.join(directory, name + ".parquet")
    if os.path.exists(whole):
        check_parquet(whole)
        parts.append(f"SELECT {cols} FROM read_parquet({quote(whole)})")
    return "\nUNION ALL ".join(parts) if parts else _no_rows(entry)


def unreadable(directory, capture_id=None):
    """One line naming the first file of the dataset (or of one capture's
    folders) DuckDB cannot decode whole (damage inside a page, which
    check_parquet's look at the ends cannot see and DuckDB may report without a
    file name), or None. Reads every file: for after a failure, not for every run."""
    import duckdb
    where = "**" if capture_id is None else os.path.join("*", f"capture_id={capture_id}")
    con = duckdb.connect()
    records = {}
    try:
        for path in sorted(glob.glob(os.path.join(glob.escape(directory), where, "*.parquet"),
                                     recursive=True)):
            if any(p.startswith(("_", ".")) for p in os.path.relpath(path, directory).split(os.sep)):
                continue  # _damaged/, _partial/: never read
            try:
                checksum.verify(directory, path, records)
                con.execute("SELECT sum(hash(t)) FROM read_parquet(?) t", [path]).fetchall()
            except TracekitError as e:
                return str(e)
            except duckdb.Error as e:
                return (f"{path}: cannot be read as Parquet ({str(e).splitlines()[0][:200]}): "
                        f"the dataset is damaged there; move that capture's folder away and "
                        f"ingest its file again")
    finally:
        con.close()
    return None


def set_aside_damaged(directory):
    """Move what is not Parquet where Parquet belongs into DIR/_damaged/ (a
    capture's folders of every table, or a whole table's file), so that the
    next writer works on what is sound: the captures set aside can be ingested
    again, the store-wide tables are rebuilt. Call with the writer's lock held;
    returns one note per thing moved."""
    notes = []
    for cid in recorded(directory):
        folders = glob.glob(os.path.join(directory, "[!_.]*", f"capture_id={cid}"))
        bad = _first_damaged(directory, [f for d in folders
                                         for f in glob.glob(os.path.join(d, "*.parquet"))])
        if bad:
            os.remove(_record(directory, cid))  # first: the capture is no longer published
            target = _aside(directory, f"capture_id={cid}")
            for folder in folders:
                os.renames(folder, os.path.join(target, os.path.basename(os.path.dirname(folder))))
            notes.append(_note(bad, "capture folder", target))
    loose = glob.glob(os.path.join(directory, "[!_.]*", "*.parquet"))
    loose += glob.glob(os.path.join(directory, "[!_.]*", f"capture_id={REST}", "*.parquet"))
    for path in sorted(loose):
        bad = _first_damaged(directory, [path])
        if bad:
            target = _aside(directory, os.path.relpath(path, directory).replace(os.sep, "-"))
            os.renames(path, target)
            notes.append(_note(bad, "table file", target))
    return notes


def _first_damaged(directory, paths):
    for path in sorted(paths):
        try:
            checksum.verify(directory, path)
        except TracekitError as e:
            return str(e).split(": the dataset is damaged")[0]
    return None


def _aside(directory, name):
    return os.path.join(directory, DAMAGED, f"{name}.{uuid.uuid4().hex[:8]}")


def _note(problem, what, target):
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
    records = {}
    con.execute("BEGIN")
    try:
        for name, entry in manifest.items():
            sql = source(directory, name, entry, records)
            staged = name in STAGED
            exists = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ? AND "
                                 "schema_name = ?", [name, "store" if staged else "main"]
                                 ).fetchall()[0][0]
            if exists:
                con.execute(f"DELETE FROM {storage(name)}")
                cols = ", ".join(f'"{r[0]}"' for r in con.execute(f"DESCRIBE {storage(name)}")
                                 .fetchall())  # (a split table's rows: not its facts')
                con.execute(f"INSERT INTO {storage(name)} BY NAME SELECT {cols} FROM ({sql})")
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
    records = {}
    for name, entry in read_manifest(directory).items():
        if name not in skip:
            con.execute(f"CREATE OR REPLACE VIEW {name} AS "
                        f"{source(directory, name, entry, records)}")
    return con
