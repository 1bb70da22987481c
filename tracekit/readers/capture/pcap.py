"""Classic libpcap files: both byte orders, microsecond and nanosecond magic.

Strategy: parse the 24-byte global header here, then let the compiled
`scan_pcap` kernel find record boundaries chunk by chunk; timestamps are
converted to int64 nanoseconds with numpy. A record whose captured length is
larger than any snapshot length could allow stops the read (the file is
corrupt from there on; nothing after it is guessed at), and so does a last
record cut short by the end of the file.
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
    truncated_header_error,
)

MAGIC_US = 0xA1B2C3D4
MAGIC_NS = 0xA1B23C4D
HEADER_BYTES = 24
RECORD_HEADER_BYTES = 16
# libpcap's MAXIMUM_SNAPLEN: no sane record is larger unless the header says so
MAXIMUM_SNAPLEN = 262144


def sniff_pcap(head):
    """Return (big_endian, nanoseconds) for a pcap magic, or None."""
    if len(head) < 4:
        return None
    for big_endian, fmt in ((False, "<I"), (True, ">I")):
        (magic,) = struct.unpack(fmt, head[:4])
        if magic == MAGIC_US:
            return big_endian, False
        if magic == MAGIC_NS:
            return big_endian, True
    return None


class PcapReader:
    format = "pcap"

    def __init__(self, path, fileobj, chunk_bytes, batch_packets):
        self.path = str(path)
        self.chunks = ChunkedFile(fileobj, chunk_bytes)
        self.jit = use_jit(input_size(fileobj))
        self.batch_packets = batch_packets
        self.stats = ReadStats()
        self.stop = None
        self.chunks.refill(0)
        head = bytes(self.chunks.buf[:HEADER_BYTES])

        if self.chunks.end < HEADER_BYTES:
            raise truncated_header_error(self.path, "pcap", self.chunks.end, HEADER_BYTES)
        self.big_endian, nanoseconds = sniff_pcap(head)
        e = ">" if self.big_endian else "<"
        major, minor, _zone, _sigfigs, snaplen, network = struct.unpack(e + "HHiIII", head[4:])
        self.version = f"{major}.{minor}"
        self.byte_order = "big" if self.big_endian else "little"
        self.snaplen = snaplen
        self.units_per_second = 1_000_000_000 if nanoseconds else 1_000_000
        self.interfaces = [Interface(
            interface_id=0,
            link_type=network & 0x03FFFFFF,
            snaplen=snaplen,
            ts_resolution="1e-9" if nanoseconds else "1e-6",
        )]
        self.max_caplen = max(snaplen, MAXIMUM_SNAPLEN)

    def batches(self):
        c = self.chunks
        cap = self.batch_packets
        hdr = np.empty(cap, np.int64)
        caplen = np.empty(cap, np.int64)
        wirelen = np.empty(cap, np.int64)
        sec = np.empty(cap, np.int64)
        frac = np.empty(cap, np.int64)
        pos = HEADER_BYTES
        frame = 1
        while True:
            n, pos, why = scan.scan_pcap(self.jit, c.buf, pos, c.end, self.big_endian, self.max_caplen,
                                         hdr, caplen, wirelen, sec, frac)
            if n:
                ts = sec[:n] * np.int64(1_000_000_000)
                if self.units_per_second == 1_000_000:
                    ts += frac[:n] * np.int64(1000)
                else:
                    ts += frac[:n]
                yield PacketBatch(
                    data=c.buf,
                    data_offset=hdr[:n] + RECORD_HEADER_BYTES,
                    captured_bytes=caplen[:n].copy(),
                    wire_bytes=wirelen[:n].copy(),
                    ts_ns=ts,
                    interface_id=np.zeros(n, np.int32),
                    file_offset=hdr[:n] + c.base,
                    first_frame=frame,
                )
                frame += n
            if why == scan.FULL:
                continue
            if why == scan.NEED_MORE:
                need = RECORD_HEADER_BYTES
                if c.end - pos >= RECORD_HEADER_BYTES:
                    need += int.from_bytes(bytes(c.buf[pos + 8:pos + 12]),
                                           "big" if self.big_endian else "little")
                more = c.refill(pos, need)
                pos = 0  # refill moved the unread bytes to the front
                if more:
                    continue
                if c.end:
                    have = c.end
                    self.stop = ReadStop(
                        "truncated", c.base,
                        f"the last record is cut short: {have} of {need} bytes present "
                        f"(the file ends inside record {frame})")
                return
            # BAD_LENGTH
            bad = int.from_bytes(bytes(c.buf[pos + 8:pos + 12]),
                                 "big" if self.big_endian else "little")
            self.stop = ReadStop(
                "corrupt", c.base + pos,
                f"record {frame} claims {bad} captured bytes, more than the largest "
                f"possible ({self.max_caplen}); the file is corrupt from here and the "
                f"rest was not read")
            return
