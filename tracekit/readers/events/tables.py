"""Result files that carry no time of their own: a `queqiaobench --json`
report, the TSV of Queqiao's harness scripts (scripts/bench_*.sh), and a
Prometheus text scrape (`curl .../metrics`) when it has no timestamps.

Their rows are stamped with the time the caller states (`tracekit ingest
--time`); without one they are kept on the file's own clock (time 0,
`"clock": "trace"`, counted and warned about like a qlog without a
reference time), never stamped with a guess such as the file's mtime. Each
row is one event whose `run` names the dimensions that tell one run from
another in its file; the conditions of the whole file (a report's `path`
section) are kept in every row.
"""

import re

from ...core.errors import TracekitError
from .jsontext import BadRecord, dumps, finite, loads
from .logfmt import value
from .queqiao import counter_kind

def _stamped(record, time_ns):
    """`record` at the stated time, or (none stated) at 0 on the file's own
    clock: "clock" last, where the reader counts it."""
    record = {k: v for k, v in record.items() if k not in ("ts", "clock")}
    if time_ns is None:
        return {**record, "ts": 0, "clock": "trace"}
    return {**record, "ts": time_ns}


def _run(row, keys):
    parts = [str(row[k]) for k in keys if row.get(k) is not None]
    return "/".join(parts) or None


# (section, kind, the fields that tell its rows apart) -- cmd/queqiaobench/report.go
BENCH_SECTIONS = (
    ("trials", "queqiaobench_trial", ("stack", "flows", "trial")),
    ("latency", "queqiaobench_latency", ("stack", "trial")),
    ("contention", "queqiaobench_contention", ("stack_a", "stack_b", "trial")),
    ("summary", "queqiaobench_summary", ("stack", "flows")),
)


def load_bench(path, text):
    try:
        doc = loads(text, lenient=True)
    except BadRecord as e:
        raise TracekitError(f"{path}: not a valid queqiaobench report: {e}") from None
    if not isinstance(doc, dict):
        raise TracekitError(f"{path}: not a valid queqiaobench report: not a JSON object")
    return doc


def bench_records(path, doc, time_ns=None):
    """Events of a queqiaobench --json report: its configuration, then one per
    trial, latency sample, contention trial and summary cell."""
    source = doc.get("source") if isinstance(doc.get("source"), dict) else {}
    stamp = source.get("time") or doc.get("time")  # not in report.go's schema: a later one may add it
    conditions = doc.get("path")
    base = {"schema_version": doc.get("schema_version"), "path": conditions}

    def timed(record):
        return {**record, "ts": stamp} if stamp is not None else _stamped(record, time_ns)
    n = 1
    try:
        yield n, dumps(timed({**base, "kind": "queqiaobench_config",
                              "arguments": doc.get("arguments"), "source": source})), None
    except BadRecord as e:
        yield n, None, str(e)
    for section, kind, keys in BENCH_SECTIONS:
        rows = doc.get(section) or []
        if not isinstance(rows, list):
            n += 1
            yield n, None, f"{section} is not a list"
            continue
        for row in rows:
            n += 1
            if not isinstance(row, dict):
                yield n, None, f"{section} entry is not an object"
                continue
            try:
                yield n, dumps(timed({**row, **base, "kind": kind, "run": _run(row, keys)})), None
            except BadRecord as e:
                yield n, None, str(e)


# the harness scripts' first column names what a row is
HARNESS_FIRST = ("trial", "round")


def looks_like_harness(first_line):
    cells = first_line.rstrip("\r\n").split("\t")
    return len(cells) >= 3 and cells[0] in HARNESS_FIRST and "complete" in cells


def harness_records(path, text, time_ns=None):
    """Events of a harness TSV (bench_http.sh, bench_single_flow.sh,
    bench_live_matched.sh): a header, then one tab-separated row per trial;
    `run` is label/flows/flow/trial or label/round (what the columns hold).
    A `time`, `timestamp` or `started_utc` column dates its row; else the
    stated time does, and without one the file's own clock."""
    lines = text.splitlines()
    header = lines[0].split("\t") if lines else []
    if len(header) < 2 or any(not h.strip() for h in header):
        raise TracekitError(f"{path}: not a harness TSV: the first line is not a header of "
                            f"tab-separated column names")
    header = [h.strip() for h in header]
    # a column of times (as Queqiao's visualizer reads them) dates each row;
    # without one the rows take the stated time, or the file's own clock
    timed = next((h for h in ("time", "timestamp", "started_utc") if h in header), None)
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip() or line.startswith("#"):
            continue
        cells = line.split("\t")
        if len(cells) != len(header):
            yield number, None, f"{len(cells)} cells where the header names {len(header)}"
            continue
        row = {h: value(c.strip()) for h, c in zip(header, cells) if c.strip() != ""}
        if "complete" in row and row["complete"] in (0, 1):  # the scripts write 1/0
            row["complete"] = bool(row["complete"])
        record = {**row, "kind": "queqiao_harness_trial",
                  "run": _run(row, ("label", "flows", "flow", "trial", "round"))}
        record = {**record, "ts": row.get(timed, time_ns)} if timed else _stamped(record, time_ns)
        try:
            yield number, dumps(record), None
        except BadRecord as e:
            yield number, None, str(e)


# Prometheus text exposition format
SAMPLE = re.compile(r"([A-Za-z_:][\w:]*(?:\{[^}]*\})?)\s+(\S+)(?:\s+(-?\d+))?\s*$")
TIME_COMMENT = re.compile(r"#\s*(?:timestamp|time|scrape(?:_time)?)\s*[:= ]\s*(.+)$",
                          re.IGNORECASE)


def looks_like_prometheus(text):
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith(("# HELP ", "# TYPE ")) or TIME_COMMENT.match(line):
            return True
        return line.startswith("queqiao_") and SAMPLE.match(line) is not None
    return False


def _number(text):
    try:
        number = float(text)
    except ValueError:
        return None
    if not finite(number):
        return text  # +Inf, NaN: JSON has no such number
    return int(number) if number.is_integer() and abs(number) < 2 ** 53 else number


def _comment_time(text):
    """A time comment's value: RFC 3339 text as it is; a number of seconds,
    ms, us or ns since the epoch (told apart by size) as integer ns."""
    try:
        number = float(text)
    except ValueError:
        return text
    if not finite(number) or number <= 0:
        return text
    for limit, scale in ((1e11, 1e9), (1e14, 1e6), (1e17, 1e3)):
        if number < limit:
            return round(number * scale)
    return round(number)


def prometheus_blocks(path, text, time_ns=None):
    """[(first line, time or None, {name: value} or None for a malformed
    line)]: one per scrape. A scrape starts at a time comment (`# timestamp:
    ...`, as Queqiao's visualizer reads them), at a sample timestamp that
    differs from the scrape's, or where a name repeats."""
    blocks, current = [], None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        stamp = TIME_COMMENT.match(line)
        if stamp:
            current = [number, _comment_time(stamp.group(1).strip()), {}]
            blocks.append(current)
            continue
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if m is None:
            blocks.append([number, None, None])
            continue
        name, sample, millis = m.groups()
        if _number(sample) is None:
            blocks.append([number, None, None])
            continue
        at = int(millis) * 1_000_000 if millis else None
        if (current is None or name in current[2]
                or (at is not None and current[2] and current[1] not in (None, at))):
            current = [number, at, {}]
            blocks.append(current)
        elif at is not None and current[1] is None:
            current[1] = at
        current[2][name] = _number(sample)
    timeless = [b for b in blocks if b[2] and b[1] is None]
    if timeless:
        if len(timeless) > 1:
            raise TracekitError(f"{path}: {len(timeless)} scrapes without a time (no "
                                f"'# timestamp:' comment or sample timestamp); --time can "
                                f"place only one")
        timeless[0][1] = time_ns  # None: the file's own clock
    return blocks


def prometheus_records(path, text, counters, time_ns=None):
    """One event per scrape (kind queqiao_metrics: the names Queqiao's
    runtime snapshots use), with the counters' deltas."""
    for number, stamp, metrics in prometheus_blocks(path, text, time_ns):
        if metrics is None:
            yield number, None, "not a Prometheus sample line (name{labels} value [timestamp])"
            continue
        if not metrics:
            continue
        record = {"kind": "queqiao_metrics", "source": "prometheus", **metrics}
        record["deltas"] = counters.deltas(("prometheus",), metrics.items(), counter_kind)
        record = {**record, "ts": stamp} if stamp is not None else _stamped(record, None)
        try:
            yield number, dumps(record), None
        except BadRecord as e:
            yield number, None, str(e)
