"""Queqiao's logs (../shared/docs/QUEQIAO_LOGS.md, and its docs/LOGGING.md and
tools/visualizer/parser.js at commit 1e40991): the runtime log as Go slog
writes it (JSON Lines by default, `key=value` text with --log-format text),
lane traces (slog records, or the older `lane t=... key=value` lines) and
the JSON Lines of scripts/capture_metrics.py (timestamped /metrics scrapes).
Each line may be any of these; one file may mix them.

Every field is kept except identifiers of accounts, devices and users, which
are dropped and counted. Each record gets a kind:

    msg "runtime configuration"            queqiao_config
    msg "performance snapshot", or a metrics scrape   queqiao_metrics
    a scrape that failed (capture_metrics)  queqiao_scrape_failed
    msg "local/remote flow complete"       queqiao_flow_complete
    msg "... flow ended with error"        queqiao_flow_error
    msg "outer lane authenticated"         queqiao_lane_authenticated
    msg "local/remote flow opened"         queqiao_flow_opened
    a lane snapshot (msg, type lane_metrics or a `lane t=` line)  queqiao_lane
    anything else                          queqiao_log

Values are made what slog's JSON handler writes: Go duration strings of
duration fields (`"2s"`, `1m2.5s`) become integer ns; lane times in ms
(`190.0ms`) become numbers of ms, as in the JSON lane records. A flow record
has no start time: `duration_ns` is its duration (start = time - duration).
A `lane t=` line has no wall-clock time: `t` (seconds since the process
started) is its time on the trace's own clock until placed.

Counters become `deltas` since the previous record of the same source
(role and process; a scrape's label; a lane's flow and lane). The source
code says what a decrease means: the process counters (`queqiao_*_total`
outside `queqiao_quic_*`) only fall when the process restarted, so the
delta is the new value (a reset, counted); the `queqiao_quic_*` counters
are sums over the QUIC connections alive at that moment and fall when one
ends or a loss is found spurious, and lane counters fall for the latter, so
that interval's change is unknown: null, counted as skipped.
"""

import re

from .jsontext import BadRecord, dumps, finite, loads
from .logfmt import go_duration_ns, parse_line

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
# cumulative QUIC sums without the _total suffix (internal/metrics/metrics.go)
QUIC_SUMS = {f"queqiao_quic_{name}" for name in (
    "bytes_sent", "bytes_received", "bytes_lost", "packets_sent", "packets_received",
    "packets_lost", "controller_bytes_lost", "controller_packets_lost")}
# cumulative per-lane counters of a lane snapshot (internal/pep/lanetrace.go)
LANE_COUNTERS = ("sent", "pktsent", "pktrecv", "lostbytes", "lost", "issued", "reissued",
                 "source", "breissued", "lanefail", "appsamp", "nonapp")
LANE_MS = ("minrtt", "srtt", "resid", "residmax", "ackwr")  # milliseconds
DURATION_KEY = re.compile(r"(^|_)(duration|timeout|delay|interval)$")
LANE_LINE = re.compile(r"(?:^|\s)lane\s+t=")
LANE_SOURCE = ("role", "pid", "flow", "flow_id", "lane")


class Stats:
    def __init__(self):
        self.private_dropped = 0
        self.negative_deltas = 0  # decreases whose interval is unknown (delta null)
        self.counter_resets = 0  # process counters that restarted (delta = new value)
        self.trace_clock = 0  # records timed on the trace's own clock


def _scrub(record, stats):
    out = {}
    for key, value in record.items():
        if PRIVATE.search(key):
            stats.private_dropped += 1
            continue
        out[key] = _scrub(value, stats) if isinstance(value, dict) else value
    return out


def is_runtime_record(obj):
    """A JSON object one of Queqiao's line formats writes."""
    if not isinstance(obj, dict):
        return False
    return (obj.get("service") == "queqiaod" or {"time", "level", "msg"} <= obj.keys()
            or obj.get("msg") in KINDS or obj.get("type") in ("lane_metrics", "metrics")
            or any(isinstance(k, str) and k.startswith("queqiao_") for k in obj))


def looks_like_text(line):
    """A Queqiao text line: a `lane t=` trace line, or slog text with a time,
    a level and a message."""
    if LANE_LINE.search(line):
        return True
    return line.startswith("time=") and " level=" in line and " msg=" in line


def is_bench_report(obj):
    return isinstance(obj, dict) and "schema_version" in obj and "trials" in obj


def counter_kind(name):
    """'reset' for a process counter, 'sum' for a QUIC sum, None for a gauge."""
    base = name.partition("{")[0]
    if not base.startswith("queqiao_"):
        return None
    if base.startswith("queqiao_quic_"):
        return "sum" if base.endswith("_total") or base in QUIC_SUMS else None
    return "reset" if base.endswith("_total") else None


class Counters:
    """The change of each counter since the previous record of its source."""

    def __init__(self, stats):
        self.stats = stats
        self.last = {}

    def deltas(self, source, values, kinds):
        """{name: change} for the (name, value) pairs whose kind (by `kinds`) is
        a counter; the first record of a source has no deltas."""
        last = self.last.setdefault(source, {})
        out = {}
        for name, value in values:
            kind = kinds(name)
            if kind is None or isinstance(value, bool) or not finite(value):
                continue
            if name in last:
                change = value - last[name]
                if change < 0 and kind == "reset":
                    self.stats.counter_resets += 1
                    change = value
                elif change < 0:
                    self.stats.negative_deltas += 1
                    change = None
                out[name] = change
            last[name] = value
        return out


def _lane_text(text):
    """A `lane t=... key=value` line as a lane record on the trace's clock."""
    fields = parse_line("t=" + text[LANE_LINE.search(text).end():])
    return {"msg": "lane performance snapshot", "type": "lane_metrics", **fields}


def _ns_of_seconds(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value * 1_000_000_000
    if isinstance(value, float) and finite(value):
        text = repr(value)
    elif isinstance(value, str):
        text = value
    else:
        return None
    return go_duration_ns(text + "s") if re.fullmatch(r"\d+(\.\d*)?", text) else None


def _normalise_values(obj, lane):
    for key, value in list(obj.items()):
        if not isinstance(value, str):
            continue
        if lane and key in LANE_MS:
            ns = go_duration_ns(value)
            if ns is not None:
                obj[key] = ns / 1e6
        elif DURATION_KEY.search(key):
            ns = go_duration_ns(value)
            if ns is not None:
                obj[key] = ns


def _record(obj, line, stats, counters):
    """The tracekit record of one Queqiao object (modified in place)."""
    msg = obj.get("msg")
    kind = KINDS.get(msg, "queqiao_log") if isinstance(msg, str) else "queqiao_log"
    if isinstance(obj.get("metrics"), dict) and obj.get("type") == "metrics":
        # capture_metrics.py: {"started_utc", "label", "elapsed_seconds", "metrics"}
        metrics = obj.pop("metrics")
        obj.update({k: v for k, v in metrics.items() if k not in obj})
        kind = "queqiao_metrics"
    elif obj.get("type") == "metrics" and obj.get("status") == "failed":
        kind = "queqiao_scrape_failed"
    elif obj.get("type") == "lane_metrics":
        kind = "queqiao_lane"
    elif obj.get("type") == "metrics" and kind == "queqiao_log":
        kind = "queqiao_metrics"
    lane = kind == "queqiao_lane"
    _normalise_values(obj, lane)
    if not any(k in obj for k in ("ts_ns", "ts", "time", "timestamp")):
        if "started_utc" in obj:
            obj["ts"] = obj["started_utc"]
        elif lane and _ns_of_seconds(obj.get("t")) is not None:
            obj["ts"] = _ns_of_seconds(obj["t"])
            obj["clock"] = "trace"  # seconds since the process started
            stats.trace_clock += 1
    if kind in ("queqiao_flow_complete", "queqiao_flow_error"):
        duration = obj.get("duration")
        if isinstance(duration, int) and not isinstance(duration, bool):
            obj["duration_ns"] = duration
        # the flow's id; a record without one (older versions) is named by its line
        obj["request"] = (f"{obj.get('session_id', '')}/{obj.get('flow_id', '')}"
                          if "session_id" in obj or "flow_id" in obj else f"line {line}")
    if kind == "queqiao_metrics":
        source = ("metrics", repr(obj.get("role")), repr(obj.get("pid")), repr(obj.get("label")))
        obj["deltas"] = counters.deltas(source, obj.items(), counter_kind)
    elif lane:
        source = ("lane",) + tuple(repr(obj.get(k)) for k in LANE_SOURCE)
        obj["deltas"] = counters.deltas(source, obj.items(),
                                        lambda n: "sum" if n in LANE_COUNTERS else None)
    obj["kind"] = kind
    return obj


def runtime_records(lines, stats):
    """Yield (line, JSON text or None, problem or None) for (line, text) pairs."""
    counters = Counters(stats)
    for line, text in lines:
        stripped = text.strip()
        if not stripped.startswith("{") and LANE_LINE.search(stripped):
            obj = _lane_text(stripped)
        elif not stripped.startswith("{") and looks_like_text(stripped):
            obj = parse_line(stripped)
        else:
            try:
                obj = loads(stripped)
            except BadRecord as e:
                yield line, None, (str(e) if stripped.startswith("{") else
                                   "neither JSON nor a slog text line (time=... level=... "
                                   "msg=...) nor a lane trace line (lane t=...)")
                continue
            if not isinstance(obj, dict):
                yield line, None, "not a JSON object"
                continue
        try:
            yield line, dumps(_record(_scrub(obj, stats), line, stats, counters)), None
        except BadRecord as e:
            yield line, None, str(e)
