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

from ...core.errors import CaptureFormatError

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
    ts_bad: np.ndarray | None = None  # bool: timestamp outside int64 ns (ts_ns is 0 there)

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
        self.size = input_size(fileobj)  # 0 when unknown (a pipe)
        small = self.size and self.size < chunk_bytes
        self.buf = np.empty(max(self.size, 1 << 16) if small else chunk_bytes, dtype=np.uint8)
        self.base = 0  # file offset of buf[0]
        self.end = 0  # valid bytes in buf
        self.eof = False

    def refill(self, keep_from, need=0):
        """Keep buf[keep_from:end], move it to the front and read more.

        `need` is the number of bytes the caller wants available from
        `keep_from`; the buffer grows when a single record is larger -- never
        beyond what the file still holds (a record that claims more is cut short
        by the end of the file, and its claim allocates nothing). Returns False
        when nothing more could be read.
        """
        tail = self.end - keep_from
        if self.size:
            need = min(need, max(self.size - (self.base + keep_from), 0))
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


INT64_MAX = (1 << 63) - 1
NS_PER_S = 1_000_000_000


def timestamps_from_units(raw, units_per_second, offset_s=0):
    """Convert raw integer timestamps in 1/units_per_second to int64 ns.

    Returns (ns, bad): `bad` marks the values that do not fit in int64
    nanoseconds (about 1677-2262) once the interface's offset is added; their
    `ns` is 0 and means nothing -- nothing is ever wrapped. Exact for decimal
    resolutions; for binary ones (2^-k) rounds down to the nanosecond,
    splitting seconds from the fraction so nothing overflows on the way.
    """
    raw = raw.astype(np.uint64, copy=False)
    if units_per_second > np.iinfo(np.uint64).max:
        # finer than 2^-64 s (a legal if_tsresol up to 2^-127): every raw value is
        # under a second
        ns = np.floor(raw.astype(np.float64) * (1e9 / units_per_second)).astype(np.int64)
        bad = np.zeros(len(raw), bool)
    else:
        ups = units_per_second
        seconds = raw // np.uint64(ups)
        frac = raw % np.uint64(ups)
        bad = seconds > np.uint64(INT64_MAX // NS_PER_S)
        seconds = np.where(bad, 0, seconds).astype(np.int64)
        if NS_PER_S % ups == 0:
            frac_ns = frac.astype(np.int64) * np.int64(NS_PER_S // ups)
        elif ups % NS_PER_S == 0:
            frac_ns = (frac // np.uint64(ups // NS_PER_S)).astype(np.int64)
        else:
            frac_ns = np.floor(frac.astype(np.float64) * (1e9 / ups)).astype(np.int64)
        base = seconds * np.int64(NS_PER_S)
        bad |= base > INT64_MAX - frac_ns
        ns = np.where(bad, 0, base + np.where(bad, 0, frac_ns))
    offset_s = np.asarray(offset_s, dtype=object if isinstance(offset_s, int) else None)
    if offset_s.dtype == object:  # one Python int, perhaps beyond int64
        if abs(int(offset_s)) > INT64_MAX // NS_PER_S:
            return np.zeros(len(raw), np.int64), np.ones(len(raw), bool)
        offset_s = np.int64(int(offset_s))
    offset_s = offset_s.astype(np.int64)
    far = np.abs(offset_s) > INT64_MAX // NS_PER_S  # (|INT64_MIN| is out of range too)
    off = np.where(far, 0, offset_s) * np.int64(NS_PER_S)
    if off.any() or far.any():
        bad = bad | far | (ns > INT64_MAX - np.maximum(off, 0)) | (ns < -INT64_MAX - np.minimum(off, 0))
        ns = np.where(bad, 0, ns) + np.where(bad, 0, off)
    return np.where(bad, 0, ns).astype(np.int64), bad


EXPECTED = ("a1b2c3d4 or a1b23c4d in either byte order (pcap) "
            "or 0a0d0d0a (pcapng)")


def truncated_header_error(path, fmt, have, need):
    return CaptureFormatError(
        path, 0, f"the {fmt} file header is cut short: {have} of {need} bytes present")


def describe_magic(head):
    if not head:
        return "the file is empty (0 bytes)"
    shown = head[:4].hex()
    text = "".join(chr(b) if 32 <= b < 127 else "." for b in head[:4])
    return f"its first bytes are {shown} ({text!r})"
