"""Injected time. Logic never reads the wall clock: it is handed a `Clock`."""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (real) or since the start of a simulation (virtual)."""
        ...


def is_due(last: float | None, now: float, period_s: float, slack_s: float = 0.0) -> bool:
    """Whether something done every `period_s`, last at `last` (None: never), is due at
    `now`; a run up to `slack_s` early counts as on time (the float sums of a virtual
    clock's steps land a hair short of the period)."""
    return last is None or now - last >= period_s - slack_s


class RealClock:
    def now(self) -> float:
        return time.time()


class VirtualClock:
    """A clock that moves only when told to: the simulator's and the tests' time."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError(f"a clock cannot go back: advance({seconds})")
        self._now += seconds
        return self._now

    def set(self, t: float) -> None:
        if t < self._now:
            raise ValueError(f"a clock cannot go back: set({t}) < now ({self._now})")
        self._now = float(t)
