"""Lines that several commands print about what was ingested."""

import os

import click

from .common import plural


def skipped_text(counts):
    if not counts:
        return "none skipped"
    return "skipped " + ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items()))


def report_log(s):
    """What one event log's ingest did (a LogSummary), with its warnings."""
    name = os.path.basename(s.path)
    if s.outcome != "duplicate" and s.trace_clock_events:
        click.echo(f"tracekit: warning: {s.path}: {plural(s.trace_clock_events, 'event')} "
                   f"count from the start of their trace (it gives no wall-clock "
                   f"time: a qlog without reference_time, a Queqiao lane trace's t=, a "
                   f"bench report, harness TSV or /metrics scrape without one): date it with "
                   f"--time T when you know when it was taken, or place it with --clock-offset, "
                   f"or with tracekit clock {s.log_id} --capture ID --apply", err=True)
    if s.outcome != "duplicate" and s.portless_requests:
        click.echo(f"tracekit: warning: {s.path}: {plural(s.portless_requests, 'request')} "
                   f"{'carries' if s.portless_requests == 1 else 'carry'} no local_port: each is linked to the one connection to its server "
                   f"that began an exchange within its time, or left unattributed "
                   f"(tracekit attribute flags it)", err=True)
    if s.outcome == "duplicate":
        click.echo(f"{name}: already in the store as event log {s.duplicate_of} "
                   f"(same sha256); nothing added. Use --replace to ingest it again.")
        return
    replacing = f", replacing event log {s.duplicate_of}" if s.outcome == "replaced" else ""
    extra = ""
    if s.private_dropped:
        extra += f", {plural(s.private_dropped, 'private identifier')} dropped"
    if s.negative_deltas:
        extra += (f", {plural(s.negative_deltas, 'counter decrease')} left unknown (a sum "
                  f"over live connections fell)")
    if s.counter_resets:
        extra += f", {plural(s.counter_resets, 'counter reset')} (a process restarted)"
    click.echo(f"{name}: ingested as event log {s.log_id} ({s.format}){replacing}: "
               f"{plural(s.events, 'event')} of {plural(s.records, 'record')}{extra}")
    if s.malformed:
        shown = ", ".join(f"line {line}: {problem}" for line, problem in s.malformed[:5])
        more = f" (and {len(s.malformed) - 5:,} more)" if len(s.malformed) > 5 else ""
        click.echo(f"tracekit: warning: {s.path}: {plural(len(s.malformed), 'malformed record')} "
                   f"skipped: {shown}{more}; the rest of the file was kept", err=True)
