"""Application event logs -> the normalised rows of `events`.

Formats (detected from the content, or named with --format):

    jsonl     tracekit's own schema, one JSON object per line (README)
    csv       a header row, then one event per row, the same names
    qlog      IETF qlog, JSON or JSON-SEQ (aioquic and other QUIC stacks)
    queqiao   Queqiao's runtime log and lane trace (Go slog JSON Lines or
              text), capture_metrics.py's scrapes
    queqiaobench  a `queqiaobench --json` report
    queqiao-tsv   the TSV of Queqiao's harness scripts (bench_*.sh)
    prometheus    a Prometheus text scrape (Queqiao's /metrics)
    har       a browser's HTTP Archive (each entry a request)
    otlp      OpenTelemetry traces as OTLP JSON (the SDK's and the
              Collector's file exporters): agent tasks and rounds

queqiaobench, queqiao-tsv and prometheus (TIMELESS) may carry no time of
their own: they then take the caller's (`time_ns`, `tracekit ingest
--time`) or stay on their own clock (time 0, counted as trace-clock events).

Every format is first turned into records of tracekit's schema; one SQL
normaliser (normalise.sql) then extracts the columns and names what is
wrong with a record (the records of many small logs in one query:
`read_logs`). A malformed record is counted with its line number and
reason; the rest of the file is kept. Nothing here touches the store.
"""

import json
import os
import threading
from dataclasses import dataclass, field
from importlib import resources

import duckdb
import numpy as np
import pyarrow as pa

from ...core.errors import NotACaptureError, TracekitError
from ..capture.base import EXPECTED, describe_magic
from ..formats import LOG_FORMATS
from ..formats import TIMELESS as TIMELESS_FORMATS
from . import csvlog, har, otlp, qlog, queqiao, tables
from .lines import iter_lines

FORMATS = LOG_FORMATS
TIMELESS = TIMELESS_FORMATS
LINE_FORMATS = ("csv", "queqiao", "queqiao-tsv", "prometheus")  # a bad line is one bad record


class NotALogError(NotACaptureError):
    """Neither a capture nor a log tracekit can read."""


@dataclass
class ParsedLog:
    path: str
    format: str
    table: pa.Table  # line, ts_ns, kind, run, request, stream, flow hints, fields
    records: int = 0
    malformed: list = field(default_factory=list)  # [(line, problem)] in file order
    private_dropped: int = 0
    negative_deltas: int = 0  # counter decreases whose interval is unknown (delta null)
    counter_resets: int = 0  # process counters that restarted (delta = the new value)
    trace_clock_events: int = 0  # events timed from their trace's start (no wall clock)
    time_stated: bool = False  # stamped with the caller's time_ns (the file has none)


def _normaliser():
    return resources.files(__package__).joinpath("normalise.sql").read_text()


# byte-order marks, longest first (UTF-32 LE starts with UTF-16 LE's)
BOMS = ((b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"),
        (b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))


def encoding(head):
    """(encoding, BOM length) of a text file from its first bytes: a byte-order
    mark names UTF-8, -16 or -32; without one the text is read as UTF-8."""
    for bom, name in BOMS:
        if head.startswith(bom):
            return name, len(bom)
    return "utf-8", 0


def _utf8_stream(path, f, head):
    """A binary stream of the file's text as UTF-8 without a BOM, for the line reader."""
    import io
    name, skip = encoding(head)
    if name == "utf-8":
        f.seek(skip)
        return f
    f.seek(0)
    data = f.read()[skip:]
    try:
        return io.BytesIO(data.decode(name).encode("utf-8"))
    except UnicodeDecodeError as e:
        raise TracekitError(f"{path}: at byte offset {e.start + skip}: not {name.upper()} text, "
                            f"although it starts with that byte-order mark") from None


def detect(path, head):
    """The log format of a file from its first bytes, or NotALogError."""
    name, skip = encoding(head)
    text = head[skip:].decode(name, errors="replace")
    stripped = text.lstrip()
    if qlog.looks_like_qlog(text):
        return "qlog"
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    if stripped.startswith("{"):
        try:
            obj = json.loads(first)
        except (ValueError, RecursionError):  # not one JSON object on the first line
            obj = None
        if obj is None:  # one multi-line JSON document
            if '"resourceSpans"' in text:
                return "otlp"
            if '"schema_version"' in text and '"trials"' in text:
                return "queqiaobench"
            if '"log"' in text and '"entries"' in text:
                return "har"
            return "jsonl"
        if har.looks_like_har(obj):
            return "har"
        if otlp.looks_like_otlp(obj):
            return "otlp"
        if queqiao.is_bench_report(obj):
            return "queqiaobench"
        if queqiao.is_runtime_record(obj):
            return "queqiao"
        return "jsonl"
    if queqiao.looks_like_text(first.strip()):
        return "queqiao"
    if tables.looks_like_harness(first):
        return "queqiao-tsv"
    if tables.looks_like_prometheus(text):
        return "prometheus"
    if csvlog.looks_like_csv(first):
        return "csv"
    raise NotALogError(f"{path} is not a pcap or pcapng capture: {describe_magic(head)}; "
                       f"expected the magic {EXPECTED}, or an event log (JSON Lines, CSV "
                       f"with ts and kind columns, qlog, Queqiao; --format names one)")


_local = threading.local()


def _connection():
    """The normaliser's in-memory DuckDB, one per thread: opening one costs about
    20 ms, more than reading a small log (a lab run's two logs of a few kB)."""
    con = getattr(_local, "con", None)
    if con is None:
        con = _local.con = duckdb.connect()
    return con


SMALL_LOG = 1 << 20  # logs up to this size are normalised together,
BATCH_BYTES = 16 << 20  # up to this much of them in one query


def read_log(path, fmt=None, time_ns=None):
    """Parse one event log; return a ParsedLog (malformed records listed, not fatal).
    `time_ns` stamps the rows of a format that carries no time (TIMELESS)."""
    return read_logs([path], fmt, time_ns)[0]


def read_logs(paths, fmt=None, time_ns=None):
    """read_log of each path, in order. The records of small logs are
    normalised together, in one query for up to BATCH_BYTES of them: the
    query costs about 20 ms whatever its size, more than a lab run's log of a
    few kB (a manifest of 480 such logs spent 10 s there)."""
    con = _connection()
    out, pending, held = [], [], 0

    def flush():
        _normalise_together(con, pending)
        out.extend(_finish(p, time_ns) for p in pending)  # an empty log raises, in order
        pending.clear()

    for path in paths:
        try:
            pending.append(_gather(con, path, fmt, time_ns))
        except TracekitError:
            flush()  # what is wrong with an earlier log is said first
            raise
        held += pending[-1].size
        if held >= BATCH_BYTES:
            flush()
            held = 0
    flush()
    return out


@dataclass
class _Pending:
    """A log read and turned into records of tracekit's schema, not all normalised yet."""
    parsed: ParsedLog
    size: int
    parts: list = field(default_factory=list)  # (line numbers, texts, trail) to normalise
    tables: list = field(default_factory=list)  # normalised, problems split off


def _gather(con, path, fmt, time_ns):
    try:
        with open(path, "rb") as f:
            head = f.read(65536)
            size = os.fstat(f.fileno()).st_size
    except OSError as e:
        raise TracekitError(f"{path}: cannot read: {e.strerror}") from None
    fmt = fmt or detect(path, head)
    if fmt not in FORMATS:
        raise TracekitError(f"unknown log format {fmt!r}; known: {', '.join(FORMATS)}")
    later = size <= SMALL_LOG  # else normalised chunk by chunk, in bounded memory
    if fmt == "jsonl":
        return _read_jsonl(con, path, size, later)
    return _read_records(path, fmt, size, time_ns)


def _finish(pending, time_ns):
    parsed = pending.parsed
    parsed.malformed.sort()
    parsed.table = _concat(pending.tables)
    if parsed.format in TIMELESS and time_ns is not None and parsed.table.num_rows:
        import pyarrow.compute as pc
        parsed.time_stated = pc.any(pc.equal(parsed.table.column("ts_ns"), time_ns)).as_py()
    if parsed.table.num_rows == 0:
        if parsed.records == 0:
            why = "it holds no records"
        else:
            line, problem = parsed.malformed[0]
            why = (f"its only record, line {line}, is malformed: {problem}"
                   if parsed.records == 1 else
                   f"all {parsed.records:,} records are malformed (the first, line {line}: "
                   f"{problem})")
        raise EmptyLogError(f"{parsed.path}: no event could be read as {parsed.format}: {why}; "
                            f"nothing was stored (--format names another format)")
    return parsed


class EmptyLogError(TracekitError):
    """A log from which not one event could be read."""


def _normalise(con, numbers, texts, trail=None):
    if trail is None:
        trail = np.zeros(len(numbers), dtype=np.int8)
    # from numpy buffers: pa.array() would import pandas to probe its argument
    numbers = np.ascontiguousarray(numbers, dtype=np.int64)
    trail = np.ascontiguousarray(trail, dtype=np.int8)
    raw = pa.table({
        "line": pa.Array.from_buffers(pa.int64(), len(numbers), [None, pa.py_buffer(numbers)]),
        "text": texts,
        "trail": pa.Array.from_buffers(pa.int8(), len(trail), [None, pa.py_buffer(trail)])})
    con.register("raw", raw)
    try:
        return con.sql(_normaliser()).to_arrow_table()
    finally:
        con.unregister("raw")


LOG_SHIFT = 40  # a log's index above its line numbers, while logs share a query


def _normalise_together(con, pending):
    """Normalise the parts of several logs in one query (the normaliser reads
    each record alone: nothing crosses from one log to another)."""
    jobs = [(k, part) for k, p in enumerate(pending) for part in p.parts]
    if not jobs:
        return
    numbers = np.concatenate([np.asarray(n, np.int64) + (k << LOG_SHIFT) for k, (n, _, _) in jobs])
    texts = pa.concat_arrays([t.cast(pa.large_string()) for _, (_, t, _) in jobs])
    trail = np.concatenate([np.zeros(len(n), np.int8) if tr is None else np.asarray(tr, np.int8)
                            for _, (n, _, tr) in jobs])
    out = _normalise(con, numbers, texts, trail)
    # (int64, never null: read from its buffer, as to_numpy() imports pandas)
    lines = out.column("line").combine_chunks()
    line = (np.frombuffer(lines.buffers()[1], np.int64, len(lines), lines.offset * 8)
            if len(lines) else np.zeros(0, np.int64))
    key = line >> LOG_SHIFT
    if len(key) > 1 and (np.diff(key) < 0).any():  # (DuckDB keeps insertion order; if not)
        order = np.argsort(key, kind="stable")
        out, line, key = out.take(order), line[order], key[order]
    out = out.set_column(out.schema.get_field_index("line"), "line",
                         pa.Array.from_buffers(pa.int64(), len(line), [
                             None, pa.py_buffer(np.ascontiguousarray(line & ((1 << LOG_SHIFT) - 1)))]))
    bounds = np.searchsorted(key, np.arange(len(pending) + 1))
    for k, p in enumerate(pending):
        if p.parts:
            p.tables.append(_split_problems(out.slice(bounds[k], bounds[k + 1] - bounds[k]),
                                            p.parsed))
            p.parts = []


def _split_problems(out, parsed):
    problem = out.column("problem")
    bad = out.filter(problem.is_valid())
    parsed.malformed.extend(zip(bad.column("line").to_pylist(), bad.column("problem").to_pylist()))
    return out.filter(problem.is_null()).drop_columns(["problem"])


def _read_jsonl(con, path, size, later):
    pending = _Pending(ParsedLog(path, "jsonl", None), size)
    parsed = pending.parsed
    with open(path, "rb") as raw:
        f = _utf8_stream(path, raw, raw.read(4))
        for numbers, texts, trail, bad in iter_lines(f):
            parsed.records += len(numbers)
            if bad:
                parsed.malformed.extend(bad)
                keep = texts.is_valid()
                mask = keep.to_numpy(zero_copy_only=False)
                numbers, texts, trail = numbers[mask], texts.filter(keep), trail[mask]
            if later:
                pending.parts.append((numbers, texts, trail))
            else:
                pending.tables.append(_split_problems(_normalise(con, numbers, texts, trail),
                                                      parsed))
    return pending


def _read_records(path, fmt, size, time_ns=None):
    with open(path, "rb") as f:
        data = f.read()
    name, skip = encoding(data[:4])
    pending = _Pending(ParsedLog(path, fmt, None), size)
    parsed = pending.parsed
    try:
        text = data[skip:].decode(name)
    except UnicodeDecodeError as e:
        if fmt not in LINE_FORMATS or name != "utf-8":  # read whole or not at all
            raise TracekitError(f"{path}: at byte offset {e.start + skip}: not "
                                f"{name.upper()} text, so not a {fmt} log") from None
        text, bad = _decode_lines(data[skip:], name)
        parsed.malformed.extend(bad)
        parsed.records += len(bad)
    if fmt == "csv":
        rows = csvlog.records(text)
    elif fmt == "qlog":
        rows = qlog.records(path, text)
    elif fmt == "queqiaobench":
        rows = tables.bench_records(path, tables.load_bench(path, text), time_ns)
    elif fmt == "har":
        rows = har.records(path, har.load(path, text))
    elif fmt == "otlp":
        rows = otlp.records(path, text)
    elif fmt == "queqiao-tsv":
        rows = tables.harness_records(path, text, time_ns)
    elif fmt == "prometheus":
        stats = queqiao.Stats()
        rows = tables.prometheus_records(path, text, queqiao.Counters(stats), time_ns)
    else:
        stats = queqiao.Stats()
        lines = ((n, ln) for n, ln in enumerate(text.splitlines(), start=1) if ln.strip())
        rows = queqiao.runtime_records(lines, stats)
    numbers, texts = [], []
    last = None
    for number, record, problem in rows:
        # a HAR entry, an OTLP line give several events
        parsed.records += fmt not in ("har", "otlp") or number != last
        last = number
        if problem:
            parsed.malformed.append((number, problem))
        else:
            numbers.append(number)
            texts.append(record)
            if fmt in ("qlog", *TIMELESS) and record.endswith('"clock": "trace"}'):
                parsed.trace_clock_events += 1
    if fmt in ("queqiao", "prometheus"):
        parsed.private_dropped, parsed.negative_deltas = stats.private_dropped, stats.negative_deltas
        parsed.counter_resets = stats.counter_resets
        parsed.trace_clock_events += stats.trace_clock
    pending.parts.append((np.asarray(numbers, np.int64), pa.array(texts, type=pa.large_string()),
                          None))
    return pending


def _decode_lines(data, name):
    """Text of a line-based log whose bytes are not all valid: each line that does
    not decode becomes an empty line (so line numbers hold) and a malformed record."""
    lines, bad = [], []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            lines.append(raw.decode(name))
        except UnicodeDecodeError as e:
            lines.append("")
            bad.append((number, f"not {name.upper()} (byte {e.start} of the line)"))
    return "\n".join(lines), bad


def _concat(tables):
    if tables:
        return pa.concat_tables(tables)
    return _split_problems(_normalise(_connection(), [], pa.array([], type=pa.large_string())),
                           ParsedLog("", "", None))
