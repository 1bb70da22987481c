"""The `tracekit` command group: every command, and one-line usage errors.

The commands live in rooms of their own (ingest, analyze, views, charts,
decide, store, lab); this module only puts them under one group.
"""

import sys

import click

from ..core.version import __version__
from . import agent, analyze, charts, decide, ingest, lab, store, streams, views, whatif
from .common import CONTEXT, verbosity_options

# numba probes for BLAS by importing scipy.linalg when scipy is installed (a
# second of start-up); tracekit uses no linear algebra, so the CLI process
# makes that probe fail fast. The library itself leaves sys.modules alone.
sys.modules.setdefault("scipy.linalg.cython_blas", None)


class _Group(click.Group):
    """click's usage errors are four lines; tracekit's errors are one."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            return super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                                standalone_mode=False, **extra)
        except click.UsageError as e:  # an unknown option or command, a bad or missing value
            where = e.ctx.command_path if e.ctx is not None else "tracekit"
            click.echo(f"tracekit: error: {e.format_message()} (see {where} --help)", err=True)
            sys.exit(2)
        except click.ClickException as e:
            click.echo(f"tracekit: error: {e.format_message()}", err=True)
            sys.exit(e.exit_code)
        except click.exceptions.Abort:
            click.echo("tracekit: interrupted", err=True)
            sys.exit(130)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)


@click.group(cls=_Group, context_settings=CONTEXT)
@click.version_option(__version__, prog_name="tracekit")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
def main(debug):
    """tracekit: packet captures and event logs in DuckDB, and where the time went.

    \b
    Quick tour:
      tracekit ingest captures/*.pcap --label path=direct
      tracekit sessions
      tracekit sql "SELECT count(*) FROM packets"
    """


for command in (ingest.ingest, analyze.analyze, *views.COMMANDS, charts.plot, charts.report,
                *decide.COMMANDS, *store.COMMANDS, lab.lab, *agent.COMMANDS, *streams.COMMANDS,
                *whatif.COMMANDS):
    main.add_command(command)


def _with_verbosity(command):
    """-q/-v on `command` and, for a group (plot, lab...), on its commands."""
    command.params.extend(verbosity_options())
    for sub in getattr(command, "commands", {}).values():
        _with_verbosity(sub)


_with_verbosity(main)
