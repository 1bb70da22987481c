"""tracekit: where the time of a remote request went, from packet captures and event logs."""

from .core.version import __version__

__all__ = ["__version__", "open", "open_dataset"]


def open(path=None, read_only=False):  # noqa: A001
    """Open a tracekit store: see tracekit.api (imported on first use: `import
    tracekit` stays cheap)."""
    from .api import open as _open
    return _open(path, read_only)


def open_dataset(directory):
    """A DuckDB connection over a Parquet dataset that `tracekit export` wrote:
    see tracekit.api.open_dataset."""
    from .api import open_dataset as _open_dataset
    return _open_dataset(directory)
