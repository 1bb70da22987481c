"""The `tracekit` command: a thin layer over the library.

Every TracekitError becomes one line on stderr and exit status 2 (`--debug`
shows the traceback instead). Row-emitting commands share --format.
"""

import contextlib
import errno
import functools
import os
import re
import sys
import time

import click

from . import __version__
from .errors import QueryError, TracekitError

# numba probes for BLAS by importing scipy.linalg when scipy is installed (a
# second of start-up); tracekit uses no linear algebra, so the CLI process
# makes that probe fail fast. The library itself leaves sys.modules alone.
sys.modules.setdefault("scipy.linalg.cython_blas", None)

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def db_option(f):
    return click.option(
        "--db", "--store", "db", metavar="PATH", envvar="TRACEKIT_DB", default="tracekit.duckdb",
        show_default=True, help="DuckDB store, or a folder holding a Parquet dataset "
                                "(or set TRACEKIT_DB).")(f)


def cluster_options(f):
    f = click.option("--cluster", metavar="ADDRESS", default=None,
                     help="Run one task per capture on this Dask scheduler (tcp://host:8786), "
                          "into the Parquet dataset --store DIR; the workers must see the "
                          "files and DIR at the same paths.")(f)
    return click.option("--workers", type=click.IntRange(1), default=None,
                        help="Run one task per capture on a local Dask cluster of N worker "
                             "processes, into the Parquet dataset --store DIR (a dataset "
                             "without --cluster or --workers: one worker per core).")(f)


def format_option(f):
    return click.option(
        "--format", "fmt", type=click.Choice(["table", "csv", "json", "markdown"]),
        default="table", show_default=True, help="Output format.")(f)


def emit(columns, rows, fmt):
    from .report.table import render
    click.echo(render(columns, rows, fmt), nl=False)


def _disk_full(e):
    """The one-line message for a full disk (DuckDB's IOException or an OSError), or None."""
    text = str(e)
    if getattr(e, "errno", None) == errno.ENOSPC or "No space left on device" in text:
        where = re.search(r'file "([^"]+)"', text)
        place = f" writing {where.group(1)}" if where else ""
        return (f"no space left on the device{place}; nothing of this command is visible "
                f"in the store (free some space and run it again)")
    return None


def handle_errors(f):
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        ctx = click.get_current_context()
        debug = ctx.find_root().params.get("debug")
        try:
            return f(*args, **kwargs)
        except TracekitError as e:
            if debug:
                raise
            click.echo(f"tracekit: error: {e}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            if ctx.info_name == "ingest":
                said = "the store is as it was before this command"
            else:
                said = ("what was complete before it is kept; nothing half-written is "
                        "visible (the next run of the command finishes the job)")
            click.echo(f"tracekit: interrupted; {said}", err=True)
            sys.exit(130)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except Exception as e:
            if debug:
                raise
            full = _disk_full(e)
            if full:
                click.echo(f"tracekit: error: {full}", err=True)
                sys.exit(2)
            # a bug: say so in one line
            click.echo(f"tracekit: internal error: {type(e).__name__}: {e} "
                       f"(run with --debug for the traceback, and please report it)", err=True)
            sys.exit(1)
    return wrapper


class _Group(click.Group):
    """click's usage errors are four lines; tracekit's errors are one."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            return super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                                standalone_mode=False, **extra)
        except click.UsageError as e:  # an unknown option or command, a bad or missing value
            where = e.ctx.command_path if e.ctx is not None else "tracekit"
            click.echo(f"tracekit: error: {e.format_message()} (see {where} --help)", err=True)
            sys.exit(2)
        except click.ClickException as e:
            click.echo(f"tracekit: error: {e.format_message()}", err=True)
            sys.exit(e.exit_code)
        except click.exceptions.Abort:
            click.echo("tracekit: interrupted", err=True)
            sys.exit(130)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)


@click.group(cls=_Group, context_settings=CONTEXT)
@click.version_option(__version__, prog_name="tracekit")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
def main(debug):
    """tracekit: packet captures and event logs in DuckDB, and where the time went.

    \b
    Quick tour:
      tracekit ingest captures/*.pcap --label path=direct
      tracekit sessions
      tracekit sql "SELECT count(*) FROM packets"
    """


class Progress:
    """Progress on stderr for long ingests (only on a terminal, after 1 s)."""

    def __init__(self, enabled):
        self.enabled = enabled
        self.started = time.monotonic()
        self.shown = False

    def __call__(self, path, done, total):
        if not self.enabled or time.monotonic() - self.started < 1.0:
            return
        pct = 100.0 * done / total if total else 100.0
        name = os.path.basename(path)
        click.echo(f"\ringesting {name}: {pct:5.1f}% of {total / 1e6:,.0f} MB", err=True, nl=False)
        self.shown = True

    def done(self):
        if self.shown:
            click.echo("\r" + " " * 70 + "\r", err=True, nl=False)


def _parse_labels(labels):
    out = {}
    for item in labels:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise TracekitError(f"--label {item!r} is not KEY=VALUE (e.g. --label path=direct)")
        out[key] = value
    return out


def _plural(n, word):
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _skipped_text(counts):
    if not counts:
        return "none skipped"
    return "skipped " + ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items()))


INPUT_FORMATS = ("auto", "pcap", "pcapng", "jsonl", "csv", "qlog", "queqiao", "queqiaobench",
                 "queqiao-tsv", "prometheus", "har")


_UNITS = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}


def _in_runs(path, runs):
    return any(path in captures for captures, _, _ in runs)


def _parse_duration_ns(text):
    """'12.5ms', '-3us', '0.2s', '150000ns' or a bare number of seconds -> int ns."""
    import re
    m = re.fullmatch(r"\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*(ns|us|ms|s)?\s*", text)
    if not m:
        raise TracekitError(f"--clock-offset {text!r} is not a duration (e.g. 12.5ms, -300us, 0.2s)")
    ns = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if not abs(ns) < 2**63:  # (and not NaN): the events' times must stay inside int64 ns
        raise TracekitError(f"--clock-offset {text!r} is beyond what int64 nanoseconds hold "
                            f"(about 146 years)")
    return round(ns)


def _parse_time_ns(text):
    """--time: an RFC 3339 time -> int ns since the epoch."""
    from .events.logfmt import rfc3339_ns
    ns = rfc3339_ns(text)
    if ns is None or not -(1 << 63) < ns < (1 << 63):
        raise TracekitError(f"--time {text!r} is not an RFC 3339 time within 1677-2262 "
                            f"(e.g. 2026-08-18T10:00:00Z or 2026-08-18T18:00:00.5+08:00)")
    return ns


@main.command(context_settings=CONTEXT)
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False))
@db_option
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE",
              help="Experiment factor to attach (repeatable), e.g. --label conn=fresh.")
@click.option("--manifest", "manifests", multiple=True, type=click.Path(dir_okay=False),
              metavar="FILE", help="Ingest the runs a manifest lists, each with its labels "
                                   "(a lab *.runs.json or a JSON list of {files, labels}).")
@click.option("--replace", is_flag=True, help="Re-ingest files already in the store.")
@click.option("--format", "input_format", type=click.Choice(INPUT_FORMATS), default="auto",
              show_default=True, help="Input format; auto detects each file from its content.")
@click.option("--clock-offset", "clock_offset", metavar="DURATION", default=None,
              help="Event logs only: add this to their timestamps to put them on the "
                   "captures' clock (e.g. 12.5ms); default 0, same host.")
@click.option("--time", "stated_time", metavar="RFC3339", default=None,
              help="When a file with no time of its own was taken (a queqiaobench report, "
                   "a harness TSV, a Prometheus scrape without timestamps), e.g. "
                   "2026-08-18T10:00:00Z; such files are refused without it.")
@cluster_options
@handle_errors
def ingest(files, db, labels, replace, input_format, clock_offset, manifests, stated_time,
           workers, cluster):
    """Ingest pcap/pcapng captures and event logs into the store.

    Every packet becomes a row of `packets`; flows are rebuilt per capture.
    Event logs (tracekit JSON Lines, CSV, qlog, Queqiao) become rows of
    `events`; malformed records are counted with their line numbers and
    skipped. A file already in the store (same SHA-256) is not added twice.
    Logs are parsed before anything is written; a failure leaves the store
    as it was.

    \b
    Example:
      tracekit ingest captures/lossy-download-client.pcap captures/lossy-download-server.pcap --label path=direct
      tracekit ingest captures/streaming-stalls-client.pcap captures/streaming-stalls-client-events.jsonl
    """
    from .events import read_logs
    from .store.db import connect
    from .store.events import load_logs
    from .store.ingest import command, load_captures

    labels = _parse_labels(labels)
    offset_ns = None if clock_offset is None else _parse_duration_ns(clock_offset)
    if not files and not manifests:
        raise TracekitError("nothing to ingest: give capture or log FILES, or --manifest FILE")
    from .capture.formats import split_inputs
    capture_paths, log_paths = split_inputs(files, input_format)
    started = time.perf_counter()
    time_ns = None if stated_time is None else _parse_time_ns(stated_time)
    parsed = read_logs(log_paths, None if input_format == "auto" else input_format, time_ns)
    runs = []
    if manifests:
        from .store.runs import read_manifest
        for m in manifests:
            runs += [(c, lg, {**r_labels, **labels}) for c, lg, r_labels in read_manifest(m)]
    from .store.db import default_db_path
    db_path = str(db or default_db_path())
    if _on_dask(db_path, workers, cluster):
        if replace:
            raise TracekitError("--replace is not available for a dataset: a file already in it "
                                "is skipped; analyse again with tracekit analyze --store DIR")
        from .clusterview import ingest_dataset
        return ingest_dataset(db_path, capture_paths, parsed, runs, labels, offset_ns,
                              workers, cluster)
    new_store = not os.path.exists(db_path)
    con = connect(db)
    progress = Progress(sys.stderr.isatty())
    run_results = []
    ok = False
    try:
        with command(con) as c:  # every file and run of this command, or none
            summaries = (load_captures(con, capture_paths, labels=labels, replace=replace,
                                       progress=progress, command=c) if capture_paths else [])
            log_summaries = (load_logs(con, parsed, labels, offset_ns, replace, command=c)
                             if parsed else [])
            if runs:
                from .store.runs import ingest_run_inputs
                run_results = ingest_run_inputs(con, runs, command=c)
        ok = True
    finally:
        progress.done()
        con.close()
        if not ok and new_store:  # a store this command created and could not fill: gone
            for leftover in (db_path, db_path + ".wal"):
                with contextlib.suppress(OSError):
                    os.remove(leftover)
    for run_labels, run_captures, run_logs in run_results:
        name = run_labels.get("run", "run")
        factors = " ".join(f"{k}={v}" for k, v in run_labels.items()
                           if k not in ("run", "trial", "order", "experiment"))
        click.echo(f"{name}: {_plural(len(run_captures), 'capture')} "
                   f"({sum(c.packets for c in run_captures):,} packets), "
                   f"{_plural(len(run_logs), 'log')} ({sum(lg.events for lg in run_logs):,} events); "
                   f"{factors}")
        for lg in run_logs:
            if lg.malformed:
                _report_log(lg)
    capture_paths = capture_paths + [p for c, _, _ in runs for p in c]
    log_paths = log_paths + [p for _, lg, _ in runs for p in lg]
    summaries_all = summaries + [c for _, cs, _ in run_results for c in cs]
    logs_all = log_summaries + [lg for _, _, ls in run_results for lg in ls]
    total_packets = total_flows = 0
    skipped = {}
    own = {id(x) for x in summaries}  # a run's files are summed in its line
    for s in summaries_all:
        shown = id(s) in own
        name = os.path.basename(s.path) if shown else s.path
        if s.outcome == "duplicate":
            click.echo(f"{name}: already in the store as capture {s.duplicate_of} "
                       f"(same sha256); nothing added. Use --replace to ingest it again.")
            continue
        replacing = f", replacing capture {s.duplicate_of}" if s.outcome == "replaced" else ""
        if shown:
            click.echo(f"{name}: ingested as capture {s.capture_id}{replacing}: "
                       f"{_plural(s.packets, 'packet')}, {_plural(s.flows, 'flow')}, "
                       f"{_skipped_text(s.decode_status)}")
        if s.read_stop:
            click.echo(f"tracekit: warning: {s.path}: {s.read_stop.reason} at byte offset "
                       f"{s.read_stop.offset}: {s.read_stop.message}; the "
                       f"{s.packets:,} packets before it were ingested", err=True)
        bad_ts = s.decode_status.get("timestamp_out_of_range", 0)
        if bad_ts:
            click.echo(f"tracekit: warning: {s.path}: {_plural(bad_ts, 'packet')} with a time "
                       f"outside 1677-2262 (int64 ns; the first at byte offset "
                       f"{s.first_bad_ts_offset}): stored with ts_ns NULL and decode_status "
                       f"timestamp_out_of_range, in no flow", err=True)
        for lt in s.unsupported_link_types:
            from .decode.link import link_type_name
            n = s.decode_status.get("link_type_unsupported", 0)
            click.echo(f"tracekit: warning: {s.path}: {link_type_name(lt)} is not decoded: its "
                       f"packets are stored undecoded (decode_status link_type_unsupported, "
                       f"{n:,} in this file); other interfaces were decoded", err=True)
        if s.skipped_blocks:
            blocks = ", ".join(f"{k} {v}" for k, v in sorted(s.skipped_blocks.items()))
            click.echo(f"{name}: pcapng blocks without packets skipped: {blocks}")
        total_packets += s.packets
        total_flows += s.flows
        for k, v in s.decode_status.items():
            skipped[k] = skipped.get(k, 0) + v
    total_events = sum(s.events for s in logs_all)
    for s in log_summaries:
        _report_log(s)
    seconds = time.perf_counter() - started
    parts = []
    if capture_paths:
        parts.append(f"{_plural(total_packets, 'packet')}, {_plural(total_flows, 'flow')}, "
                     f"{_skipped_text(skipped)}")
    if log_paths:
        parts.append(f"{_plural(total_events, 'event')}, "
                     f"{_plural(sum(len(s.malformed) for s in logs_all), 'malformed record')}")
    rates = []
    if capture_paths and seconds > 0:
        rates.append(f"{total_packets / seconds:,.0f} packets/s")
    if log_paths and seconds > 0:
        rates.append(f"{total_events / seconds:,.0f} events/s")
    click.echo(f"total: {'; '.join(parts)}; {seconds:.2f} s, {', '.join(rates)}")


def _on_dask(db, workers, cluster):
    """Whether the command runs on Dask into a dataset (and the options agree)."""
    from .store.dataset import is_dataset
    if is_dataset(db):
        return True
    if workers or cluster:
        raise TracekitError(f"--workers and --cluster write a Parquet dataset: give a folder "
                            f"with --store DIR/ ({db} is a DuckDB file)")
    return False


def _report_log(s):
    name = os.path.basename(s.path)
    if s.outcome != "duplicate" and s.trace_clock_events:
        click.echo(f"tracekit: warning: {s.path}: {_plural(s.trace_clock_events, 'event')} "
                   f"count from the start of their trace (it gives no wall-clock "
                   f"time: a qlog without reference_time, a Queqiao lane trace's t=): place the log with --clock-offset, or with tracekit "
                   f"clock {s.log_id} --capture ID --apply", err=True)
    if s.outcome != "duplicate" and s.portless_requests:
        click.echo(f"tracekit: warning: {s.path}: {_plural(s.portless_requests, 'request')} "
                   f"{'carries' if s.portless_requests == 1 else 'carry'} no local_port: each is linked to the one connection to its server "
                   f"that began an exchange within its time, or left unattributed "
                   f"(tracekit attribute flags it)", err=True)
    if s.outcome == "duplicate":
        click.echo(f"{name}: already in the store as event log {s.duplicate_of} "
                   f"(same sha256); nothing added. Use --replace to ingest it again.")
        return
    replacing = f", replacing event log {s.duplicate_of}" if s.outcome == "replaced" else ""
    extra = ""
    if s.private_dropped:
        extra += f", {_plural(s.private_dropped, 'private identifier')} dropped"
    if s.negative_deltas:
        extra += (f", {_plural(s.negative_deltas, 'counter decrease')} left unknown (a sum "
                  f"over live connections fell)")
    if s.counter_resets:
        extra += f", {_plural(s.counter_resets, 'counter reset')} (a process restarted)"
    click.echo(f"{name}: ingested as event log {s.log_id} ({s.format}){replacing}: "
               f"{_plural(s.events, 'event')} of {_plural(s.records, 'record')}{extra}")
    if s.malformed:
        shown = ", ".join(f"line {line}: {problem}" for line, problem in s.malformed[:5])
        more = f" (and {len(s.malformed) - 5:,} more)" if len(s.malformed) > 5 else ""
        click.echo(f"tracekit: warning: {s.path}: {_plural(len(s.malformed), 'malformed record')} "
                   f"skipped: {shown}{more}; the rest of the file was kept", err=True)


@main.command(context_settings=CONTEXT)
@db_option
@format_option
@handle_errors
def captures(db, fmt):
    """List the ingested captures.

    \b
    Example:
      tracekit captures --format markdown
    """
    from .store.db import connect

    con = connect(db, read_only=True)
    cur = con.execute("""
        SELECT c.capture_id AS capture, c.file_name AS file, c.format,
               array_to_string(c.link_types, ',') AS link_types, c.packets,
               (SELECT count(*) FROM flows f WHERE f.capture_id = c.capture_id) AS flows,
               strftime(make_timestamp(c.first_ts_ns // 1000), '%Y-%m-%d %H:%M:%S') AS first_utc,
               round((c.last_ts_ns - c.first_ts_ns) / 1e9, 6) AS duration_s,
               c.size_bytes, c.read_stop,
               nullif(array_to_string(list_transform(map_entries(c.labels),
                      lambda e: e.key || '=' || e.value), ' '), '') AS labels
        FROM captures c ORDER BY c.capture_id""")
    columns = [d[0] for d in cur.description]
    emit(columns, cur.fetchall(), fmt)


@main.command(context_settings=CONTEXT)
@db_option
@click.option("--dupthresh", type=click.IntRange(1), default=3, show_default=True,
              help="Duplicate ACKs (or SACKed segments) that make a retransmission 'fast'.")
@click.option("--rto-min-ms", type=click.FloatRange(0), default=200.0, show_default=True,
              help="Smallest RTO estimate (Linux: 200 ms; RFC 6298: 1000 ms).")
@click.option("--reorder-window-ms", type=click.FloatRange(0), default=3.0, show_default=True,
              help="Without timestamps, a hole filled sooner than this is reordering.")
@cluster_options
@handle_errors
def analyze(db, dupthresh, rto_min_ms, reorder_window_ms, workers, cluster):
    """Build the derived tables (tcp_analysis, retransmissions, ...), incrementally.

    Only captures not yet analysed by the current version of each analysis
    are processed; a changed analysis (or threshold) is rebuilt for every
    capture.

    \b
    Example:
      tracekit ingest captures/*.pcap && tracekit analyze && tracekit retransmissions
    """
    from .analyze import analyze as run
    from .store.db import connect

    params = {"dupthresh": dupthresh, "rto_min_ns": int(rto_min_ms * 1e6),
              "reorder_window_ns": int(reorder_window_ms * 1e6)}
    if _on_dask(db, workers, cluster):
        from .clusterview import analyze_dataset
        return analyze_dataset(db, params, workers, cluster)
    con = connect(db)
    shown = [False]
    started = time.monotonic()

    def progress(table, capture_id):
        if sys.stderr.isatty() and time.monotonic() - started > 1.0:
            what = f"for capture {capture_id}" if capture_id else "over the whole store"
            click.echo(f"\ranalysing: {table} {what}" + " " * 10, err=True, nl=False)
            shown[0] = True
    try:
        summary = run(con, progress, params)
    finally:
        if shown[0]:
            click.echo("\r" + " " * 60 + "\r", err=True, nl=False)
        con.close()
    for result in summary:
        table, built, rows, seconds = result
        if result.scope == "view":
            click.echo(f"{table}: a view, computed when read" + (" (created)" if built else ""))
        elif built and result.scope == "store":
            click.echo(f"{table}: rebuilt over the whole store, {_plural(rows, 'row')}, "
                       f"{seconds:.2f} s")
        elif built:
            click.echo(f"{table}: {_plural(built, 'capture')} analysed, "
                       f"{_plural(rows, 'row')}, {seconds:.2f} s")
        elif not result.failures:
            click.echo(f"{table}: up to date")
        for capture_id, reason in result.failures:
            if result.scope == "store":
                click.echo(f"warning: {table}: could not be built over the whole store and is "
                           f"empty until the next analyze (the steps after it ran): {reason}",
                           err=True)
                continue
            click.echo(f"warning: {table}: capture {capture_id} was not analysed and is left "
                       f"out of the analyses after it: {reason}", err=True)


@main.command(context_settings=CONTEXT)
@db_option
@format_option
@click.option("--capture", "capture_id", type=int, default=None, help="Only this capture id.")
@handle_errors
def sessions(db, fmt, capture_id):
    """One row per flow: endpoints, protocol, handshake RTT, duration, packets and bytes.

    \b
    Example:
      tracekit sessions --capture 2 --format csv > flows.csv
    """
    from .runner import run_analysis
    from .store.db import connect

    con = connect(db, read_only=True)
    _known(con, capture_id=capture_id)
    columns, rows = run_analysis(con, "sessions", capture_id=capture_id)
    emit(columns, rows, fmt)


def _help(doc, example):
    return f"{doc}\n\n\b\nExample:\n  {example}"


def _view(name, doc, example):
    """A CLI command showing analyses/views/<name>.sql, with --capture/--flow filters."""
    @main.command(name=name, context_settings=CONTEXT, help=_help(doc, example))
    @db_option
    @format_option
    @click.option("--capture", "capture_id", type=int, default=None, help="Only this capture id.")
    @click.option("--flow", "flow_id", type=int, default=None, help="Only this flow id.")
    @handle_errors
    def command(db, fmt, capture_id, flow_id):
        from .runner import run_analysis
        from .store.db import connect

        con = connect(db, read_only=True)
        _require_analyzed(con, db)
        _known(con, capture_id=capture_id, flow_id=flow_id)
        columns, rows = run_analysis(con, f"views/{name}", capture_id=capture_id, flow_id=flow_id)
        emit(columns, rows, fmt)
    return command


def _store_view(name, doc, example):
    """A CLI command showing analyses/views/<name>.sql over a store-wide table, with --run."""
    @main.command(name=name, context_settings=CONTEXT, help=_help(doc, example))
    @db_option
    @format_option
    @click.option("--run", "run", default=None, help="Only this run (the events' run field).")
    @handle_errors
    def command(db, fmt, run):
        from .runner import run_analysis
        from .store.db import connect

        con = connect(db, read_only=True)
        _require_analyzed(con, db)
        _known(con, run=run)
        columns, rows = run_analysis(con, f"views/{name}", run=run)
        emit(columns, rows, fmt)
        if "flag" in columns:
            unlinked = sum(1 for r in rows if r[columns.index("flag")] == "no flow linked")
            if unlinked:
                click.echo(f"tracekit: warning: {_plural(unlinked, 'request')} unattributed: no "
                           f"flow of theirs was linked (no local_port hint, and not exactly one "
                           f"connection to their server began within their time)", err=True)
    return command


@main.command(context_settings=CONTEXT)
@db_option
@format_option
@click.option("--log", "log_id", type=int, default=None, help="Only this event log.")
@handle_errors
def queqiao(db, fmt, log_id):
    """Queqiao's dashboard figures per snapshot interval: goodput, loss, RTT, window.

    From the counters of its performance snapshots, /metrics scrapes and lane
    traces (their deltas; an interval whose counter fell has no rate).
    Needs no `tracekit analyze`.

    \b
    Example:
      tracekit queqiao --log 1 --format csv
    """
    from .runner import run_analysis
    from .store.db import connect

    con = connect(db, read_only=True)
    if log_id is not None and not con.execute(
            "SELECT count(*) FROM event_logs WHERE log_id = ?", [log_id]).fetchall()[0][0]:
        raise TracekitError(f"no event log {log_id} in the store (see tracekit sql 'FROM event_logs')")
    columns, rows = run_analysis(con, "views/queqiao", log=log_id)
    emit(columns, rows, fmt)


def _known(con, capture_id=None, flow_id=None, run=None):
    """An id the store does not hold is an error, not an empty table."""
    if capture_id is not None and not con.execute(
            "SELECT count(*) FROM captures WHERE capture_id = ?", [capture_id]).fetchall()[0][0]:
        raise TracekitError(f"no capture {capture_id} in the store (tracekit captures lists them)")
    if flow_id is not None and not con.execute(
            "SELECT count(*) FROM flows WHERE flow_id = ? AND (? IS NULL OR capture_id = ?)",
            [flow_id, capture_id, capture_id]).fetchall()[0][0]:
        where = f" of capture {capture_id}" if capture_id is not None else ""
        raise TracekitError(f"no flow {flow_id}{where} in the store (tracekit sessions lists them)")
    if run is not None and not con.execute(
            "SELECT count(*) FROM events WHERE run = $r", {"r": run}).fetchall()[0][0] and not \
            con.execute("SELECT count(*) FROM runs WHERE run = $r", {"r": run}).fetchall()[0][0]:
        raise TracekitError(f"no run {run!r} in the store (tracekit sql \"SELECT run FROM runs\" "
                            f"and the events' run field name them)")


def _require_analyzed(con, db):
    n = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = "
                    "'handshakes'").fetchall()[0][0]
    if not n:
        raise TracekitError(f"{db} has not been analysed yet; run: tracekit analyze --db {db}")


FLOW_CHARTS = ("time-sequence", "inflight", "rtt")
APP_CHARTS = ("buffer", "chunks", "serving")
ATTRIBUTION_CHARTS = ("waterfall", "ablation", "attribution")


@main.command(context_settings=CONTEXT)
@click.argument("kind", type=click.Choice(FLOW_CHARTS + APP_CHARTS + ATTRIBUTION_CHARTS))
@click.option("--flow", "flow_id", type=int, default=None,
              help="Flow id (see tracekit sessions); flow charts.")
@click.option("--capture", "capture_id", type=int, default=None,
              help="Capture id (needed when the store holds several); flow charts.")
@click.option("--direction", type=click.Choice(["s2c", "c2s"]), default="s2c", show_default=True,
              help="Data direction to draw; flow charts.")
@click.option("--stream", default=None, help="Audio stream (buffer, chunks charts).")
@click.option("--run", default=None, help="Only this run (serving chart).")
@click.option("--request", "request_key", default=None, help="Request key (waterfall chart).")
@click.option("--compare", default=None, metavar="FACTOR", help="Ablation, attribution charts.")
@click.option("--by", "by", multiple=True, metavar="FACTOR", help="Ablation, attribution charts.")
@click.option("--levels", default=None, metavar="A,B", help="Arm order (ablation charts).")
@click.option("--where", "where", multiple=True, metavar="LABEL=VALUE",
              help="Only requests with this label (ablation charts).")
@click.option("--out", "stem", default=None, metavar="STEM",
              help="Output path without extension (default from the kind and ids).")
@db_option
@handle_errors
def plot(kind, flow_id, capture_id, direction, stream, run, request_key, compare, by, levels,
         where, stem, db):
    """Draw a chart: STEM.html (self-contained, works offline) and STEM.png.

    \b
    Flow charts: time-sequence, inflight, rtt (--capture, --flow).
    Application charts: buffer (playback buffer and underruns), chunks
    (chunk timeline) (--stream); serving (throughput and TPOT by batch size).
    Attribution: waterfall (--request KEY); ablation (median per arm with
    95% intervals) and attribution (median spans per arm, stacked)
    (--compare FACTOR [--by FACTOR] [--levels A,B]).

    \b
    Example:
      tracekit plot time-sequence --capture 1 --flow 0 --out tseq
      tracekit plot buffer --stream local --out buffer
    """
    from .report import app_charts, charts
    from .store.db import connect

    con = connect(db, read_only=True)
    _require_analyzed(con, db)
    if kind in ATTRIBUTION_CHARTS:
        from .report import ablation_charts
        if kind == "waterfall":
            if not request_key:
                raise TracekitError("the waterfall chart needs --request KEY (see tracekit requests)")
            chart = ablation_charts.waterfall(con, request_key)
            default = f"waterfall-{request_key.replace(':', '-')}"
        else:
            if not compare:
                raise TracekitError(f"the {kind} chart needs --compare FACTOR")
            from .ablation import ablation as run_ablation
            results = run_ablation(con, compare, by, levels.split(",") if levels else None,
                                   _parse_labels(where))
            chart = (ablation_charts.ablation_bars(results, by) if kind == "ablation"
                     else ablation_charts.attribution_stacked(results, by))
            default = f"{kind}-{compare}"
        html, png = charts.save(chart, stem or default)
        click.echo(f"wrote {html} and {png}")
        return
    if kind in APP_CHARTS:
        chart = {"buffer": lambda: app_charts.playback_buffer(con, stream),
                 "chunks": lambda: app_charts.chunk_timeline(con, stream),
                 "serving": lambda: app_charts.serving(con, run)}[kind]()
        html, png = charts.save(chart, stem or (kind if kind == "serving" else f"{kind}-{stream or 'stream'}"))
        click.echo(f"wrote {html} and {png}")
        return
    if flow_id is None:
        raise TracekitError(f"the {kind} chart needs --flow (see tracekit sessions)")
    if capture_id is None:
        ids = [r[0] for r in con.execute("SELECT capture_id FROM captures").fetchall()]
        if len(ids) != 1:
            raise TracekitError(f"the store holds {len(ids)} captures; choose one with --capture")
        capture_id = ids[0]
    chart = charts.build(con, kind, capture_id, flow_id, direction)
    html, png = charts.save(chart, stem or f"{kind}-c{capture_id}-f{flow_id}")
    click.echo(f"wrote {html} and {png}")


@main.command(context_settings=CONTEXT)
@click.argument("log_id", type=int)
@click.option("--capture", "capture_id", type=int, required=True,
              help="Capture whose clock the log should be put on.")
@click.option("--apply", is_flag=True, help="Store the estimate: move the log's events.")
@db_option
@handle_errors
def clock(log_id, capture_id, apply, db):
    """Estimate the offset of event log LOG_ID's clock against a capture's.

    Events that must come before a packet (connect_start before the SYN) or
    after one (connect_end after the SYN-ACK, first_byte after the first
    response byte) bound the offset; the estimate is the middle of what is
    left, with half its width as the uncertainty. --apply stores it (the
    analyses are rebuilt on the next tracekit analyze).

    \b
    Example:
      tracekit clock 1 --capture 4 --apply
    """
    from .clock import estimate_offset
    from .store.db import connect
    from .store.events import set_clock_offset

    con = connect(db, read_only=not apply)
    if not con.execute("SELECT count(*) FROM event_logs WHERE log_id = ?", [log_id]).fetchall()[0][0]:
        raise TracekitError(f"no event log {log_id} in {db} (see tracekit sql 'FROM event_logs')")
    est = estimate_offset(con, log_id, capture_id)

    def ms(ns):
        return "none" if ns is None else f"{ns / 1e6:+.3f} ms"
    click.echo(f"event log {log_id} vs capture {capture_id}: {_plural(est.pairs, 'bound')}; "
               f"offset between {ms(est.lower_ns)} and {ms(est.upper_ns)}")
    if est.uncertainty_ns is None:
        click.echo(f"offset {ms(est.offset_ns)} (one-sided: only "
                   f"{'upper' if est.lower_ns is None else 'lower'} bounds)")
    elif est.consistent:
        click.echo(f"offset {ms(est.offset_ns)} +- {est.uncertainty_ns / 1e6:.3f} ms")
    else:
        click.echo(f"offset {ms(est.offset_ns)}; the bounds cross by "
                   f"{2 * est.uncertainty_ns / 1e6:.3f} ms: the clocks drift or a port "
                   f"matched the wrong flow", err=True)
    if apply:
        set_clock_offset(con, log_id, est.offset_ns, "estimated", est.uncertainty_ns)
        click.echo(f"applied: event log {log_id} moved to the capture's clock")
    con.close()


@main.command(context_settings=CONTEXT)
@click.option("--compare", required=True, metavar="FACTOR",
              help="The factor whose levels are the arms (a label, e.g. path).")
@click.option("--by", "by", multiple=True, metavar="FACTOR",
              help="Split the table by this factor (repeatable), e.g. --by conn.")
@click.option("--levels", default=None, metavar="A,B",
              help="Arm order: the ratio is A / B (default: sorted).")
@click.option("--spans", "top_spans", type=int, default=3, show_default=True,
              help="How many moved spans to show.")
@click.option("--where", "where", multiple=True, metavar="LABEL=VALUE",
              help="Only requests with this label (repeatable), e.g. --where experiment=cross-region.")
@click.option("--predict", "predict", default=None, is_flag=False, flag_value="",
              metavar="[SPAN,...]",
              help="Put the saving the first arm's spans predict beside the saving measured "
                   "(spans: those the factor removes; default by factor, e.g. loss_down: "
                   "loss_recovery).")
@db_option
@format_option
@handle_errors
def ablation(compare, by, levels, top_spans, where, predict, db, fmt):
    """Compare the levels of one factor: medians, ratios, CI, spans that moved.

    One row per combination of the --by factors. For the first two arms:
    the ratio of medians, the median of paired ratios (pairs in
    interleaving order), a seeded bootstrap 95% CI of the ratio, paired
    rounds won, and the attribution spans whose median paired change
    explains the difference. Medians interpolate linearly between the two
    nearest ranks (type 7). A difference smaller than the runs' RTT spread
    (p90 - p10) is marked: it is no difference. With --predict: the saving
    the first arm's spans predict for removing the factor's mechanism, the
    saving measured (difference of medians, bootstrap 95% interval), and
    whether the prediction holds (inside the interval, or within 10 % / 10 ms).

    \b
    Example:
      tracekit ablation --compare path --by connection --levels direct,tunnel --where experiment=cross-region
      tracekit ablation --compare loss_down --by connection --levels 0.05,0.0 --predict
    """
    from .ablation import ablation as run
    from .store.db import connect

    con = connect(db, read_only=True)
    _require_analyzed(con, db)
    results = run(con, compare, by, levels.split(",") if levels else None, _parse_labels(where))
    con.close()
    if predict is not None:
        from .ablation import predict as predicted
        spans = tuple(x for x in predict.split(",") if x) if predict else None
        for c in results:
            c.prediction = predicted(c, compare, spans)
        if not any(c.prediction for c in results):
            raise TracekitError(f"no spans to predict {compare!r} with: name them "
                                f"(--predict SPAN,SPAN)")
    from .report.table import ablation_rows
    emit(*ablation_rows(results, by, top_spans, predict is not None), fmt)
    for c in results:
        if c.no_difference:
            where = c.label(by) or "all requests"
            click.echo(f"tracekit: warning: {where}: the medians differ by less than the RTT "
                       f"spread of these runs ({c.rtt_spread_ns / 1e6:.1f} ms): no difference",
                       err=True)


@main.command(context_settings=CONTEXT)
@click.option("--up-bytes", type=click.IntRange(0), default=0, show_default=True)
@click.option("--down-bytes", type=click.IntRange(0), default=354_640, show_default=True)
@click.option("--rtt-ms", type=click.FloatRange(0), required=True, help="Propagation round trip.")
@click.option("--rate-mbps", type=click.FloatRange(0, min_open=True), default=None,
              help="Bottleneck rate both ways (Mbit/s); default: unlimited.")
@click.option("--up-rate-mbps", type=click.FloatRange(0, min_open=True), default=None)
@click.option("--down-rate-mbps", type=click.FloatRange(0, min_open=True), default=None)
@click.option("--processing-ms", type=click.FloatRange(0), default=0.0, show_default=True)
@click.option("--loss", type=click.FloatRange(0, 1, max_open=True), default=0.0, show_default=True,
              help="Random loss of the data direction, for the retransmission rounds.")
@click.option("--mss", type=click.IntRange(1), default=1448, show_default=True)
@click.option("--initial-window", "iw_segments", type=click.IntRange(1), default=10,
              show_default=True, help="Initial congestion window in segments.")
@format_option
@handle_errors
def bound(up_bytes, down_bytes, rtt_ms, rate_mbps, up_rate_mbps, down_rate_mbps, processing_ms,
          loss, mss, iw_segments, fmt):
    """The serial lower bound from flags alone, and what mechanisms would add.

    T_serial = S_u/B_u + R + T_c + S_d/B_d (docs/timing-model.md); beside it, the
    round trips a fresh connection adds (TCP, TLS 1.3), slow start's rounds
    for the response, and the retransmission rounds random loss costs
    (mean and p99), all from tracekit.model.

    \b
    Example (the motivating case):
      tracekit bound --down-bytes 354640 --rtt-ms 200 --rate-mbps 333 --processing-ms 30 --loss 0.14
    """
    import math

    from . import model

    rtt = rtt_ms / 1e3
    up_rate = (up_rate_mbps or rate_mbps or math.inf) * 1e6 / 8
    down_rate = (down_rate_mbps or rate_mbps or math.inf) * 1e6 / 8
    t = model.serial_time(up_bytes, up_rate, rtt, processing_ms / 1e3, down_bytes, down_rate)
    iw = iw_segments * mss
    ss_rounds = model.slow_start_rounds(down_bytes, iw)
    packets = math.ceil(down_bytes / mss) if down_bytes else 0
    mean_s, p99_s = model.retransmission_completion(packets, loss, rtt, t, q=0.99)
    rows = [
        ("upload S_u/B_u", up_bytes / up_rate * 1e3 if up_bytes else 0.0, "bound"),
        ("propagation R", rtt_ms, "bound"),
        ("processing T_c", processing_ms, "bound"),
        ("download S_d/B_d", down_bytes / down_rate * 1e3 if down_bytes else 0.0, "bound"),
        ("serial bound", t * 1e3, "total"),
        ("+ TCP handshake (fresh connection)", rtt_ms, "mechanism"),
        ("+ TLS 1.3 handshake (fresh connection)", rtt_ms, "mechanism"),
        (f"+ slow start from {iw_segments} segments: {ss_rounds} rounds, RTT waits",
         max(ss_rounds - 1, 0) * rtt_ms, "mechanism"),
        (f"loss {loss:g} over {packets} packets: mean completion", mean_s * 1e3, "with loss"),
        ("  p99 completion", p99_s * 1e3, "with loss"),
    ]
    emit(["component", "ms", "kind"], [(n, round(v, 3), k) for n, v, k in rows], fmt)


@main.group(context_settings=CONTEXT)
def lab():
    """Run experiments with real stacks over an emulated WAN (root needed)."""


@lab.command("run", context_settings=CONTEXT)
@click.argument("experiment", type=click.Path(dir_okay=False))
@click.option("--out", "workdir", default="lab-runs", show_default=True, metavar="DIR",
              help="Where each run's captures, logs and manifest go.")
@click.option("--dry-run", is_flag=True, help="Print the run order and settings only.")
@click.option("--resume", is_flag=True,
              help="Keep the runs an interrupted call finished (their manifest.json exists).")
@db_option
@handle_errors
def lab_run(experiment, workdir, dry_run, resume, db):
    """Run EXPERIMENT (TOML), interleaved, then ingest every run with its labels.

    \b
    Example:
      sudo tracekit lab run experiments/cross-region.toml --out runs --db lab.duckdb
      tracekit analyze --db lab.duckdb
      tracekit ablation --compare path --by connection --db lab.duckdb
    """
    from .lab import experiment as ex

    spec = ex.load(experiment)
    plan = ex.schedule(spec)
    if dry_run:
        for trial, order, combo in plan:
            levels = " ".join(f"{k}={v}" for k, v in combo.items())
            click.echo(f"run {order:3d}  trial {trial}  {levels}  {ex._settings(spec, combo)}")
        return
    os.makedirs(workdir, exist_ok=True)
    started = time.monotonic()

    def progress(i, n, combo, skipped=False):
        levels = " ".join(f"{k}={v}" for k, v in combo.items())
        what = "kept from before" if skipped else f"{time.monotonic() - started:.0f} s"
        click.echo(f"run {i}/{n}: {levels} ({what})", err=True)
    manifests = ex.run_experiment(spec, workdir, progress, resume)
    busy = ex.disturbed(manifests)
    if busy:
        click.echo(f"note: the machine was busy during {_plural(len(busy), 'run')} "
                   f"({', '.join(busy)}): the path's forwarder or the lab's processes were held up "
                   f"by more than 5 ms at times (each manifest's forwarder.max_late_ms and "
                   f"forwarder.machine say how much)", err=True)
    from .store.db import connect
    con = connect(db)
    try:
        ex.ingest_runs(con, manifests, workdir)
    finally:
        con.close()
    click.echo(f"{spec['name']}: {_plural(len(manifests), 'run')} in "
               f"{time.monotonic() - started:.0f} s; files in {workdir}, ingested into {db}. "
               f"Next: tracekit analyze --db {db}")


@lab.command("clean", context_settings=CONTEXT)
@click.option("--force", is_flag=True,
              help="Also remove the paths of a lab run that is still running (says whose).")
@handle_errors
def lab_clean(force):
    """Remove what crashed lab runs left: their namespaces, the processes in them and
    their forwarder. Only what tracekit's registry of paths names (/run/tracekit-lab)
    is touched; a live run's paths only with --force.

    \b
    Example:
      tracekit lab clean
    """
    from .lab import cleanup
    for line in cleanup.clean(force):
        click.echo(line)


@main.command(context_settings=CONTEXT)
@click.option("--run", "run", default=None,
              help="A run or an experiment (its label); the whole store without it.")
@click.option("--compare", default=None, metavar="FACTOR",
              help="Show the ablation of this factor (as tracekit ablation).")
@click.option("--by", multiple=True, metavar="FACTOR", help="Ablation rows per level of this.")
@click.option("--levels", default=None, metavar="A,B", help="The two arms, in this order.")
@click.option("--where", multiple=True, metavar="LABEL=VALUE", help="Only requests with these labels.")
@click.option("--out", default="tracekit-report.html", show_default=True, metavar="FILE",
              help="The HTML file to write.")
@db_option
@handle_errors
def report(run, compare, by, levels, where, out, db):
    """Write one self-contained HTML report (it opens offline in any browser): what
    was measured, the ablation table with intervals, attribution per arm and per
    request, time-sequence graphs of the flows that matter, playback and serving,
    and where every figure came from.

    \b
    Example:
      tracekit report --run cross-region --compare path --by connection --levels direct,tunnel --out report.html
    """
    from .report.html import build
    from .store.db import connect

    con = connect(db, read_only=True)
    try:
        page = build(con, run=run, compare=compare, by=by,
                     levels=levels.split(",") if levels else None, where=_parse_labels(where))
    finally:
        con.close()
    with open(out, "w", encoding="utf-8") as f:
        f.write(page)
    click.echo(f"wrote {out} ({len(page) / 1e6:.1f} MB, self-contained)")


@main.command(context_settings=CONTEXT)
@click.option("--parquet", "directory", required=True, type=click.Path(file_okay=False),
              help="A new folder for the dataset.")
@db_option
@handle_errors
def export(directory, db):
    """Write the store as a Parquet dataset: a folder per table, partitioned by capture.

    Tables with a capture_id are split hive-style (packets/capture_id=3/...);
    `_tables.json` lists the tables and their columns. DuckDB, Spark, pandas
    or `tracekit import` read it back.

    \b
    Example:
      tracekit export --parquet store-dataset
    """
    from .analyze import store_wide_tables
    from .store.dataset import export as write
    from .store.db import connect

    con = connect(db, read_only=True)
    try:
        counts = write(con, directory, whole=store_wide_tables())
    finally:
        con.close()
    click.echo(f"wrote {directory}: {_plural(len(counts), 'table')}, "
               f"{_plural(counts.get('packets', 0), 'packet')}")


@main.command("import", context_settings=CONTEXT)
@click.argument("directory", type=click.Path(file_okay=False, exists=True))
@db_option
@handle_errors
def import_(directory, db):
    """Fill a new store from a Parquet dataset that `tracekit export` wrote.

    \b
    Example:
      tracekit import store-dataset --db copy.duckdb
    """
    from .store.dataset import import_into
    from .store.db import connect

    con = connect(db)
    try:
        counts = import_into(con, directory)
    finally:
        con.close()
    click.echo(f"imported {_plural(len(counts), 'table')}, "
               f"{_plural(counts.get('packets', 0), 'packet')}")


@main.command("tls-keys", context_settings=CONTEXT)
@click.argument("capture_id", type=int)
@click.argument("keylog", type=click.Path(dir_okay=False))
@db_option
@handle_errors
def tls_keys(capture_id, keylog, db):
    """Decrypt capture CAPTURE_ID's TLS with KEYLOG (SSLKEYLOGFILE) for exact handshake times.

    Needs tshark. The decrypted handshake messages go to `tls_decrypted`;
    `handshakes` is rebuilt for that capture with timing_source `decrypted`.

    \b
    Example:
      SSLKEYLOGFILE=keys.log curl https://... ; tracekit tls-keys 1 keys.log
    """
    from .analyze import analyze as run
    from .store.db import connect
    from .transport.keylog import load_keys

    con = connect(db)
    try:
        n = load_keys(con, capture_id, keylog)
        run(con)
    finally:
        con.close()
    click.echo(f"capture {capture_id}: {_plural(n, 'decrypted TLS message')}; handshakes rebuilt")


_view("handshakes", "TCP, TLS and QUIC connection setups: duration, first data, round trips.",
      "tracekit handshakes --capture 1 --format markdown")
_view("rtt", "RTT per flow and direction (min/median/p90/max) and the capture's vantage point.",
      "tracekit rtt --capture 3")
_view("retransmissions", "Retransmissions per flow direction by trigger, beside Wireshark's calls.",
      "tracekit retransmissions --capture 3 --flow 0")
_view("rounds", "Loss-recovery rounds: segments, triggers and what each round cost.",
      "tracekit rounds --capture 3 --format csv")
_view("stalls", "Share of each flow direction's life in each limitation state.",
      "tracekit stalls --capture 3")
_view("acks", "ACK behaviour per flow direction: frequency, delayed, stretch, duplicate, SACK.",
      "tracekit acks --capture 2")
_view("requests", "Requests: from request_start/end events, else each request/response exchange "
      "of a TCP flow.", "tracekit requests --capture 1 --format json")
_store_view("playback", "Audio streams: underruns, silence, jitter or rate deficit, buffer needed.",
            "tracekit playback --run stalls")
_store_view("underruns", "Playback underruns, each charged to model, transport or local.",
            "tracekit underruns --run stalls --format markdown")
_store_view("attribute", "Per request: measured time, serial bound, gap and the spans that took it.",
            "tracekit attribute --run cross-region-001")
_store_view("serving", "Model serving per batch size: throughput, TTFT, TPOT, slot waste, slowdown.",
            "tracekit serving --format csv")


@main.command(context_settings=CONTEXT)
@click.argument("query", required=False)
@db_option
@format_option
@handle_errors
def sql(query, db, fmt):
    """Run a SQL QUERY on the store (read from stdin when QUERY is omitted or -).

    \b
    Example:
      tracekit sql "SELECT protocol, count(*) FROM flows GROUP BY ALL"
      echo "SELECT * FROM captures" | tracekit sql --format json
    """
    import duckdb

    from .store.db import connect

    if query in (None, "-"):
        query = sys.stdin.read()
    if not query.strip():
        raise QueryError("no query given (pass it as an argument or on stdin)")
    con = connect(db, read_only=True if not os.path.exists(db) else "auto")
    try:
        cur = con.execute(query)
    except duckdb.Error as e:
        raise QueryError(f"query failed: {str(e).splitlines()[0]}") from None
    if cur.description is None:
        return
    columns = [d[0] for d in cur.description]
    emit(columns, cur.fetchall(), fmt)


if __name__ == "__main__":
    main(prog_name="tracekit")
