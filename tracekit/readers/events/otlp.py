"""OpenTelemetry traces as OTLP JSON: what the OpenTelemetry SDK's OTLP JSON
file exporter writes (one ExportTraceServiceRequest per line,
`{"resourceSpans": [...]}`), and what the Collector's file exporter writes
(the same, one per line), or one such document over many lines.

Each span becomes events of tracekit's agent vocabulary (docs/agents.md),
from the GenAI semantic conventions' `gen_ai.operation.name` (else the
span name's first word):

    invoke_agent                 task_start / task_end (deadline_s from the
                                 `tracekit.deadline_s` attribute)
    chat, generate_content,      model_start / model_end when the span is
    text_completion              INTERNAL or SERVER (the model ran there);
                                 request_start / request_end when CLIENT
                                 (the model was called across the network)
    execute_tool                 action_start / action_end, action_id the
                                 `gen_ai.tool.call.id`
    an HTTP client span          request_start / request_end (kind CLIENT
    (http.request.method)        with an HTTP method attribute)
    `tracekit.kind` = X          X_start / X_end (edge, upload, round, ...)

The task of a span is its trace (`task` = trace id, or the agent span's
`gen_ai.conversation.id`), its `run` any span's of the trace `tracekit.run`
attribute (else the resource's); its round is its own `tracekit.round` attribute
or its nearest ancestor's; a span with a `tracekit.round` and no other
meaning is the round (round_start / round_end). A span's events (OTLP span
events) named in the vocabulary (commit, disconnect, reconnect, retry,
action_query, deadline) become events at their own time, with their
attributes. A request's `request` id is its span id; server.address and
server.port are its flow hints (`network.local.port` too, when set).

A record's line is the line of the file it was on (a one-document file:
the span's number). A span without a start or end time, or a line that is
not JSON, is a malformed record with its reason; the rest is read.
"""

from .jsontext import BadRecord, dumps, loads

MODEL_OPERATIONS = ("chat", "generate_content", "text_completion")
POINT_EVENTS = ("commit", "disconnect", "reconnect", "retry", "action_query", "deadline")
SPAN_KIND_CLIENT = 3


def looks_like_otlp(obj):
    return isinstance(obj, dict) and isinstance(obj.get("resourceSpans"), list)


def _value(v):
    """An OTLP AnyValue as a Python value."""
    if not isinstance(v, dict) or not v:
        return None
    (kind, x), = list(v.items())[:1]
    if kind == "intValue":
        try:
            return int(x)  # int64 travels as a decimal string
        except (TypeError, ValueError):
            return None
    if kind in ("arrayValue", "kvlistValue"):
        items = x.get("values") if isinstance(x, dict) else None
        if not isinstance(items, list):
            return None
        return [_value(i) for i in items] if kind == "arrayValue" else _attributes(items)
    return x


def _attributes(items):
    out = {}
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and isinstance(item.get("key"), str):
            out[item["key"]] = _value(item.get("value"))
    return out


def _list(x):
    return x if isinstance(x, list) else []


def _dict(x):
    return x if isinstance(x, dict) else {}


def _spans(doc, line):
    """(line, span, resource attributes) of one ExportTraceServiceRequest."""
    for rs in map(_dict, _list(doc.get("resourceSpans"))):
        resource = _attributes(_dict(rs.get("resource")).get("attributes"))
        for ss in map(_dict, _list(rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans"))):
            for span in _list(ss.get("spans")):
                yield line, span, resource


def _documents(path, text):
    """(line, document or BadRecord) of a file: JSON lines, or one document."""
    stripped = text.strip()
    try:
        yield 1, loads(stripped)
        return
    except BadRecord:
        pass
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                yield number, loads(line)
            except BadRecord as e:
                yield number, e


def _meaning(span, attrs):
    """(event stem, extra fields) of a span, or None when it means nothing here."""
    op = attrs.get("gen_ai.operation.name") or str(span.get("name", "")).split(" ")[0]
    client = span.get("kind") in (SPAN_KIND_CLIENT, "SPAN_KIND_CLIENT")
    if "tracekit.kind" in attrs:
        return str(attrs["tracekit.kind"]), {}
    if op == "invoke_agent":
        return "task", {}
    if op in MODEL_OPERATIONS:
        return ("request", {"operation": op}) if client else ("model", {})
    if op == "execute_tool":
        return "action", {"action_id": attrs.get("gen_ai.tool.call.id"),
                          "action": attrs.get("gen_ai.tool.name")}
    if client and ("http.request.method" in attrs or "http.method" in attrs):
        return "request", {}
    if "tracekit.round" in attrs:
        return "round", {}
    return None


def records(path, text):
    """(line, record JSON text, problem) for every span of an OTLP JSON file."""
    spans, bad = [], []
    for line, doc in _documents(path, text):
        if isinstance(doc, BadRecord):
            bad.append((line, str(doc)))
        elif not isinstance(doc, dict) or not looks_like_otlp(doc):
            bad.append((line, "not an OTLP trace (no resourceSpans)"))
        else:
            spans.extend(_spans(doc, line))
    one_document = len({line for line, _, _ in spans}) == 1 and not bad
    by_id = {}
    for line, span, resource in spans:
        if isinstance(span, dict) and isinstance(span.get("spanId"), str):
            by_id[span["spanId"]] = (span, _attributes(span.get("attributes")))
    tasks, runs = {}, {}  # trace id -> task id (an agent span's conversation id), run
    for span, attrs in by_id.values():
        if not isinstance(span.get("traceId"), str):
            continue
        if attrs.get("gen_ai.conversation.id") and attrs.get("gen_ai.operation.name") == "invoke_agent":
            tasks[span.get("traceId")] = str(attrs["gen_ai.conversation.id"])
        if attrs.get("tracekit.run"):
            runs[span.get("traceId")] = str(attrs["tracekit.run"])
    out = list((line, None, problem) for line, problem in bad)
    for k, (line, span, resource) in enumerate(spans, start=1):
        number = k if one_document else line
        try:
            out.extend([(number, rec, None) for rec in _span_records(span, by_id, tasks, runs,
                                                                      resource)])
        except BadRecord as e:
            out.append((number, None, str(e)))
    return out


def _round_of(span, by_id):
    seen = 0
    while span is not None and seen < 64:
        attrs = _attributes(span.get("attributes"))
        if "tracekit.round" in attrs:
            return attrs["tracekit.round"]
        parent = by_id.get(span.get("parentSpanId")) if isinstance(span.get("parentSpanId"), str) else None
        span = parent[0] if parent else None
        seen += 1
    return None


def _time(span, key):
    try:
        return int(span[key])
    except (KeyError, TypeError, ValueError):
        raise BadRecord(f"span {span.get('name')!r} has no {key}") from None


def _span_records(span, by_id, tasks, runs, resource):
    if not isinstance(span, dict):
        raise BadRecord("a span that is not a JSON object")
    attrs = _attributes(span.get("attributes"))
    start, end = _time(span, "startTimeUnixNano"), _time(span, "endTimeUnixNano")
    if end < start:
        raise BadRecord(f"span {span.get('name')!r} ends before it starts")
    trace = span.get("traceId")
    if not isinstance(trace, str):
        raise BadRecord(f"span {span.get('name')!r} has no traceId")
    base = {"task": tasks.get(trace, trace), "span": span.get("name"),
            "span_id": span.get("spanId"), "trace_id": trace}
    run = runs.get(trace, resource.get("tracekit.run"))
    if run:
        base["run"] = str(run)
    rnd = _round_of(span, by_id)
    if rnd is not None:
        base["round"] = rnd
    meaning = _meaning(span, attrs)
    if meaning is not None:
        stem, extra = meaning
        fields = {**base, **{k: v for k, v in extra.items() if v is not None}}
        if stem == "request":
            fields["request"] = span.get("spanId")
            for key, hint in (("server.address", "remote_addr"), ("server.port", "remote_port"),
                              ("network.local.port", "local_port")):
                if key in attrs:
                    fields[hint] = attrs[key]
        if stem == "task" and "tracekit.deadline_s" in attrs:
            fields["deadline_s"] = attrs["tracekit.deadline_s"]
        yield dumps({"ts_ns": start, "kind": f"{stem}_start", **fields})
        yield dumps({"ts_ns": end, "kind": f"{stem}_end", **fields})
    for event in _list(span.get("events")):
        name = event.get("name") if isinstance(event, dict) else None
        if name in POINT_EVENTS:
            fields = {**base, **_attributes(event.get("attributes"))}
            yield dumps({**fields, "ts_ns": _time(event, "timeUnixNano"), "kind": name})
