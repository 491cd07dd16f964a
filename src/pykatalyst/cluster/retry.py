"""Retry a read-modify-write that lost a race (client-go's `retry.RetryOnConflict`).

A write built on what was read carries that resourceVersion; when someone else wrote in
between the API server answers 409 Conflict, and the write is rebuilt from a fresh read and
tried again, a few times, before the Conflict goes to the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeVar

from pykatalyst.cluster.protocol import Conflict

CONFLICT_ATTEMPTS: Final = 3

T = TypeVar("T")


def retry_on_conflict(write: Callable[[int], T], attempts: int = CONFLICT_ATTEMPTS) -> T:
    """`write(attempt)` (attempt 0, 1, ...: it reads afresh each time) until it does not
    raise Conflict; the Conflict of the last of `attempts` tries is raised."""
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")
    for attempt in range(attempts - 1):
        try:
            return write(attempt)
        except Conflict:
            continue
    return write(attempts - 1)
