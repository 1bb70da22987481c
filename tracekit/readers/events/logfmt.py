"""Go's text log lines (log/slog's TextHandler, `key=value ...`) and Go
duration strings, for the Queqiao readers.

slog writes each attribute as `key=value`; a value holding a space, `=`,
`"` or a control character is quoted the way Go's strconv.Quote does (so a
Python string literal reads it back). Durations are written by
time.Duration.String: `1h2m3.5s`, `250ms`, `1.5µs`, `0s`.
"""

import ast
import math
import re

PAIR = re.compile(r'([^\s="]+)=("(?:\\.|[^"\\])*"|\S*)')
UNITS = {"ns": 1, "us": 1_000, "\u00b5s": 1_000, "\u03bcs": 1_000, "ms": 1_000_000,
         "s": 1_000_000_000, "m": 60_000_000_000, "h": 3_600_000_000_000}
DURATION = re.compile(r"([+-]?)((?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|\u00b5s|\u03bcs|ms|s|m|h))+)")
TERM = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
INTEGER = re.compile(r"[+-]?\d+")
DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def go_duration_ns(text):
    """Integer nanoseconds of a Go duration string (`1m2.5s`, `250ms`, `0s`),
    or None when the text is not one."""
    if not isinstance(text, str):
        return None
    if text in ("0", "+0", "-0"):
        return 0
    m = DURATION.fullmatch(text.strip())
    if m is None:
        return None
    total = 0
    for number, unit in TERM.findall(m.group(2)):
        whole, _, fraction = number.partition(".")
        scale = UNITS[unit]
        total += int(whole or 0) * scale + (int(fraction) * scale // 10 ** len(fraction)
                                            if fraction else 0)
    if total >= 1 << 63:
        return None  # beyond time.Duration (int64 ns): no Go program wrote it
    return -total if m.group(1) == "-" else total


def _unquote(value):
    if not value.startswith('"'):
        return value
    try:
        out = ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value[1:-1]
    return out if isinstance(out, str) else value[1:-1]


def value(text):
    """A bare logfmt value as the JSON value slog's JSON handler would have
    written: integers, decimals, true/false; anything else stays text."""
    if text == "true":
        return True
    if text == "false":
        return False
    if INTEGER.fullmatch(text):
        return int(text)
    if DECIMAL.fullmatch(text):
        number = float(text)
        return number if math.isfinite(number) else text
    return text


def parse_line(line):
    """The attributes of one `key=value` line, in order; None when the line
    holds none. Quoted values stay text; bare ones are typed (value())."""
    out = {}
    for key, raw in PAIR.findall(line):
        out[key] = _unquote(raw) if raw.startswith('"') else value(raw)
    return out or None


RFC3339 = re.compile(r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
                     r"([Zz]|[+-]\d{2}:\d{2})")


def rfc3339_ns(text):
    """Integer ns since the epoch of an RFC 3339 time (all nine fraction
    digits kept), or None when the text is not one."""
    import datetime
    m = RFC3339.fullmatch(text.strip()) if isinstance(text, str) else None
    if m is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = m.groups()
    try:
        tz = (datetime.timezone.utc if zone in "Zz" else datetime.timezone(
            (-1 if zone[0] == "-" else 1) * datetime.timedelta(hours=int(zone[1:3]),
                                                              minutes=int(zone[4:6]))))
        moment = datetime.datetime(int(year), int(month), int(day), int(hour), int(minute),
                                   int(second), tzinfo=tz)
    except ValueError:
        return None
    seconds = int(moment.timestamp())
    return seconds * 1_000_000_000 + int((fraction or "0").ljust(9, "0"))
