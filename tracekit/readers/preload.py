"""Load ingest's compiled kernels on one packet, beside the work before them.

Strategy: the first call of a numba kernel in a process loads numba and
its cached machine code (~0.3 CPU s, more than reading 100 k packets), and
the record scan needs it before the first packet. `load_kernels` runs the
very code ingest runs (a reader over a one-packet pcap and pcapng in
memory, the decoder, the flow tracker), so the kernels are loaded with the
argument types ingest will give them; called on a thread
(tracekit.core.jit.preload) while the store is opened and the file read.
"""

import io
import struct

import numpy as np

from .capture import open_capture
from .capture.pcap import sniff_pcap
from .capture.pcapng import sniff_pcapng
from .capture.scan import scan_pcap, scan_pcapng
from .decode.flows import EMPTY, FlowTable, _rehash, _track
from .decode.packets import decode_packets
from .decode.status import CODE

# what ingest runs compiled: compiled ahead of time by the warm-up (core/aot.py)
INGEST_KERNELS = (scan_pcap, scan_pcapng, _track, _rehash)

# Ethernet, IPv4, TCP SYN: 10.0.0.1:1234 -> 10.0.0.2:80
_PACKET = (b"\x02\x00\x00\x00\x00\x02" b"\x02\x00\x00\x00\x00\x01" b"\x08\x00"
           + struct.pack(">BBHHHBBH4s4s", 0x45, 0, 40, 1, 0x4000, 64, 6, 0,
                         bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
           + struct.pack(">HHIIBBHHH", 1234, 80, 1, 0, 5 << 4, 0x02, 65535, 0, 0))


def _pcap():
    head = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    return head + struct.pack("<IIII", 1, 0, len(_PACKET), len(_PACKET)) + _PACKET


def _pcapng():
    shb = struct.pack("<IIIHHqI", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1, 28)
    idb = struct.pack("<IIHHII", 1, 20, 1, 0, 65535, 20)
    data = _PACKET + b"\0" * (-len(_PACKET) % 4)
    size = 32 + len(data)
    epb = struct.pack("<IIIIIII", 6, size, 0, 0, 1_000_000, len(_PACKET), len(_PACKET))
    return shb + idb + epb + data + struct.pack("<I", size)


def formats_of(paths):
    """The capture formats among `paths` (by magic number; unreadable ones left out)."""
    found = set()
    for path in paths:
        try:
            with open(path, "rb") as f:
                head = f.read(4)
        except OSError:
            continue
        found |= {"pcapng"} if sniff_pcapng(head) else {"pcap"} if sniff_pcap(head) else set()
        if len(found) == 2:
            break
    return sorted(found)


def load_kernels(paths):
    """Run ingest's kernels (compiled: the caller has chosen them) on one packet
    of each capture format among `paths`."""
    for blob in ((_pcap() if f == "pcap" else _pcapng()) for f in formats_of(paths)):
        reader = open_capture("<kernels>", io.BytesIO(blob))
        types = np.array([i.link_type for i in reader.interfaces] + [-1], np.int32)
        for batch in reader.batches():
            cols = decode_packets(batch.data, batch.data_offset, batch.captured_bytes,
                                  batch.wire_bytes, types[batch.interface_id])
            table = FlowTable(jit=reader.jit)
            table.track(cols, batch.ts_ns, batch.first_frame, batch.wire_bytes,
                        cols["status"] == CODE["bad_tcp_header"])
            # (as a grown or evicted table is filled again)
            _rehash(reader.jit, table.key, table.tiny, table.live(),
                    np.full(len(table.slots), EMPTY, np.int32))
