"""Settings that leave a whole class of the scenario's pods unable to run.

A simulation that quietly runs no batch at all reads like a result; these checks say why
before the run starts (on the command line) and again in the report."""

from __future__ import annotations

from pykatalyst.api import names
from pykatalyst.sim.scenario import Policy, Scenario


def _reclaim_on(policy: Policy, index: int) -> bool | None:
    """The agent's effective `advisor.enable_reclaim`; None when the config does not parse
    (the run itself reports that error)."""
    from pykatalyst.agent.config import parse_config

    try:
        config = parse_config(dict(policy.agent.config), f"policies[{index}].agent.config")
    except ValueError:
        return None
    return bool(config.advisor.enable_reclaim)


def scenario_warnings(scenario: Scenario) -> tuple[str, ...]:
    """One sentence per policy whose configuration means some of the scenario's pods can
    never be scheduled, naming the setting that would change it."""
    out: list[str] = []
    for index, policy in enumerate(scenario.policies):
        if policy.name != "katalyst":
            continue
        reclaimed = [s.name for s in scenario.services if s.qos == names.QOS_RECLAIMED_CORES]
        if scenario.batch is None and not reclaimed:
            continue
        if _reclaim_on(policy, index) is not False:
            continue
        whom = []
        if scenario.batch is not None:
            whom.append("every batch task")
        if reclaimed:
            whom.append(f"the reclaimed_cores services ({', '.join(reclaimed)})")
        out.append(
            f"policy katalyst: the agent's reclaim is off (advisor.enable_reclaim is false, "
            f"Katalyst's default), so no node publishes reclaimed capacity and "
            f"{' and '.join(whom)} can never be scheduled; set "
            f"policies[{index}].agent.config.advisor.enable_reclaim: true to let them run"
        )
    return tuple(out)
