"""Load parsed event logs into `event_logs` and `events`, all or nothing.

Logs are small next to captures (a million events is ~150 MB of text), so
each call writes all of its logs in one transaction. Timestamps are stored
twice: as the log wrote them and on the captures' clock (plus the log's
offset), so a later clock estimate (tracekit clock) can move them again.
"""

import os
from dataclasses import dataclass

from ..core.errors import TracekitError
from ..core.version import __version__
from ..readers.capture import hash_file

MALFORMED_KEPT = 1000


@dataclass
class LogSummary:
    path: str
    format: str
    log_id: int | None = None
    outcome: str = "ingested"  # ingested, replaced, duplicate
    records: int = 0
    events: int = 0
    malformed: list = None
    private_dropped: int = 0
    negative_deltas: int = 0
    counter_resets: int = 0
    duplicate_of: int | None = None
    portless_requests: int = 0  # requests whose events carry no local_port
    trace_clock_events: int = 0  # events timed from their qlog trace's start


def load_logs(con, parsed_logs, labels=None, clock_offset_ns=None, replace=False,
              command=None):
    """Store ParsedLogs in one transaction; return a LogSummary each. With
    `command` (store.ingest.Command) they are stored when it commits, in its
    transaction, and the list returned is filled then."""
    args = (parsed_logs, labels, clock_offset_ns, replace)
    if command is not None:
        out = []
        command.logs.append((args, out))
        return out
    con.execute("BEGIN TRANSACTION")
    try:
        summaries = store_logs(con, *args)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return summaries


def store_logs(con, parsed_logs, labels=None, clock_offset_ns=None, replace=False):
    """The rows of ParsedLogs, in the caller's transaction."""
    return [_load_one(con, parsed, labels or {}, clock_offset_ns, replace)
            for parsed in parsed_logs]


def _load_one(con, parsed, labels, clock_offset_ns, replace):
    path = os.path.abspath(parsed.path)
    try:
        digest = hash_file(parsed.path)
        size = os.stat(parsed.path).st_size
    except OSError as e:
        raise TracekitError(f"{parsed.path}: cannot read: {e.strerror}") from None
    summary = LogSummary(path=path, format=parsed.format, records=parsed.records,
                         malformed=parsed.malformed, private_dropped=parsed.private_dropped,
                         negative_deltas=parsed.negative_deltas,
                         counter_resets=parsed.counter_resets)
    old = con.execute("SELECT log_id, format FROM event_logs WHERE sha256 = ?",
                      [digest]).fetchall()
    if old:
        summary.duplicate_of = old[0][0]
        # read as another format before (--format names this one): it replaces that
        if not replace and old[0][1] == parsed.format:
            summary.outcome = "duplicate"
            return summary
        summary.outcome = "replaced"
        con.execute("DELETE FROM events WHERE log_id = ?", [old[0][0]])
        con.execute("DELETE FROM event_logs WHERE log_id = ?", [old[0][0]])
    (log_id,), = con.execute("SELECT coalesce(max(log_id), 0) + 1 FROM event_logs").fetchall()
    offset = clock_offset_ns or 0
    if offset and parsed.table.num_rows:
        import pyarrow.compute as pc
        lo, hi = pc.min_max(parsed.table.column("ts_ns")).values()
        if not -(1 << 63) < lo.as_py() + offset <= hi.as_py() + offset < (1 << 63):
            raise TracekitError(f"{parsed.path}: the clock offset {offset:,} ns moves its events "
                                f"outside 1677-2262 (int64 ns); nothing was stored")
    con.register("_tracekit_events", parsed.table)
    try:
        con.execute("""
            INSERT INTO events
            SELECT ?, line, ts_ns + ?, ts_ns, ?, kind, run, request, stream,
                   local_addr, local_port, remote_addr, remote_port, fields
            FROM _tracekit_events""", [log_id, offset, parsed.format])
        # (from the log's own rows: a query of events would scan every log's)
        (portless,), = con.execute("""
            SELECT count(*) FROM (SELECT request FROM _tracekit_events WHERE request IS NOT NULL
                                  GROUP BY request
                                  HAVING count(*) FILTER (kind = 'request_start') > 0
                                     AND count(local_port) = 0)""").fetchall()
    finally:
        con.unregister("_tracekit_events")
    # what was just inserted, from the table itself (a query of events would
    # scan every log's rows, again for each log of a command)
    n = parsed.table.num_rows
    first = last = None
    if n:
        import pyarrow.compute as pc
        lo, hi = pc.min_max(parsed.table.column("ts_ns")).values()
        first, last = lo.as_py() + offset, hi.as_py() + offset
    lines = [line for line, _ in parsed.malformed[:MALFORMED_KEPT]]
    con.execute("""
        INSERT INTO event_logs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
                                       MAP(?::VARCHAR[], ?::VARCHAR[]), now(), now(), ?, ?)""",
                [log_id, path, os.path.basename(path), digest, size, parsed.format,
                 parsed.records, n, len(parsed.malformed), lines,
                 parsed.malformed[0][1] if parsed.malformed else None,
                 parsed.private_dropped, parsed.negative_deltas, offset,
                 ("given" if clock_offset_ns is not None else
                  "trace_start" if parsed.trace_clock_events else
                  "stated" if parsed.time_stated else "same_host"), None, first, last,
                 list(labels), list(labels.values()), __version__, parsed.counter_resets])
    summary.log_id = log_id
    summary.events = n
    summary.trace_clock_events = parsed.trace_clock_events if clock_offset_ns is None else 0
    summary.portless_requests = portless
    return summary


def set_clock_offset(con, log_id, offset_ns, source, uncertainty_ns=None):
    """Put a log on the captures' clock with a new offset (moves every event)."""
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute("UPDATE events SET ts_ns = log_ts_ns + ? WHERE log_id = ?", [offset_ns, log_id])
        con.execute("""
            UPDATE event_logs SET clock_offset_ns = ?, clock_source = ?, clock_uncertainty_ns = ?,
                   first_ts_ns = (SELECT min(ts_ns) FROM events WHERE log_id = ?),
                   last_ts_ns = (SELECT max(ts_ns) FROM events WHERE log_id = ?),
                   updated_at = now()
            WHERE log_id = ?""", [offset_ns, source, uncertainty_ns, log_id, log_id, log_id])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
