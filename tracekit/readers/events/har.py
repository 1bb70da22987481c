"""Browser HAR files (HTTP Archive 1.2: Chrome and Safari's Web Inspector,
Firefox, Charles, Insomnia, WebPageTest exports): each entry is a request.

An entry gives its start (`startedDateTime`), its total time and the
phases of `timings` in ms, one after the other -- blocked, dns, connect
(which includes ssl), send, wait, receive; -1 or absent: did not happen.
From them, per entry (its number in the file is the record's line):

    request_start   startedDateTime; the entry's method, url, status, timings,
                    server address and connection as written
    connect_start   after blocked and dns, when connect > 0 (a new connection)
    connect_end     connect ms later (and ssl ms more where the exporter
                    counts ssl apart from connect, as Firefox does: the
                    entry's phases then sum to its time only with ssl)
    first_byte      after blocked, dns, connect, send and wait, when the
                    response has a wait or receive phase
    request_end     startedDateTime + time

`request` is `har:<entry>`; `remote_addr` the serverIPAddress and
`remote_port` the URL's port (its scheme's default), so `requests` links
the entry to the capture's connection to that server that began within
its time. `connection` is `fresh` when it spent time connecting, else
`reused`. Bytes: the response's `_transferSize` (Chrome, Safari), else
headersSize + bodySize when both are known; the request's likewise.
"""

from urllib.parse import urlsplit

from ...core.errors import TracekitError
from .jsontext import BadRecord, dumps, finite, loads
from .logfmt import rfc3339_ns

PHASES = ("blocked", "dns", "connect", "send", "wait", "receive")
TOLERANCE_MS = 0.01  # phases that sum to `time` within this are the whole entry
DEFAULT_PORTS = {"https": 443, "http": 80, "wss": 443, "ws": 80}


def looks_like_har(obj):
    return (isinstance(obj, dict) and isinstance(obj.get("log"), dict)
            and "entries" in obj["log"])


def load(path, text):
    try:
        doc = loads(text, lenient=True)
    except BadRecord as e:
        raise TracekitError(f"{path}: not a valid HAR file: {e}") from None
    if not looks_like_har(doc) or not isinstance(doc["log"]["entries"], list):
        raise TracekitError(f"{path}: not a valid HAR file: no log.entries list")
    return doc


def _ms(value):
    """A phase's duration in ms, or None when it did not happen (-1, absent)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not finite(value):
        return None
    return value if value >= 0 else None


def _ns(ms):
    return round(ms * 1_000_000)


def _size(message, transfer):
    if not isinstance(message, dict):
        return None
    if isinstance(message.get(transfer), int) and message[transfer] >= 0:
        return message[transfer]
    headers, body = message.get("headersSize"), message.get("bodySize")
    if isinstance(headers, int) and isinstance(body, int) and headers >= 0 and body >= 0:
        return headers + body
    return None


def _server(entry, url):
    addr = entry.get("serverIPAddress")
    addr = addr.strip("[]") if isinstance(addr, str) and addr else None
    try:
        parts = urlsplit(url) if isinstance(url, str) else None
        port = parts.port if parts else None
    except ValueError:
        parts, port = None, None
    if port is None and parts is not None:
        port = DEFAULT_PORTS.get(parts.scheme.lower())
    return addr, port


def _events(number, entry, creator):
    start = entry.get("startedDateTime")
    start_ns = rfc3339_ns(start)
    if start_ns is None:
        raise BadRecord(f"startedDateTime is not an RFC 3339 time: {str(start)[:40]!r}")
    total = _ms(entry.get("time"))
    if total is None:
        raise BadRecord("time is not a duration in ms")
    timings = entry.get("timings") if isinstance(entry.get("timings"), dict) else {}
    phase = {name: _ms(timings.get(name)) for name in PHASES}
    request = entry.get("request") if isinstance(entry.get("request"), dict) else {}
    response = entry.get("response") if isinstance(entry.get("response"), dict) else {}
    url = request.get("url")
    addr, port = _server(entry, url)
    common = {"request": f"har:{number}", "remote_addr": addr, "remote_port": port}
    common = {k: v for k, v in common.items() if v is not None}
    fields = {
        "method": request.get("method"), "url": url,
        "http_version": request.get("httpVersion") or response.get("httpVersion"),
        "status": response.get("status"), "time_ms": total, "timings": timings,
        "connection_id": entry.get("connection"), "creator": creator,
        "connection": "fresh" if (phase["connect"] or 0) > 0 else "reused",
        "bytes_up": _size(request, "_transferSize"),
        "bytes_down": _size(response, "_transferSize"),
    }
    fields = {k: v for k, v in fields.items() if v is not None}
    # HAR 1.2 counts ssl inside connect (Chrome, Safari, Charles do); Firefox
    # adds it after connect. The entry's own sum tells which.
    ssl = _ms(timings.get("ssl")) or 0
    listed = sum(phase[name] or 0 for name in PHASES)
    separate = ssl > 0 and abs(listed - total) > TOLERANCE_MS >= abs(listed + ssl - total)
    fields["ssl_in_connect"] = not separate if ssl > 0 else None
    fields = {k: v for k, v in fields.items() if v is not None}
    out = [(start_ns, "request_start", fields)]
    before = (phase["blocked"] or 0) + (phase["dns"] or 0)
    connect = (phase["connect"] or 0) + (ssl if separate else 0)
    if connect > 0:
        out.append((start_ns + _ns(before), "connect_start", {}))
        out.append((start_ns + _ns(before + connect), "connect_end", {}))
    if phase["wait"] is not None or phase["receive"] is not None:
        first = before + connect + (phase["send"] or 0) + (phase["wait"] or 0)
        out.append((start_ns + _ns(first), "first_byte", {}))
    out.append((start_ns + _ns(total), "request_end", {}))
    return [{"ts_ns": ts, "kind": kind, **common, **extra} for ts, kind, extra in out]


def records(path, doc):
    """Yield (entry number, JSON text or None, problem or None), one per event."""
    log = doc["log"]
    creator = log.get("creator", {}).get("name") if isinstance(log.get("creator"), dict) else None
    for number, entry in enumerate(log["entries"], start=1):
        if not isinstance(entry, dict):
            yield number, None, "entry is not an object"
            continue
        try:
            texts = [dumps(event) for event in _events(number, entry, creator)]
        except BadRecord as e:
            yield number, None, str(e)
            continue
        for text in texts:
            yield number, text, None
