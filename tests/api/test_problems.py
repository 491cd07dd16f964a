"""Every config pykatalyst reads says what is wrong the same way: the path the user wrote,
the message, the value."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pykatalyst.agent.config import ConfigError, parse_config
from pykatalyst.api.problems import field_problems, one_line
from pykatalyst.scheduler.config import SchedulerConfigError, load_config_text
from pykatalyst.sim.scenario import ScenarioError, parse_scenario
from tests.sim.conftest import tiny


class _Item(BaseModel):
    model_config = ConfigDict(extra="forbid")
    size: int = Field(ge=1)
    mode: Literal["a", "b"] = "a"


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[_Item]


def _refusal(data: object) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        _Doc.model_validate(data)
    return info.value


def test_paths_values_and_messages() -> None:
    exc = _refusal({"items": [{"size": 1}, {"size": 0, "mode": "c", "extra": 1}]})
    shown = [p.show() for p in field_problems(exc)]
    assert shown == [
        "items[1].size: Input should be greater than or equal to 1 (got 0)",
        "items[1].mode: must be 'a' or 'b' (got 'c')",
        "items[1].extra: unknown field (got 1)",
    ]
    assert one_line(_refusal({}), prefix="spec") == "spec.items: Field required"


def test_the_agent_the_scheduler_and_scenarios_say_it_alike() -> None:
    with pytest.raises(ConfigError) as agent:
        parse_config({"cpu": {"min_reclaim_pool_cpus": -1, "colour": "red"}})
    assert "cpu.min_reclaim_pool_cpus: Input should be greater than or equal to 0 (got -1)" in str(
        agent.value
    )
    assert "cpu.colour: unknown field (got 'red')" in str(agent.value)
    with pytest.raises(SchedulerConfigError) as sched:
        load_config_text(
            "apiVersion: kubescheduler.config.k8s.io/v1\n"
            "kind: KubeSchedulerConfiguration\nprofiles: [{schedulerName: x, colour: red}]\n"
        )
    assert "colour: unknown field (got 'red')" in str(sched.value)
    data = tiny()
    data["nodes"][0]["count"] = 0
    with pytest.raises(ScenarioError) as scen:
        parse_scenario(data, "s.yaml")
    assert "nodes[0].count: Input should be greater than or equal to 1 (got 0)" in str(scen.value)
