"""Commands that compare and predict: ablation, bound, clock."""

import click

from .. import api
from ..core.errors import TracekitError
from .common import (
    CONTEXT,
    db_option,
    emit,
    format_option,
    handle_errors,
    parse_labels,
    plural,
    replay_progress,
)


@click.command(context_settings=CONTEXT)
@click.option("--compare", required=True, metavar="FACTOR",
              help="The factor whose levels are the arms (a label, e.g. path).")
@click.option("--by", "by", multiple=True, metavar="FACTOR",
              help="Split the table by this factor (repeatable), e.g. --by conn.")
@click.option("--levels", default=None, metavar="A,B",
              help="Arm order: the ratio is A / B (default: sorted).")
@click.option("--spans", "top_spans", type=int, default=3, show_default=True,
              help="How many moved spans to show.")
@click.option("--where", "where", multiple=True, metavar="NAME=VALUE",
              help="Only requests with this attribute (a label, an event field or a column; "
                   "repeatable), e.g. --where experiment=cross-region.")
@click.option("--predict", "predict", default=None, is_flag=False, flag_value="",
              metavar="[SPAN,...]",
              help="Put the saving the first arm's spans predict beside the saving measured "
                   "(spans: those the factor removes; default by factor, e.g. loss_down: "
                   "loss_recovery).")
@db_option
@format_option
@handle_errors
def ablation(compare, by, levels, top_spans, where, predict, db, fmt):
    """Compare the levels of one factor: medians, ratios, CI, spans that moved.

    One row per combination of the --by factors. For the first two arms:
    the ratio of medians, the median of paired ratios (pairs in
    interleaving order), a seeded bootstrap 95% CI of the ratio, paired
    rounds won, and the attribution spans whose median paired change
    explains the difference. Medians interpolate linearly between the two
    nearest ranks (type 7). A difference smaller than the runs' RTT spread
    (p90 - p10) is marked: it is no difference. With --predict: the saving
    the first arm's spans predict for removing the factor's mechanism, the
    saving measured (difference of medians, bootstrap 95% interval), and
    whether the prediction holds (inside the interval, or within 10 % / 10 ms).

    \b
    Example:
      tracekit ablation --compare path --by connection --levels direct,tunnel --where experiment=cross-region
      tracekit ablation --compare loss_down --by connection --levels 0.05,0.0 --predict
    """
    from ..presentation.table import ablation_rows
    spans = None if predict is None else tuple(x for x in predict.split(",") if x)
    with api.open(db, read_only=True) as store, replay_progress():  # (comparisons: analysed)
        results = store.comparisons(compare, by, levels.split(",") if levels else None,
                                    parse_labels(where), spans)
    if predict is not None and not any(c.prediction for c in results):
        raise TracekitError(f"no spans to predict {compare!r} with: name them "
                            f"(--predict SPAN,SPAN)")
    emit(*ablation_rows(results, by, top_spans, predict is not None), fmt)
    for c in results:
        where = c.label(by) or "all requests"
        for arm in (a for a in c.arms if a.untimed):
            click.echo(f"tracekit: warning: {where}: {arm.untimed} {arm.level} request(s) left "
                       f"out: no duration (no response seen)", err=True)
        if c.no_difference:
            click.echo(f"tracekit: warning: {where}: the medians differ by less than the RTT "
                       f"spread of these runs ({c.rtt_spread_ns / 1e6:.1f} ms): no difference",
                       err=True)


@click.command(context_settings=CONTEXT)
@click.option("--up-bytes", type=click.IntRange(0), default=0, show_default=True)
@click.option("--down-bytes", type=click.IntRange(0), default=354_640, show_default=True)
@click.option("--rtt-ms", type=click.FloatRange(0), required=True, help="Propagation round trip.")
@click.option("--rate-mbps", type=click.FloatRange(0, min_open=True), default=None,
              help="Bottleneck rate both ways (Mbit/s); default: unlimited.")
@click.option("--up-rate-mbps", type=click.FloatRange(0, min_open=True), default=None)
@click.option("--down-rate-mbps", type=click.FloatRange(0, min_open=True), default=None)
@click.option("--processing-ms", type=click.FloatRange(0), default=0.0, show_default=True)
@click.option("--loss", type=click.FloatRange(0, 1, max_open=True), default=0.0, show_default=True,
              help="Random loss of the data direction, for the retransmission rounds.")
@click.option("--mss", type=click.IntRange(1), default=1448, show_default=True)
@click.option("--initial-window", "iw_segments", type=click.IntRange(1), default=10,
              show_default=True, help="Initial congestion window in segments.")
@format_option
@handle_errors
def bound(up_bytes, down_bytes, rtt_ms, rate_mbps, up_rate_mbps, down_rate_mbps, processing_ms,
          loss, mss, iw_segments, fmt):
    """The serial lower bound from flags alone, and what mechanisms would add.

    T_serial = S_u/B_u + R + T_c + S_d/B_d (docs/timing-model.md); beside it, the
    round trips a fresh connection adds (TCP, TLS 1.3), slow start's rounds
    for the response, and the retransmission rounds random loss costs
    (mean and p99), all from tracekit.model.

    \b
    Example (the motivating case):
      tracekit bound --down-bytes 354640 --rtt-ms 200 --rate-mbps 333 --processing-ms 30 --loss 0.14
    """
    from ..presentation.bound import bound_rows
    emit(*bound_rows(up_bytes, down_bytes, rtt_ms, up_rate_mbps or rate_mbps,
                     down_rate_mbps or rate_mbps, processing_ms, loss, mss, iw_segments), fmt)


@click.command(context_settings=CONTEXT)
@click.argument("log_id", type=int)
@click.option("--capture", "capture_id", type=int, required=True,
              help="Capture whose clock the log should be put on.")
@click.option("--apply", is_flag=True, help="Store the estimate: move the log's events.")
@db_option
@handle_errors
def clock(log_id, capture_id, apply, db):
    """Estimate the offset of event log LOG_ID's clock against a capture's.

    Events that must come before a packet (connect_start before the SYN) or
    after one (connect_end after the SYN-ACK, first_byte after the first
    response byte) bound the offset; the estimate is the middle of what is
    left, with half its width as the uncertainty. --apply stores it (the
    analyses are rebuilt on the next tracekit analyze).

    \b
    Example:
      tracekit clock 1 --capture 4 --apply
    """
    with api.open(db, read_only=not apply) as store:
        est = store.estimate_clock(log_id, capture_id)

        def ms(ns):
            return "none" if ns is None else f"{ns / 1e6:+.3f} ms"
        click.echo(f"event log {log_id} vs capture {capture_id}: {plural(est.pairs, 'bound')}; "
                   f"offset between {ms(est.lower_ns)} and {ms(est.upper_ns)}")
        if est.uncertainty_ns is None:
            click.echo(f"offset {ms(est.offset_ns)} (one-sided: only "
                       f"{'upper' if est.lower_ns is None else 'lower'} bounds)")
        elif est.consistent:
            click.echo(f"offset {ms(est.offset_ns)} +- {est.uncertainty_ns / 1e6:.3f} ms")
        else:
            click.echo(f"offset {ms(est.offset_ns)}; the bounds cross by "
                       f"{2 * est.uncertainty_ns / 1e6:.3f} ms: the clocks drift or a port "
                       f"matched the wrong flow", err=True)
        if apply:
            store.apply_clock(log_id, est)
            click.echo(f"applied: event log {log_id} moved to the capture's clock")


COMMANDS = [ablation, bound, clock]
