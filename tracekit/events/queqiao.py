"""Queqiao's logs (../shared/docs/QUEQIAO_LOGS.md): runtime log, lane trace,
queqiaobench report.

Runtime and lane-trace records (Go log/slog JSON Lines) keep every field
except identifiers of accounts, devices and users, which are dropped and
counted. Each gets a kind from its `msg`:

    runtime configuration            queqiao_config
    performance snapshot             queqiao_metrics (+ `deltas` of counters)
    local/remote flow complete       queqiao_flow_complete (+ `start_ns`)
    local/remote flow ended with error  queqiao_flow_error (+ `start_ns`)
    outer lane authenticated         queqiao_lane_authenticated
    local/remote flow opened         queqiao_flow_opened
    lane performance snapshot        queqiao_lane
    anything else                    queqiao_log

Counters of performance snapshots are process-wide sums that can decrease
(a loss later found spurious): `deltas` holds the change since the previous
snapshot of the same role and process, with negative changes skipped (0)
and counted. A flow record has no start time: start = time - duration.
The benchmark report (one JSON document) becomes one event per trial,
latency sample and summary row, stamped with the report's time.
"""

import os
import re

from ..errors import TracekitError
from .jsontext import BadRecord, dumps, finite, loads

KINDS = {
    "runtime configuration": "queqiao_config",
    "performance snapshot": "queqiao_metrics",
    "local flow complete": "queqiao_flow_complete",
    "remote flow complete": "queqiao_flow_complete",
    "local flow ended with error": "queqiao_flow_error",
    "remote flow ended with error": "queqiao_flow_error",
    "outer lane authenticated": "queqiao_lane_authenticated",
    "local flow opened": "queqiao_flow_opened",
    "remote flow opened": "queqiao_flow_opened",
    "lane performance snapshot": "queqiao_lane",
}
# identifiers of people and devices: never stored
PRIVATE = re.compile(r"(account|device|user|email|subscriber|customer|token|secret|password|"
                     r"credential|api_?key)", re.IGNORECASE)
COUNTER = re.compile(r"^queqiao_.*(_total|_bytes_sent|_packets_lost)$")


class Stats:
    def __init__(self):
        self.private_dropped = 0
        self.negative_deltas = 0


def _scrub(record, stats):
    out = {}
    for key, value in record.items():
        if PRIVATE.search(key):
            stats.private_dropped += 1
            continue
        out[key] = _scrub(value, stats) if isinstance(value, dict) else value
    return out


def is_runtime_record(obj):
    return isinstance(obj, dict) and (obj.get("service") == "queqiaod"
                                      or {"time", "level", "msg"} <= obj.keys())


def is_bench_report(obj):
    return isinstance(obj, dict) and "schema_version" in obj and "trials" in obj


def runtime_records(lines, stats):
    """Yield (line, JSON text or None, problem or None) for (line, text) pairs."""
    previous = {}
    for line, text in lines:
        try:
            obj = loads(text)
        except BadRecord as e:
            yield line, None, str(e)
            continue
        if not isinstance(obj, dict):
            yield line, None, "not a JSON object"
            continue
        obj = _scrub(obj, stats)
        msg = obj.get("msg")
        kind = KINDS.get(msg, "queqiao_log") if isinstance(msg, str) else "queqiao_log"
        obj["kind"] = kind
        if "duration" in obj and kind.startswith("queqiao_flow_") and kind != "queqiao_flow_opened":
            obj["duration_ns"] = obj["duration"]
            if "session_id" in obj or "flow_id" in obj:
                obj["request"] = f"{obj.get('session_id', '')}/{obj.get('flow_id', '')}"
        if kind == "queqiao_metrics":
            key = (repr(obj.get("role")), repr(obj.get("pid")))  # any JSON value
            last = previous.get(key, {})
            deltas = {}
            for name, value in obj.items():
                if COUNTER.match(name) and finite(value):
                    if name in last:
                        change = value - last[name]
                        if change < 0:
                            stats.negative_deltas += 1
                            change = 0
                        deltas[name] = change
                    last[name] = value
            previous[key] = last
            obj["deltas"] = deltas
        try:
            yield line, dumps(obj), None
        except BadRecord as e:
            yield line, None, str(e)


def bench_records(path, doc):
    """Events of a queqiaobench --json report."""
    source = doc.get("source") if isinstance(doc.get("source"), dict) else {}
    stamp = source.get("time") or source.get("generated_at") or doc.get("time")
    if stamp is None:
        stamp = int(os.stat(path).st_mtime * 1e9)  # the report carries no time of its own
    base = {"ts": stamp, "schema_version": doc.get("schema_version")}
    n = 0
    n += 1
    try:
        yield n, dumps({**base, "kind": "queqiaobench_config", "path": doc.get("path"),
                        "arguments": doc.get("arguments"), "source": source}), None
    except BadRecord as e:
        yield n, None, str(e)
    for section, kind in (("trials", "queqiaobench_trial"), ("latency", "queqiaobench_latency"),
                          ("summary", "queqiaobench_summary")):
        rows = doc.get(section) or []
        if not isinstance(rows, list):
            n += 1
            yield n, None, f"{section} is not a list"
            continue
        for row in rows:
            n += 1
            if not isinstance(row, dict):
                yield n, None, f"{section} entry is not an object"
                continue
            run = f"{row.get('stack', '')}/{row['trial']}" if "trial" in row else row.get("stack")
            try:
                yield n, dumps({**base, "kind": kind, "run": run, **row}), None
            except BadRecord as e:
                yield n, None, str(e)


def load_bench(path, text):
    try:
        doc = loads(text, lenient=True)
    except BadRecord as e:
        raise TracekitError(f"{path}: not a valid queqiaobench report: {e}") from None
    if not isinstance(doc, dict):
        raise TracekitError(f"{path}: not a valid queqiaobench report: not a JSON object")
    return doc
