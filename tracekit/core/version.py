"""tracekit's version: what a store records of the code that wrote it."""

__version__ = "0.1.0"
