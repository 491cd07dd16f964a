"""One grammar for durations, cpu and memory in every file a user writes: the agent's
config, the eviction section, and simulator scenarios read them alike."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from pykatalyst.agent.config import ConfigError, parse_config
from pykatalyst.api.duration import format_duration
from pykatalyst.api.units import Bytes, Cores, Seconds
from pykatalyst.sim.scenario import ScenarioError, parse_scenario
from tests.sim.conftest import tiny

SECONDS: TypeAdapter[float] = TypeAdapter(Seconds)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90.0), ("1m30s", 90.0), ("1.5h", 5400.0), ("300ms", 0.3), (120, 120.0), ("0", 0)],
)
def test_go_durations_and_numbers_are_seconds(text: Any, seconds: float) -> None:
    assert SECONDS.validate_python(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["2x", "1d", "-5s", True, "", "5 m"])
def test_what_is_not_a_duration_is_refused_saying_what_is(bad: Any) -> None:
    with pytest.raises(ValidationError, match="duration"):
        SECONDS.validate_python(bad)


@given(st.integers(0, 10**7))
def test_a_formatted_duration_reads_back(millis: int) -> None:
    assert SECONDS.validate_python(format_duration(millis / 1000)) == pytest.approx(millis / 1000)


def test_cores_and_bytes_take_quantities() -> None:
    assert TypeAdapter(Cores).validate_python("500m") == 0.5
    assert TypeAdapter(Bytes).validate_python("5Gi") == 5 * 2**30
    with pytest.raises(ValidationError, match="cpu quantity"):
        TypeAdapter(Cores).validate_python("lots")
    with pytest.raises(ValidationError, match="memory"):
        TypeAdapter(Bytes).validate_python(False)


def test_the_agent_config_reads_durations_as_a_scenario_does() -> None:
    cfg = parse_config({"period_s": "2m", "eviction": {"throttle_settle_s": "1m30s"}})
    assert cfg.period_s == 120.0
    assert cfg.eviction.throttle_settle_s == 90.0
    with pytest.raises(ConfigError, match=r"period_s: .*not a duration.*'2 minutes'"):
        parse_config({"period_s": "2 minutes"})


def test_a_scenario_reads_go_durations_and_days() -> None:
    data = tiny()
    data["duration"] = "1h30m"
    assert parse_scenario(data, "s.yaml").duration == 5400.0
    data["duration"] = "2d"
    assert parse_scenario(data, "s.yaml").duration == 2 * 86400.0
    data["duration"] = "-1h"
    with pytest.raises(ScenarioError, match="duration"):
        parse_scenario(data, "s.yaml")
