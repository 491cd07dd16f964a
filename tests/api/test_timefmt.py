import calendar
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pykatalyst.api.timefmt import format_microtime, parse_rfc3339, rfc3339


def test_microtime_has_the_six_fraction_digits_the_api_server_wants() -> None:
    assert format_microtime(0.25) == "1970-01-01T00:00:00.250000Z"


def test_offsets_and_fractions_are_kept() -> None:
    # Another writer's heartbeat in +02:00 is the same instant as its UTC form.
    assert parse_rfc3339("2024-03-01T10:00:00+02:00") == parse_rfc3339("2024-03-01T08:00:00Z")
    assert parse_rfc3339("2024-03-01T08:00:00-01:30") == parse_rfc3339("2024-03-01T09:30:00Z")
    assert parse_rfc3339("1970-01-01T00:00:01.5Z") == 1.5
    assert parse_rfc3339("1970-01-01T00:00:00.123456789Z") == pytest.approx(0.123456789)


@pytest.mark.parametrize(
    "text", ["yesterday", "2024-03-01", "2024-03-01 08:00:00Z", "2024-13-01T00:00:00Z", ""]
)
def test_what_is_not_a_timestamp_is_refused_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match=r"RFC 3339|not a valid date"):
        parse_rfc3339(text)


@given(st.integers(0, 4_000_000_000_000_000))
def test_microtime_round_trips(micros: int) -> None:
    t = micros / 1_000_000
    assert round(parse_rfc3339(format_microtime(t)) * 1_000_000) == micros


@given(st.integers(0, 253_402_300_799))
def test_time_round_trips_in_whole_seconds(secs: int) -> None:
    text = rfc3339(secs)
    assert text.endswith("Z")
    assert parse_rfc3339(text) == secs == calendar.timegm(time.gmtime(secs))
