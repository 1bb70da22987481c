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

from ...core.errors import TracekitError
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


UNITS_MS = {"ms": Decimal(1), "us": Decimal("0.001"), "ns": Decimal("0.000001"),
            "s": Decimal(1000)}
# categories of QUIC's own events (kind quic_<event>); others keep theirs (h3_..., qperf_...)
QUIC_CATEGORIES = {"transport", "recovery", "connectivity", "security", "quic", "loss",
                   "congestion", "generic", "info", "error", "warning", "debug", "simulation"}
EPOCH_2000_MS = Decimal(946_684_800_000)


def _number(value):
    """A qlog number: JSON number or its decimal text (pcap2qlog writes strings)."""
    if isinstance(value, str):
        try:
            d = Decimal(value.strip())
        except (ArithmeticError, InvalidOperation):
            return None
        return d if d.is_finite() else None
    if finite(value):
        return _exact(value)
    return None


def _reference_ms(common, unit_ms):
    """The trace's reference time in ms since the Unix epoch, or None when it has
    none or one that is not on that clock (a test trace's counter). A number is in
    the trace's time unit; a decimal string in seconds, ms, us or ns by its size
    (pcap2qlog writes seconds: "1592171671.66")."""
    ref = common.get("reference_time")
    if isinstance(ref, dict):  # the newer schema: {clock_type, epoch, wall_clock_time}
        epoch = ref.get("epoch", "1970-01-01T00:00:00.000Z")
        if isinstance(epoch, str) and (epoch.startswith("1970-01-01T00:00:00")
                                       or epoch.lower() == "unix"):
            return Decimal(0)  # times are ms since the Unix epoch
        return None
    value = _number(ref)
    if value is None:
        return None
    if isinstance(ref, str):
        for scale in (Decimal(1000), Decimal(1), Decimal("0.001"), Decimal("0.000001")):
            ms = value * scale  # seconds, ms, us, ns
            if EPOCH_2000_MS <= ms < EPOCH_2000_MS * 4:
                return ms
        ms = value * unit_ms
    else:
        ms = value * unit_ms
    return ms if ms >= EPOCH_2000_MS else None  # a counter, not a wall clock


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
        units = config.get("time_units", common.get("time_units", "ms"))
        if units not in UNITS_MS:
            raise BadRecord(f"its time_units {units!r} is not one of ms, us, ns, s")
        self.unit_ms = UNITS_MS[units]
        offset = _number(config.get("time_offset", 0) or 0)
        if offset is None:
            raise BadRecord(f"its configuration.time_offset "
                            f"({_json_type(config.get('time_offset'))}) is not a finite number")
        fields = trace.get("event_fields")
        if fields is not None and not (isinstance(fields, list)
                                       and all(isinstance(f, str) for f in fields)):
            raise BadRecord("its event_fields is not a list of names")
        self.path = path
        self.index = index
        self.reference_ms = _reference_ms(common, self.unit_ms)
        self.time_format = common.get("time_format", "relative")
        self.offset_ms = offset * self.unit_ms
        self.clock = "epoch"  # or "trace": times relative to the trace's start
        self.last_ms = None
        self.context = {"qlog_trace": index, "vantage_point": trace.get("vantage_point"),
                        "odcid": common.get("ODCID") or common.get("group_id")}
        self.fields = fields

    def event_time_ns(self, t):
        """ns since the Unix epoch, or (self.clock "trace") since the trace began
        when the trace gives no wall-clock reference: such events are kept, and
        the log is placed with --clock-offset or `tracekit clock`."""
        t = t * self.unit_ms + self.offset_ms
        if self.time_format == "delta":
            t = (self.last_ms or 0) + t
            self.last_ms = t
        if self.time_format == "absolute" or (self.reference_ms is None and t >= EPOCH_2000_MS):
            return int((t * 1_000_000).to_integral_value())  # ms since the epoch (aioquic)
        if self.reference_ms is None:
            self.clock = "trace"
            return int((t * 1_000_000).to_integral_value())
        return int(((self.reference_ms + t) * 1_000_000).to_integral_value())

    def record(self, event):
        if self.fields and isinstance(event, list):
            event = dict(zip(self.fields, event))
        if not isinstance(event, dict):
            return None, "qlog event is not an object"
        event = {str(k).lower(): v for k, v in event.items()}  # draft-01 wrote CATEGORY, EVENT
        time = _number(event.get("time", event.get("relative_time")))
        name = event.get("name")
        if name is None and "category" in event:
            name = event.get("event", event.get("event_type", event.get("type", "")))
            name = f"{event['category']}:{name}"
        if time is None or not isinstance(name, str):
            return None, "qlog event without a finite numeric time and a name"
        try:
            ts_ns = self.event_time_ns(time)
        except (ArithmeticError, InvalidOperation):
            ts_ns = None
        if ts_ns is None or not -INT64 < ts_ns < INT64:
            return None, "qlog event time outside 1677-2262 (int64 ns)"
        category, _, short = name.rpartition(":")
        category = category.lower()
        prefix = "quic" if not category or category in QUIC_CATEGORIES else category
        data = dict(event.get("data")) if isinstance(event.get("data"), dict) else {}
        if "congestion_window" in data and "cwnd" not in data:  # the newer metrics name
            data["cwnd"] = data["congestion_window"]
        short = "_".join(short.lower().split())  # 0.1 wrote "NEW CONNECTION"
        short = OLD_NAMES.get(short, short)
        out = {"ts_ns": ts_ns, "kind": f"{prefix}_{short}", "qlog_name": name,
               **self.context, "data": data}
        if self.clock == "trace":
            out["clock"] = "trace"
        try:
            return dumps(out), None
        except BadRecord as e:
            return None, str(e)


# names of the drafts before 02 (aioquic 2019, pcap2qlog) -> the names since
OLD_NAMES = {"metric_update": "metrics_updated", "datagram_received": "datagrams_received",
             "datagram_sent": "datagrams_sent", "spin_bit_update": "spin_bit_updated",
             "connection_id_update": "connection_id_updated",
             "packet_rx": "packet_received", "packet_tx": "packet_sent",  # 0.1
             "new_connection": "connection_started"}


def records(path, text):
    """Yield (record number, JSON text or None, problem or None) per qlog event."""
    if text.lstrip(" \t\r\n").startswith(RS):
        yield from _json_seq(path, text.split(RS)[1:])
    elif _ndjson(text):  # quic-go, qperf-go: a header object, then one event a line
        yield from _json_seq(path, [ln for ln in text.splitlines() if ln.strip()])
    else:
        yield from _json(path, text)


def _ndjson(text):
    first = text.lstrip(" \t\r\n").split("\n", 1)[0].strip()
    if not (first.startswith("{") and first.endswith("}")):
        return False
    try:
        head = loads(first)
    except BadRecord:
        return False
    return isinstance(head, dict) and ("trace" in head or head.get("qlog_format") == "NDJSON")


def _json(path, text):
    try:
        doc = _loads(text, lenient=True)
    except BadRecord as e:
        raise QlogError(f"{path}: not a qlog JSON document: {e}") from None
    traces = doc.get("traces") if isinstance(doc, dict) else None
    if traces is None and isinstance(doc, dict) and "events" in doc:
        traces = [_v01_trace(doc)]
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
            if event == [] or event == {}:
                continue  # holds nothing: the `[]` pcap2qlog and quictrace-to-qlog end with
            text_, problem = t.record(event)
            yield n, text_, problem


def _v01_trace(doc):
    """qlog 0.1 (pcap2qlog, 2018): one connection per file, no `traces` list --
    `starttime` in seconds since the epoch (a JSON number: its decimal text is
    kept), `fields` naming each event array's members, times in whole ms since
    starttime, `vantagepoint` a string. Read as the draft-01 trace it became."""
    start = doc.get("starttime")
    common = {"ODCID": doc.get("connectionid")}
    if isinstance(start, _Number):
        common["reference_time"] = start.text  # a string: its size tells seconds
    elif start is not None:
        common["reference_time"] = start
    vantage = doc.get("vantagepoint")
    return {"common_fields": common, "event_fields": doc.get("fields"),
            "vantage_point": {"type": vantage} if isinstance(vantage, str) else vantage,
            "configuration": {"time_units": "ms"}, "events": doc.get("events")}


def _json_seq(path, parts):
    trace = None
    for n, part in enumerate(parts, start=1):
        try:
            obj = _loads(part)
        except BadRecord as e:
            if trace is None:
                raise QlogError(f"{path}: the JSON-SEQ qlog's header record: {e}") from None
            yield n, None, str(e)
            continue
        if trace is None:
            if not isinstance(obj, dict) or not ({"qlog_version", "trace"} & obj.keys()):
                raise QlogError(f"{path}: a JSON-SEQ or NDJSON qlog must start with a header "
                                f"record holding qlog_version or trace")
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
    return stripped.startswith(RS) or (stripped.startswith("{") and (
        '"qlog_version"' in head[:4096] or '"qlog_format"' in head[:4096]))
