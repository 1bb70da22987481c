"""Runs of an experiment in, with their labels: a manifest file.

A manifest is JSON: either the `*.runs.json` that `tracekit lab run` writes
(one lab manifest per run, its files in a folder named after the run beside
it), or a list of runs written by hand:

    [{"files": ["run1/client.pcap", "run1/client-events.jsonl"],
      "labels": {"path": "direct", "connection": "fresh", "trial": "0", "order": "1"}},
     ...]

Paths are relative to the manifest. `order` is the run's position in the
interleaving (the ablation pairs runs by it) and `trial` its round.
"""

import json
import os

from ..errors import TracekitError


def read_manifest(path):
    """[(capture paths, log paths, labels)] from a manifest file."""
    from ..capture.formats import is_capture_file
    from ..lab.experiment import run_inputs

    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise TracekitError(f"{path}: cannot read: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise TracekitError(f"{path}: not a JSON manifest: {e.msg} at line {e.lineno}") from None
    base = os.path.dirname(os.path.abspath(path))
    if not isinstance(doc, list):
        raise TracekitError(f"{path}: a manifest is a JSON list of runs")
    if doc and isinstance(doc[0], dict) and "run" in doc[0] and "factors" in doc[0]:
        return run_inputs(doc, base)
    out = []
    for i, run in enumerate(doc):
        if not isinstance(run, dict) or not isinstance(run.get("files"), list):
            raise TracekitError(f"{path}: run {i} needs a list of files")
        labels = {str(k): str(v) for k, v in (run.get("labels") or {}).items()}
        captures, logs = [], []
        for name in run["files"]:
            full = os.path.join(base, name)
            try:
                capture = is_capture_file(full)
            except OSError as e:
                raise TracekitError(f"{path}: run {i}: {full}: cannot read: {e.strerror}") from None
            (captures if capture else logs).append(full)
        out.append((captures, logs, labels))
    return out


def ingest_run_inputs(con, runs, command=None):
    """Ingest [(captures, logs, labels)]: every log is parsed before anything is
    written; then each run's captures and logs go in with its labels, all runs
    in one transaction (`command`, or one of their own).
    Returns [(labels, capture summaries, log summaries)], one per run."""
    from ..events import read_logs
    from .events import load_logs
    from .ingest import command as new_command, load_captures

    if command is None:
        with new_command(con) as c:
            return ingest_run_inputs(con, runs, c)
    every = iter(read_logs([p for _, logs, _ in runs for p in logs]))
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
