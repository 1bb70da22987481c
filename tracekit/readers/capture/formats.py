"""Open a capture file by its magic number."""

import hashlib
import os

from ...core.errors import NotACaptureError
from ..formats import CAPTURE_FORMATS
from .base import DEFAULT_BATCH_PACKETS, DEFAULT_CHUNK_BYTES, EXPECTED, describe_magic
from .pcap import PcapReader, sniff_pcap
from .pcapng import PcapngReader, sniff_pcapng

FORMATS = CAPTURE_FORMATS  # the capture formats tracekit reads


def is_capture_file(path):
    """True when the file starts with a pcap or pcapng magic number (OSError if
    it cannot be read): how ingest tells captures from event logs."""
    with open(path, "rb") as f:
        head = f.read(4)
    return bool(sniff_pcap(head) or sniff_pcapng(head))


def split_inputs(files, input_format="auto"):
    """(capture paths, log paths): by magic number, or all one kind when a format
    is named (pcap/pcapng: captures; any log format: logs)."""
    from ...core.errors import TracekitError

    files = [str(f) for f in files]
    if input_format in FORMATS:
        return files, []
    if input_format not in ("auto", None):
        return [], files
    captures, logs = [], []
    for path in files:
        try:
            capture = is_capture_file(path)
        except OSError as e:
            raise TracekitError(f"{path}: cannot read: {e.strerror}") from None
        (captures if capture else logs).append(path)
    return captures, logs


def open_capture(path, fileobj, chunk_bytes=DEFAULT_CHUNK_BYTES,
                 batch_packets=DEFAULT_BATCH_PACKETS):
    """Return a reader for an open binary file, chosen by its magic number."""
    head = fileobj.read(4)
    fileobj.seek(0)
    if sniff_pcapng(head):
        return PcapngReader(path, fileobj, chunk_bytes, batch_packets)
    if sniff_pcap(head):
        return PcapReader(path, fileobj, chunk_bytes, batch_packets)
    raise NotACaptureError(
        f"{path} is not a pcap or pcapng capture: {describe_magic(head)}; "
        f"expected the magic {EXPECTED}")


def hash_file(path, block=8 << 20):
    """sha256 of a file (hashlib releases the GIL, so this runs beside parsing)."""
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        # no bigger than the file: zeroing 8 MiB for a 30 kB capture costs more
        # than hashing it (a directory of small captures: ~1 ms a file)
        buf = bytearray(max(1, min(block, os.fstat(f.fileno()).st_size + 1)))
        view = memoryview(buf)
        while True:
            n = f.readinto(buf)
            if not n:
                break
            h.update(view[:n])
    return h.hexdigest()
