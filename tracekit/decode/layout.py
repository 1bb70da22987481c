"""Header layouts declared once as data, read for many packets at once.

Strategy (dpkt's idea, vectorised): a header is a list of fields (name, byte
offset, width in bytes, shift, mask). `read_fields` reads the same header at
a different position in each packet with one numpy gather per field, and
returns each field's values with a mask saying whether the packet's captured
bytes covered the field. Nothing here allocates a Python object per packet.
"""

from typing import NamedTuple

import numpy as np


class Field(NamedTuple):
    name: str
    offset: int
    width: int  # bytes: 1, 2, 4 or 8 (big-endian)
    shift: int = 0
    mask: int | None = None


class Layout(NamedTuple):
    name: str
    fields: tuple

    @property
    def size(self):
        return max(f.offset + f.width for f in self.fields)


_DTYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def read_uint(data, pos, end, width):
    """Big-endian unsigned integers of `width` bytes at data[pos]; (values, ok).

    `ok` is False where the bytes are not all inside [pos, end); those values
    are 0. `pos` and `end` are int64 arrays of the same length.
    """
    ok = (pos >= 0) & (pos + width <= end)
    safe = np.where(ok, pos, 0)
    dtype = _DTYPES[width]
    value = data[safe].astype(dtype)
    for k in range(1, width):
        value = (value << dtype(8)) | data[safe + k].astype(dtype)
    if not ok.all():
        value[~ok] = 0
    return value, ok


def read_fields(data, pos, end, layout, only=None):
    """Read the fields of `layout` starting at pos; return {name: (values, ok)}."""
    out = {}
    cache = {}
    for f in layout.fields:
        if only is not None and f.name not in only:
            continue
        key = (f.offset, f.width)
        if key not in cache:
            cache[key] = read_uint(data, pos + f.offset, end, f.width)
        value, ok = cache[key]
        if f.shift:
            value = value >> value.dtype.type(f.shift)
        if f.mask is not None:
            value = value & value.dtype.type(f.mask)
        out[f.name] = (value, ok)
    return out


def read_bytes16(data, pos, end):
    """16 bytes at pos as two big-endian uint64 (high, low); (hi, lo, ok)."""
    hi, ok = read_uint(data, pos, end, 8)
    lo, ok2 = read_uint(data, pos + 8, end, 8)
    ok = ok & ok2
    return np.where(ok, hi, 0), np.where(ok, lo, 0), ok


# --- the headers tracekit decodes -------------------------------------------

ETHERNET = Layout("ethernet", (Field("ethertype", 12, 2),))

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
