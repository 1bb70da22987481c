"""CSV event logs: a header row naming the columns, mapped to tracekit's schema.

The columns `ts`/`ts_ns`/`time`, `kind`, `run`, `request`, `stream` and the
flow hints keep their meaning; every other column is kept as a field. Cells
that read as integers, decimals or true/false become JSON numbers and
booleans; empty cells are left out.
"""

import csv
import re

from .jsontext import MAX_INT_DIGITS, BadRecord, dumps

_INT = re.compile(r"[+-]?\d+\Z")
_FLOAT = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?\Z")
MAX_FIELD_BYTES = 16 << 20  # a cell larger than this is a malformed row, not a crash
MAX_QUOTED_LINES = 1000  # a quoted cell may span lines, this many at most


def _value(cell):
    if _INT.match(cell):
        return int(cell) if len(cell.lstrip("+-")) <= MAX_INT_DIGITS else cell
    if _FLOAT.match(cell) and len(cell) <= 400:
        return float(cell)  # finite or not: dumps() refuses what JSON cannot hold
    if cell.lower() in ("true", "false"):
        return cell.lower() == "true"
    return cell


def records(text):
    """Yield (line number, JSON text or None, problem or None) for each data row.

    A row starts on a line; a quote left open runs it on over the next lines (a
    quoted cell may hold line breaks). A quote still open after MAX_QUOTED_LINES
    lines or at the end of the file, or a row over several lines that has the
    wrong width, is one malformed line, and the next line is read as a row of
    its own: an unterminated quote never swallows the rows after it."""
    lines = text.splitlines(keepends=True)
    csv.field_size_limit(MAX_FIELD_BYTES)
    header = None
    i = 0
    while i < len(lines):
        start = i
        buf = lines[i]
        quotes = buf.count('"')
        i += 1
        while quotes % 2 and i < len(lines) and i - start < MAX_QUOTED_LINES:
            buf += lines[i]
            quotes += lines[i].count('"')
            i += 1
        line = start + 1
        if quotes % 2:
            yield line, None, "a quote that is never closed"
            i = start + 1
            continue
        try:
            row = next(csv.reader([buf], strict=True), [])
        except csv.Error as e:
            yield line, None, f"not CSV ({e})"
            i = start + 1
            continue
        if not any(cell.strip() for cell in row):
            continue
        if header is None:
            header = [h.strip() for h in row]
            continue
        if len(row) != len(header):
            if i - start > 1:
                yield line, None, "a quote that is never closed (the row it opens is too wide)"
                i = start + 1
            else:
                yield line, None, f"{len(row)} fields, the header has {len(header)}"
            continue
        try:
            record = {k: _value(v.strip()) for k, v in zip(header, row) if v.strip() != ""}
            yield line, dumps(record), None
        except BadRecord as e:
            yield line, None, str(e)


def looks_like_csv(first_line):
    names = [h.strip().lower() for h in first_line.split(",")]
    return len(names) > 1 and "kind" in names and bool({"ts", "ts_ns", "time"} & set(names))
