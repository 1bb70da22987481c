"""A capture from a stream (`-`, /dev/stdin as a pipe, a named pipe): spooled first.

Strategy: ingest reads a file more than once (its first bytes to tell a
capture from a log, its SHA-256 on its own thread, its records), so a stream
is copied into an unnamed temporary file beside the store (the same disk as
the store, not a /tmp that may be memory) and ingested from there under the
stream's name (`<stdin>`). On Linux the file is unlinked as soon as it is
made (O_TMPFILE or unlink-after-create) and read back through
/proc/self/fd/N: it disappears with the process however it ends, Ctrl-C or
kill -9; elsewhere it has a name and is removed when ingest ends, whatever
the outcome. A stream is ingested whole or not at all: one cut short (a
last record or block incomplete, or corrupt) is refused, naming the offset,
where a file cut short is ingested up to that point with a warning (the
file is still there to look at; the stream is not).
"""

import contextlib
import os
import stat
import sys
import tempfile

from ..core.errors import TracekitError
from ..readers.capture.base import describe_magic
from ..readers.capture.pcap import sniff_pcap
from ..readers.capture.pcapng import sniff_pcapng

STDIN = "<stdin>"
STDIN_PATHS = ("-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0")
BLOCK = 1 << 20


def is_stream(path):
    """Whether `path` names a stream to spool: `-`, or a pipe, socket or device."""
    if str(path) == "-":
        return True
    try:
        st = os.stat(path)
    except OSError:
        return False  # (said in its turn: cannot read)
    return not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode))


def shown_name(path):
    """What a stream is called in messages and in `captures.path`."""
    return STDIN if str(path) in STDIN_PATHS else os.path.abspath(path)


class Spooled:
    """The streams of one ingest, each copied to a temporary file.

    `paths` maps each stream's name as given to the file to read; `names`
    maps that file to the stream's shown name. Use as a context manager:
    the files are closed (and removed) on leaving it."""

    def __init__(self, directory):
        self.directory = directory
        self.paths = {}  # as given -> file to read
        self.names = {}  # file to read -> shown name
        self._files = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for f in self._files:
            with contextlib.suppress(OSError):
                f.close()  # (a named one is removed on close: delete=True)
        self._files.clear()

    def add(self, path, input_format="auto"):
        name = shown_name(path)
        if name in self.names.values():
            raise TracekitError(f"{path}: standard input named twice: it is read once")
        if input_format not in ("auto", None, "pcap", "pcapng"):
            raise TracekitError(f"{path}: only a capture (pcap or pcapng) is read from a "
                                f"stream, not --format {input_format}: save the log to a file")
        f = self._temporary(path)
        self._files.append(f)
        source = sys.stdin.buffer if str(path) == "-" else None
        _copy(path, source, f)
        f.seek(0)
        head = f.read(4)
        if not head:
            raise TracekitError(f"{name}: the stream is empty (0 bytes): nothing to ingest")
        if not (sniff_pcap(head) or sniff_pcapng(head)):
            raise TracekitError(f"{name} is not a pcap or pcapng capture: "
                                f"{describe_magic(head)} (only captures are read from a stream)")
        readable = f"/proc/self/fd/{f.fileno()}" if _unnamed_ok() else f.name
        self.paths[str(path)] = readable
        self.names[readable] = name
        return readable

    def _temporary(self, path):
        try:
            if _unnamed_ok():  # gone from the directory already: nothing to clean up
                return tempfile.TemporaryFile(dir=self.directory, prefix=".tracekit-stream-")
            return tempfile.NamedTemporaryFile(dir=self.directory, prefix=".tracekit-stream-",
                                               suffix=".spool", delete=True)
        except OSError as e:
            raise TracekitError(f"{shown_name(path)}: cannot keep a copy of the stream in "
                                f"{self.directory}: {e.strerror}") from None


def _unnamed_ok():
    return sys.platform.startswith("linux") and os.path.isdir("/proc/self/fd")


def _copy(path, source, f):
    """Copy the stream into `f` (one line on a terminal, an unreadable path, a full disk)."""
    name = shown_name(path)
    try:
        if source is None:
            source = open(path, "rb", buffering=0)  # noqa: SIM115 (closed below)
            close = source.close
        else:
            close = None
            if source.isatty():
                raise TracekitError(f"{path}: standard input is a terminal: pipe a capture "
                                    f"in (e.g. tcpdump -w - ... | tracekit ingest -)")
        try:
            while True:
                block = source.read(BLOCK)
                if not block:
                    break
                f.write(block)
            f.flush()
        finally:
            if close:
                close()
    except OSError as e:
        raise TracekitError(f"{name}: cannot copy the stream beside the store: "
                            f"{e.strerror}") from None


def stream_stop_error(name, stop):
    """The one line refusing a stream that ended cut short or corrupt (a ReadStop)."""
    return TracekitError(f"{name}: at byte offset {stop.offset}: {stop.message}; a stream "
                         f"that ends {stop.reason} is not ingested (taken whole or not at all: "
                         f"nothing of it was written)")
