"""The one exception hierarchy of tracekit.

Every error a user can act on is a `TracekitError`; the CLI prints its message
on one line and exits with status 2. A reader or decoder that lets any other
exception escape has a bug (the fuzz tests check this).
"""


class TracekitError(Exception):
    """Base class: a message that says what was wrong and what to do."""


class NotACaptureError(TracekitError):
    """The file does not start with a pcap or pcapng magic number."""


class CaptureFormatError(TracekitError):
    """A capture file breaks its format at a known byte offset."""

    def __init__(self, path, offset, message):
        self.path = str(path)
        self.offset = offset
        super().__init__(f"{self.path}: at byte offset {offset}: {message}")


class StoreError(TracekitError):
    """The database cannot be opened or written."""


class QueryError(TracekitError):
    """A SQL query given by the user failed."""
