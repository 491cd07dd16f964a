"""The agent's decision is a pure function of the tick's inputs and the last tick's state:
whatever pods came and went and whatever they ran, deciding again from the same inputs and
state gives the same plan and the same next state, and leaves both untouched (the machine
and the cluster too)."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pykatalyst.agent.tick import decide
from pykatalyst.api import names
from tests.agent.test_agent_invariants import step_st
from tests.agent.test_agent_loop import Node

CONFIGS: list[dict[str, Any]] = [
    {},
    {"cpu": {"overlap_reclaim_with_share": True}},
    {"advisor": {"isolation": {"enabled": True}}},
    {"advisor": {"provision_policy": "rama", "reserved_for_allocate_cpu": 0}},
]


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    cfg=st.sampled_from(CONFIGS),
    steps=st.lists(step_st, min_size=2, max_size=8),
    later=st.floats(min_value=0, max_value=90),
)
def test_decide_is_pure(
    cfg: dict[str, Any], steps: list[tuple[str, dict[str, Any], float]], later: float
) -> None:
    n = Node(cfg)
    live: list[tuple[str, str]] = []
    for i, (op, kw, load) in enumerate(steps):
        if op == "add" or not live:
            name = f"p{i}"
            live.append((name, n.pod(name, **kw)))
        elif op == "remove":
            name, uid = live.pop(int(load) % len(live))
            n.cluster.delete(names.POD, name, "default", grace_period_seconds=0)
            n.host.remove_pod(uid)
        elif op == "load":
            n.host.set_load(live[int(load) % len(live)][1], load)
        if i < len(steps) - 1:  # the last change is news to the decision under test
            n.run(10)
    n.clock.advance(later)
    inputs = n.agent.gather(n.clock.now())
    state = n.agent.state
    state_before = repr(state)  # every value in it, nested ones too
    knobs_before = copy.deepcopy(n.host.knobs)
    version_before = n.cluster.list(names.POD, "default").resource_version

    first, after_first = decide(inputs, state)
    second, after_second = decide(inputs, state)

    assert first == second
    assert after_first == after_second
    assert repr(state) == state_before, "deciding changed the state it was given"
    assert n.agent.state is state
    assert n.host.knobs == knobs_before, "deciding wrote to the machine"
    assert n.cluster.list(names.POD, "default").resource_version == version_before
    # the agent executes the decision and keeps the state decide returned
    plan, kept = n.agent.execute(inputs, first, after_first)
    assert kept.placement == after_first.placement and kept.plans == after_first.plans
    assert plan.pools == first.plan.pools and plan.pods == first.plan.pods
