"""Read chosen packet records back from a capture file, by their byte offset.

Analyses that need payload bytes (the TLS handshake) fetch just those
records: `packets.file_offset` says where each record starts, so no scan of
the file is needed. pcap records are a 16-byte header and the packet;
pcapng Enhanced and obsolete Packet Blocks keep the packet 28 bytes in, Simple
Packet Blocks 12 bytes in (their length is the block's, capped by the
interface snaplen, here by the block).
"""

import struct

import numpy as np

from ..errors import CaptureFormatError

EPB, SPB, PB = 6, 3, 2


def read_records(path, fmt, offsets):
    """(data, start, captured) for the records at `offsets`: numpy arrays over one buffer."""
    order = np.argsort(offsets, kind="stable")
    pieces, starts, lengths = [], np.zeros(len(offsets), np.int64), np.zeros(len(offsets), np.int64)
    pos = 0
    try:
        f = open(path, "rb")
    except OSError as e:
        raise CaptureFormatError(path, 0, f"cannot reopen the capture to read payloads: "
                                          f"{e.strerror}") from None
    with f:
        head = f.read(4)
        little_pcap = head in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1")
        for i in order:
            off = int(offsets[i])
            f.seek(off)
            if fmt == "pcap":
                hdr = f.read(16)
                if len(hdr) < 16:
                    raise CaptureFormatError(path, off, "record header expected")
                caplen = struct.unpack_from("<I" if little_pcap else ">I", hdr, 8)[0]
                data = f.read(caplen)
            else:
                hdr = f.read(28)
                if len(hdr) < 12:
                    raise CaptureFormatError(path, off, "pcapng block expected")
                e = "<" if struct.unpack_from("<I", hdr, 0)[0] in (EPB, SPB, PB) else ">"
                btype, blen = struct.unpack_from(e + "II", hdr, 0)
                if btype == SPB:
                    f.seek(off + 12)
                    caplen = struct.unpack_from(e + "I", hdr, 8)[0]
                    caplen = min(caplen, blen - 16)
                elif btype in (EPB, PB):
                    caplen = struct.unpack_from(e + "I", hdr, 20)[0]
                else:
                    raise CaptureFormatError(path, off, f"a packet block expected, "
                                                        f"found block type {btype:#x}")
                data = f.read(caplen)
            pieces.append(data)
            starts[i] = pos
            lengths[i] = len(data)
            pos += len(data)
    buf = np.frombuffer(b"".join(pieces), np.uint8)
    return buf, starts, lengths
