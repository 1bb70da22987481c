"""Capture readers (I/O): pcap and pcapng files to batches of raw packets."""

from .base import Interface, PacketBatch, ReadStop
from .formats import hash_file, open_capture

__all__ = ["Interface", "PacketBatch", "ReadStop", "hash_file", "open_capture"]
