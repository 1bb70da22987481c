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

from decimal import Decimal, InvalidOperation

from ..errors import TracekitError
from .jsontext import BadRecord, dumps, finite, loads

RS = "\x1e"


class _Number(float):
    """A JSON number that remembers its text: epoch milliseconds as a double
    would lose the sub-microsecond digits a qlog writer printed."""

    def __new__(cls, text):
        n = super().__new__(cls, text)
        n.text = text
        return n


def _loads(text, lenient=False):
    return loads(text, parse_float=_Number, lenient=lenient)


INT64 = 1 << 63


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


def _object(trace, key):
    value = trace.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRecord(f"its {key} is a {_json_type(value)}, not an object")
    return value


def _json_type(value):
    return {list: "list", str: "string", bool: "boolean", int: "number", float: "number",
            _Number: "number"}.get(type(value), type(value).__name__)


class _Trace:
    def __init__(self, path, index, trace):
        """Raises BadRecord when the trace's own fields have the wrong JSON types."""
        common = dict(_object(trace, "common_fields"))
        config = _object(trace, "configuration")
        offset = config.get("time_offset", 0) or 0
        if not finite(offset):
            raise BadRecord(f"its configuration.time_offset is a {_json_type(offset)}, "
                            f"not a finite number of ms")
        fields = trace.get("event_fields")
        if fields is not None and not (isinstance(fields, list)
                                       and all(isinstance(f, str) for f in fields)):
            raise BadRecord("its event_fields is not a list of names")
        self.path = path
        self.index = index
        self.reference_ms = _reference_ms(common)
        self.time_format = common.get("time_format", "relative")
        self.offset_ms = _exact(offset)
        self.last_ms = None
        self.context = {"qlog_trace": index, "vantage_point": trace.get("vantage_point"),
                        "odcid": common.get("ODCID") or common.get("group_id")}
        self.fields = fields

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
        if not finite(time) or not isinstance(name, str):
            return None, "qlog event without a finite numeric time and a name"
        try:
            ts_ns = self.event_time_ns(time)
        except (ArithmeticError, InvalidOperation):
            ts_ns = None
        if ts_ns is None or not -INT64 < ts_ns < INT64:
            return None, "qlog event time outside 1677-2262 (int64 ns)"
        short = name.split(":", 1)[-1]
        data = event.get("data") if isinstance(event.get("data"), dict) else {}
        out = {"ts_ns": ts_ns, "kind": f"quic_{short}", "qlog_name": name, **self.context,
               "data": data}
        try:
            return dumps(out), None
        except BadRecord as e:
            return None, str(e)


def records(path, text):
    """Yield (record number, JSON text or None, problem or None) per qlog event."""
    if text.lstrip(" \t\r\n").startswith(RS):
        yield from _json_seq(path, text)
    else:
        yield from _json(path, text)


def _json(path, text):
    try:
        doc = _loads(text, lenient=True)
    except BadRecord as e:
        raise QlogError(f"{path}: not a qlog JSON document: {e}") from None
    traces = doc.get("traces") if isinstance(doc, dict) else None
    if not isinstance(traces, list):
        raise QlogError(f"{path}: qlog JSON without a `traces` list")
    n = 0
    for i, trace in enumerate(traces):
        events = trace.get("events") if isinstance(trace, dict) else None
        try:
            if not isinstance(trace, dict):
                raise BadRecord(f"it is a {_json_type(trace)}, not an object")
            if events is not None and not isinstance(events, list):
                raise BadRecord(f"its events is a {_json_type(events)}, not a list")
            t = _Trace(path, i, trace)
        except BadRecord as e:
            n += 1  # the trace counts as one malformed record
            yield n, None, f"qlog trace {i}: {e}"
            continue
        for event in events or []:
            n += 1
            text_, problem = t.record(event)
            yield n, text_, problem


def _json_seq(path, text):
    trace = None
    for n, part in enumerate(text.split(RS)[1:], start=1):
        try:
            obj = _loads(part)
        except BadRecord as e:
            if trace is None:
                raise QlogError(f"{path}: the JSON-SEQ qlog's header record: {e}") from None
            yield n, None, str(e)
            continue
        if trace is None:
            if not isinstance(obj, dict) or "qlog_version" not in obj:
                raise QlogError(f"{path}: JSON-SEQ qlog must start with a header record "
                                f"holding qlog_version")
            try:
                head = obj.get("trace") or {}
                if not isinstance(head, dict):
                    raise BadRecord(f"its trace is a {_json_type(head)}, not an object")
                trace = _Trace(path, 0, head)
            except BadRecord as e:
                raise QlogError(f"{path}: the JSON-SEQ qlog's header record: {e}") from None
            continue
        text_, problem = trace.record(obj)
        yield n, text_, problem


def looks_like_qlog(head):
    stripped = head.lstrip(" \t\r\n")
    return stripped.startswith(RS) or ('"qlog_version"' in head[:4096] and stripped.startswith("{"))
