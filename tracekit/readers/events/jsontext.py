"""JSON in and out for the formats parsed in Python (qlog, Queqiao, CSV rows).

Python's json module fails in ways a log must not pass on as a crash: an
integer of thousands of digits (int conversion limit), nesting deeper than
the interpreter's recursion limit, NaN and Infinity (read by default, but not
JSON, so the store's reader refuses them). Here each of these is a
`BadRecord` with a reason, which the formats count against the record.
"""

import json
import math

MAX_INT_DIGITS = 64  # far beyond any counter or timestamp; int64 has 19


class BadRecord(ValueError):
    """A record that cannot be read; str() is the reason shown to the user."""


def _int(text):
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise BadRecord(f"an integer of {digits:,} digits")
    return int(text)


def _constant(name):
    raise BadRecord(f"{name} is not a JSON number")


class Unreadable(float):
    """Where a document holds a number JSON cannot carry (NaN, Infinity, an integer
    of thousands of digits): NaN, so `finite` is false and `dumps` refuses the
    record that holds it -- the record is counted, the document read."""

    def __new__(cls, text):
        return super().__new__(cls, "nan")


def _lenient_int(text):
    return Unreadable(text) if len(text.lstrip("-")) > MAX_INT_DIGITS else int(text)


def loads(text, parse_float=None, lenient=False):
    """json.loads, with every failure a BadRecord. `lenient` (one document of many
    records): numbers JSON cannot carry become `Unreadable` instead."""
    try:
        if lenient:
            return json.loads(text, parse_int=_lenient_int, parse_float=parse_float,
                              parse_constant=Unreadable)
        return json.loads(text, parse_int=_int, parse_float=parse_float,
                          parse_constant=_constant)
    except json.JSONDecodeError as e:
        raise BadRecord(f"not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise BadRecord("JSON nested too deeply to read") from None


def dumps(obj):
    """json.dumps for the store: a non-finite number is a BadRecord."""
    try:
        return json.dumps(obj, allow_nan=False)
    except ValueError:
        raise BadRecord("a number that is not finite (NaN or Infinity)") from None
    except RecursionError:
        raise BadRecord("JSON nested too deeply to write") from None


def finite(x):
    """True for an int or a finite float (bool is not a number here)."""
    if isinstance(x, bool):
        return False
    if isinstance(x, int):
        return True
    return isinstance(x, float) and math.isfinite(x)
