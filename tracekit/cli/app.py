"""The `tracekit` command group: every command, and one-line usage errors.

The commands live in rooms of their own (ingest, analyze, views, charts,
decide, store, lab); this module only puts them under one group, and
imports a room only when one of its commands runs (or help lists them
all): each room pulls in what its commands need (numpy for the agents'
tables, the presentation layer for the views), and `tracekit ingest` paid
for all of them. `import tracekit.cli`: 80 -> 41 ms; the 200 k slice's
ingest 0.611 -> 0.589 s wall (a script doing the same imports, median of
9 alternated runs on a quiet machine, 2026-12-05 08:39; numpy, DuckDB and
pyarrow are imported by ingest anyway).
"""

import atexit
import importlib
import os
import sys
import threading

import click

from ..core.version import __version__
from .common import CONTEXT, verbosity_options

# numba probes for BLAS by importing scipy.linalg when scipy is installed (a
# second of start-up); tracekit uses no linear algebra, so the CLI process
# makes that probe fail fast. The library itself leaves sys.modules alone.
sys.modules.setdefault("scipy.linalg.cython_blas", None)

# each room (a module of tracekit.cli) and the commands its COMMANDS holds
ROOMS = {
    "ingest": ("ingest",),
    "analyze": ("analyze",),
    "views": ("captures", "sessions", "queqiao", "sql", "handshakes", "rtt", "retransmissions",
              "rounds", "stalls", "acks", "requests", "playback", "underruns", "attribute",
              "serving", "tasks", "agent-rounds", "streams"),
    "charts": ("plot", "report"),
    "decide": ("ablation", "bound", "clock"),
    "store": ("export", "import", "check", "tls-keys"),
    "lab": ("lab",),
    "agent": ("deadline", "placement"),
    "streams": ("h2-events", "stream-ablation"),
    "whatif": ("whatif", "interactions"),
}
ROOM_OF = {name: room for room, names in ROOMS.items() for name in names}


class _Group(click.Group):
    """click's usage errors are four lines; tracekit's errors are one. Its
    commands are loaded room by room as they are asked for (ROOMS); `commands`
    (help, suggestions for a misspelt command) loads every room."""

    @property
    def commands(self):
        for room in ROOMS:
            self._load(room)
        return self._commands

    @commands.setter
    def commands(self, value):
        self._commands = value
        self._loaded = set()

    def _load(self, room):
        if room in self._loaded:
            return
        self._loaded.add(room)
        for command in importlib.import_module(f"{__package__}.{room}").COMMANDS:
            _with_verbosity(command)
            self._commands[command.name] = command

    def get_command(self, ctx, cmd_name):
        if cmd_name in ROOM_OF:
            self._load(ROOM_OF[cmd_name])
        return self._commands.get(cmd_name)

    def list_commands(self, ctx):
        return sorted(ROOM_OF)

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


def _with_verbosity(command):
    """-q/-v on `command` and, for a group (plot, lab...), on its commands."""
    command.params.extend(verbosity_options())
    for sub in getattr(command, "commands", {}).values():
        _with_verbosity(sub)


main.params.extend(verbosity_options())  # (each command gets them as its room loads)


def run():
    """The process's entry point (the `tracekit` script, `python -m
    tracekit.cli`): `main`, then the exit without the interpreter's
    teardown.

    Tearing down numpy's, pyarrow's and DuckDB's modules took 45-55 ms of
    every command (`import numpy, pyarrow, duckdb` then exit: 0.17-0.22 s of
    work, 45-54 ms from its last line to the shell's prompt; 8-9 ms with
    os._exit; 2026-12-07). Nothing of it is the user's: each command closes
    its store before it returns, so the exit runs the atexit handlers,
    flushes the output and leaves. With a thread still running (a Dask
    client's, a pool's) or output that cannot be flushed, the usual exit,
    which joins and reports. `main` itself, as the tests and other programs
    call it, exits the usual way."""
    try:
        main(prog_name="tracekit")
        code = 0
    except SystemExit as e:
        code = e.code
    if code is None:
        code = 0
    if not isinstance(code, int) or threading.active_count() > 1:
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # (a closed pipe: the usual exit reports it)
        sys.exit(code)
    os._exit(code)
