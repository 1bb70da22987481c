"""Read and decode capture files for ingest: one at a time, or small ones together.

A capture of a few hundred packets costs more in fixed work per call than
in packets: `decode_packets` sets up some ninety columns and runs a dozen
vectorised passes whatever the number of packets (2 of the 6 ms a file
took in a directory of 1,000 captures of 200 packets). So consecutive
small files are read ahead, each whole, and decoded in one call over all
their packets; every later step (duplicates, flows, payloads, rows) stays
per file, in order, as if each had been read alone.
"""

import dataclasses
import os

import numpy as np

from ..core.errors import TracekitError
from ..readers.capture import open_capture
from ..readers.decode.packets import decode_packets

SMALL_FILE = 1 << 20  # files up to this size are read ahead and decoded together,
GROUP_BYTES = 4 << 20  # up to this much of them at a time
GROUP_FILES = 64  # (and no more files than this: each holds an open file)


def open_file(path):
    """(binary file object, size), or a one-line error naming the file."""
    try:
        size = os.stat(path).st_size
        return open(path, "rb"), size
    except OSError as e:
        raise TracekitError(f"{path}: cannot read: {e.strerror}") from None


def file_size(path):
    """A file's size, or None when it cannot be read (said when it is loaded)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def link_types_of(reader, batch):
    """The link type of each packet of a batch (-1: an interface never described)."""
    types = np.array([i.link_type for i in reader.interfaces] + [-1], np.int32)
    return types[batch.interface_id]


def decoded_batches(reader, most=None):
    """(batch, link type per packet, decoded columns) of each batch a reader gives;
    with `most` (a function), cut into batches of at most `most()` packets
    (asked before each: fewer while the flow table is large)."""
    for whole in reader.batches():
        begin = 0
        while True:  # (an empty batch too, once)
            step = most() if most else len(whole)
            batch = whole if begin == 0 and step >= len(whole) else _part(whole, begin,
                                                                        begin + step)
            begin += len(batch)
            link_type = link_types_of(reader, batch)
            yield batch, link_type, decode_packets(batch.data, batch.data_offset,
                                                   batch.captured_bytes, batch.wire_bytes,
                                                   link_type)
            if begin >= len(whole):
                break


def _part(batch, begin, end):
    """Packets begin..end of a batch (over the same buffer)."""
    return dataclasses.replace(batch, data_offset=batch.data_offset[begin:end],
                   captured_bytes=batch.captured_bytes[begin:end],
                   wire_bytes=batch.wire_bytes[begin:end], ts_ns=batch.ts_ns[begin:end],
                   interface_id=batch.interface_id[begin:end],
                   file_offset=batch.file_offset[begin:end], first_frame=batch.first_frame + begin,
                   ts_bad=None if batch.ts_bad is None else batch.ts_bad[begin:end])


def small_file_groups(paths, chunk_bytes):
    """`paths` in order, cut into lists: runs of small files, and every other file alone."""
    limit = min(SMALL_FILE, chunk_bytes)
    group, held = [], 0
    for path in paths:
        size = file_size(path)
        if size is None or size > limit:  # (an unreadable file alone: its error in its turn)
            if group:
                yield group
                group, held = [], 0
            yield [path]
            continue
        if group and (held + size > GROUP_BYTES or len(group) >= GROUP_FILES):
            yield group
            group, held = [], 0
        group.append(path)
        held += size
    if group:
        yield group


def prefetch(paths, chunk_bytes, batch_packets, names=None):
    """Read small files whole and decode their packets in one call; per file
    (open file, size, its reader, [(batch, link type, columns)]). `names`: the
    name a message gives a file (a spooled stream's, pipeline/spool.py)."""
    files, out = [], []
    try:
        for path in paths:
            fileobj, size = open_file(path)
            files.append(fileobj)
            reader = open_capture((names or {}).get(path, path), fileobj, chunk_bytes,
                                  batch_packets)
            # (each batch's bytes copied: a reader may reuse its buffer for the next)
            batches = [dataclasses.replace(b, data=b.data.copy()) for b in reader.batches()]
            out.append((fileobj, size, reader, [(b, link_types_of(reader, b)) for b in batches]))
    except BaseException:
        for f in files:
            f.close()
        raise
    pairs = [pair for *_, items in out for pair in items]
    if not pairs:
        return [(f, size, reader, []) for f, size, reader, _ in out]
    shift = np.cumsum([0] + [len(b.data) for b, _ in pairs[:-1]])
    cols = decode_packets(np.concatenate([b.data for b, _ in pairs]),
                          np.concatenate([b.data_offset + s for (b, _), s in zip(pairs, shift)]),
                          np.concatenate([b.captured_bytes for b, _ in pairs]),
                          np.concatenate([b.wire_bytes for b, _ in pairs]),
                          np.concatenate([lt for _, lt in pairs]))
    prepared, start = [], 0
    for fileobj, size, reader, items in out:
        decoded = []
        for batch, link_type in items:
            end = start + len(batch)
            decoded.append((batch, link_type, {k: v[start:end] for k, v in cols.items()}))
            start = end
        prepared.append((fileobj, size, reader, decoded))
    return prepared
