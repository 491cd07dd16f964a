"""The scenarios pykatalyst ships turn reclaim on explicitly (the agent's default is off)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pykatalyst.agent.config import parse_config
from pykatalyst.cli.sim import demo_scenario_path
from pykatalyst.sim.scenario import load_scenario

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "scenarios"
SHIPPED = [demo_scenario_path(), *sorted(EXAMPLES.glob("*.yaml"))]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_the_katalyst_policy_of_each_shipped_scenario_reclaims(path: Path) -> None:
    scenario = load_scenario(path)
    policies = [p for p in scenario.policies if p.name == "katalyst"]
    assert policies
    for policy in policies:
        cfg = parse_config(dict(policy.agent.config))
        assert cfg.advisor.enable_reclaim is True
        assert cfg.reclaimed_cpu_idle is True
