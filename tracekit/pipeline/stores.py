"""Open a store as the analyses see it: a DuckDB file, or a Parquet dataset
with the analyses' views (rtt_samples, ack_gaps, inflight, request_attributes)
over its tables."""

from ..store import db
from ..store.dataset import is_dataset
from .analyze import create_views


def open_store(path=None, read_only=False):
    """Open (creating if needed) the store at `path` (store.db.connect); a
    dataset opens read-only, with the analyses' views over its tables."""
    path = str(path or db.default_db_path())
    con = db.connect(path, read_only=read_only)
    if is_dataset(path):
        _add_views(con)
    return con


def open_dataset(path):
    """A read-only connection over a dataset's tables and the analyses' views."""
    con = db.open_dataset(str(path))
    _add_views(con)
    return con


def _add_views(con):
    names = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() "
                                       "WHERE NOT internal").fetchall()}
    if "tcp_analysis" in names:
        create_views(con)
