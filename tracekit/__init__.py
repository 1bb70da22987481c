"""tracekit: where the time of a remote request went, from packet captures and event logs."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .core.version import __version__

if TYPE_CHECKING:
    import duckdb

    from .api import Store

__all__ = ["__version__", "open", "open_dataset"]


def open(path: str | os.PathLike[str] | None = None,  # noqa: A001
         read_only: bool | str = False) -> Store:
    """Open (creating if needed) the tracekit store at `path` (default:
    $TRACEKIT_DB or ./tracekit.duckdb) and return a tracekit.api.Store, a
    context manager: `with tracekit.open("runs.duckdb") as store:` then
    store.ingest([...]), store.analyze(), store.view("attribute"),
    store.ablation("path", by=["connection"]), store.report("out.html"),
    store.sql("SELECT ..."). `read_only=True` for a store you must not change
    ("auto": read-only when the file cannot be written). help(tracekit.api.Store)
    lists every method."""
    from .api import open as _open
    return _open(path, read_only)


def open_dataset(directory: str | os.PathLike[str]) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection over a Parquet dataset that `tracekit export` wrote:
    see tracekit.api.open_dataset."""
    from .api import open_dataset as _open_dataset
    return _open_dataset(directory)
