"""Durations as Kubernetes writes them: Go's `time.Duration` strings ("30s", "5m", "1h30m",
"1.5h", "300ms", "0"), the form of every `metav1.Duration` field in Katalyst's objects.

`parse_duration` gives seconds; `format_duration` writes seconds back the way Go prints
them ("5m0s"); `Duration` is the pydantic field type (seconds in Python, a Go string in
JSON). A bare number is read as seconds where a user may write one (our own config files
and command options); Katalyst's objects always carry strings.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, PlainSerializer

ACCEPTED = (
    "accepted: a Go duration such as 30s, 5m, 1h30m, 1.5h or 300ms "
    "(units ns, us, ms, s, m, h), or a number of seconds"
)
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


class DurationError(ValueError):
    """Not a duration; the message says what is accepted."""


def parse_duration(value: str | float | int) -> float:
    """Seconds of a Go duration string, or of a number of seconds."""
    if isinstance(value, bool):
        raise DurationError(f"{value!r} is not a duration; {ACCEPTED}")
    seconds = float(value) if isinstance(value, int | float) else _parse_text(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise DurationError(f"{value!r} is not a duration (negative or not finite); {ACCEPTED}")
    return seconds


def _parse_text(text: str) -> float:
    raw = text.strip()
    try:
        return float(raw)
    except ValueError:
        pass
    body = raw[1:] if raw[:1] in "+-" else raw
    total = 0.0
    pos = 0
    for m in _PART.finditer(body):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    if not body or pos != len(body):
        raise DurationError(f"{text!r} is not a duration; {ACCEPTED}")
    return -total if raw.startswith("-") else total


def format_duration(seconds: float) -> str:
    """Go's `Duration.String()`: "0s", "300ms", "45s", "5m0s", "1h30m0s"."""
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 1:
        for unit, size in (("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
            if seconds >= size:
                return f"{sign}{_number(seconds / size)}{unit}"
        return f"{sign}{_number(seconds / 1e-9)}ns"
    hours, rest = divmod(seconds, 3600.0)
    minutes, secs = divmod(rest, 60.0)
    out = f"{_number(secs)}s"
    if hours or minutes:
        out = f"{int(minutes)}m{out}"
    if hours:
        out = f"{int(hours)}h{out}"
    return sign + out


def _number(value: float) -> str:
    text = f"{value:.9f}".rstrip("0").rstrip(".")
    return text or "0"


def _validate(value: Any) -> Any:
    if isinstance(value, str | int | float):
        return parse_duration(value)
    return value


Duration = Annotated[
    float,
    BeforeValidator(_validate),
    Field(ge=0),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
]
"""Seconds in Python; a Go duration string in JSON."""
