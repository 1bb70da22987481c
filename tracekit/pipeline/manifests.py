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

from ..core.errors import TracekitError
from ..readers.capture.formats import is_capture_file


def read_manifest(path):
    """[(capture paths, log paths, labels)] from a manifest file."""
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


def lab_manifest(run, experiment, trial, order, factors, fixed, settings, path, tunnel, workload,
                 forwarder, files, started, seconds):
    """The manifest of one lab run (its folder's manifest.json; a runs.json
    lists them): what was run, with which settings, and its files by role
    (client_capture, server_capture, loopback_capture, client_log,
    server_log, qlogs), named relative to the run's folder."""
    return {"run": run, "experiment": experiment, "trial": trial, "order": order,
            "factors": factors, "fixed": fixed, "settings": settings, "path": path,
            "tunnel": tunnel, "workload": workload, "forwarder": forwarder, "files": files,
            "started": started, "seconds": seconds}


def labels_of(manifest):
    """A lab run's labels: its factors and fixed settings, run, trial, order,
    experiment, rtt_ms and (when the path was shaped) bottleneck_mbps."""
    s = manifest["settings"]
    labels = {k: str(v) for k, v in manifest.get("fixed", {}).items()}
    labels.update({k: str(v) for k, v in manifest["factors"].items()})
    labels.update(run=manifest["run"], trial=str(manifest["trial"]), order=str(manifest["order"]),
                  experiment=manifest["experiment"], rtt_ms=str(s["rtt_ms"]))
    if s.get("rate_mbps"):
        labels["bottleneck_mbps"] = str(s["rate_mbps"])
    return labels


def run_inputs(manifests, workdir):
    """[(capture paths, log paths, labels)] of lab manifests (a runs.json)."""
    out = []
    for m in manifests:
        base = os.path.join(workdir, m["run"])
        captures = [os.path.join(base, m["files"][k])
                    for k in ("client_capture", "loopback_capture", "server_capture")
                    if k in m["files"] and os.path.exists(os.path.join(base, m["files"][k]))]
        logs = [os.path.join(base, m["files"][k]) for k in ("client_log", "server_log")
                if k in m["files"]]
        logs += [os.path.join(base, q) for q in m["files"].get("qlogs", [])]
        logs += [os.path.join(base, q) for q in m["files"].get("logs", [])]  # e.g. h2 frames
        out.append((captures, logs, labels_of(m)))
    return out
