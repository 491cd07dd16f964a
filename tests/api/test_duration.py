"""Go durations, the one grammar for every duration a user writes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from pykatalyst.api.duration import Duration, DurationError, format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("300s", 300.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("300ms", 0.3),
        ("2m3.5s", 123.5),
        ("0", 0.0),
        ("45", 45.0),
        (" 10s ", 10.0),
        (120, 120.0),
    ],
)
def test_go_durations_read_as_seconds(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["", "5", "5x", "m5", "5m 3s", "-5s", "1d", "nan", True])
def test_a_bad_duration_says_what_is_accepted(bad: object) -> None:
    if bad == "5":  # a bare number is seconds
        assert parse_duration("5") == 5.0
        return
    with pytest.raises(DurationError, match="accepted: a Go duration such as 30s"):
        parse_duration(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.3, "300ms"), (45, "45s"), (300, "5m0s"), (5400, "1h30m0s"), (90.5, "1m30.5s")],
)
def test_seconds_print_as_go_prints_them(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@given(st.integers(min_value=0, max_value=10**7), st.integers(min_value=0, max_value=999))
def test_printing_then_reading_gives_the_same_duration(whole: int, millis: int) -> None:
    seconds = whole + millis / 1000
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds, abs=1e-6)


class _Model(BaseModel):
    cool_down: Duration = 300.0


def test_the_field_type_reads_strings_and_writes_go_strings() -> None:
    m = _Model.model_validate({"cool_down": "1m30s"})
    assert m.cool_down == 90.0
    assert m.model_dump(mode="json") == {"cool_down": "1m30s"}
    with pytest.raises(ValidationError, match="cool_down"):
        _Model.model_validate({"cool_down": "soon"})
