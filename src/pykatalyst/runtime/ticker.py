"""Drift-free periodic deadlines.

A ticker's next deadline is its previous deadline plus the period, never "now plus the
period after the work": work that takes a while does not push every later tick back. A tick
that overran by more than a period does not cause a burst of catch-up runs either; the
deadlines it missed are skipped and counted. A kick runs a ticker early, and its grid
restarts from that run; an extra run (`extra`) runs it early once and leaves its grid where
it was.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field


def next_deadline(previous: float, period: float, now: float) -> tuple[float, int]:
    """The first deadline on the grid `previous + k * period` (k >= 1) that is after `now`,
    and how many deadlines of that grid were missed (at or before `now`, after `previous`).

    >>> next_deadline(10.0, 5.0, 11.0)
    (15.0, 0)
    >>> next_deadline(10.0, 5.0, 27.0)
    (30.0, 2)
    """
    if period <= 0 or not math.isfinite(period):
        raise ValueError(f"period: must be a positive number of seconds, got {period}")
    following = previous + period
    if now < following:
        return following, 0
    missed = math.floor((now - previous) / period)
    deadline = previous + (missed + 1) * period
    # Float rounding must never hand back a deadline that is already due.
    while deadline <= now:
        missed += 1
        deadline = previous + (missed + 1) * period
    return deadline, missed


@dataclass(slots=True)
class Ticker:
    """One periodic job of a ComponentHost: `fn(now)` at `start, start + period, ...`."""

    name: str
    period_s: float
    fn: Callable[[float], object]
    leader_only: bool = False
    deadline: float | None = None
    runs: int = 0
    skipped: int = 0
    kicked: int = 0
    extra_at: float | None = None
    again: bool = False  # asked during its own run: run once more at the next step
    last_ok: bool | None = None
    last_error: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.period_s <= 0 or not math.isfinite(self.period_s):
            raise ValueError(
                f"{self.name}: period must be a positive number of seconds, got {self.period_s}"
            )

    def due(self, now: float) -> bool:
        if self.extra_at is not None and now >= self.extra_at:
            return True
        return self.deadline is None or now >= self.deadline

    def on_grid(self, now: float) -> bool:
        """Whether a run at `now` is one of the grid's (not only an extra run)."""
        return self.deadline is None or now >= self.deadline

    def next_run(self, now: float) -> float:
        """When the ticker runs next: its deadline or an earlier extra run (`now` when it has
        not run yet)."""
        deadline = self.deadline if self.deadline is not None else now
        if self.extra_at is not None:
            return min(deadline, self.extra_at)
        return deadline

    def extra(self, now: float) -> bool:
        """Run once more at `now` (or at the first step after it) without moving the grid.
        False when a run is due by then anyway."""
        if self.deadline is None or self.deadline <= now:
            return False
        if self.extra_at is None or now < self.extra_at:
            self.extra_at = now
        return True

    def kick(self, now: float) -> bool:
        """Make the ticker due at `now` (an early run); its grid then restarts from that
        run. False when it was due already."""
        if self.deadline is None or self.deadline <= now:
            return False
        self.deadline = now
        self.kicked += 1
        return True

    def advance(self, scheduled: float, now: float) -> int:
        """Move past the deadline that just ran (`scheduled`), given the time `now` the run
        ended; returns the deadlines skipped because the run overran them."""
        self.deadline, missed = next_deadline(scheduled, self.period_s, now)
        self.skipped += missed
        return missed
