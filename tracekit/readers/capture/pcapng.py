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
        self._units_of = self._offset_of = None  # per global interface (then a 0 for -1)
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
        per distinct resolution (at most 256), whatever the number of interfaces."""
        ts = np.zeros(len(raw_ts), np.int64)
        bad = np.zeros(len(raw_ts), bool)
        if self._units_of is None or len(self._units_of) != len(self.interfaces):
            self._units_of = np.asarray(self.units, dtype=object)
            self._offset_of = np.asarray(
                [min(max(i.ts_offset_s, -(1 << 63) + 1), (1 << 63) - 1)
                 for i in self.interfaces] + [0], np.int64)
        known = iface >= 0
        units = self._units_of[np.where(known, iface, 0)] if len(self.units) else None
        offset = self._offset_of[iface]  # -1 picks the trailing 0
        for u in set(units[known].tolist()) if units is not None else ():
            sel = known & (units == u)
            ts[sel], bad[sel] = timestamps_from_units(raw_ts[sel], u, offset[sel])
        return ts, bad

    def batches(self):
        """Packet batches; blocks of other types between packets (interfaces, name
        resolution, statistics, new sections) are read without ending the batch, so
        any pattern of blocks costs the same per packet. A batch ends when it is
        full, when the buffer must be refilled (it points into the buffer) or at
        the end of the file."""
        c = self.chunks
        cap = self.batch_packets
        hdr = np.empty(cap, np.int64)
        data = np.empty(cap, np.int64)
        caplen = np.empty(cap, np.int64)
        wirelen = np.empty(cap, np.int64)
        raw_ts = np.empty(cap, np.int64)
        local = np.empty(cap, np.int64)
        iface = np.empty(cap, np.int32)
        skipped = np.zeros(len(scan.SKIPPED_TYPES), np.int64)
        k = 0  # packets held for the next batch
        pos = 0
        frame = 1

        def flush():
            nonlocal k, frame
            batch = None
            if k:
                ts, bad = self._ts_ns(raw_ts[:k].view(np.uint64), iface[:k])
                batch = PacketBatch(
                    data=c.buf, data_offset=data[:k].copy(), captured_bytes=caplen[:k].copy(),
                    wire_bytes=wirelen[:k].copy(), ts_ns=ts, interface_id=iface[:k].copy(),
                    file_offset=hdr[:k] + c.base, first_frame=frame, ts_bad=bad)
                frame += k
                k = 0
            return batch

        while True:
            spb_snaplen = (self.interfaces[self.section_interfaces[0]].snaplen
                           if self.section_interfaces else 0)
            n, pos, why = scan.scan_pcapng(
                self.jit, c.buf, pos, c.end, self.big_endian, MAX_BLOCK_BYTES, spb_snaplen,
                hdr[k:], data[k:], caplen[k:], wirelen[k:], raw_ts[k:], local[k:], skipped)
            if skipped.any():
                for t, count in zip(scan.SKIPPED_TYPES.tolist(), skipped.tolist()):
                    if count:
                        name = BLOCK_NAMES[t]
                        self.stats.skipped_blocks[name] = self.stats.skipped_blocks.get(name, 0) + count
                skipped[:] = 0
            if n:
                # local interface numbers -> file-wide ones, with this section's table
                ids, count = self._ids, len(self.section_interfaces)
                loc = local[k:k + n]
                iface[k:k + n] = ids[np.where((loc >= 0) & (loc < count), loc, count)]
                k += n
            if why == scan.FULL:
                yield flush()
                continue
            if why == scan.NEED_MORE or why == scan.OTHER_BLOCK:
                if c.end - pos < 12:
                    need = 12
                else:
                    need = self._u32(pos + 4)
                    btype = self._u32(pos)
                    if btype == SHB:
                        # the length of a section header is in its own byte order
                        bom = struct.unpack_from("<I", c.buf, pos + 8)[0] if c.end - pos >= 12 else 0
                        e = "<" if bom == BYTE_ORDER_MAGIC else ">"
                        need = struct.unpack_from(e + "I", c.buf, pos + 4)[0]
                    if need < 12 or need % 4 or need > MAX_BLOCK_BYTES:
                        if k:
                            yield flush()
                        self._corrupt(pos, frame, f"a block length of {need} bytes")
                        return
                if c.end - pos < need:
                    if k:
                        yield flush()  # the refill moves the bytes the batch points at
                    more = c.refill(pos, need)
                    pos = 0  # refill moved the unread bytes to the front
                    if more:
                        continue
                    if c.end:
                        self.stop = ReadStop(
                            "truncated", c.base,
                            f"the last block is cut short: {c.end} of {need} bytes "
                            f"present (the file ends inside it)")
                    return
                problem = self._other_block(pos, need)
                if problem:
                    if k:
                        yield flush()
                    self._corrupt(pos, frame, problem)
                    return
                pos += need
                continue
            if k:
                yield flush()
            if why == scan.BAD_LENGTH:
                self._corrupt(pos, frame, f"a block length of {self._u32(pos + 4)} bytes "
                              f"(or a trailing length that does not match it)")
            else:
                self._corrupt(pos, frame, "a packet block whose captured length does not "
                              "fit inside the block")
            return

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
