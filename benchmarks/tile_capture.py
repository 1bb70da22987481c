"""Make a bigger capture from a real one: N copies one after another, each its own hosts.

For the scaling table: `kernel-tcp-mix-128.pcap` (2.9 M packets of real
kernel TCP) tiled 3x and 10x gives 8.6 M and 29 M packets with the same mix
of flows. Each copy is shifted in time to start 1 s after the previous one
ends, and its IPv4 addresses get the copy's number in their third octet
(198.18.0.1 -> 198.18.k.1), so every copy's connections are new flows, as in
a longer capture of more hosts; nothing else changes (IP checksums are left
as they were: neither tracekit nor tcptrace verifies them).

    python benchmarks/tile_capture.py benchmarks/data/kernel-tcp-mix-128.pcap 10 \\
        benchmarks/data/kernel-tcp-mix-128-x10.pcap

Classic pcap, Ethernet, microsecond or nanosecond timestamps, little endian.
"""

import argparse
import struct
import sys

import numpy as np


def record_offsets(buf):
    """Byte offset of every record header (a sequential walk, once)."""
    offsets = []
    pos = 24
    end = len(buf)
    while pos + 16 <= end:
        caplen = struct.unpack_from("<I", buf, pos + 8)[0]
        if pos + 16 + caplen > end:
            break
        offsets.append(pos)
        pos += 16 + caplen
    return np.array(offsets, np.int64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture")
    ap.add_argument("copies", type=int)
    ap.add_argument("out")
    args = ap.parse_args()
    data = np.fromfile(args.capture, np.uint8)
    magic, = struct.unpack_from("<I", data, 0)
    if magic not in (0xA1B2C3D4, 0xA1B23C4D) or struct.unpack_from("<I", data, 20)[0] != 1:
        sys.exit("tile_capture.py takes little-endian classic pcap of Ethernet")
    per_second = 1_000_000 if magic == 0xA1B2C3D4 else 1_000_000_000
    offsets = record_offsets(memoryview(data))
    sec = data[offsets[:, None] + np.arange(4)].copy().view("<u4").ravel().astype(np.int64)
    frac = data[offsets[:, None] + np.arange(4, 8)].copy().view("<u4").ravel().astype(np.int64)
    ts = sec * per_second + frac
    span = int(ts.max() - ts.min()) + per_second  # each copy starts 1 s after the last ended
    caplen = data[offsets[:, None] + np.arange(8, 12)].copy().view("<u4").ravel()
    ipv4 = (caplen >= 34) & (data[offsets + 16 + 12] == 0x08) & (data[offsets + 16 + 13] == 0x00)
    src3 = offsets[ipv4] + 16 + 14 + 12 + 2  # third octet of the source address
    dst3 = offsets[ipv4] + 16 + 14 + 16 + 2
    with open(args.out, "wb") as out:
        out.write(data[:24].tobytes())
        for k in range(args.copies):
            copy = data[24:offsets[-1] + 16 + int(caplen[-1])].copy()
            shifted = ts + k * span
            base = offsets - 24
            new_sec = (shifted // per_second).astype("<u4").view(np.uint8).reshape(-1, 4)
            new_frac = (shifted % per_second).astype("<u4").view(np.uint8).reshape(-1, 4)
            copy[base[:, None] + np.arange(4)] = new_sec
            copy[base[:, None] + np.arange(4, 8)] = new_frac
            copy[src3 - 24] = (copy[src3 - 24].astype(np.int64) + k) % 256
            copy[dst3 - 24] = (copy[dst3 - 24].astype(np.int64) + k) % 256
            out.write(copy.tobytes())
            print(f"copy {k + 1} of {args.copies}", file=sys.stderr)
    print(f"{args.out}: {args.copies * len(offsets):,} packets")


if __name__ == "__main__":
    main()
