"""Ingest: the one orchestrator the library, the CLI, manifests and Dask all use.

Strategy: everything a call names -- capture files, event logs, the runs of
manifests -- is sorted and parsed before the store is touched (a log that
cannot be read writes nothing); then one command (captures.command) writes
all of it in one all-or-nothing unit: the files named directly with the
call's labels, each run's files with its own. A dataset (`DIR/`) is
ingested on Dask instead (pipeline/cluster), the same inputs in the same
order. A store this call created and could not fill is removed again. A
capture from a stream (`-`, a pipe) is spooled first (pipeline/spool.py).
"""

import os
import time
from dataclasses import dataclass, field

from ..core.errors import TracekitError
from ..core.jit import preload, prefer_compiled
from ..readers.capture.formats import split_inputs
from ..readers.preload import INGEST_KERNELS, load_kernels
from ..store.dataset import is_dataset
from ..store.db import connect, default_db_path, on_dask, remove_store
from .captures import command as new_command
from .captures import load_captures
from .logs import load_logs
from .manifests import read_manifest
from .reading import file_size
from .spool import Spooled, is_stream


@dataclass
class Ingested:
    """What one ingest did: the files named directly, each run of a manifest
    (labels, capture summaries, log summaries), the time it took; for a
    dataset, the DatasetRun of its cluster and where it ran."""

    captures: list = field(default_factory=list)  # CaptureSummary
    logs: list = field(default_factory=list)  # LogSummary
    runs: list = field(default_factory=list)  # (labels, [CaptureSummary], [LogSummary])
    capture_paths: list = field(default_factory=list)  # every capture of the call
    log_paths: list = field(default_factory=list)  # every log of the call
    seconds: float = 0.0
    dataset: object = None  # a cluster DatasetRun, for a dataset
    where: str | None = None  # the cluster it ran on, for a dataset


@dataclass
class Inputs:
    """A call's inputs, sorted and parsed: nothing written yet."""

    capture_paths: list
    parsed_logs: list  # ParsedLog of the logs named directly
    log_paths: list
    runs: list  # (capture paths, log paths, labels) of the manifests' runs
    names: dict = field(default_factory=dict)  # a spooled stream's file -> its name (<stdin>)


def gather(files=(), manifests=(), labels=None, input_format="auto", time_ns=None, warm=False):
    """Sort `files` into captures and logs (by content, or as `input_format`
    says), parse the logs, and read the manifests' runs (their labels under
    the call's `labels`). `warm`: the captures are read in this process
    (not on Dask): start loading their kernels if they are worth it."""
    capture_paths, log_paths = split_inputs(files, input_format)
    if warm:  # compiled kernels loaded on a thread while the logs are read, the store opened
        prefer_compiled(sum(file_size(p) or 0 for p in capture_paths))
        preload(load_kernels, capture_paths, kernels=INGEST_KERNELS)
    parsed = _read_logs(log_paths, None if input_format in ("auto", None) else input_format,
                        time_ns)
    runs = []
    for m in manifests:
        runs += [(c, lg, {**r_labels, **(labels or {})}) for c, lg, r_labels in read_manifest(m)]
    return Inputs(capture_paths, parsed, log_paths, runs)


def ingest(db=None, files=(), manifests=(), labels=None, replace=False, input_format="auto",
           clock_offset_ns=None, time_ns=None, progress=None, workers=None, cluster=None,
           dataset_progress=None, opening=None):
    """Ingest `files` and the runs of `manifests` into the store `db` (a
    DuckDB file, created if needed) or the dataset `db` (a folder, on Dask:
    `workers` local processes or the scheduler at `cluster`). Returns Ingested.
    `opening`: the store `db` already opening on a thread (store/opening.py),
    taken where it would have been opened; discarded if the call fails first."""
    try:
        return _ingest(db, files, manifests, labels, replace, input_format, clock_offset_ns,
                       time_ns, progress, workers, cluster, dataset_progress, opening)
    except BaseException:
        if opening is not None:
            opening.discard()  # (nothing once it was taken)
        raise


def _ingest(db, files, manifests, labels, replace, input_format, clock_offset_ns, time_ns,
            progress, workers, cluster, dataset_progress, opening):
    labels = labels or {}
    if not files and not manifests:
        raise TracekitError("nothing to ingest: give capture or log FILES, or --manifest FILE")
    started = time.perf_counter()
    db_path = str(db or default_db_path())
    with Spooled(os.path.dirname(os.path.abspath(db_path))) as spooled:
        if any(is_stream(p) for p in files):
            if on_dask(db_path, workers, cluster):
                raise TracekitError("a capture from a stream (-, a pipe) goes into a DuckDB "
                                    "store, not a dataset: save it to a file first")
            files = [spooled.add(p, input_format) if is_stream(p) else p for p in files]
        warm = not (workers or cluster or is_dataset(db_path))
        inputs = gather(files, manifests, labels, input_format, time_ns, warm)
        inputs.names = spooled.names
        out = _ingest_gathered(db_path, inputs, labels, replace, clock_offset_ns, progress,
                               workers, cluster, dataset_progress, opening)
    out.seconds = out.seconds if out.dataset is not None else time.perf_counter() - started
    return out


def _ingest_gathered(db_path, inputs, labels, replace, clock_offset_ns, progress, workers,
                     cluster, dataset_progress, opening=None):
    if on_dask(db_path, workers, cluster):
        if replace:
            raise TracekitError("--replace is not available for a dataset: a file already in it "
                                "is skipped; analyse again with tracekit analyze --store DIR")
        return _ingest_dataset(db_path, inputs, labels, clock_offset_ns, workers, cluster,
                               dataset_progress)
    if opening is not None:
        new_store = opening.new
        con = opening.result()
    else:
        new_store = not os.path.exists(db_path)
        con = connect(db_path)
    ok = False
    try:
        out = ingest_into(con, inputs, labels, replace, clock_offset_ns, progress)
        ok = True
    finally:
        con.close()
        if not ok and new_store:  # a store this call created and could not fill: gone
            remove_store(db_path)
    return out


def ingest_into(con, inputs, labels=None, replace=False, clock_offset_ns=None, progress=None):
    """Write gathered `inputs` into the open store `con`: every file and run, or
    none. Returns Ingested (seconds left 0: the caller times the whole call)."""
    out = Ingested(capture_paths=list(inputs.capture_paths), log_paths=list(inputs.log_paths))
    with new_command(con) as c:
        if inputs.capture_paths:
            out.captures = load_captures(con, inputs.capture_paths, labels=labels,
                                         replace=replace, progress=progress, command=c,
                                         names=inputs.names)
        if inputs.parsed_logs:
            out.logs = load_logs(con, inputs.parsed_logs, labels, clock_offset_ns, replace,
                                 command=c)
        if inputs.runs:
            out.runs = ingest_runs(con, inputs.runs, command=c)
    out.capture_paths += [p for caps, _, _ in inputs.runs for p in caps]
    out.log_paths += [p for _, lg, _ in inputs.runs for p in lg]
    return out


def ingest_runs(con, runs, command=None):
    """Ingest [(captures, logs, labels)]: every log is parsed before anything is
    written; then each run's captures and logs go in with its labels, all runs
    in one transaction (`command`, or one of their own).
    Returns [(labels, capture summaries, log summaries)], one per run."""
    if command is None:
        with new_command(con) as c:
            return ingest_runs(con, runs, c)
    every = iter(_read_logs([p for _, logs, _ in runs for p in logs]))
    parsed = [[next(every) for _ in logs] for _, logs, _ in runs]
    # every run's captures in one call: one writer, one set of appends, and
    # together they decide whether compiled kernels pay for their start-up
    # (one run's are small: 240 runs of the chapter's case, each alone,
    # were scanned as Python, 25 s of a 45 s ingest)
    paths = [p for captures, _, _ in runs for p in captures]
    labels = [run_labels for captures, _, run_labels in runs for _ in captures]
    summaries = iter(load_captures(con, paths, labels=labels, command=command) if paths else [])
    out = []
    for (capture_paths, _, labels), run_logs in zip(runs, parsed):
        captures = [next(summaries) for _ in capture_paths]
        logs = load_logs(con, run_logs, labels, command=command) if run_logs else []
        out.append((labels, captures, logs))
    return out


def _read_logs(paths, fmt=None, time_ns=None):
    """readers.events.read_logs, imported and its DuckDB connection opened only
    for logs (~50 ms of a capture's ingest that had none)."""
    if not paths:
        return []
    from ..readers.events import read_logs
    return read_logs(paths, fmt, time_ns)


def _ingest_dataset(directory, inputs, labels, clock_offset_ns, workers, cluster, progress):
    from . import cluster as engine
    items = [(p, labels) for p in inputs.capture_paths]
    items += [(p, run_labels) for caps, _, run_labels in inputs.runs for p in caps]
    logs = [(inputs.parsed_logs, labels, clock_offset_ns)] if inputs.parsed_logs else []
    logs += [(_read_logs(run_logs), run_labels, None)
             for _, run_logs, run_labels in inputs.runs if run_logs]
    with engine.client_for(workers, cluster) as (client, where):
        run = engine.ingest(directory, items, logs, client, progress=progress)
    return Ingested(capture_paths=inputs.capture_paths, log_paths=inputs.log_paths,
                    seconds=run.seconds, dataset=run, where=where)
