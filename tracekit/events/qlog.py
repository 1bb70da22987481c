"""qlog (IETF QUIC event logging) in its JSON and JSON-SEQ serialisations.

Both the draft-02/0.3 shape aioquic writes (`traces[].events[]` of
{time, name, data}, times in ms since the epoch when there is no
reference_time) and the main-schema JSON-SEQ shape (a header record with
`trace.common_fields.reference_time`, then one event per record, times in
ms relative to it) are read; the older `event_fields` arrays too. Each
event becomes kind `quic_<event>` (packet_sent, packet_received,
packets_acked, packet_lost, metrics_updated, ...) with its `data` kept as
written (qlog's units: milliseconds, bytes) plus the trace's vantage point
and ODCID.
"""

import json
from decimal import Decimal

from ..errors import TracekitError

RS = "\x1e"


class _Number(float):
    """A JSON number that remembers its text: epoch milliseconds as a double
    would lose the sub-microsecond digits a qlog writer printed."""

    def __new__(cls, text):
        n = super().__new__(cls, text)
        n.text = text
        return n


def _loads(text):
    return json.loads(text, parse_float=_Number)


def _exact(t):
    return Decimal(t.text) if isinstance(t, _Number) else Decimal(t)


class QlogError(TracekitError):
    pass


def _reference_ms(common):
    ref = common.get("reference_time")
    if isinstance(ref, (int, float)):
        return _exact(ref)
    if isinstance(ref, dict):  # main schema: clock_type/epoch; "1970-01-01..." = Unix epoch
        epoch = ref.get("epoch", "1970-01-01T00:00:00.000Z")
        if isinstance(epoch, str) and epoch.startswith("1970-01-01T00:00:00"):
            return Decimal(0)
        return None
    if isinstance(ref, str):
        try:
            return Decimal(ref)
        except ArithmeticError:
            return None
    return None


class _Trace:
    def __init__(self, path, index, trace):
        common = dict(trace.get("common_fields") or {})
        config = trace.get("configuration") or {}
        self.path = path
        self.index = index
        self.reference_ms = _reference_ms(common)
        self.time_format = common.get("time_format", "relative")
        self.offset_ms = _exact(config.get("time_offset", 0) or 0)
        self.last_ms = None
        self.context = {"qlog_trace": index, "vantage_point": trace.get("vantage_point"),
                        "odcid": common.get("ODCID") or common.get("group_id")}
        self.fields = trace.get("event_fields")

    def event_time_ns(self, t):
        t = _exact(t) + self.offset_ms
        if self.time_format == "delta":
            t = (self.last_ms or 0) + t
            self.last_ms = t
        if self.reference_ms is None:
            if self.time_format == "absolute" or t > 100_000_000_000:  # ms since the epoch (aioquic)
                return int((t * 1_000_000).to_integral_value())
            raise QlogError(f"{self.path}: qlog trace {self.index} has relative times and no "
                            f"reference_time, so its events cannot be placed on a clock")
        if self.time_format == "absolute":
            return int((t * 1_000_000).to_integral_value())
        return int(((self.reference_ms + t) * 1_000_000).to_integral_value())

    def record(self, event):
        if self.fields and isinstance(event, list):
            event = dict(zip(self.fields, event))
        if not isinstance(event, dict):
            return None, "qlog event is not an object"
        time = event.get("time", event.get("relative_time"))
        name = event.get("name")
        if name is None and "category" in event:
            name = f"{event['category']}:{event.get('event', '')}"
        if not isinstance(time, (int, float)) or not isinstance(name, str):
            return None, "qlog event without a numeric time and a name"
        ts_ns = self.event_time_ns(time)
        short = name.split(":", 1)[-1]
        data = event.get("data") if isinstance(event.get("data"), dict) else {}
        out = {"ts_ns": ts_ns, "kind": f"quic_{short}", "qlog_name": name, **self.context,
               "data": data}
        return json.dumps(out), None


def records(path, text):
    """Yield (record number, JSON text or None, problem or None) per qlog event."""
    if text.lstrip(" \t\r\n").startswith(RS):
        yield from _json_seq(path, text)
    else:
        yield from _json(path, text)


def _json(path, text):
    try:
        doc = _loads(text)
    except json.JSONDecodeError as e:
        raise QlogError(f"{path}: not valid qlog JSON: {e.msg} at line {e.lineno} "
                        f"column {e.colno}") from None
    traces = doc.get("traces") if isinstance(doc, dict) else None
    if not isinstance(traces, list):
        raise QlogError(f"{path}: qlog JSON without a `traces` list")
    n = 0
    for i, trace in enumerate(traces):
        if not isinstance(trace, dict):
            continue
        t = _Trace(path, i, trace)
        for event in trace.get("events") or []:
            n += 1
            text_, problem = t.record(event)
            yield n, text_, problem


def _json_seq(path, text):
    trace = None
    for n, part in enumerate(text.split(RS)[1:], start=1):
        try:
            obj = _loads(part)
        except json.JSONDecodeError as e:
            yield n, None, f"not JSON ({e.msg})"
            continue
        if trace is None:
            if not isinstance(obj, dict) or "qlog_version" not in obj:
                raise QlogError(f"{path}: JSON-SEQ qlog must start with a header record "
                                f"holding qlog_version")
            trace = _Trace(path, 0, obj.get("trace") or {})
            continue
        text_, problem = trace.record(obj)
        yield n, text_, problem


def looks_like_qlog(head):
    stripped = head.lstrip(" \t\r\n")
    return stripped.startswith(RS) or ('"qlog_version"' in head[:4096] and stripped.startswith("{"))
