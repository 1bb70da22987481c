"""`tracekit lab`: experiments with real stacks over an emulated WAN (root)."""

import time

import click

from .. import api
from .common import CONTEXT, db_option, handle_errors, plural


@click.group(context_settings=CONTEXT)
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
    if dry_run:
        _, plan = api.lab_plan(experiment)
        for trial, order, combo, settings in plan:
            levels = " ".join(f"{k}={v}" for k, v in combo.items())
            click.echo(f"run {order:3d}  trial {trial}  {levels}  {settings}")
        return
    started = time.monotonic()

    def progress(i, n, combo, skipped=False):
        levels = " ".join(f"{k}={v}" for k, v in combo.items())
        what = "kept from before" if skipped else f"{time.monotonic() - started:.0f} s"
        click.echo(f"run {i}/{n}: {levels} ({what})", err=True)
    spec, manifests, busy = api.lab_run(experiment, workdir, db, progress, resume,
                                        on_runs_done=_note_busy)
    click.echo(f"{spec['name']}: {plural(len(manifests), 'run')} in "
               f"{time.monotonic() - started:.0f} s; files in {workdir}, ingested into {db}. "
               f"Next: tracekit analyze --db {db}")


def _note_busy(busy):
    if busy:
        click.echo(f"note: the machine was busy during {plural(len(busy), 'run')} "
                   f"({', '.join(busy)}): the path's forwarder or the lab's processes were held up "
                   f"by more than 5 ms at times (each manifest's forwarder.max_late_ms and "
                   f"forwarder.machine say how much)", err=True)


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
    for line in api.lab_clean(force):
        click.echo(line)


COMMANDS = [lab]
