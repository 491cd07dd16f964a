"""Timestamps as the Kubernetes API writes them (RFC 3339 in UTC), and back."""

from __future__ import annotations

import calendar
import functools
import re
import time

_RFC3339 = re.compile(
    r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$", re.ASCII
)


def rfc3339(t: float) -> str:
    """`t` (seconds since the epoch) as a metav1.Time: whole seconds, UTC, `Z`."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def format_microtime(t: float) -> str:
    """A metav1.MicroTime: RFC 3339 in UTC with exactly six fractional digits (the API
    server's parser wants all six)."""
    micros = round(t * 1_000_000)
    secs, frac = divmod(micros, 1_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{frac:06d}Z"


def parse_rfc3339(text: str) -> float:
    """Seconds since the epoch of an RFC 3339 time: fractional seconds kept, `Z` or a
    numeric offset. Raises ValueError naming the text and the accepted form otherwise."""
    if not isinstance(text, str):
        return _parse_rfc3339(text)
    return _parse_rfc3339_text(text)


@functools.lru_cache(maxsize=4096)
def _parse_rfc3339_text(text: str) -> float:
    """`parse_rfc3339` of a string, remembered: the same few times (a pod's creation and
    start, an object's heartbeat) are read again on every pass."""
    return _parse_rfc3339(text)


def _parse_rfc3339(text: object) -> float:
    m = _RFC3339.match(text.strip()) if isinstance(text, str) else None
    if m is None:
        raise ValueError(
            f"{text!r} is not an RFC 3339 time (accepted: 2006-01-02T15:04:05Z, with any "
            "number of fractional digits and Z or a +hh:mm offset)"
        )
    base, frac, zone = m.groups()
    try:
        t = float(calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        raise ValueError(f"{text!r} is not a valid date and time") from None
    if frac:
        t += float(frac)
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        t -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return t
