"""Commands that move a store, check it or add to its evidence: export, import, check,
tls-keys."""

import sys

import click

from .. import api
from .common import CONTEXT, EXIT_USAGE, db_option, handle_errors, plural


@click.command(context_settings=CONTEXT)
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
    counts = api.export(db, directory)
    click.echo(f"wrote {directory}: {plural(len(counts), 'table')}, "
               f"{plural(counts.get('packets', 0), 'packet')}")


@click.command("import", context_settings=CONTEXT)
@click.argument("directory", type=click.Path(file_okay=False, exists=True))
@db_option
@handle_errors
def import_(directory, db):
    """Fill a new store from a Parquet dataset that `tracekit export` wrote.

    \b
    Example:
      tracekit import store-dataset --db copy.duckdb
    """
    counts = api.import_dataset(directory, db)
    click.echo(f"imported {plural(len(counts), 'table')}, "
               f"{plural(counts.get('packets', 0), 'packet')}")


@click.command(context_settings=CONTEXT)
@click.argument("directory", type=click.Path(file_okay=False, exists=True))
@handle_errors
def check(directory):
    """Verify every file of a Parquet dataset against the checksum recorded when it was written.

    One line per file: ok, damaged, missing, or not checksummed (a dataset
    written before checksums; read, never refused). Exit 2 when a file is
    damaged or missing. Every command reading the dataset verifies the files
    it reads; this one reads them all and lists them.

    \b
    Example:
      tracekit export --parquet store-dataset && tracekit check store-dataset
    """
    found = api.check_dataset(directory)
    for path, state, detail in found:
        click.echo(f"{state:<16} {path}  ({detail})")
    counts = {s: sum(1 for f in found if f[1] == s)
              for s in ("ok", "damaged", "missing", "not checksummed")}
    click.echo(f"{plural(len(found), 'file')}: "
               + ", ".join(f"{n:,} {s}" for s, n in counts.items()))
    if counts["damaged"] or counts["missing"]:
        sys.exit(EXIT_USAGE)


@click.command("tls-keys", context_settings=CONTEXT)
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
    with api.open(db) as store:
        n = store.tls_keys(capture_id, keylog)
    click.echo(f"capture {capture_id}: {plural(n, 'decrypted TLS message')}; handshakes rebuilt")


COMMANDS = [export, import_, check, tls_keys]
