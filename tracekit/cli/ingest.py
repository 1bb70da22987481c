"""`tracekit ingest`: files and manifests in, and what happened to each."""

import os

import click

from .. import api
from . import dask_runs
from .common import (
    CONTEXT,
    Progress,
    cluster_options,
    db_option,
    handle_errors,
    parse_duration_ns,
    parse_labels,
    plural,
)
from .messages import report_log, skipped_text


@click.command(context_settings=CONTEXT)
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False))
@db_option
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE",
              help="Experiment factor to attach (repeatable), e.g. --label conn=fresh.")
@click.option("--manifest", "manifests", multiple=True, type=click.Path(dir_okay=False),
              metavar="FILE", help="Ingest the runs a manifest lists, each with its labels "
                                   "(a lab *.runs.json or a JSON list of {files, labels}).")
@click.option("--replace", is_flag=True, help="Re-ingest files already in the store.")
@click.option("--format", "input_format", type=click.Choice(api.INPUT_FORMATS), default="auto",
              show_default=True, help="Input format; auto detects each file from its content.")
@click.option("--clock-offset", "clock_offset", metavar="DURATION", default=None,
              help="Event logs only: add this to their timestamps to put them on the "
                   "captures' clock (e.g. 12.5ms); default 0, same host.")
@click.option("--time", "stated_time", metavar="RFC3339", default=None,
              help="When a file with no time of its own was taken (a queqiaobench report, "
                   "a harness TSV, a Prometheus scrape without timestamps), e.g. "
                   "2026-08-18T10:00:00Z; such files are refused without it.")
@cluster_options
@handle_errors
def ingest(files, db, labels, replace, input_format, clock_offset, manifests, stated_time,
           workers, cluster):
    """Ingest pcap/pcapng captures and event logs into the store.

    Every packet becomes a row of `packets`; flows are rebuilt per capture.
    Event logs (tracekit JSON Lines, CSV, qlog, Queqiao) become rows of
    `events`; malformed records are counted with their line numbers and
    skipped. A file already in the store (same SHA-256) is not added twice.
    Logs are parsed before anything is written; a failure leaves the store
    as it was. FILE `-` (or /dev/stdin, a pipe) reads one capture from
    standard input, whole or not at all, stored as `<stdin>`.

    \b
    Example:
      tracekit ingest captures/lossy-download-client.pcap captures/lossy-download-server.pcap --label path=direct
      tracekit ingest captures/streaming-stalls-client.pcap captures/streaming-stalls-client-events.jsonl
      tcpdump -i eth0 -c 10000 -w - | tracekit ingest -
    """
    labels = parse_labels(labels)
    offset_ns = None if clock_offset is None else parse_duration_ns(clock_offset)
    # (nothing to ingest is said before a bad --time)
    time_ns = (api.parse_time(stated_time) if stated_time is not None and (files or manifests)
               else None)
    progress = Progress()
    try:
        done = api.ingest(db, files, manifests, labels, replace, input_format, offset_ns, time_ns,
                          progress=progress, workers=workers, cluster=cluster,
                          dataset_progress=dask_runs.progress())
    finally:
        progress.done()
    if done.dataset is not None:
        return dask_runs.report(done.dataset, done.where)
    report(done)


def report(done):
    """What an ingest into a store did (an api Ingested)."""
    for run_labels, run_captures, run_logs in done.runs:
        name = run_labels.get("run", "run")
        factors = " ".join(f"{k}={v}" for k, v in run_labels.items()
                           if k not in ("run", "trial", "order", "experiment"))
        click.echo(f"{name}: {plural(len(run_captures), 'capture')} "
                   f"({sum(c.packets for c in run_captures):,} packets), "
                   f"{plural(len(run_logs), 'log')} ({sum(lg.events for lg in run_logs):,} events); "
                   f"{factors}")
        for lg in run_logs:
            if lg.malformed:
                report_log(lg)
    summaries_all = done.captures + [c for _, cs, _ in done.runs for c in cs]
    logs_all = done.logs + [lg for _, _, ls in done.runs for lg in ls]
    total_packets = total_flows = 0
    skipped = {}
    own = {id(x) for x in done.captures}  # a run's files are summed in its line
    for s in summaries_all:
        shown = id(s) in own
        name = os.path.basename(s.path) if shown else s.path
        if s.outcome == "duplicate":
            click.echo(f"{name}: already in the store as capture {s.duplicate_of} "
                       f"(same sha256); nothing added. Use --replace to ingest it again.")
            continue
        replacing = f", replacing capture {s.duplicate_of}" if s.outcome == "replaced" else ""
        if shown:
            click.echo(f"{name}: ingested as capture {s.capture_id}{replacing}: "
                       f"{plural(s.packets, 'packet')}, {plural(s.flows, 'flow')}, "
                       f"{skipped_text(s.decode_status)}")
        _warn_capture(s)
        if s.skipped_blocks:
            blocks = ", ".join(f"{k} {v}" for k, v in sorted(s.skipped_blocks.items()))
            click.echo(f"{name}: pcapng blocks without packets skipped: {blocks}")
        total_packets += s.packets
        total_flows += s.flows
        for k, v in s.decode_status.items():
            skipped[k] = skipped.get(k, 0) + v
    total_events = sum(s.events for s in logs_all)
    for s in done.logs:
        report_log(s)
    seconds = done.seconds
    parts = []
    if done.capture_paths:
        parts.append(f"{plural(total_packets, 'packet')}, {plural(total_flows, 'flow')}, "
                     f"{skipped_text(skipped)}")
    if done.log_paths:
        parts.append(f"{plural(total_events, 'event')}, "
                     f"{plural(sum(len(s.malformed) for s in logs_all), 'malformed record')}")
    rates = []
    if done.capture_paths and seconds > 0:
        rates.append(f"{total_packets / seconds:,.0f} packets/s")
    if done.log_paths and seconds > 0:
        rates.append(f"{total_events / seconds:,.0f} events/s")
    click.echo(f"total: {'; '.join(parts)}; {seconds:.2f} s, {', '.join(rates)}")


def _warn_capture(s):
    if s.read_stop:
        click.echo(f"tracekit: warning: {s.path}: {s.read_stop.reason} at byte offset "
                   f"{s.read_stop.offset}: {s.read_stop.message}; the "
                   f"{s.packets:,} packets before it were ingested", err=True)
    bad_ts = s.decode_status.get("timestamp_out_of_range", 0)
    if bad_ts:
        click.echo(f"tracekit: warning: {s.path}: {plural(bad_ts, 'packet')} with a time "
                   f"outside 1677-2262 (int64 ns; the first at byte offset "
                   f"{s.first_bad_ts_offset}): stored with ts_ns NULL and decode_status "
                   f"timestamp_out_of_range, in no flow", err=True)
    if s.late_packets:
        click.echo(f"tracekit: warning: {s.path}: {plural(s.late_packets, 'packet')} timed in "
                   f"2200 or later (the first at byte offset {s.first_late_offset}): stored as "
                   f"read, but the capture's clock or its time resolution is likely wrong",
                   err=True)
    for name in s.unsupported_link_type_names():
        n = s.decode_status.get("link_type_unsupported", 0)
        click.echo(f"tracekit: warning: {s.path}: {name} is not decoded: its "
                   f"packets are stored undecoded (decode_status link_type_unsupported, "
                   f"{n:,} in this file); other interfaces were decoded", err=True)


COMMANDS = [ingest]
