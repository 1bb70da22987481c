"""CSV event logs: a header row naming the columns, mapped to tracekit's schema.

The columns `ts`/`ts_ns`/`time`, `kind`, `run`, `request`, `stream` and the
flow hints keep their meaning; every other column is kept as a field. Cells
that read as integers, decimals or true/false become JSON numbers and
booleans; empty cells are left out.
"""

import csv
import io
import json
import re

_INT = re.compile(r"[+-]?\d+\Z")
_FLOAT = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?\Z")


def _value(cell):
    if _INT.match(cell):
        return int(cell)
    if _FLOAT.match(cell):
        return float(cell)
    if cell.lower() in ("true", "false"):
        return cell.lower() == "true"
    return cell


def records(text):
    """Yield (line number, JSON text or None, problem or None) for each data row."""
    reader = csv.reader(io.StringIO(text, newline=""))
    header = None
    for row in reader:
        if not any(cell.strip() for cell in row):
            continue
        if header is None:
            header = [h.strip() for h in row]
            continue
        line = reader.line_num
        if len(row) != len(header):
            yield line, None, f"{len(row)} fields, the header has {len(header)}"
            continue
        record = {k: _value(v.strip()) for k, v in zip(header, row) if v.strip() != ""}
        yield line, json.dumps(record), None


def looks_like_csv(first_line):
    names = [h.strip().lower() for h in first_line.split(",")]
    return len(names) > 1 and "kind" in names and bool({"ts", "ts_ns", "time"} & set(names))
