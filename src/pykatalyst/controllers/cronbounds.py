"""An IHPA's `timeBounds`: which cron bound overrides minReplicas/maxReplicas now.

Two semantics, chosen by `CronMode`:

- `minute` (Katalyst's): a bound applies only in a minute its cron matches (Katalyst
  checks `cron.Next(now - 1m)` falls in the current minute). A cron must name every minute
  of the window it means, e.g. `* 8-20 * * 1-5`; `0 8 * * *` holds for one minute.
- `window` (the default): a cron that matches a run of consecutive minutes holds for
  exactly those minutes, as above; a cron that fires at a single minute (`0 8 * * *`)
  starts a setting that holds until another bound of the same timeBound fires (or the
  timeBound ends). So "at 08:00 min 10, at 20:00 min 2" is two one-minute crons.

Crons are the standard five fields (with `@hourly`-style descriptors), evaluated in UTC
unless prefixed with `CRON_TZ=<zone> ` or `TZ=<zone> `, as Katalyst's cron library reads
them. Timestamps are seconds since the epoch; everything here is pure.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pykatalyst.extras import MissingExtra, require

MINUTE_S = 60.0
_ONE_VALUE_RANGE = re.compile(r"(?<![\w/-])(\d+)-\1(?![\w/-])")
# How far back a single-minute cron's last firing is looked for (a weekly cron fires
# within 7 days; a yearly one is looked for over a year, at the cost of one croniter step).
LOOKBACK = timedelta(days=366)


def _croniter() -> Any:
    """croniter's class (the `autoscale` extra); CronError naming the extra without it."""
    try:
        return require("croniter", "autoscale", "IHPA timeBounds crons").croniter
    except MissingExtra as exc:
        raise CronError(str(exc)) from None


class CronMode(enum.StrEnum):
    MINUTE = "minute"
    WINDOW = "window"


class CronError(ValueError):
    """A cronTab that is not a standard five-field cron expression."""


@dataclass(frozen=True, slots=True)
class Bound:
    cron: str
    min_replicas: int | None = None
    max_replicas: int | None = None


@dataclass(frozen=True, slots=True)
class TimeBound:
    start: float | None
    end: float | None
    bounds: tuple[Bound, ...]


@dataclass(frozen=True, slots=True)
class Schedule:
    """A parsed cronTab: the expression and its time zone."""

    expr: str
    zone: tzinfo

    def matches(self, minute: datetime) -> bool:
        return bool(_croniter().match(self.expr, minute.astimezone(self.zone)))

    def last_at_or_before(self, minute: datetime) -> datetime | None:
        local = minute.astimezone(self.zone)
        cron = _croniter()
        if cron.match(self.expr, local):
            return minute
        prev = cron(self.expr, local).get_prev(datetime)
        assert isinstance(prev, datetime)
        if prev < local - LOOKBACK:
            return None
        return prev.astimezone(UTC)

    def next_after(self, minute: datetime) -> datetime:
        nxt = _croniter()(self.expr, minute.astimezone(self.zone)).get_next(datetime)
        assert isinstance(nxt, datetime)
        return nxt.astimezone(UTC)


def parse_cron(text: str) -> Schedule:
    """A Schedule, or CronError saying what is accepted."""
    expr = text.strip()
    zone: tzinfo = UTC
    for prefix in ("CRON_TZ=", "TZ="):
        if expr.startswith(prefix):
            name, _, expr = expr[len(prefix) :].partition(" ")
            try:
                zone = ZoneInfo(name)
            except (ZoneInfoNotFoundError, ValueError):
                raise CronError(f"{text!r}: unknown time zone {name!r}") from None
            expr = expr.strip()
    fields = expr.split()
    if not expr.startswith("@") and len(fields) != 5:
        raise CronError(
            f"{text!r}: expected five fields (minute hour day-of-month month day-of-week) "
            "or a descriptor such as @hourly"
        )
    # croniter reads a one-value range `1-1` as the whole field; robfig/cron (Katalyst's
    # parser) reads it as that one value.
    expr = _ONE_VALUE_RANGE.sub(r"\1", expr)
    if not _croniter().is_valid(expr):
        raise CronError(f"{text!r}: not a valid cron expression")
    return Schedule(expr, zone)


def _minute(t: float) -> datetime:
    return datetime.fromtimestamp(t // MINUTE_S * MINUTE_S, UTC)


def in_time_bound(tb: TimeBound, now: float) -> bool:
    """Katalyst's test: strictly after start (if set) and strictly before end (if set)."""
    return (tb.start is None or now > tb.start) and (tb.end is None or now < tb.end)


def _window_active(schedules: Sequence[Schedule], i: int, now: datetime) -> bool:
    """Bound i holds now under the window semantics (see the module doc)."""
    mine = schedules[i]
    if mine.matches(now):
        return True
    last = mine.last_at_or_before(now)
    if last is None:
        return False
    if mine.matches(last - timedelta(minutes=1)):
        return False  # a run of minutes that has ended
    for j, other in enumerate(schedules):
        if j == i:
            continue
        other_last = other.last_at_or_before(now)
        if other_last is not None and other_last > last:
            return False
    return True


def active_bounds(
    tb: TimeBound, schedules: Sequence[Schedule | None], now: float, mode: CronMode
) -> list[Bound]:
    """The bounds of one timeBound that hold at `now`, in spec order (a later one wins)."""
    if not in_time_bound(tb, now):
        return []
    minute = _minute(now)
    valid = [s for s in schedules if s is not None]
    out: list[Bound] = []
    for bound, sched in zip(tb.bounds, schedules, strict=True):
        if sched is None:
            continue
        if mode is CronMode.MINUTE:
            hit = sched.matches(minute)
        else:
            hit = _window_active(valid, valid.index(sched), minute)
        if hit:
            out.append(bound)
    return out


def cron_replicas(
    min_replicas: int | None,
    max_replicas: int,
    time_bounds: Sequence[TimeBound],
    now: float,
    mode: CronMode = CronMode.WINDOW,
) -> tuple[int | None, int, list[str]]:
    """minReplicas and maxReplicas after the bounds that hold now (a later bound overrides
    an earlier one, as Katalyst applies them), and the errors of crons that do not parse,
    each naming its field (those bounds are skipped)."""
    errors: list[str] = []
    for i, tb in enumerate(time_bounds):
        schedules: list[Schedule | None] = []
        for j, b in enumerate(tb.bounds):
            try:
                schedules.append(parse_cron(b.cron))
            except CronError as exc:
                errors.append(f"spec.timeBounds[{i}].bounds[{j}].cronTab: {exc}")
                schedules.append(None)
        for b in active_bounds(tb, schedules, now, mode):
            if b.min_replicas is not None:
                min_replicas = b.min_replicas
            if b.max_replicas is not None:
                max_replicas = b.max_replicas
    return min_replicas, max_replicas, errors
