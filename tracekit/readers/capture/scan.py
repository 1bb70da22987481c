"""Sequential record scanners for pcap and pcapng, compiled with numba.

Strategy: a capture is a chain of records whose positions depend on the
lengths of all records before them, so finding record boundaries is a
sequential scan that numpy cannot express. These kernels walk one in-memory
chunk of the file and write the position, lengths and raw timestamp of each
record into preallocated arrays; everything after that (timestamps, link
layers, IP, TCP) is vectorised over those arrays. A kernel stops and tells
the caller why: its output is full, the next record is not wholly in the
chunk, a length is impossible, or (pcapng) the next block is one that Python
handles (section and interface headers, statistics, name resolution...).

The kernels run compiled for large files and as plain Python for small
ones (see tracekit/core/jit.py).
"""

import numpy as np

from ...core.jit import kernel

# Why a scan stopped.
FULL = 0  # the output arrays are full; call again from the returned position
NEED_MORE = 1  # the next record is not wholly inside the chunk
BAD_LENGTH = 2  # a record or block length that cannot be right
OTHER_BLOCK = 3  # pcapng: a block the Python side handles
BAD_RECORD = 4  # pcapng: a packet block whose fields contradict its length

EPB = 6
SPB = 3
PB = 2
# blocks without packets that the scanner steps over (pcapng.BLOCK_NAMES names them):
# name resolution, interface statistics, IRIG, ARINC 429, systemd journal, decryption
# secrets, custom, custom (do not copy)
SKIPPED_TYPES = np.array([4, 5, 7, 8, 9, 10, 0xBAD, 0x40000BAD], np.int64)


def _u16(buf, p, big_endian):
    a = np.int64(buf[p])
    b = np.int64(buf[p + 1])
    if big_endian:
        return (a << 8) | b
    return (b << 8) | a


def _u32(buf, p, big_endian):
    a = np.int64(buf[p])
    b = np.int64(buf[p + 1])
    c = np.int64(buf[p + 2])
    d = np.int64(buf[p + 3])
    if big_endian:
        return (a << 24) | (b << 16) | (c << 8) | d
    return (d << 24) | (c << 16) | (b << 8) | a


@kernel(helpers=(_u32,))
def scan_pcap(buf, pos, end, big_endian, max_caplen,
              out_hdr, out_caplen, out_wirelen, out_sec, out_frac):
    """Walk classic pcap records in buf[pos:end]; return (count, pos, why)."""
    n = 0
    cap = out_hdr.shape[0]
    while n < cap:
        if pos + 16 > end:
            return n, pos, NEED_MORE
        caplen = _u32(buf, pos + 8, big_endian)
        if caplen > max_caplen:
            return n, pos, BAD_LENGTH
        if pos + 16 + caplen > end:
            return n, pos, NEED_MORE
        out_hdr[n] = pos
        out_sec[n] = _u32(buf, pos, big_endian)
        out_frac[n] = _u32(buf, pos + 4, big_endian)
        out_caplen[n] = caplen
        out_wirelen[n] = _u32(buf, pos + 12, big_endian)
        n += 1
        pos += 16 + caplen
    return n, pos, FULL


@kernel(helpers=(_u16, _u32))
def scan_pcapng(buf, pos, end, big_endian, max_block, spb_snaplen,
                out_hdr, out_data, out_caplen, out_wirelen, out_ts, out_iface, skipped):
    """Walk pcapng packet blocks (EPB, SPB, PB) in buf[pos:end].

    Returns (count, pos, why). ``out_hdr`` is the block's offset, ``out_data``
    the offset of the packet bytes, ``out_ts`` the raw 64-bit timestamp in
    the interface's units (0 for SPB, which has none). Blocks that carry
    nothing tracekit reads (SKIPPED_TYPES: name resolution, statistics...) are
    counted in ``skipped`` and stepped over here, so that any pattern of blocks
    costs the same per packet; section and interface headers, and blocks of
    other types, stop the scan for the Python side.
    """
    n = 0
    cap = out_hdr.shape[0]
    while n < cap:
        if pos + 12 > end:
            return n, pos, NEED_MORE
        btype = _u32(buf, pos, big_endian)
        if btype != EPB and btype != SPB and btype != PB:
            k = -1
            for j in range(len(SKIPPED_TYPES)):
                if SKIPPED_TYPES[j] == btype:
                    k = j
            if k < 0:
                return n, pos, OTHER_BLOCK
            blen = _u32(buf, pos + 4, big_endian)
            if blen < 12 or blen % 4 != 0 or blen > max_block or pos + blen > end:
                return n, pos, OTHER_BLOCK  # Python finds out what is wrong, or reads more
            if _u32(buf, pos + blen - 4, big_endian) != blen:
                return n, pos, OTHER_BLOCK
            skipped[k] += 1
            pos += blen
            continue
        blen = _u32(buf, pos + 4, big_endian)
        if blen < 12 or blen % 4 != 0 or blen > max_block:
            return n, pos, BAD_LENGTH
        if pos + blen > end:
            return n, pos, NEED_MORE
        if _u32(buf, pos + blen - 4, big_endian) != blen:
            return n, pos, BAD_LENGTH
        if btype == EPB:
            if blen < 32:
                return n, pos, BAD_RECORD
            caplen = _u32(buf, pos + 20, big_endian)
            if 28 + caplen + 4 > blen:
                return n, pos, BAD_RECORD
            out_iface[n] = _u32(buf, pos + 8, big_endian)
            out_ts[n] = (_u32(buf, pos + 12, big_endian) << 32) | _u32(buf, pos + 16, big_endian)
            out_caplen[n] = caplen
            out_wirelen[n] = _u32(buf, pos + 24, big_endian)
            out_data[n] = pos + 28
        elif btype == SPB:
            if blen < 16:
                return n, pos, BAD_RECORD
            wirelen = _u32(buf, pos + 8, big_endian)
            caplen = wirelen
            if spb_snaplen > 0 and caplen > spb_snaplen:
                caplen = spb_snaplen
            if caplen > blen - 16:
                caplen = blen - 16
            out_iface[n] = 0
            out_ts[n] = 0
            out_caplen[n] = caplen
            out_wirelen[n] = wirelen
            out_data[n] = pos + 12
        else:  # obsolete Packet Block
            if blen < 32:
                return n, pos, BAD_RECORD
            caplen = _u32(buf, pos + 20, big_endian)
            if 28 + caplen + 4 > blen:
                return n, pos, BAD_RECORD
            out_iface[n] = _u16(buf, pos + 8, big_endian)
            out_ts[n] = (_u32(buf, pos + 12, big_endian) << 32) | _u32(buf, pos + 16, big_endian)
            out_caplen[n] = caplen
            out_wirelen[n] = _u32(buf, pos + 24, big_endian)
            out_data[n] = pos + 28
        out_hdr[n] = pos
        n += 1
        pos += blen
    return n, pos, FULL
