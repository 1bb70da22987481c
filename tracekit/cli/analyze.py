"""`tracekit analyze`: every derived table, incrementally, and what each step did."""

import time

import click

from .. import api
from . import dask_runs
from .common import (
    CONTEXT,
    StatusLine,
    cluster_options,
    db_option,
    eta_text,
    handle_errors,
    live,
    plural,
    verbosity,
)


@click.command(context_settings=CONTEXT)
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
    params = {"dupthresh": dupthresh, "rto_min_ns": int(rto_min_ms * 1e6),
              "reorder_window_ns": int(reorder_window_ms * 1e6)}
    if api.on_dataset(db, workers, cluster):
        run, where = api.analyze(db, params, workers=workers, cluster=cluster,
                                 dataset_progress=dask_runs.progress())
        if not run.captures and not run.failures:
            click.echo("per-capture analyses: up to date")
        return dask_runs.report(run, where, "analyze")
    line = StatusLine()
    started = time.monotonic()
    rewrite, verbose = live(), verbosity() > 0

    def progress(table, capture_id, done=None, total=None):
        what = f"for capture {capture_id}" if capture_id else "over the whole store"
        now = time.monotonic()
        if table != step[0]:
            step[:] = [table, now]
        elapsed = now - started
        share = (f", {100.0 * done / total:.0f}% of the step's packets done"
                 f"{eta_text(now - step[1], done, total)}" if total else "")
        if verbose:
            click.echo(f"analysing {table} {what} ({elapsed:,.1f} s in{share})", err=True)
        elif rewrite and elapsed > 1.0:
            line.show(f"analysing: {table} {what} ({elapsed:,.0f} s in{share})")
    progress.takes_share = True
    step = [None, started]
    try:
        summary = api.analyze(db, params, progress)
    finally:
        line.clear()
    report(summary)


def report(summary):
    """What each step of an analyze did (StepResults)."""
    for result in summary:
        table, built, rows, seconds = result
        if result.scope == "view":
            click.echo(f"{table}: a view, computed when read" + (" (created)" if built else ""))
        elif built and result.scope == "store":
            click.echo(f"{table}: rebuilt over the whole store, {plural(rows, 'row')}, "
                       f"{seconds:.2f} s")
        elif built:
            click.echo(f"{table}: {plural(built, 'capture')} analysed, "
                       f"{plural(rows, 'row')}, {seconds:.2f} s")
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


COMMANDS = [analyze]
