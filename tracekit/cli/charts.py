"""`tracekit plot` and `tracekit report`: charts and the HTML report."""

import click

from .. import api
from ..presentation import plots
from ..presentation.page import require_chart_modules
from .common import CONTEXT, db_option, handle_errors, parse_labels


@click.command(context_settings=CONTEXT)
@click.argument("kind", type=click.Choice(plots.KINDS))
@click.option("--flow", "flow_id", type=int, default=None,
              help="Flow id (see tracekit sessions); flow charts.")
@click.option("--capture", "capture_id", type=int, default=None,
              help="Capture id (needed when the store holds several); flow charts.")
@click.option("--direction", type=click.Choice(["s2c", "c2s"]), default="s2c", show_default=True,
              help="Data direction to draw; flow charts.")
@click.option("--from", "t_from", type=float, default=None, metavar="S",
              help="Flow charts: from S seconds after the flow's first packet.")
@click.option("--to", "t_to", type=float, default=None, metavar="S",
              help="Flow charts: up to S seconds (a short stretch is drawn in full detail).")
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
def plot(kind, flow_id, capture_id, direction, t_from, t_to, stream, run, request_key, compare,
         by, levels, where, stem, db):
    """Draw a chart: STEM.html (self-contained, works offline) and STEM.png.

    \b
    Flow charts: time-sequence, inflight, rtt (--capture, --flow); a long
    flow is drawn from per-pixel min/max aggregates, --from/--to S draws a
    stretch of it in full detail.
    Application charts: buffer (playback buffer and underruns), chunks
    (chunk timeline) (--stream); serving (throughput and TPOT by batch size);
    streams (a connection's streams: sent, arrived, head-of-line; --stream
    names the connection, see tracekit streams).
    Attribution: waterfall (--request KEY); ablation (median per arm with
    95% intervals) and attribution (median spans per arm, stacked)
    (--compare FACTOR [--by FACTOR] [--levels A,B]).

    \b
    Example:
      tracekit plot time-sequence --capture 1 --flow 0 --out tseq
      tracekit plot buffer --stream local --out buffer
    """
    require_chart_modules()
    with api.open(db, read_only=True) as store:
        store.require_analyzed(needs=("request_attributes",) if compare else ())  # (ablation.sql)
        where = parse_labels(where) if compare else {}
        chart, default = plots.draw(store.con, kind, flow_id, capture_id, direction, stream, run,
                                    request_key, compare, by,
                                    levels.split(",") if levels else None, where, t_from, t_to)
        html, png = plots.save(chart, stem or default)
    click.echo(f"wrote {html} and {png}")


@click.command(context_settings=CONTEXT)
@click.option("--run", "run", default=None,
              help="Only this run (its run label or the events' run field), as the views.")
@click.option("--experiment", default=None, help="Only this experiment's requests.")
@click.option("--compare", default=None, metavar="FACTOR",
              help="Show the ablation of this factor (as tracekit ablation).")
@click.option("--by", multiple=True, metavar="FACTOR", help="Ablation rows per level of this.")
@click.option("--levels", default=None, metavar="A,B", help="The two arms, in this order.")
@click.option("--where", multiple=True, metavar="LABEL=VALUE", help="Only requests with these labels.")
@click.option("--out", default="tracekit-report.html", show_default=True, metavar="FILE",
              help="The HTML file to write.")
@db_option
@handle_errors
def report(run, experiment, compare, by, levels, where, out, db):
    """Write one self-contained HTML report (it opens offline in any browser). It
    leads with the answer -- each ablation's verdict, where the time went, the
    flagged requests -- then the ablation tables, the requests and their
    waterfalls, the flows that matter, playback, serving and what was measured,
    all limited to the requests --run, --experiment and --where select.

    \b
    Example:
      tracekit report --experiment cross-region --compare path --by connection --levels direct,tunnel --out report.html
    """
    require_chart_modules()
    with api.open(db, read_only=True) as store:
        page = store.report(out, run=run, experiment=experiment, compare=compare, by=by,
                            levels=levels.split(",") if levels else None,
                            where=parse_labels(where))
    click.echo(f"wrote {out} ({len(page) / 1e6:.1f} MB, self-contained)")


COMMANDS = [plot, report]
