"""pcapng files: sections in either byte order, interfaces, packet blocks.

Strategy: the compiled `scan_pcapng` kernel walks Enhanced, Simple and the
obsolete Packet Blocks; whenever it meets any other block it returns and the
Python code here handles it: a Section Header Block switches byte order and
starts a new interface list, an Interface Description Block adds an
interface (link type, snaplen, if_tsresol incl. power-of-two resolutions,
if_tsoffset, name), and every other block type is skipped and counted.
Interface ids in packet blocks are local to their section; batches carry
the file-wide index into `PcapngReader.interfaces` (-1 when a packet names an
interface its section never described).
"""

import struct

import numpy as np

from ...core.arrays import distinct
from ...core.jit import use_jit
from . import scan
from .base import (
    ChunkedFile,
    Interface,
    PacketBatch,
    ReadStats,
    ReadStop,
    input_size,
    timestamps_from_units,
    truncated_header_error,
)

SHB = 0x0A0D0D0A
IDB = 0x00000001
BYTE_ORDER_MAGIC = 0x1A2B3C4D
MAX_BLOCK_BYTES = 64 << 20

BLOCK_NAMES = {
    0x00000002: "packet block",
    0x00000004: "name resolution block",
    0x00000005: "interface statistics block",
    0x00000007: "IRIG timestamp block",
    0x00000008: "ARINC 429 block",
    0x00000009: "systemd journal export block",
    0x0000000A: "decryption secrets block",
    0x00000BAD: "custom block",
    0x40000BAD: "custom block (do not copy)",
}

OPT_ENDOFOPT = 0
OPT_IF_NAME = 2
OPT_IF_DESCRIPTION = 3
OPT_IF_TSRESOL = 9
OPT_IF_TSOFFSET = 14


def sniff_pcapng(head):
    return len(head) >= 4 and struct.unpack("<I", head[:4])[0] == SHB


def _options(raw, e):
    """Yield (code, value bytes) of a pcapng option list."""
    pos = 0
    while pos + 4 <= len(raw):
        code, length = struct.unpack_from(e + "HH", raw, pos)
        if code == OPT_ENDOFOPT:
            return
        value = raw[pos + 4:pos + 4 + length]
        if len(value) < length:
            return
        yield code, value
        pos += 4 + ((length + 3) & ~3)


def tsresol_units(value):
    """Units per second of an if_tsresol byte (10^-v, or 2^-v with the high bit)."""
    if value & 0x80:
        return 1 << (value & 0x7F), f"2^-{value & 0x7F}"
    return 10 ** value, f"1e-{value}"


class PcapngReader:
    format = "pcapng"

    def __init__(self, path, fileobj, chunk_bytes, batch_packets):
        self.path = str(path)
        self.chunks = ChunkedFile(fileobj, chunk_bytes)
        self.jit = use_jit(input_size(fileobj))
        self.batch_packets = batch_packets
        self.stats = ReadStats()
        self.stop = None
        self.interfaces = []
        self.units = []  # units per second, per interface
        self.section = -1
        self.section_interfaces = []  # global ids of this section's interfaces
        self._ids = np.full(16, -1, np.int32)  # section_interfaces, then -1 (unknown numbers)
        self._units_of = self._offset_of = None  # per global interface, then for iface -1
        self.sections = 0
        self.byte_orders = set()
        self.big_endian = False
        self.chunks.refill(0)

        if self.chunks.end < 28:
            raise truncated_header_error(self.path, "pcapng", self.chunks.end, 28)
        # The first block must be a valid section header; fail as a format error.
        bom = struct.unpack_from("<I", self.chunks.buf, 8)[0]
        if bom not in (BYTE_ORDER_MAGIC, 0x4D3C2B1A):
            from ...core.errors import CaptureFormatError
            raise CaptureFormatError(
                self.path, 8, f"section header has byte-order magic 0x{bom:08x}, "
                f"expected 0x1a2b3c4d in either byte order")

    @property
    def byte_order(self):
        return "/".join(sorted(self.byte_orders))

    @property
    def snaplen(self):
        return max((i.snaplen for i in self.interfaces), default=0)

    def _u32(self, pos):
        e = ">" if self.big_endian else "<"
        return struct.unpack_from(e + "I", self.chunks.buf, pos)[0]

    def _section_header(self, pos):
        """Parse an SHB at buffer position pos; return an error text or None."""
        c = self.chunks
        bom = struct.unpack_from("<I", c.buf, pos + 8)[0]
        if bom == BYTE_ORDER_MAGIC:
            self.big_endian = False
        elif bom == struct.unpack(">I", struct.pack("<I", BYTE_ORDER_MAGIC))[0]:
            self.big_endian = True
        else:
            return (f"section header has byte-order magic 0x{bom:08x}, "
                    f"expected 0x1a2b3c4d in either byte order")
        self.byte_orders.add("big" if self.big_endian else "little")
        self.section += 1
        self.sections += 1
        self.section_interfaces = []
        self._ids[:] = -1
        return None

    def _interface(self, pos, blen):
        c = self.chunks
        e = ">" if self.big_endian else "<"
        link_type, _reserved, snaplen = struct.unpack_from(e + "HHI", c.buf, pos + 8)
        units, label = 1_000_000, "1e-6"
        offset_s = 0
        name = description = None
        raw = bytes(c.buf[pos + 16:pos + blen - 4])
        for code, value in _options(raw, e):
            if code == OPT_IF_TSRESOL and value:
                units, label = tsresol_units(value[0])
            elif code == OPT_IF_TSOFFSET and len(value) == 8:
                offset_s = struct.unpack(e + "q", value)[0]
            elif code == OPT_IF_NAME:
                name = value.decode("utf-8", "replace").rstrip("\x00")
            elif code == OPT_IF_DESCRIPTION:
                description = value.decode("utf-8", "replace").rstrip("\x00")
        iface = Interface(
            interface_id=len(self.interfaces), link_type=link_type, snaplen=snaplen,
            ts_resolution=label, ts_offset_s=offset_s, name=name,
            description=description, section=self.section)
        self.interfaces.append(iface)
        self.units.append(units)
        self.section_interfaces.append(iface.interface_id)
        count = len(self.section_interfaces)
        if count >= len(self._ids):  # keep at least one -1 after the section's interfaces
            self._ids = np.concatenate([self._ids, np.full(len(self._ids), -1, np.int32)])
        self._ids[count - 1] = iface.interface_id

    def _ts_ns(self, raw_ts, iface):
        """(ns, bad): int64 ns per packet and where that is out of range. One pass
        per distinct resolution (at most 256), whatever the number of interfaces;
        each packet's resolution is found by a small integer index (an array of
        the resolutions themselves, Python ints, cost 65 ms for 200 k packets)."""
        if self._units_of is None or len(self._units_of) != len(self.interfaces) + 1:
            self._unit_values = list(dict.fromkeys(self.units))
            # per global interface, the index of its resolution (then -1 for iface -1)
            self._units_of = np.asarray([self._unit_values.index(u) for u in self.units] + [-1],
                                        np.int64)
            self._offset_of = np.asarray(
                [min(max(i.ts_offset_s, -(1 << 63) + 1), (1 << 63) - 1)
                 for i in self.interfaces] + [0], np.int64)
        which = self._units_of[iface]  # -1: no interface described, no clock (NULL)
        offset = self._offset_of[iface]  # -1 picks the trailing 0
        if len(which) and len(self._unit_values) == 1 and int(which.min()) == 0:
            return signed_timestamps(raw_ts, self._unit_values[0], offset)  # one clock
        ts = np.zeros(len(raw_ts), np.int64)
        bad = which < 0
        for u in distinct(which[~bad]).tolist():
            sel = which == u
            ts[sel], bad[sel] = signed_timestamps(raw_ts[sel], self._unit_values[u], offset[sel])
        return ts, bad

    def batches(self):
        """Packet batches; blocks of other types between packets (interfaces, name
        resolution, statistics, new sections) are read without ending the batch, so
        any pattern of blocks costs the same per packet. A batch ends when it is
        full, when the buffer must be refilled (it points into the buffer) or at
        the end of the file."""
        c = self.chunks
        b = _Batch(self.batch_packets)
        skipped = np.zeros(len(scan.SKIPPED_TYPES), np.int64)
        pos = 0
        while True:
            spb_snaplen = (self.interfaces[self.section_interfaces[0]].snaplen
                           if self.section_interfaces else 0)
            k = b.k
            n, pos, why = scan.scan_pcapng(
                self.jit, c.buf, pos, c.end, self.big_endian, MAX_BLOCK_BYTES, spb_snaplen,
                b.hdr[k:], b.data[k:], b.caplen[k:], b.wirelen[k:], b.raw_ts[k:], b.local[k:],
                skipped)
            self._count_skipped(skipped)
            if n:
                # local interface numbers -> file-wide ones, with this section's table
                ids, count = self._ids, len(self.section_interfaces)
                loc = b.local[k:k + n]
                b.iface[k:k + n] = ids[np.where((loc >= 0) & (loc < count), loc, count)]
                b.k += n
            if why == scan.FULL:
                yield self._flush(b)
                continue
            if why == scan.NEED_MORE or why == scan.OTHER_BLOCK:
                pos = yield from self._block(b, pos)
                if pos is None:
                    return
                continue
            if b.k:
                yield self._flush(b)
            if why == scan.BAD_LENGTH:
                self._corrupt(pos, b.frame, f"a block length of {self._u32(pos + 4)} bytes "
                              f"(or a trailing length that does not match it)")
            else:
                self._corrupt(pos, b.frame, "a packet block whose captured length does not "
                              "fit inside the block")
            return

    def _count_skipped(self, skipped):
        if skipped.any():
            for t, count in zip(scan.SKIPPED_TYPES.tolist(), skipped.tolist()):
                if count:
                    name = BLOCK_NAMES[t]
                    self.stats.skipped_blocks[name] = self.stats.skipped_blocks.get(name, 0) + count
            skipped[:] = 0

    def _flush(self, b):
        """The packets held in `b` as a PacketBatch (None: none held)."""
        if not b.k:
            return None
        k = b.k
        ts, bad = self._ts_ns(b.raw_ts[:k].view(np.uint64), b.iface[:k])
        batch = PacketBatch(
            data=self.chunks.buf, data_offset=b.data[:k].copy(),
            captured_bytes=b.caplen[:k].copy(), wire_bytes=b.wirelen[:k].copy(), ts_ns=ts,
            interface_id=b.iface[:k].copy(), file_offset=b.hdr[:k] + self.chunks.base,
            first_frame=b.frame, ts_bad=bad)
        b.frame += k
        b.k = 0
        return batch

    def _block_length(self, pos):
        """The length of the block at `pos` (12 when too little is buffered to say)."""
        c = self.chunks
        if c.end - pos < 12:
            return 12
        if self._u32(pos) == SHB:  # the length of a section header is in its own byte order
            bom = struct.unpack_from("<I", c.buf, pos + 8)[0]
            e = "<" if bom == BYTE_ORDER_MAGIC else ">"
            return struct.unpack_from(e + "I", c.buf, pos + 4)[0]
        return self._u32(pos + 4)

    def _block(self, b, pos):
        """A block that is not a packet, or one the buffer does not hold whole:
        refill, or read it; yields what `b` holds first when it must. Returns
        where to go on, or None at the end (or a corrupt file)."""
        c = self.chunks
        need = self._block_length(pos)
        if c.end - pos >= 12 and (need < 12 or need % 4 or need > MAX_BLOCK_BYTES):
            if b.k:
                yield self._flush(b)
            self._corrupt(pos, b.frame, f"a block length of {need} bytes")
            return None
        if c.end - pos < need:
            if b.k:
                yield self._flush(b)  # the refill moves the bytes the batch points at
            more = c.refill(pos, need)
            if more:
                return 0  # refill moved the unread bytes to the front
            if c.end:
                self.stop = ReadStop(
                    "truncated", c.base,
                    f"the last block is cut short: {c.end} of {need} bytes "
                    f"present (the file ends inside it)")
            return None
        problem = self._other_block(pos, need)
        if problem:
            if b.k:
                yield self._flush(b)
            self._corrupt(pos, b.frame, problem)
            return None
        return pos + need

    def _corrupt(self, pos, frame, what):
        self.stop = ReadStop(
            "corrupt", self.chunks.base + pos,
            f"{what} at record {frame}; the file is corrupt from here and the rest "
            f"was not read")

    def _other_block(self, pos, blen):
        btype = self._u32(pos)
        if btype == SHB:
            return self._section_header(pos)
        if self._u32(pos + blen - 4) != blen:
            return f"a block of type 0x{btype:08x} whose trailing length does not match {blen}"
        if btype == IDB:
            if blen < 20:
                return f"an interface description block of only {blen} bytes"
            self._interface(pos, blen)
            return None
        name = BLOCK_NAMES.get(btype, f"block type 0x{btype:08x}")
        self.stats.skipped_blocks[name] = self.stats.skipped_blocks.get(name, 0) + 1
        return None


def signed_timestamps(raw, units, offset_s):
    """(ns, bad) of raw pcapng times read as signed 64-bit counts: a raw value with
    its top bit set is a time before 1970 (two's complement; PcapPlusPlus writes
    them so), which read unsigned would be out of range for any resolution of a
    nanosecond or coarser. The interface's offset is added after."""
    raw = raw.astype(np.uint64, copy=False)
    neg = raw >= np.uint64(1 << 63)
    if not neg.any():
        return timestamps_from_units(raw, units, offset_s)
    magnitude = np.where(neg, ~raw + np.uint64(1), raw)
    ns, bad = timestamps_from_units(magnitude, units)
    ns = np.where(neg, -ns, ns)
    off_s = np.broadcast_to(np.asarray(offset_s, dtype=np.int64), ns.shape)
    far = np.abs(off_s) > INT64_MAX // 10**9
    off = np.where(far, 0, off_s) * np.int64(10**9)
    bad = bad | far | ((off > 0) & (ns > INT64_MAX - off)) | ((off < 0) & (ns < -INT64_MAX - off))
    return np.where(bad, 0, ns + np.where(bad, 0, off)).astype(np.int64), bad


INT64_MAX = (1 << 63) - 1


class _Batch:
    """The packets of the batch being gathered: where each is, its lengths, raw time
    and interface (local to its section, then file-wide); `k` held, `frame` the first's."""

    def __init__(self, cap):
        self.hdr, self.data, self.caplen, self.wirelen, self.raw_ts, self.local = (
            np.empty(cap, np.int64) for _ in range(6))
        self.iface = np.empty(cap, np.int32)
        self.k = 0
        self.frame = 1
