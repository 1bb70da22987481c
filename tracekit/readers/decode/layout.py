"""Header layouts declared once as data, read for many packets at once.

Strategy (dpkt's idea, vectorised): a header is a list of fields (name, byte
offset, width in bytes, shift, mask), from which a big-endian structured
numpy dtype is derived. `read_fields` takes the header's bytes of many
packets as one block out of `HeaderBytes` (the batch's first bytes, a row
per packet) and views it through that dtype, returning each field's values
with a mask saying whether the packet's captured bytes covered the field.
Nothing here allocates a Python object per packet.
"""

from typing import NamedTuple

import numpy as np


class Field(NamedTuple):
    name: str
    offset: int
    width: int  # bytes: 1, 2, 4 or 8 (big-endian)
    shift: int = 0
    mask: int | None = None


def _key(f):
    return f"b{f.offset}w{f.width}"


class Layout(NamedTuple):
    name: str
    fields: tuple

    @property
    def size(self):
        return max(f.offset + f.width for f in self.fields)

    @property
    def dtype(self):
        """Big-endian structured dtype over the header (overlapping bit fields share bytes)."""
        spans = sorted({(f.offset, f.width) for f in self.fields})
        return np.dtype({"names": [f"b{o}w{w}" for o, w in spans],
                         "formats": [">u%d" % w for _, w in spans],
                         "offsets": [o for o, _ in spans], "itemsize": self.size})


_DTYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


class HeaderBytes:
    """The first `k` bytes of every packet of a batch, one row per packet.

    Made with a single numpy gather (rows of a sliding-window view over the
    capture buffer), so a header at the same offset in every packet is one
    column slice of `rows`. Positions given to the readers are relative to
    each packet's first byte. Bytes past a packet's captured length are
    undefined: every reader masks its results by the captured length.
    A read beyond the first `k` bytes falls back to the capture buffer.
    """

    def __init__(self, data, start, captured_bytes, max_bytes=128):
        self.data = data
        self.start = start.astype(np.int64, copy=False)
        self.n = len(start)
        longest = int(captured_bytes.max()) if self.n else 0
        self.k = k = min(max_bytes, longest, len(data))
        if not self.n or not k:
            self.rows = np.zeros((self.n, k), np.uint8)
            return
        window = np.lib.stride_tricks.sliding_window_view(data, k)
        last = len(data) - k  # windows cannot start later than this
        if int(self.start[-1]) <= last and int(self.start.max()) <= last:
            self.rows = window[self.start]
        else:
            self.rows = window[np.minimum(self.start, last)]
            for i in np.flatnonzero(self.start > last).tolist():
                s = int(self.start[i])
                tail = data[s:s + k]
                self.rows[i, :len(tail)] = tail


MAX_POSITION_GROUPS = 8


def _block(hb, rows, pos, ok, size):
    """The `size` bytes at `pos` of each packet in `rows`, as an (m, size) array.

    Fast when few distinct positions occur (the common case: a capture's
    packets mostly share their header offsets): one slice of the byte-major
    matrix per distinct position. Returns None when the positions are too
    varied or run past the stored bytes; the caller then reads byte by byte.
    """
    m = len(rows)
    if not m:
        return np.zeros((0, size), np.uint8)
    if not ok.all():
        valid = np.flatnonzero(ok)
        if not len(valid):
            return np.zeros((m, size), np.uint8)
        pos = np.where(ok, pos, pos[valid[0]])
    lo, hi = int(pos.min()), int(pos.max())
    if lo < 0 or hi + size > hb.k:
        return None
    every = m == hb.n  # rows are sorted and distinct, so this means all packets
    if lo == hi:
        return np.ascontiguousarray(hb.rows[:, lo:lo + size] if every
                                    else hb.rows[rows, lo:lo + size])
    counts = np.bincount(pos - lo)
    distinct = np.flatnonzero(counts) + lo
    if len(distinct) > MAX_POSITION_GROUPS:
        return None
    out = np.empty((m, size), np.uint8)
    for p in distinct.tolist():
        sel = pos == p
        out[sel] = hb.rows[rows[sel], p:p + size]
    return out


def _bytewise(hb, rows, pos, ok, width):
    safe = np.where(ok, pos, 0)
    dtype = _DTYPES[width]
    if not len(safe) or int(safe.max()) + width <= hb.k:
        value = hb.rows[rows, safe].astype(dtype)
        for k in range(1, width):
            value = (value << dtype(8)) | hb.rows[rows, safe + k].astype(dtype)
    else:
        base = hb.start[rows] + safe
        value = hb.data[base].astype(dtype)
        for k in range(1, width):
            value = (value << dtype(8)) | hb.data[base + k].astype(dtype)
    return value


def read_uint(hb, rows, pos, end, width):
    """Big-endian unsigned integers of `width` bytes at `pos` in packets `rows`.

    Returns (values, ok); ok is False where the bytes are not all inside
    [pos, end) (end = captured length or a tighter bound); those values are 0.
    `rows`, `pos` and `end` are arrays of the same length.
    """
    ok = (pos >= 0) & (pos + width <= end)
    # one 2-D gather per byte is cheapest unless every packet has the field
    # at the same offset (then it is a column slice)
    uniform = len(pos) and width > 1 and pos.min() == pos.max()
    block = _block(hb, rows, pos, ok, width) if uniform else None
    if block is not None:
        value = block.view(">u%d" % width).reshape(-1).astype(_DTYPES[width])
    else:
        value = _bytewise(hb, rows, pos, ok, width)
    if not ok.all():
        value[~ok] = 0
    return value, ok


def read_fields(hb, rows, pos, end, layout, only=None):
    """Read the fields of `layout` starting at pos; return {name: (values, ok)}.

    The header is fetched as one block and viewed through the layout's
    big-endian structured dtype, so a header costs one gather, not one per
    byte.
    """
    ok_all = (pos >= 0) & (pos + layout.size <= end)
    block = _block(hb, rows, pos, ok_all, layout.size)
    records = None if block is None else block.view(layout.dtype).reshape(-1)
    out = {}
    for f in layout.fields:
        if only is not None and f.name not in only:
            continue
        ok = (pos >= 0) & (pos + f.offset + f.width <= end)
        if records is not None:
            value = records[_key(f)].astype(_DTYPES[f.width])
            partial = ok & ~ok_all  # header cut short, but this field was captured
            if partial.any():
                value[partial] = _bytewise(hb, rows[partial], pos[partial] + f.offset,
                                           ok[partial], f.width)
        else:
            value = _bytewise(hb, rows, pos + f.offset, ok, f.width)
        if f.shift:
            value = value >> value.dtype.type(f.shift)
        if f.mask is not None:
            value = value & value.dtype.type(f.mask)
        if not ok.all():
            value[~ok] = 0
        out[f.name] = (value, ok)
    return out


def selection(idx, good):
    """Where the packets idx[good] go: (rows, pick, g) with `out[rows] =
    values[pick]` for values over idx, and g = idx[good]. Slices (no index
    arrays, no masked copies) when every packet is good and idx is a run of
    consecutive packets -- the common batch, all IPv4 and TCP. `idx` is sorted
    and distinct (np.nonzero)."""
    if good.all():
        pick, g = slice(None), idx
    else:
        pick, g = good, idx[good]
    if len(g) and int(g[-1]) - int(g[0]) + 1 == len(g):
        return slice(int(g[0]), int(g[-1]) + 1), pick, g
    return g, pick, g


def read_bytes16(hb, rows, pos, end):
    """16 bytes at pos as two big-endian uint64 (high, low); (hi, lo, ok)."""
    hi, ok = read_uint(hb, rows, pos, end, 8)
    lo, ok2 = read_uint(hb, rows, pos + 8, end, 8)
    ok = ok & ok2
    return np.where(ok, hi, 0), np.where(ok, lo, 0), ok


# --- the headers tracekit decodes -------------------------------------------

IPV4 = Layout("ipv4", (
    Field("version", 0, 1, 4, 0x0F),
    Field("ihl", 0, 1, 0, 0x0F),
    Field("tos", 1, 1),
    Field("total_length", 2, 2),
    Field("identification", 4, 2),
    Field("dont_fragment", 6, 2, 14, 0x1),
    Field("more_fragments", 6, 2, 13, 0x1),
    Field("fragment_offset", 6, 2, 0, 0x1FFF),  # in 8-byte units
    Field("ttl", 8, 1),
    Field("protocol", 9, 1),
    Field("src", 12, 4),
    Field("dst", 16, 4),
))

IPV6 = Layout("ipv6", (
    Field("version", 0, 1, 4, 0x0F),
    Field("traffic_class", 0, 2, 4, 0xFF),
    Field("flow_label", 0, 4, 0, 0xFFFFF),
    Field("payload_length", 4, 2),
    Field("next_header", 6, 1),
    Field("hop_limit", 7, 1),
))

TCP = Layout("tcp", (
    Field("src_port", 0, 2),
    Field("dst_port", 2, 2),
    Field("seq", 4, 4),
    Field("ack", 8, 4),
    Field("data_offset", 12, 1, 4, 0x0F),  # in 32-bit words
    Field("flags", 12, 2, 0, 0x0FFF),
    Field("window", 14, 2),
    Field("checksum", 16, 2),
    Field("urgent_pointer", 18, 2),
))

UDP = Layout("udp", (
    Field("src_port", 0, 2),
    Field("dst_port", 2, 2),
    Field("length", 4, 2),
    Field("checksum", 6, 2),
))
