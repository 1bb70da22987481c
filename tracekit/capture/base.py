"""What every capture reader yields: interfaces, packet batches, a stop reason.

Strategy: a reader reads the file in large chunks into one reusable numpy
buffer and hands out `PacketBatch` objects that point into that buffer (no
copy per packet). A batch is valid until the next one is requested, so memory
stays bounded by the chunk size whatever the capture size. A reader never
guesses past a corrupt record: it stops, and `CaptureReader.stop` says where
and why; everything before that point has been yielded.
"""

import io
import os
from dataclasses import dataclass, field

import numpy as np

DEFAULT_CHUNK_BYTES = 32 << 20
DEFAULT_BATCH_PACKETS = 1 << 18


@dataclass(frozen=True)
class Interface:
    """One capture interface (pcap has exactly one; pcapng one per IDB)."""

    interface_id: int  # index over the whole file (all sections)
    link_type: int
    snaplen: int
    ts_resolution: str  # "1e-6", "1e-9", "2^-20" ...
    ts_offset_s: int = 0
    name: str | None = None
    description: str | None = None
    section: int = 0


@dataclass
class PacketBatch:
    """Consecutive records of one capture, as columns over a shared buffer."""

    data: np.ndarray  # uint8 buffer holding the packet bytes
    data_offset: np.ndarray  # int64, where each packet starts in `data`
    captured_bytes: np.ndarray  # int64
    wire_bytes: np.ndarray  # int64
    ts_ns: np.ndarray  # int64, nanoseconds since the epoch
    interface_id: np.ndarray  # int32, index into CaptureReader.interfaces
    file_offset: np.ndarray  # int64, byte offset of each record in the file
    first_frame: int  # frame number of the first record (1-based)

    def __len__(self):
        return len(self.data_offset)


@dataclass(frozen=True)
class ReadStop:
    """Why a reader stopped before the end of the file."""

    reason: str  # "truncated" or "corrupt"
    offset: int  # byte offset of the record or block where reading stopped
    message: str

    def __post_init__(self):
        object.__setattr__(self, "offset", int(self.offset))  # not a numpy integer


@dataclass
class ReadStats:
    skipped_blocks: dict = field(default_factory=dict)  # block name -> count


class ChunkedFile:
    """A file read forwards in chunks into one reusable numpy buffer."""

    def __init__(self, fileobj, chunk_bytes=DEFAULT_CHUNK_BYTES):
        self.file = fileobj
        self.buf = np.empty(chunk_bytes, dtype=np.uint8)
        self.base = 0  # file offset of buf[0]
        self.end = 0  # valid bytes in buf
        self.eof = False

    def refill(self, keep_from, need=0):
        """Keep buf[keep_from:end], move it to the front and read more.

        `need` is the number of bytes the caller wants available from
        `keep_from`; the buffer grows when a single record is larger.
        Returns False when nothing more could be read.
        """
        tail = self.end - keep_from
        if need > len(self.buf):
            grown = np.empty(max(need, 2 * len(self.buf)), dtype=np.uint8)
            grown[:tail] = self.buf[keep_from:self.end]
            self.buf = grown
        elif tail:
            self.buf[:tail] = self.buf[keep_from:self.end]
        self.base += keep_from
        self.end = tail
        if self.eof:
            return False
        view = memoryview(self.buf)[tail:]
        got_any = False
        while self.end < len(self.buf):
            got = self.file.readinto(view[self.end - tail:])
            if not got:
                self.eof = True
                break
            self.end += got
            got_any = True
        return got_any


def input_size(fileobj):
    """Size in bytes of an open binary file (or BytesIO)."""
    try:
        return os.fstat(fileobj.fileno()).st_size
    except (AttributeError, OSError, io.UnsupportedOperation):
        return len(fileobj.getbuffer())


def timestamps_from_units(raw, units_per_second, offset_s=0):
    """Convert raw integer timestamps in 1/units_per_second to int64 ns.

    Exact for decimal resolutions; for binary ones (2^-k) rounds down to the
    nanosecond, splitting seconds from the fraction so nothing overflows.
    """
    raw = raw.astype(np.uint64, copy=False)
    if units_per_second == 1_000_000_000:
        ns = raw.astype(np.int64)
    elif units_per_second < 1_000_000_000 and 1_000_000_000 % units_per_second == 0:
        ns = raw.astype(np.int64) * np.int64(1_000_000_000 // units_per_second)
    elif units_per_second > np.iinfo(np.uint64).max:
        # finer than 2^-64 s (a legal if_tsresol up to 2^-127): every raw value is
        # under a second
        ns = np.floor(raw.astype(np.float64) * (1e9 / units_per_second)).astype(np.int64)
    else:
        ups = np.uint64(units_per_second)
        seconds = (raw // ups).astype(np.int64)
        frac = (raw % ups).astype(np.float64)
        ns = seconds * np.int64(1_000_000_000) + np.floor(
            frac * (1e9 / units_per_second)).astype(np.int64)
    if offset_s:
        ns = ns + np.int64(offset_s) * np.int64(1_000_000_000)
    return ns
