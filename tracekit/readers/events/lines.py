"""A text file -> Arrow arrays of its non-blank lines and their line numbers.

Strategy: the file is read in large chunks cut at a newline; line
boundaries are found with numpy and the chunk's bytes become the data
buffer of an Arrow string array (no Python object per line). Invalid UTF-8
is found by Arrow's validation and only then are lines decoded one by one
to name the bad ones.
"""

import numpy as np
import pyarrow as pa

CHUNK_BYTES = 64 << 20


def iter_lines(fileobj, chunk_bytes=CHUNK_BYTES):
    """Yield (line numbers, texts, trail, bad) per chunk: int64 numpy array,
    Arrow string array (each text still ends with its line end), int8 numpy
    array of how many line-end characters it carries (0-2), and
    [(line, problem)] for lines that are not UTF-8."""
    carry = b""
    first_line = 1
    while True:
        block = fileobj.read(chunk_bytes)
        data = carry + block
        if not block:
            if data:
                yield _split(data, first_line, final=True)[:4]
            return
        cut = data.rfind(b"\n")
        if cut < 0:
            carry = data
            continue
        carry = data[cut + 1:]
        numbers, texts, trail, bad, first_line = _split(data[:cut + 1], first_line)
        yield numbers, texts, trail, bad


def _split(data, first_line, final=False):
    buf = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(buf == 10)
    starts = np.concatenate(([0], newlines + 1))
    if not final or starts[-1] == len(buf):  # nothing after the last newline
        starts = starts[:-1]
    # each line's string runs to the next line's start: it keeps its "\r\n",
    # which JSON reads as whitespace, and the chunk is not copied
    offsets = np.append(starts, len(buf)).astype(np.int64)
    ends = np.minimum(np.append(newlines, len(buf))[:len(starts)], len(buf))
    cr = (ends > starts) & (buf[np.maximum(ends - 1, 0)] == 13)
    keep = (ends - cr) > starts  # blank lines are not records
    trail = ((ends < len(buf)).astype(np.int8) + cr)[:len(starts)]
    numbers = first_line + np.arange(len(starts), dtype=np.int64)
    arr = pa.LargeStringArray.from_buffers(len(starts), pa.py_buffer(offsets), pa.py_buffer(data))
    bad = []
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid:
        arr, bad = _decode_each(data, starts, offsets, numbers)
    if not keep.all():
        arr, numbers, trail = arr.filter(pa.array(keep)), numbers[keep], trail[keep]
        bad = [b for b in bad if keep[b[0] - first_line]]
    return numbers, arr, trail, bad, first_line + len(newlines)


def _decode_each(data, starts, offsets, numbers):
    texts, bad = [], []
    for n, s, e in zip(numbers.tolist(), starts.tolist(), offsets[1:].tolist()):
        try:
            texts.append(data[s:e].decode("utf-8"))
        except UnicodeDecodeError as err:
            texts.append(None)
            bad.append((n, f"not UTF-8 (byte {err.start} of the line)"))
    return pa.array(texts, type=pa.large_string()), bad
