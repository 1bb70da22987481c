"""`tracekit h2-events`: a capture's HTTP/2 frames as stream events;
`tracekit stream-ablation`: the streams of an experiment's cells beside the
model (issue #27)."""

import click

from .. import api
from .common import CONTEXT, db_option, emit, format_option, handle_errors, parse_labels


@click.command("h2-events", context_settings=CONTEXT)
@click.argument("capture", type=click.Path(exists=True, dir_okay=False))
@click.option("--port", type=int, required=True, help="The HTTP/2 server's TCP port.")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False),
              help="JSON Lines file to write (then: tracekit ingest OUT).")
@click.option("--vantage", type=click.Choice(["client", "server"]), default="client",
              show_default=True, help="Where the capture was taken: its sent and arrived side.")
@click.option("--connection", default=None, help="Name of the connection (default h2:<client port>).")
@click.option("--run", default=None, help="The run the events belong to.")
@click.option("--keylog", default=None, type=click.Path(exists=True, dir_okay=False),
              help="An SSLKEYLOGFILE: HTTP/2 in TLS 1.3, decrypted with it.")
@handle_errors
def h2_events(capture, port, out, vantage, connection, run, keylog):
    """Write the HTTP/2 frames of CAPTURE (cleartext h2c, or TLS 1.3 with --keylog),
    placed in the connection's byte stream, as stream events
    (stream_sent/stream_arrived) the `streams` table reads.

    \b
    Example:
      tracekit h2-events tests/data/pcap/ndpi-http2.pcapng --port 29518 --out h2.events && tracekit ingest h2.events
    """
    notes = []
    n = api.h2_events(capture, port, out, vantage, connection, run, keylog, notes)
    for line in notes:
        click.echo(f"tracekit: warning: {line}", err=True)
    click.echo(f"{out}: {n} stream events")


@click.command("stream-ablation", context_settings=CONTEXT)
@click.option("--by", "by", multiple=True, metavar="FACTOR",
              help="A factor that makes a cell (repeatable; default: protocol and scheduling).")
@click.option("--where", "where", multiple=True, metavar="LABEL=VALUE",
              help="Only streams of runs with this label (repeatable), e.g. --where loss_down=0.0.")
@click.option("--all-streams", is_flag=True,
              help="Every stream, not only those with timed chunks (the audio).")
@db_option
@format_option
@handle_errors
def stream_ablation(by, where, all_streams, db, fmt):
    """The streams of an experiment per cell: completion, deliverable time,
    the client's read, hol_blocking, stream_queueing and on-time seconds,
    each the median over the cell's runs with a bootstrap 95 % interval,
    and tracekit.model's values for the cell's settings beside them (with
    loss: the modelled schedule slowed in each run's measured recovery
    periods, analyses/stream_loss_response.sql, plus its measured repair
    times, analyses/stream_repairs.sql). Times are ms from
    when the sender's application had the stream ready.

    \b
    Example (the committed runs of experiments/multiplexing.toml):
      tracekit ingest --manifest captures/multiplexing/multiplexing.runs.json --db mux.duckdb && tracekit analyze --db mux.duckdb && tracekit stream-ablation --db mux.duckdb --where loss_down=0.0 --format markdown
    """
    from ..presentation.stream_ablation import table_rows
    by = tuple(by) or ("protocol", "scheduling")
    with api.open(db, read_only=True) as store:
        store.require_analyzed()
        cells = store.stream_ablation(by, parse_labels(where), media=not all_streams)
    emit(*table_rows(cells, by), fmt)


COMMANDS = [h2_events, stream_ablation]
