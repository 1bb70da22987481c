"""`tracekit h2-events`: a capture's HTTP/2 frames as stream events (issue #27)."""

import click

from .. import api
from .common import CONTEXT, handle_errors


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
    n = api.h2_events(capture, port, out, vantage, connection, run, keylog)
    click.echo(f"{out}: {n} stream events")


COMMANDS = [h2_events]
