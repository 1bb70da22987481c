"""The `tracekit` command (the faces' floor: it calls the library, tracekit.api,
and the presentation layer, and prints)."""

from .app import main

__all__ = ["main"]
