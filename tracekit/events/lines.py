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
    """Yield (line numbers, texts, bad) per chunk: int64 numpy array, Arrow
    string array, and [(line, problem)] for lines that are not UTF-8."""
    carry = b""
    first_line = 1
    while True:
        block = fileobj.read(chunk_bytes)
        data = carry + block
        if not block:
            if data:
                yield _split(data, first_line, final=True)[:3]
            return
        cut = data.rfind(b"\n")
        if cut < 0:
            carry = data
            continue
        carry = data[cut + 1:]
        numbers, texts, bad, first_line = _split(data[:cut + 1], first_line)
        yield numbers, texts, bad


def _split(data, first_line, final=False):
    buf = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(buf == 10)
    starts = np.concatenate(([0], newlines + 1))
    ends = np.concatenate((newlines, [len(buf)]))
    if not final or ends[-1] == starts[-1]:  # nothing after the last newline
        starts, ends = starts[:-1], ends[:-1]
    numbers = first_line + np.arange(len(starts), dtype=np.int64)
    # drop a '\r' before the '\n', then blank lines
    cr = (ends > starts) & (buf[np.maximum(ends - 1, 0)] == 13)
    ends = ends - cr
    keep = ends > starts
    starts, ends, numbers = starts[keep], ends[keep], numbers[keep]
    texts, bad = _strings(data, buf, starts, ends, numbers)
    return numbers, texts, bad, first_line + len(newlines)


def _strings(data, buf, starts, ends, numbers):
    # contiguous copies of the kept lines, so offsets can describe them
    lengths = ends - starts
    offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    index = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
    values = buf[index]
    arr = pa.LargeStringArray.from_buffers(len(starts), pa.py_buffer(offsets), pa.py_buffer(values))
    try:
        arr.validate(full=True)
        return arr, []
    except pa.ArrowInvalid:
        pass
    good, bad = [], []
    for n, s, e in zip(numbers.tolist(), starts.tolist(), ends.tolist()):
        try:
            good.append(data[s:e].decode("utf-8"))
        except UnicodeDecodeError as err:
            good.append(None)
            bad.append((n, f"not UTF-8 (byte {err.start} of the line)"))
    return pa.array(good, type=pa.large_string()), bad
