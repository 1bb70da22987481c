"""The read-only views: captures, sessions, the transport and application
views of analyses/views/, Queqiao's dashboard figures, and `sql`."""

import os
import sys

import click

from .. import api
from ..core.errors import QueryError
from ..presentation.views import VIEWS
from .common import (
    CONTEXT,
    db_option,
    emit,
    format_option,
    handle_errors,
    help_text,
    plural,
)


@click.command(context_settings=CONTEXT)
@db_option
@format_option
@handle_errors
def captures(db, fmt):
    """List the ingested captures.

    \b
    Example:
      tracekit captures --format markdown
    """
    with api.open(db, read_only=True) as store:
        emit(*store.rows("views/captures"), fmt)


@click.command(context_settings=CONTEXT)
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
    with api.open(db, read_only=True) as store:
        store.check(capture_id=capture_id)
        emit(*store.rows("sessions", capture_id=capture_id), fmt)


def transport_view(name, doc, example):
    """A command showing analyses/views/<name>.sql, with --capture/--flow filters."""
    @click.command(name=name, context_settings=CONTEXT, help=help_text(doc, example))
    @db_option
    @format_option
    @click.option("--capture", "capture_id", type=int, default=None, help="Only this capture id.")
    @click.option("--flow", "flow_id", type=int, default=None, help="Only this flow id.")
    @handle_errors
    def command(db, fmt, capture_id, flow_id):
        with api.open(db, read_only=True) as store:
            store.require_analyzed()
            store.check(capture_id=capture_id, flow_id=flow_id)
            emit(*store.rows(f"views/{name}", capture_id=capture_id, flow_id=flow_id), fmt)
    return command


def application_view(name, doc, example):
    """A command showing analyses/views/<name>.sql over a store-wide table, with --run."""
    @click.command(name=name, context_settings=CONTEXT, help=help_text(doc, example))
    @db_option
    @format_option
    @click.option("--run", "run", default=None, help="Only this run (the events' run field).")
    @handle_errors
    def command(db, fmt, run):
        with api.open(db, read_only=True) as store:
            store.require_analyzed()
            store.check(run=run)
            columns, rows = store.rows(f"views/{name}", run=run)
        emit(columns, rows, fmt)
        if "flag" in columns:
            clocks = [r[columns.index("flag")] for r in rows
                      if (r[columns.index("flag")] or "").startswith("bound refused: clock")]
            if clocks:
                click.echo(f"tracekit: warning: {plural(len(clocks), 'bound')} refused: an event "
                           f"log's clock contradicts its packets ({clocks[0][22:]}); `tracekit "
                           f"clock LOG --capture CAPTURE --apply` estimates the offset and applies it",
                           err=True)
            unlinked = sum(1 for r in rows if r[columns.index("flag")] == "no flow linked")
            if unlinked:
                click.echo(f"tracekit: warning: {plural(unlinked, 'request')} unattributed: no "
                           f"flow of theirs was linked (no local_port hint, and not exactly one "
                           f"connection to their server began within their time, or their log's "
                           f"clock is off the capture's: `tracekit clock LOG --capture CAPTURE` "
                           f"estimates the offset)", err=True)
    return command


@click.command(context_settings=CONTEXT)
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
    with api.open(db, read_only=True) as store:
        store.check(log_id=log_id, where="the store")
        emit(*store.rows("views/queqiao", log=log_id), fmt)


@click.command(context_settings=CONTEXT)
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
    if query in (None, "-"):
        query = sys.stdin.read()
    if not query.strip():
        raise QueryError("no query given (pass it as an argument or on stdin)")
    with api.open(db, read_only=True if not os.path.exists(db) else "auto") as store:
        result = store.query(query)
    if result is not None:
        emit(*result, fmt)


COMMANDS = [captures, sessions, queqiao, sql,
            *((transport_view if v.scope == "transport" else application_view)(v.name, v.doc,
                                                                                v.example)
              for v in VIEWS)]
