"""Open the DuckDB store and create its tables.

The store is an ordinary DuckDB file: `duckdb tracekit.duckdb` opens it.
"""

import contextlib
import os
import re
from importlib import resources
from pathlib import Path

import duckdb

from ..core.errors import StoreError, TracekitError
from .recovery import recover
from .schema import DERIVED, STAGED, TABLES, create_table_sql

DEFAULT_DB = "tracekit.duckdb"
MEMORY_LIMIT = "512MB"


@contextlib.contextmanager
def settings(con, **values):
    """DuckDB settings for the length of a block, each put back as it was
    after it (most are global to the database, not the connection's)."""
    kept = {}
    for name, value in values.items():
        (kept[name],), = con.execute(f"SELECT current_setting('{name}')").fetchall()
        con.execute(f"SET {name} = {_literal(value)}")
    try:
        yield
    finally:
        for name, value in kept.items():
            con.execute(f"SET {name} = {_literal(value)}")


def _literal(value):
    return str(value).lower() if isinstance(value, bool) else f"'{value}'"


def default_db_path():
    return os.environ.get("TRACEKIT_DB") or DEFAULT_DB


def remove_store(path):
    """A store's file and its write-ahead log, gone (either may be missing)."""
    for leftover in (path, path + ".wal"):
        with contextlib.suppress(OSError):
            os.remove(leftover)


# A store never fetches code: DuckDB would otherwise download and load an
# extension to read a file of another kind (a SQLite file, say).
CONFIG = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
DUCKDB_MAGIC = b"DUCK"  # bytes 8-11 of every DuckDB database file


def connect(path=None, read_only=False):
    """Open (creating if needed) the store; DuckDB errors become StoreError.

    `read_only="auto"` opens read-only when the file cannot be written (a
    store on read-only media, or another user's). A file that is not a DuckDB
    database, or a DuckDB database of another program, is refused before
    anything is written to it.
    """
    path = str(path or default_db_path())
    from .dataset import is_dataset
    if is_dataset(path):
        if read_only is not True and read_only != "auto":
            raise StoreError(f"{path} is a Parquet dataset: it is written by `tracekit ingest "
                             f"--store {path}` and `tracekit analyze --store {path}` (on Dask), "
                             f"not by this command; `tracekit import {path}` makes a DuckDB "
                             f"store of it")
        return open_dataset(path)
    _check_name(path)
    exists = os.path.exists(path)
    if read_only == "auto":
        read_only = exists and not (os.access(path, os.W_OK)
                                    and os.access(os.path.dirname(os.path.abspath(path)), os.W_OK))
    if read_only and not exists:
        raise StoreError(f"{path}: no such database; ingest a capture first "
                         f"(tracekit ingest FILE --db {path})")
    if exists:
        _check_kind(path)
    try:
        con = duckdb.connect(path, read_only=read_only, config=CONFIG)
    except duckdb.IOException as e:
        text = str(e)
        if "lock" in text.lower():
            pid = re.search(r"PID (\d+)", text)
            holder = f" (PID {pid.group(1)})" if pid else ""
            raise StoreError(
                f"{path} is in use by another process{holder}; close that process "
                f"or choose another database with --db") from None
        raise StoreError(f"{path}: cannot open the database: {text.splitlines()[0]}") from None
    except duckdb.Error as e:
        raise StoreError(f"{path}: not a DuckDB database tracekit can open: "
                         f"{str(e).splitlines()[0]}") from None
    if not read_only:
        _check_catalogue(con, path)
    # DuckDB's share of memory in a tracekit process: what it keeps of the
    # store in its buffers and what queries and checkpoints may use before
    # spilling to disk (its default, 80 % of RAM, is not a bound at all)
    con.execute(f"SET memory_limit = '{os.environ.get('TRACEKIT_MEMORY_LIMIT', MEMORY_LIMIT)}'")
    if not read_only:
        if exists:  # (a new store is made at this schema: its catalogue query cost 7 ms)
            _upgrade(con)
        # one transaction: a commit each made a new store's ~25 statements 25
        # writes of the log to disk (0.08-0.13 s of wall time, against 0.05)
        con.execute("BEGIN TRANSACTION")
        try:
            for name in sorted(TABLES, key=lambda n: n in STAGED):  # views after what they read
                con.execute(create_table_sql(name))
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        recover(con)
    return con


def open_dataset(path):
    """A read-only connection whose views are a dataset's tables
    (store/dataset.py); the analyses' views over them are the pipeline's
    (tracekit.pipeline.stores.open_store adds them)."""
    from .dataset import open_views
    con = duckdb.connect(config=CONFIG)
    con.execute(f"SET memory_limit = '{os.environ.get('TRACEKIT_MEMORY_LIMIT', MEMORY_LIMIT)}'")
    open_views(con, path)
    return con


def _check_name(path):
    """Refuse a file DuckDB would name `store`: a database is named after its
    file (up to its first dot), and a catalog named as tracekit's schema
    `store` makes every `store.<table>` in the views ambiguous to DuckDB, in
    tracekit and in any other client."""
    catalog = os.path.basename(path).split(".")[0]
    if catalog.lower() == "store":
        raise StoreError(f"{path}: DuckDB names a database after its file, and '{catalog}' is "
                         f"the schema tracekit keeps its rows in (store.packets...): DuckDB could "
                         f"not tell the two apart; choose another name (e.g. traces.duckdb)")


def _check_kind(path):
    """Refuse a file that is not a DuckDB database (by its header)."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as e:
        raise StoreError(f"{path}: cannot read: {e.strerror}") from None
    if not head:
        return  # an empty file: DuckDB makes a database of it
    if head[8:12] != DUCKDB_MAGIC:
        kind = "a SQLite database" if head.startswith(b"SQLite format 3") else "not a DuckDB database"
        raise StoreError(f"{path}: {kind} (its header is {head[:16]!r}); tracekit keeps its store "
                         f"in a DuckDB file of its own: choose another --db")


def _check_catalogue(con, path):
    """Refuse a DuckDB database of another program before writing to it."""
    tables = {r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' "
        "AND database_name = current_database()").fetchall()}
    if tables and "captures" not in tables:
        con.close()
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise StoreError(f"{path}: a DuckDB database of another program (tables: {shown}); "
                         f"tracekit keeps its store in a file of its own: choose another --db")


def _upgrade(con):
    """Bring a store made by an earlier version up to this schema."""
    tables = {(r[0], r[1]) for r in con.execute(
        "SELECT schema_name, table_name FROM duckdb_tables()").fetchall()}
    # columns added since: (table, column, type and default)
    columns = {(r[0], r[1]) for r in con.execute(
        "SELECT table_name, column_name FROM duckdb_columns() WHERE schema_name = 'main'").fetchall()}
    for table, column, sql in (("analysis_runs", "error", "VARCHAR"),
                               ("captures", "payloads_kept", "BOOLEAN DEFAULT false"),
                               ("event_logs", "counter_resets", "BIGINT DEFAULT 0")):
        if ("main", table) in tables and (table, column) not in columns:
            con.execute(f"ALTER TABLE {table} ADD COLUMN {column} {sql}")
    # staged tables were plain tables: move the captured ones into `store`, drop the
    # derived ones (`tracekit analyze` builds them again)
    for name in STAGED:
        if ("main", name) not in tables:
            continue
        con.execute("BEGIN")
        if name in DERIVED:
            con.execute(f"DROP TABLE main.{name}")
            con.execute("DELETE FROM analysis_runs")
        else:
            con.execute("CREATE SCHEMA IF NOT EXISTS store")
            con.execute(f"CREATE TABLE store.{name} AS FROM main.{name}")
            con.execute(f"DROP TABLE main.{name}")
        con.execute("COMMIT")


def analyses_dir():
    """Folder of the analyses' .sql files: in the wheel, or the source tree."""
    installed = resources.files("tracekit").joinpath("analyses")
    if installed.is_dir():
        return Path(str(installed))
    return Path(__file__).resolve().parents[2] / "analyses"


def on_dask(db, workers=None, cluster=None):
    """Whether `db` is a dataset, ingested and analysed on Dask (and the options agree)."""
    from .dataset import is_dataset  # (not at import: the dataset's modules)
    if is_dataset(db):
        return True
    if workers or cluster:
        raise TracekitError(f"--workers and --cluster write a Parquet dataset: give a folder "
                            f"with --store DIR/ ({db} is a DuckDB file)")
    return False


def in_transaction(con):
    """Whether `con` is inside an explicit transaction (BEGIN without its end),
    failed or not; leaves it as it was. Outside one every statement is a
    transaction of its own, so two reads of the transaction id differ."""
    try:
        ids = [con.execute("SELECT txid_current()").fetchall()[0][0] for _ in range(2)]
    except duckdb.TransactionException:  # a failed transaction: only ROLLBACK goes
        return True
    return ids[0] == ids[1]
