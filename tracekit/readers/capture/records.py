"""Read chosen packet records back from a capture file, by their byte offset.

Analyses that need payload bytes (the TLS handshake) fetch just those
records: `packets.file_offset` says where each record starts, so no scan of
the file is needed. pcap records are a 16-byte header and the packet;
pcapng Enhanced and obsolete Packet Blocks keep the packet 28 bytes in, Simple
Packet Blocks 12 bytes in (their length is the block's, capped by the
interface snaplen, here by the block).
"""

import numpy as np

from ...core.errors import CaptureFormatError

EPB, SPB, PB = 6, 3, 2


def read_records(path, fmt, offsets):
    """(data, start, captured) for the records at `offsets`: numpy arrays over one buffer.

    Vectorised over a memory map of the file: the headers' length fields are
    gathered for all records at once, then all packet bytes in one take.
    """
    offsets = np.asarray(offsets, np.int64)
    try:
        mm = np.memmap(path, np.uint8, mode="r")
    except (OSError, ValueError) as e:
        raise CaptureFormatError(path, 0, f"cannot reopen the capture to read payloads: {e}") from None
    size = len(mm)
    if len(offsets) == 0:
        return np.zeros(0, np.uint8), np.zeros(0, np.int64), np.zeros(0, np.int64)
    short = (offsets < 0) | (offsets + 16 > size)
    if short.any():
        raise CaptureFormatError(path, int(offsets[np.argmax(short)]),
                                 "record header expected (the file changed since ingest?)")

    def u32(pos, big):
        """32-bit fields at `pos`, big-endian where `big` (one flag, or one per record)."""
        b = mm[pos[:, None] + np.arange(4)].astype(np.uint32)
        little = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16) | (b[:, 3] << 24)
        swapped = (b[:, 0] << 24) | (b[:, 1] << 16) | (b[:, 2] << 8) | b[:, 3]
        return np.where(big, swapped, little)

    if fmt == "pcap":
        big = bytes(mm[:4]) in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d")
        caplen = u32(offsets + 8, big).astype(np.int64)
        data_at = offsets + 16
    else:
        kind_le = u32(offsets, False)
        big = ~np.isin(kind_le, (EPB, SPB, PB))
        kind = u32(offsets, big)
        if not np.isin(kind, (EPB, SPB, PB)).all():
            bad = int(offsets[np.argmax(~np.isin(kind, (EPB, SPB, PB)))])
            raise CaptureFormatError(path, bad, "a packet block expected (the file changed since ingest?)")
        spb = kind == SPB
        short = ~spb & (offsets + 28 > size)
        if short.any():
            raise CaptureFormatError(path, int(offsets[np.argmax(short)]),
                                     "packet block header expected (the file changed since ingest?)")
        block_len = u32(offsets + 4, big).astype(np.int64)
        caplen = np.where(spb, np.minimum(u32(offsets + 8, big).astype(np.int64), block_len - 16),
                          u32(np.where(spb, offsets, offsets + 20), big).astype(np.int64))
        data_at = np.where(spb, offsets + 12, offsets + 28)
    caplen = np.clip(caplen, 0, np.maximum(size - data_at, 0))
    start = np.zeros(len(offsets), np.int64)
    np.cumsum(caplen[:-1], out=start[1:])
    take = np.repeat(data_at - start, caplen) + np.arange(int(caplen.sum()), dtype=np.int64)
    return np.asarray(mm[take]), start, caplen
