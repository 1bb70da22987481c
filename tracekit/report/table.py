"""Rows to text: an aligned terminal table, CSV, JSON (lines of objects) or Markdown.

Every row-emitting command shares these four formats (sqlite-utils' habit).
Numbers are right-aligned in the terminal table; NULL shows as an empty cell
(`null` in JSON); nothing is rounded except floats in the terminal and
Markdown tables, which show at most 6 significant digits.
"""

import csv
import io
import json
import math

FORMATS = ("table", "csv", "json", "markdown")


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_cell(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_cell(v)}" for k, v in value.items()) + "}"
    return str(value)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _jsonable(value):
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return str(value)


def render(columns, rows, fmt="table"):
    """Return the text of `rows` (sequences) under `columns` in format `fmt`."""
    if fmt == "csv":
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        w.writerow(columns)
        for r in rows:
            w.writerow(["" if v is None else v for v in r])
        return out.getvalue()
    if fmt == "json":
        return json.dumps([dict(zip(columns, (_jsonable(v) for v in r))) for r in rows],
                          indent=2) + "\n"
    cells = [[_cell(v) for v in r] for r in rows]
    numeric = [all(_is_number(r[i]) or r[i] is None for r in rows) and rows
               for i in range(len(columns))]
    if fmt == "markdown":
        def esc(s):
            return s.replace("|", "\\|")
        lines = ["| " + " | ".join(esc(c) for c in columns) + " |",
                 "| " + " | ".join("---:" if numeric[i] else "---"
                                   for i in range(len(columns))) + " |"]
        lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in cells]
        return "\n".join(lines) + "\n"
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]

    def line(values):
        parts = [v.rjust(widths[i]) if numeric[i] else v.ljust(widths[i])
                 for i, v in enumerate(values)]
        return "  ".join(parts).rstrip()
    out = [line(columns), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    return "\n".join(out) + "\n"
