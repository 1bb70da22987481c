"""Commands that predict from a calibrated replay: whatif, interactions."""

import time

import click

from .. import api
from .common import (CONTEXT, db_option, emit, format_option, handle_errors, parse_labels,
                     replay_progress)


def _pairs(items, option):
    out = {}
    for item in items:
        for part in filter(None, (p.strip() for p in item.split(","))):
            out.update(parse_labels([part]) if "=" in part else {part: None})
            if out.get(part.split("=")[0]) is None:
                raise click.UsageError(f"{option} {part!r} is not FACTOR=VALUE")
    return out


@click.command(context_settings=CONTEXT)
@click.option("--where", "where", multiple=True, metavar="NAME=VALUE",
              help="Only requests with this attribute: a label, else a field of their events "
                   "(e.g. mode), else connection, protocol, vantage, source, capture or log (a "
                   "file's name); repeatable, "
                   "e.g. --where experiment=cf.")
@click.option("--from", "source", multiple=True, metavar="FACTOR=VALUE[,...]",
              help="The level measured (its requests calibrate the model), e.g. loss_down=0.03.")
@click.option("--set", "target", multiple=True, required=True, metavar="FACTOR=VALUE[,...]",
              help="The change to predict, e.g. loss_down=0 or "
                   "connection=persistent,congestion=bbr.")
@click.option("--by", "by", multiple=True, metavar="NAME",
              help="One prediction per value of this attribute (as --where; repeatable).")
@click.option("--assume", "assume", multiple=True, metavar="FACTOR=VALUE[,...]",
              help="State a path or sender value instead of calibrating it (e.g. rate_mbps=50).")
@click.option("--draws", type=click.IntRange(8), default=400, show_default=True,
              help="Monte-Carlo replays per group (each level).")
@click.option("--seed", type=click.IntRange(0), default=None, metavar="N",
              help="Seed of the replays' random draws (default: a fixed one); another seed "
                   "shows how much a prediction owes to its draws.")
@click.option("--explain", is_flag=True,
              help="Print the calibration (value and where from); where the queue is a guess, "
                   "the predicted saving at half and at twice it, and at the longest wait's "
                   "queue where the guess is over twice that.")
@click.option("--emulate", type=click.IntRange(1), default=None, metavar="ROUNDS",
              help="Also re-run each group's calibrated path and workload in the lab (root), "
                   "as measured and with the change, this many interleaved rounds of 4 "
                   "requests each, and print the emulated saving beside the replay's.")
@click.option("--emulate-dir", default="whatif-emulation", show_default=True, metavar="DIR",
              help="Where the emulation's runs and their store go (a folder per group).")
@db_option
@format_option
@handle_errors
def whatif(where, source, target, by, assume, draws, seed, explain, emulate, emulate_dir, db,
           fmt):
    """Predict the time of a group's requests under a change (docs/whatif.md).

    The requests matching --where and --from calibrate a model of the path
    (RTT, bottleneck rate, loss and its burstiness, queue), the sender
    (congestion control, initial window) and the server's time; each
    request is replayed packet by packet as it was and under --set, many
    times (the calibrated loss drawn anew). Printed per group: the measured
    median, the replay of it, the predicted median at the target (measured
    less the replayed saving) with a 95 % interval, the predicted saving,
    and, when the store holds runs at the target, their median, the
    measured saving and the error. Factors: rtt_ms, rate_mbps, loss_down,
    loss_up, processing_ms, congestion, connection, initcwnd, queue_bytes,
    bucket_bytes, pacing, jitter_ms, warmup, slow_start_after_idle,
    rcv_window, path (--set path=tunnel or tunnel-arq: the response through
    kcptun, with FEC sized for the loss or ARQ alone; calibrated on direct
    runs). --emulate re-runs the calibrated path and workload in the lab
    with real kernel TCP, both ways, and prints the emulated saving beside
    the replay's.
    The replays run in one worker process per CPU (TRACEKIT_WORKERS=N says
    how many; 1: none) and give the same numbers as one process.

    \b
    Example:
      tracekit whatif --where experiment=counterfactual --from loss_down=0.05 --set loss_down=0 --by connection --draws 100
    """
    from ..presentation.whatif import emulation_rows, explain_rows, rows
    # (whatif checks the store is analysed)
    with api.open(db, read_only=True) as store, replay_progress():
        results = store.whatif(_pairs(target, "--set"), parse_labels(where),
                               _pairs(source, "--from"), by, draws, _pairs(assume, "--assume"),
                               seed)
    if explain:
        emit(*explain_rows(results), fmt)
    emit(*rows(results, by), fmt)
    if emulate:
        started = time.monotonic()

        def progress(i, n, combo, skipped=False):
            click.echo(f"emulation run {i}/{n}: {combo['arm']} "
                       f"({time.monotonic() - started:.0f} s)", err=True)
        emit(*emulation_rows(api.whatif_emulate(results, emulate_dir, emulate, 4, progress), by),
             fmt)


@click.command(context_settings=CONTEXT)
@click.option("--where", "where", multiple=True, metavar="NAME=VALUE",
              help="Only requests with this attribute (as whatif's --where; repeatable).")
@click.option("--from", "source", multiple=True, required=True, metavar="LABEL=VALUE[,...]",
              help="Configuration A, e.g. connection=fresh,loss_down=0.05.")
@click.option("--to", "target", multiple=True, required=True, metavar="LABEL=VALUE[,...]",
              help="Configuration B over the same labels, e.g. "
                   "connection=persistent,loss_down=0.0.")
@db_option
@format_option
@handle_errors
def interactions(where, source, target, db, fmt):
    """Split median(A) - median(B) of a factorial design across its factors.

    Shapley values: each factor's marginal effect averaged over the orders
    in which the factors could be switched from A's level to B's (they add
    up to the total); for each pair, the interaction term (how much one's
    effect depends on the other; 0: they add). Bootstrap 95 % intervals,
    each cell's requests resampled. Every combination of levels must have
    requests.

    \b
    Example:
      tracekit interactions --where experiment=counterfactual --from connection=fresh,loss_down=0.05 --to connection=persistent,loss_down=0.0
    """
    from ..presentation.whatif import interaction_rows
    with api.open(db, read_only=True) as store:  # (interactions checks it is analysed)
        result = store.interactions(_pairs(source, "--from"), _pairs(target, "--to"),
                                    parse_labels(where))
    emit(*interaction_rows(result), fmt)


COMMANDS = [whatif, interactions]
