"""timeBounds crons: Katalyst's one-minute semantics and the whole-window default."""

from __future__ import annotations

import calendar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.controllers.cronbounds import (
    Bound,
    CronError,
    CronMode,
    TimeBound,
    cron_replicas,
    parse_cron,
)

DAY0 = float(calendar.timegm((2026, 11, 30, 0, 0, 0, 0, 0, 0)))  # a Monday, 00:00 UTC
times = st.floats(DAY0, DAY0 + 14 * 86400, allow_nan=False)


def minute_of_day(t: float) -> tuple[int, int]:
    m = int(t // 60) % 1440
    return divmod(m, 60)


@settings(max_examples=80, deadline=None)
@given(t=times, h1=st.integers(0, 23), span=st.integers(0, 23))
def test_an_hour_range_cron_holds_exactly_its_minutes_in_both_modes(
    t: float, h1: int, span: int
) -> None:
    h2 = min(23, h1 + span)
    tb = [TimeBound(None, None, (Bound(f"* {h1}-{h2} * * *", min_replicas=7),))]
    hour, _ = minute_of_day(t)
    want = 7 if h1 <= hour <= h2 else 2
    for mode in CronMode:
        assert cron_replicas(2, 10, tb, t, mode)[0] == want, (mode, hour)


@settings(max_examples=80, deadline=None)
@given(t=times, morning=st.integers(0, 11), evening=st.integers(12, 23))
def test_two_single_minute_crons_make_a_schedule_in_window_mode(
    t: float, morning: int, evening: int
) -> None:
    tb = [
        TimeBound(
            None,
            None,
            (
                Bound(f"0 {morning} * * *", min_replicas=10),
                Bound(f"0 {evening} * * *", min_replicas=3),
            ),
        )
    ]
    hour, minute = minute_of_day(t)
    day_minute = hour * 60 + minute
    want = 10 if morning * 60 <= day_minute < evening * 60 else 3
    assert cron_replicas(1, 20, tb, t, CronMode.WINDOW)[0] == want
    # Katalyst's semantics: only the firing minute itself
    katalyst = {morning * 60: 10, evening * 60: 3}.get(day_minute, 1)
    assert cron_replicas(1, 20, tb, t, CronMode.MINUTE)[0] == katalyst


def test_a_time_bound_outside_its_start_and_end_does_nothing() -> None:
    tb = [TimeBound(DAY0 + 3600, DAY0 + 7200, (Bound("* * * * *", max_replicas=4),))]
    assert cron_replicas(1, 9, tb, DAY0 + 60, CronMode.WINDOW)[1] == 9
    assert cron_replicas(1, 9, tb, DAY0 + 5000, CronMode.WINDOW)[1] == 4
    assert cron_replicas(1, 9, tb, DAY0 + 7200, CronMode.WINDOW)[1] == 9


def test_a_later_bound_overrides_an_earlier_one() -> None:
    tb = [TimeBound(None, None, (Bound("* * * * *", 3, 5), Bound("* * * * *", min_replicas=4)))]
    assert cron_replicas(1, 9, tb, DAY0, CronMode.MINUTE)[:2] == (4, 5)


def test_time_zones_and_descriptors() -> None:
    # 08:00 in Tokyo is 23:00 UTC the day before
    at = DAY0 + 23 * 3600
    tb = [TimeBound(None, None, (Bound("CRON_TZ=Asia/Tokyo * 8 * * *", min_replicas=6),))]
    assert cron_replicas(1, 9, tb, at, CronMode.MINUTE)[0] == 6
    assert parse_cron("@hourly").expr == "@hourly"


@pytest.mark.parametrize(
    "bad", ["", "* * * *", "61 * * * *", "CRON_TZ=Mars/Base * * * * *", "x y z a b"]
)
def test_bad_crons_are_refused_with_what_is_accepted(bad: str) -> None:
    with pytest.raises(CronError):
        parse_cron(bad)
    tb = [TimeBound(None, None, (Bound(bad, min_replicas=5),))]
    lo, hi, errors = cron_replicas(1, 9, tb, DAY0, CronMode.WINDOW)
    assert (lo, hi) == (1, 9)
    assert errors and errors[0].startswith("spec.timeBounds[0].bounds[0].cronTab")
