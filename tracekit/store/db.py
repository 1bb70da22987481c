"""Open the DuckDB store and create its tables.

The store is an ordinary DuckDB file: `duckdb tracekit.duckdb` opens it.
"""

import os
import re
from importlib import resources
from pathlib import Path

import duckdb

from ..errors import StoreError
from .schema import TABLES, create_table_sql

DEFAULT_DB = "tracekit.duckdb"


def default_db_path():
    return os.environ.get("TRACEKIT_DB") or DEFAULT_DB


def connect(path=None, read_only=False):
    """Open (creating if needed) the store; DuckDB errors become StoreError."""
    path = str(path or default_db_path())
    if read_only and not os.path.exists(path):
        raise StoreError(f"{path}: no such database; ingest a capture first "
                         f"(tracekit ingest FILE --db {path})")
    try:
        con = duckdb.connect(path, read_only=read_only)
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
        for name in TABLES:
            con.execute(create_table_sql(name))
    return con


def analyses_dir():
    """Folder of the analyses' .sql files: in the wheel, or the source tree."""
    installed = resources.files("tracekit").joinpath("analyses")
    if installed.is_dir():
        return Path(str(installed))
    return Path(__file__).resolve().parents[2] / "analyses"
