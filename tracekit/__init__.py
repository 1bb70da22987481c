"""tracekit: where the time of a remote request went, from packet captures and event logs."""

__version__ = "0.1.0"
