"""What every command shares: options, output, error handling, progress.

Every TracekitError becomes one line on stderr and exit status 2 (`--debug`
shows the traceback instead); a full disk is named as such; anything else is
a bug and says so in one line. Row-emitting commands share --format.

Exit statuses: the EXIT_ constants below (the table in docs/guide.md, "Exit
statuses"; tests/test_exit_codes.py runs each).
"""

import contextlib
import errno
import functools
import os
import re
import stat
import sys
import time

import click

from ..core.errors import QueryError, TracekitError

EXIT_OK = 0
EXIT_PARTIAL = 1  # a run that failed in part (a capture of a Dask run); the rest is kept
EXIT_USAGE = 2  # usage or bad input: one line naming what (click's usage errors too)
EXIT_INTERNAL = 3  # a bug: one line, --debug for the traceback
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of the output went away

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


def _remember_out(ctx, param, value):
    ctx.meta["tracekit.out"] = value
    return value


def format_option(f):
    f = click.option(
        "--out", "out", metavar="FILE", default=None, expose_value=False, callback=_remember_out,
        help="Write the rows to FILE instead of stdout (needed by --format parquet, unless "
             "stdout is redirected to a file).")(f)
    return click.option(
        "--format", "fmt", type=click.Choice(["table", "csv", "json", "ndjson", "markdown",
                                              "parquet"]),
        default="table", show_default=True,
        help="Output format: ndjson is one JSON object a line; parquet writes a Parquet "
             "file (--out FILE, or > FILE).")(f)


def emit(columns, rows, fmt):
    from ..presentation.table import render
    out = click.get_current_context().meta.get("tracekit.out")
    if fmt == "parquet":
        _write_parquet(columns, rows, out)
        return
    text = render(columns, rows, fmt)
    if out:
        try:
            with open(out, "w") as f:
                f.write(text)
        except OSError as e:
            raise TracekitError(f"{out}: cannot write: {e.strerror}") from None
    else:
        click.echo(text, nl=False)


def _write_parquet(columns, rows, out):
    """The rows as one Parquet file: to `out`, or to stdout when it is a file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..presentation.table import parquet_table
    if out is None:
        try:
            regular = stat.S_ISREG(os.fstat(sys.stdout.fileno()).st_mode)
        except (OSError, ValueError, AttributeError):
            regular = False
        if not regular:
            raise TracekitError("--format parquet writes a file: give --out FILE (or redirect "
                                "stdout to a file: > rows.parquet)")
    table = parquet_table(pa, columns, rows)
    try:
        if out is None:
            sys.stdout.flush()
            pq.write_table(table, sys.stdout.buffer)
        else:
            pq.write_table(table, out)
    except OSError as e:
        raise TracekitError(f"{out or 'stdout'}: cannot write Parquet: {e}") from None


def plural(n, word):
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def help_text(doc, example):
    return f"{doc}\n\n\b\nExample:\n  {example}"


def _disk_full(e, command=None):
    """The one-line message for a full disk (DuckDB's IOException or an OSError), or None.
    An ingest is all or nothing; an analyze keeps the steps it committed."""
    text = str(e)
    if getattr(e, "errno", None) == errno.ENOSPC or "No space left on device" in text:
        where = re.search(r'file "([^"]+)"', text)
        place = f" writing {where.group(1)}" if where else ""
        if getattr(e, "tracekit_committed", False):
            return (f"no space left on the device{place} after this command's rows were "
                    f"committed: they are in the store (free some space before the next command)")
        if command == "analyze":
            return (f"no space left on the device{place}; what this command finished before "
                    f"is kept, nothing half-built is visible (free some space and run it "
                    f"again: it builds the rest)")
        return (f"no space left on the device{place}; nothing of this command is visible "
                f"in the store (free some space and run it again)")
    return None


# modules of the extras, and what a command that needs one says without it
_DASK = ("a folder as --store is a Parquet dataset, ingested and analysed on Dask, which is "
         "not installed: pip install 'tracekit[cluster]' (or give a .duckdb file)")
OPTIONAL = {"dask": _DASK, "distributed": _DASK}


def _quiet_stdout():
    """Point stdout at /dev/null, so that the interpreter's last flush of what
    was buffered for the closed pipe does not fail again on the way out."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _damaged_parquet(e):
    """One line for a dataset's file DuckDB cannot read as Parquet (damage past
    what store/dataset.check_parquet sees: inside a page, a footer), or None."""
    text = str(e)
    where = re.search(r"""[Ff]ile ['"]([^'"]+\.parquet)['"]""", text)
    if where and type(e).__module__.startswith(("duckdb", "_duckdb")):
        first = text.splitlines()[0][:200]
        return (f"{where.group(1)}: cannot be read as Parquet ({first}): the dataset is "
                f"damaged there; move that capture's folder away and ingest its file again")
    return None


def _damaged_dataset(ctx, e):
    """When a command over a Parquet dataset failed in DuckDB (not on the user's
    SQL), the one line naming the dataset's file it cannot read whole (damage
    inside a page: DuckDB's "TProtocolException: Invalid data" names none), or None."""
    text = str(e)
    if not (isinstance(e, QueryError) or type(e).__module__.startswith(("duckdb", "_duckdb"))):
        return None
    if any(f"{kind} Error" in text for kind in ("Binder", "Parser", "Catalog")):
        return None
    from .. import api
    for key in ("db", "directory"):
        said = api.damaged_dataset_file(ctx.params.get(key))
        if said:
            return said
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
            said = _damaged_dataset(ctx, e) if isinstance(e, QueryError) else None
            click.echo(f"tracekit: error: {said or e}", err=True)
            sys.exit(EXIT_USAGE)
        except KeyboardInterrupt:
            if ctx.info_name == "ingest":
                said = "the store is as it was before this command"
            else:
                said = ("what was complete before it is kept; nothing half-written is "
                        "visible (the next run of the command finishes the job)")
            click.echo(f"tracekit: interrupted; {said}", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except BrokenPipeError:
            # the reader of the output went away (`| head`): stop as a Unix filter
            # does, silently, with 128 + SIGPIPE (what is committed stays)
            _quiet_stdout()
            sys.exit(EXIT_BROKEN_PIPE)
        except ModuleNotFoundError as e:
            if debug or e.name not in OPTIONAL:
                raise
            click.echo(f"tracekit: error: {OPTIONAL[e.name]}", err=True)
            sys.exit(EXIT_USAGE)
        except Exception as e:
            if debug:
                raise
            full = (_disk_full(e, ctx.info_name) or _out_of_memory(e, ctx.info_name)
                    or _damaged_dataset(ctx, e) or _damaged_parquet(e))
            if full:
                click.echo(f"tracekit: error: {full}", err=True)
                sys.exit(EXIT_USAGE)
            # a bug: say so in one line
            click.echo(f"tracekit: internal error: {type(e).__name__}: {e} "
                       f"(run with --debug for the traceback, and please report it)", err=True)
            sys.exit(EXIT_INTERNAL)
    return wrapper


def _out_of_memory(e, command):
    """One line for memory that ran out (a MemoryError of Python or numpy, or
    DuckDB's OutOfMemoryException), naming what ran out; None otherwise."""
    if not isinstance(e, MemoryError) and type(e).__name__ != "OutOfMemoryException":
        return None
    what = str(e).splitlines()[0][:200] if str(e) else "an allocation failed"
    said = ("the store is as it was before this command" if command == "ingest" else
            "nothing half-written is visible")
    return (f"out of memory during `{command}` ({what}): the process's memory or address "
            f"space limit (ulimit -v, a container's limit) is too small for this input; "
            f"{said}")


VERBOSITY = "tracekit.verbosity"  # ctx.meta key, shared by a command and its group


def _set_verbosity(level):
    def callback(ctx, param, value):
        if value:
            ctx.meta[VERBOSITY] = level
        return value
    return callback


def verbosity_options():
    """-q and -v, for the group and every command (`tracekit -q ingest` and
    `tracekit ingest -q` alike)."""
    return [click.Option(["-q", "--quiet"], is_flag=True, expose_value=False,
                         callback=_set_verbosity(-1), help="No progress lines."),
            click.Option(["-v", "--verbose"], is_flag=True, expose_value=False,
                         callback=_set_verbosity(1),
                         help="Say each step on stderr as it starts (each file read, each "
                              "analysis step and capture, each Dask capture done), terminal "
                              "or not.")]


def verbosity():
    """-1 quiet, 0 by default, 1 verbose."""
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(VERBOSITY, 0) if ctx is not None else 0


def live():
    """Whether a progress line that rewrites itself is shown: on a terminal, not -q."""
    return verbosity() >= 0 and sys.stderr.isatty()


def eta_text(seconds_so_far, done, total):
    """', about N s left' from the rate so far, or '' before there is one."""
    if not done or done >= total or seconds_so_far <= 0:
        return ""
    left = seconds_so_far * (total - done) / done
    if left < 120:
        return f", about {left:,.0f} s left"
    return f", about {left / 60:,.0f} min left" if left < 7200 else f", about {left / 3600:,.1f} h left"


@contextlib.contextmanager
def replay_progress():
    """The replays' progress on stderr: on a terminal a line rewritten after
    1 s (transfers replayed so far), with -v a line every 10 s, with -q or
    off a terminal nothing. A replay of a bulk response is minutes."""
    from ..presentation.whatif import on_replay
    rewrite, verbose = live(), verbosity() > 0
    if not rewrite and not verbose:
        yield
        return
    started = time.monotonic()
    state, line = {"done": 0.0, "said": started}, StatusLine()

    def tick(transfers):
        state["done"] += transfers
        now = time.monotonic()
        text = f"whatif: {state['done']:,.0f} transfers replayed ({now - started:,.0f} s in)"
        if verbose:
            if now - state["said"] >= 10.0:
                click.echo(text, err=True)
                state["said"] = now
        elif now - started > 1.0:
            line.show(text)
    on_replay(tick)
    try:
        yield
    finally:
        on_replay(None)
        line.clear()


class StatusLine:
    """A line of progress on stderr rewritten in place (on a terminal: the
    callers ask `live()`), padded to cover a longer one before it; `clear`
    wipes it where it was shown."""

    def __init__(self, pad=10, width=80):
        self.pad, self.width, self.shown = pad, width, False

    def show(self, text):
        click.echo("\r" + text + " " * self.pad, err=True, nl=False)
        self.shown = True

    def clear(self):
        if self.shown:
            click.echo("\r" + " " * self.width + "\r", err=True, nl=False)
            self.shown = False


class Progress:
    """Progress of an ingest on stderr: a line rewritten in place on a terminal
    (after 1 s; with the time left at the rate so far), a line per file with -v,
    nothing with -q."""

    def __init__(self, enabled=None):
        self.enabled = live() if enabled is None else enabled
        self.verbose = verbosity() > 0
        self.started = time.monotonic()
        self.path = None
        self.file_started = self.started
        self.line = StatusLine(pad=8, width=90)

    def __call__(self, path, done, total):
        if not self.enabled and not self.verbose:
            return
        now = time.monotonic()
        if path != self.path:
            self.path, self.file_started = path, now
            if self.verbose:
                self.done()
                click.echo(f"reading {path} ({total / 1e6:,.1f} MB)", err=True)
        if not self.enabled or now - self.started < 1.0:
            return
        pct = 100.0 * done / total if total else 100.0
        name = os.path.basename(path)
        eta = eta_text(now - self.file_started, done, total)
        self.line.show(f"ingesting {name}: {pct:5.1f}% of {total / 1e6:,.0f} MB{eta}")

    def done(self):
        self.line.clear()


def parse_labels(labels):
    out = {}
    for item in labels:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise TracekitError(f"--label {item!r} is not KEY=VALUE (e.g. --label path=direct)")
        out[key] = value
    return out


_UNITS = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}


def parse_duration_ns(text):
    """'12.5ms', '-3us', '0.2s', '150000ns' or a bare number of seconds -> int ns."""
    m = re.fullmatch(r"\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*(ns|us|ms|s)?\s*", text)
    if not m:
        raise TracekitError(f"--clock-offset {text!r} is not a duration (e.g. 12.5ms, -300us, 0.2s)")
    ns = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if not abs(ns) < 2**63:  # (and not NaN): the events' times must stay inside int64 ns
        raise TracekitError(f"--clock-offset {text!r} is beyond what int64 nanoseconds hold "
                            f"(about 146 years)")
    return round(ns)
