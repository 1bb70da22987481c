"""What `tracekit ingest` and `tracekit analyze` print when they run on Dask
into a Parquet dataset (`--store DIR`, `--workers N`, `--cluster ADDRESS`):
the CLI's side of tracekit/cluster/."""

import contextlib
import os
import sys

import click


def _plural(n, word):
    return f"{n:,} {word}" + ("" if n == 1 else "s")


@contextlib.contextmanager
def client_for(workers, cluster):
    """A Dask client: of the scheduler at `cluster`, or of a LocalCluster of
    `workers` processes (default: one per core), closed at the end."""
    from .cluster import connect, local_cluster
    if cluster:
        client = connect(cluster)
        try:
            yield client, f"the Dask cluster at {cluster}"
        finally:
            client.close()
        return
    n = workers or os.cpu_count() or 1
    client, local = local_cluster(n)
    try:
        yield client, f"a local Dask cluster of {_plural(n, 'worker')}"
    finally:
        client.close()
        local.close()


def _progress(n, total, path, capture_id, result):
    if sys.stderr.isatty():
        click.echo(f"\r{n}/{total} captures done (last: capture {capture_id})" + " " * 10,
                   err=True, nl=False)
        if n == total:
            click.echo("\r" + " " * 70 + "\r", err=True, nl=False)


def _report(run, where):
    from .cli import _report_log, _skipped_text
    for r in run.captures:
        name = os.path.basename(r["path"]) if r["path"] else f"capture {r['capture_id']}"
        if r["packets"] is None:
            click.echo(f"{name}: analysed again, {r['seconds']:.2f} s")
        else:
            click.echo(f"{name}: capture {r['capture_id']}: {_plural(r['packets'], 'packet')}, "
                       f"{_plural(r['flows'], 'flow')}, {_skipped_text(r['decode_status'])}; "
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
        _report_log(s)
    for step in run.steps:
        if step.scope == "store" and step.built:
            click.echo(f"{step.table}: rebuilt over the whole dataset, "
                       f"{_plural(step.rows, 'row')}, {step.seconds:.2f} s")
        for _, reason in (step.failures if step.scope == "store" else ()):
            click.echo(f"warning: {step.table}: could not be built over the whole dataset and "
                       f"is empty until the next analyze: {reason}", err=True)
    for note in run.notes:
        click.echo(f"tracekit: warning: {note}", err=True)
    for path, cid, reason in run.failures:
        what = os.path.basename(path) if path else f"capture {cid}"
        click.echo(f"tracekit: error: {what} (capture {cid}) failed twice and is not in the "
                   f"dataset: {reason}; the next run gives it the same id", err=True)
    packets = sum(r["packets"] or 0 for r in run.captures)
    rate = f", {packets / run.seconds:,.0f} packets/s" if packets and run.seconds > 0 else ""
    click.echo(f"total: {_plural(len(run.captures), 'capture')} ({_plural(packets, 'packet')}), "
               f"{_plural(len(run.failures), 'failure')} on {where}; {run.seconds:.2f} s{rate}")
    if run.failures:
        sys.exit(1)


def ingest_dataset(directory, capture_paths, parsed, runs, labels, clock_offset_ns,
                   workers, cluster):
    from . import cluster as engine
    from .events import read_logs
    items = [(p, labels) for p in capture_paths]
    items += [(p, run_labels) for caps, _, run_labels in runs for p in caps]
    logs = [(parsed, labels, clock_offset_ns)] if parsed else []
    logs += [(read_logs(run_logs), run_labels, None)
             for _, run_logs, run_labels in runs if run_logs]
    with client_for(workers, cluster) as (client, where):
        run = engine.ingest(directory, items, logs, client, progress=_progress)
    _report(run, where)


def analyze_dataset(directory, params, workers, cluster):
    from . import cluster as engine
    with client_for(workers, cluster) as (client, where):
        run = engine.analyze(directory, client, params, progress=_progress)
    if not run.captures and not run.failures:
        click.echo("per-capture analyses: up to date")
    _report(run, where)
