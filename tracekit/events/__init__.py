"""Application event logs -> the normalised rows of `events`.

Formats (detected from the content, or named with --format):

    jsonl     tracekit's own schema, one JSON object per line (README)
    csv       a header row, then one event per row, the same names
    qlog      IETF qlog, JSON or JSON-SEQ (aioquic and other QUIC stacks)
    queqiao   Queqiao's runtime log and lane trace (Go slog JSON Lines)
    queqiaobench  a `queqiaobench --json` report

Every format is first turned into records of tracekit's schema; one SQL
normaliser (normalise.sql) then extracts the columns and names what is
wrong with a record. A malformed record is counted with its line number and
reason; the rest of the file is kept. Nothing here touches the store.
"""

from dataclasses import dataclass, field
from importlib import resources
import json

import duckdb
import numpy as np
import pyarrow as pa

from ..capture.formats import EXPECTED, describe_magic
from ..errors import NotACaptureError, TracekitError
from . import csvlog, qlog, queqiao
from .lines import iter_lines

FORMATS = ("jsonl", "csv", "qlog", "queqiao", "queqiaobench")


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
    negative_deltas: int = 0


def _normaliser():
    return resources.files(__package__).joinpath("normalise.sql").read_text()


def detect(path, head):
    """The log format of a file from its first bytes, or NotALogError."""
    text = head.decode("utf-8", errors="replace")
    stripped = text.lstrip()
    if qlog.looks_like_qlog(text):
        return "qlog"
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    if stripped.startswith("{"):
        try:
            obj = json.loads(first)
        except json.JSONDecodeError:
            obj = None
        if obj is None:  # one multi-line JSON document
            if '"schema_version"' in text and '"trials"' in text:
                return "queqiaobench"
            return "jsonl"
        if queqiao.is_bench_report(obj):
            return "queqiaobench"
        if queqiao.is_runtime_record(obj):
            return "queqiao"
        return "jsonl"
    if csvlog.looks_like_csv(first):
        return "csv"
    raise NotALogError(f"{path} is not a pcap or pcapng capture: {describe_magic(head)}; "
                       f"expected the magic {EXPECTED}, or an event log (JSON Lines, CSV "
                       f"with ts and kind columns, qlog, Queqiao; --format names one)")


def read_log(path, fmt=None):
    """Parse one event log; return a ParsedLog (malformed records listed, not fatal)."""
    try:
        with open(path, "rb") as f:
            head = f.read(65536)
    except OSError as e:
        raise TracekitError(f"{path}: cannot read: {e.strerror}") from None
    fmt = fmt or detect(path, head)
    if fmt not in FORMATS:
        raise TracekitError(f"unknown log format {fmt!r}; known: {', '.join(FORMATS)}")
    con = duckdb.connect()
    try:
        if fmt == "jsonl":
            return _read_jsonl(con, path)
        return _read_records(con, path, fmt)
    finally:
        con.close()


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


def _split_problems(out, parsed):
    problem = out.column("problem")
    bad = out.filter(problem.is_valid())
    parsed.malformed.extend(zip(bad.column("line").to_pylist(), bad.column("problem").to_pylist()))
    return out.filter(problem.is_null()).drop_columns(["problem"])


def _read_jsonl(con, path):
    parsed = ParsedLog(path, "jsonl", None)
    tables = []
    with open(path, "rb") as f:
        for numbers, texts, trail, bad in iter_lines(f):
            parsed.records += len(numbers)
            if bad:
                parsed.malformed.extend(bad)
                keep = texts.is_valid()
                mask = keep.to_numpy(zero_copy_only=False)
                numbers, texts, trail = numbers[mask], texts.filter(keep), trail[mask]
            tables.append(_split_problems(_normalise(con, numbers, texts, trail), parsed))
    parsed.malformed.sort()
    parsed.table = _concat(con, tables)
    return parsed


def _read_records(con, path, fmt):
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TracekitError(f"{path}: at byte offset {e.start}: not UTF-8 text, so not a "
                            f"{fmt} log") from None
    parsed = ParsedLog(path, fmt, None)
    if fmt == "csv":
        rows = csvlog.records(text)
    elif fmt == "qlog":
        rows = qlog.records(path, text)
    elif fmt == "queqiaobench":
        rows = queqiao.bench_records(path, queqiao.load_bench(path, text))
    else:
        stats = queqiao.Stats()
        lines = ((n, ln) for n, ln in enumerate(text.splitlines(), start=1) if ln.strip())
        rows = queqiao.runtime_records(lines, stats)
    numbers, texts = [], []
    for number, record, problem in rows:
        parsed.records += 1
        if problem:
            parsed.malformed.append((number, problem))
        else:
            numbers.append(number)
            texts.append(record)
    if fmt == "queqiao":
        parsed.private_dropped, parsed.negative_deltas = stats.private_dropped, stats.negative_deltas
    table = _split_problems(_normalise(con, numbers, pa.array(texts, type=pa.large_string())), parsed)
    parsed.malformed.sort()
    parsed.table = table
    return parsed


def _concat(con, tables):
    if tables:
        return pa.concat_tables(tables)
    return _split_problems(_normalise(con, [], pa.array([], type=pa.large_string())),
                           ParsedLog("", "", None))
