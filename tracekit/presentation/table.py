"""Rows to text: an aligned terminal table, CSV, JSON (an array of objects),
NDJSON (one object a line) or Markdown; or to a Parquet table.

Every row-emitting command shares these formats (sqlite-utils' habit).
Numbers are right-aligned in the terminal table; NULL shows as an empty cell
(`null` in JSON); nothing is rounded except floats in the terminal and
Markdown tables, which show at most 6 significant digits.
"""

import csv
import io
import json
import math

FORMATS = ("table", "csv", "json", "ndjson", "markdown", "parquet")


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
    if fmt == "ndjson":
        return "".join(json.dumps(dict(zip(columns, (_jsonable(v) for v in r)))) + "\n"
                       for r in rows)
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


def parquet_table(pa, columns, rows):
    """A pyarrow Table of `rows` (sequences) under `columns`: each column's type
    inferred from its values (all NULL: a string column); values pyarrow cannot
    type (a Decimal, a date mixed with text) as their text."""
    arrays = []
    for i in range(len(columns)):
        values = [r[i] for r in rows]
        try:
            arrays.append(pa.array(values) if any(v is not None for v in values)
                          else pa.array(values, type=pa.string()))
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            arrays.append(pa.array([None if v is None else _cell(v) for v in values]))
    return pa.Table.from_arrays(arrays, names=[str(c) for c in columns])


def ablation_rows(results, by, top_spans=3, predictions=False):
    """(columns, rows) of the ablation table; times in ms. Numbers stay numbers:
    ci_low/ci_high (the ratio's bootstrap 95 % interval), pairs, won (rounds
    the first arm won) and lost (rounds the second won); `spans_moved` gives
    each span's signed median change in ms, and its share of the total change
    only where a share reads (the arms differ and the span moved with the
    total, by at most all of it); `verdict` is hedged (ablation.verdict)."""
    import math

    from .ablation import verdict

    def ms(ns):
        return None if ns is None or not math.isfinite(ns) else round(ns / 1e6, 1)

    def r3(x):
        return None if x is None or not math.isfinite(x) else round(x, 2)
    names = [a.level for a in results[0].arms] if results else []
    columns = list(by)
    for name in names:
        columns += [f"{name}_n", f"{name}_completed", f"{name}_median_ms"]
    tail = ["ratio", "paired_ratio", "ci_low", "ci_high", "pairs", "won", "lost", "spans_moved",
            "rtt_spread_ms", "verdict"]
    columns += tail
    if predictions:
        columns += ["predicted_by", "predicted_ms", "saved_ms", "saved_ci95_ms", "prediction"]
    rows = []
    for c in results:
        row = list(c.by)
        for arm in c.arms:
            row += [arm.n, arm.completed, ms(arm.median if arm.n else None)]
        row += [None] * (len(columns) - len(row) - len(tail) - (5 if predictions else 0))
        differs, said = verdict(c)
        moved = ", ".join(f"{name} {change / 1e6:+.1f} ms"
                          + (f" ({share:.0%})" if differs and 0 < share <= 1 else "")
                          for name, change, share in c.spans_moved[:top_spans])
        row += [r3(c.ratio_of_medians), r3(c.median_paired_ratio), r3(c.ci_low), r3(c.ci_high),
                c.pairs, c.won[0] if c.pairs else None, c.won[1] if c.pairs else None,
                moved or None, ms(c.rtt_spread_ns), said]
        if predictions:
            p = c.prediction
            if p is None:
                row += [None] * 5
            else:
                interval = (f"{ms(p.ci_low_ns)}-{ms(p.ci_high_ns)}"
                            if math.isfinite(p.ci_low_ns) else None)
                row += ["+".join(p.spans), ms(p.predicted_ns), ms(p.measured_ns), interval,
                        "holds" if p.holds else "misses"]
        rows.append(row)
    return columns, rows
