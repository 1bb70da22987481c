"""What `tracekit ingest` and `tracekit analyze` print when they run on Dask
into a Parquet dataset (`--store DIR`, `--workers N`, `--cluster ADDRESS`):
the CLI's side of tracekit/pipeline/cluster."""

import os
import sys
import time

import click

from .common import EXIT_PARTIAL, StatusLine, eta_text, live, plural, verbosity
from .messages import report_log, skipped_text


def progress():
    """A callback for a Dask run's captures as they end: n/total and the time
    left on a terminal, a line per capture with -v, nothing with -q."""
    started = time.monotonic()
    rewrite, verbose, line = live(), verbosity() > 0, StatusLine()

    def shown(n, total, path, capture_id, result):
        eta = eta_text(time.monotonic() - started, n, total)
        state = "failed" if result is None else "done"
        if verbose:
            name = os.path.basename(path) if path else f"capture {capture_id}"
            click.echo(f"{n}/{total}: {name} (capture {capture_id}) {state}{eta}", err=True)
        elif rewrite:
            line.show(f"{n}/{total} captures done (last: capture {capture_id}){eta}")
            if n == total:
                line.clear()
    return shown


def report(run, where, command="ingest"):
    """What a DatasetRun of `command` (ingest or analyze) did; exit status 1
    when a capture failed."""
    for r in run.captures:
        name = os.path.basename(r["path"]) if r["path"] else f"capture {r['capture_id']}"
        if r["packets"] is None:
            click.echo(f"{name}: analysed again, {r['seconds']:.2f} s")
        else:
            click.echo(f"{name}: capture {r['capture_id']}: {plural(r['packets'], 'packet')}, "
                       f"{plural(r['flows'], 'flow')}, {skipped_text(r['decode_status'])}; "
                       f"ingested and analysed in {r['seconds']:.2f} s")
        if r["read_stop"]:
            reason, offset, message = r["read_stop"]
            click.echo(f"tracekit: warning: {r['path']}: {reason} at byte offset {offset}: "
                       f"{message}; the {r['packets']:,} packets before it were ingested",
                       err=True)
        for table, reason in r["analysis_failures"]:
            click.echo(f"warning: {table}: capture {r['capture_id']} was not analysed and is "
                       f"left out of the analyses after it: {reason}", err=True)
    for path, cid in run.duplicates:
        click.echo(f"{os.path.basename(path)}: already in the dataset as capture {cid} "
                   f"(same sha256); nothing added")
    for s in run.logs:
        report_log(s)
    for step in run.steps:
        if step.scope == "store" and step.built:
            click.echo(f"{step.table}: rebuilt over the whole dataset, "
                       f"{plural(step.rows, 'row')}, {step.seconds:.2f} s")
        for _, reason in (step.failures if step.scope == "store" else ()):
            click.echo(f"warning: {step.table}: could not be built over the whole dataset and "
                       f"is empty until the next analyze: {reason}", err=True)
    for note in run.notes:
        click.echo(f"tracekit: warning: {note}", err=True)
    for path, cid, reason in run.failures:
        what = os.path.basename(path) if path else f"capture {cid}"
        if command == "analyze":
            click.echo(f"tracekit: error: {what} (capture {cid}) failed twice and was not "
                       f"analysed: {reason}; the next analyze tries it again", err=True)
        else:
            click.echo(f"tracekit: error: {what} (capture {cid}) failed twice and is not in the "
                       f"dataset: {reason}; the next run gives it the same id", err=True)
    counted = [r["packets"] for r in run.captures if r["packets"] is not None]
    packets = sum(counted)  # (a capture analysed again was not read here: its packets not counted)
    rate = f", {packets / run.seconds:,.0f} packets/s" if packets and run.seconds > 0 else ""
    held = f" ({plural(packets, 'packet')})" if counted or not run.captures else ""
    click.echo(f"total: {plural(len(run.captures), 'capture')}{held}, "
               f"{plural(len(run.failures), 'failure')} on {where}; {run.seconds:.2f} s{rate}")
    if run.failures:
        sys.exit(EXIT_PARTIAL)
