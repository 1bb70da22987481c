"""Commands about agent tasks: deadline, placement (the views `tasks` and
`agent-rounds` are in views.py's list)."""

import click

from .. import api
from ..presentation.agents import chapter_table, parse_tier
from .common import CONTEXT, db_option, emit, format_option, handle_errors

_run = click.option("--run", default=None, help="Only the rounds of this run.")
_block = click.option("--block", type=int, default=5, show_default=True,
                      help="Neighbouring rounds resampled together (1: independently).")
_rounds = click.option("--rounds", type=int, required=True, help="Rounds in a task.")
_deadline = click.option("--deadline", "deadline_s", type=float, required=True,
                         help="The deadline, in seconds.")


@click.command(context_settings=CONTEXT)
@_rounds
@_deadline
@_run
@_block
@click.option("--samples", type=int, default=4000, show_default=True, help="Resampled tasks.")
@click.option("--upload-bits", type=float, default=None,
              help="A round's upload, in bits: also print the uplink the deadline needs.")
@click.option("--disconnect", nargs=2, type=float, default=None, metavar="K RECONNECT_S",
              help="Also the task time after a disconnect after round K that takes "
                   "RECONNECT_S to recover: with rounds before K committed, and with none.")
@db_option
@format_option
@handle_errors
def deadline(rounds, deadline_s, run, block, samples, upload_bits, disconnect, db, fmt):
    """P(T <= D) for a task of N rounds, from the measured agent rounds.

    The rounds are resampled in blocks of neighbouring rounds, so that slow
    periods stay together (and independently, for contrast); beside it the
    share of measured tasks of N rounds that met the deadline.

    \b
    Example:
      tracekit deadline --rounds 20 --deadline 45 --upload-bits 6.4e6 --disconnect 10 1
    """
    with api.open(db, read_only=True) as store:
        store.require_analyzed()
        table = store.deadline(rounds, deadline_s, run, block, samples, upload_bits=upload_bits,
                               disconnect=(int(disconnect[0]), disconnect[1])
                               if disconnect else None)
    emit(list(table.columns), table.astype(object).where(table.notna(), None).values.tolist(), fmt)


@click.command(context_settings=CONTEXT)
@click.option("--tier", "tiers", multiple=True, metavar="NAME:KEY=VALUE,...",
              help="A tier: edge_s, model_s, rtt_s, setup_s, upload_s or upload_bits and "
                   "uplink_mbps, power_w (repeatable); a key left out keeps the measured span.")
@click.option("--rounds", type=int, default=20, show_default=True, help="Rounds in a task.")
@click.option("--deadline", "deadline_s", type=float, default=45.0, show_default=True,
              help="The deadline, in seconds.")
@click.option("--chapter", is_flag=True,
              help="Print the chapter's local / nearby / cloud table from the closed forms "
                   "(no store needed).")
@_run
@_block
@db_option
@format_option
@handle_errors
def placement(tiers, rounds, deadline_s, chapter, run, block, db, fmt):
    """Measured agent rounds moved to other tiers: task time, P(T <= D), energy.

    \b
    Example:
      tracekit placement --tier nearby:model_s=0.137,rtt_s=0.02 --rounds 20 --deadline 45
      tracekit placement --chapter
    """
    if chapter:
        emit(*chapter_table(deadline_s, rounds), fmt)
        return
    parsed = [parse_tier(t) for t in tiers]
    with api.open(db, read_only=True) as store:
        store.require_analyzed()
        table = store.placement(parsed, rounds, deadline_s, run, block)
    emit(list(table.columns), table.astype(object).where(table.notna(), None).values.tolist(), fmt)


COMMANDS = [deadline, placement]
