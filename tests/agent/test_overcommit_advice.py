"""The realtime overcommit ratio (Katalyst's overcommitment-aware plugin): the formula, and
the agent publishing it on its CNR only while the node's set ratio is higher."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pykatalyst.agent.agent import Agent
from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.agent.overcommit import Demand, cnr_annotations, format_ratio, realtime_ratio
from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.protocol import AlreadyExists
from pykatalyst.controllers.overcommit import OvercommitController
from pykatalyst.topology.machine import CPUTopology
from tests.agent.inmemory_host import GIB, InMemoryHost, node_json, pod_json

CPU_KEY = names.CPU_OVERCOMMIT_RATIO_ANNOTATION


def test_katalysts_formula() -> None:
    # 10 cores, 8 requested, 2 used: pods load 0.25 of their request, below the 0.4
    # assumed, so room is counted at 0.4: ((10 × 0.6 − 2) / 0.4 + 8) / 10 = 1.8
    ratio, terms = realtime_ratio(Demand(10.0, 8.0, 2.0), 0.6, 0.4)
    assert ratio == pytest.approx(1.8)
    assert terms["pod_load"] == 0.4
    # already above allocatable in requests, lightly used: ((6 − 3) / 0.4 + 12) / 10
    assert realtime_ratio(Demand(10.0, 12.0, 3.0), 0.6, 0.4)[0] == pytest.approx(1.95)
    # busy pods (usage = request) leave no room beyond the target load
    assert realtime_ratio(Demand(10.0, 5.0, 5.0), 0.6, 0.4)[0] == 1.0
    # past the target load nothing is overcommitted
    assert realtime_ratio(Demand(10.0, 8.0, 8.0), 0.6, 0.4)[0] == 1.0
    assert realtime_ratio(Demand(0.0, 1.0, 1.0), 0.6, 0.4)[0] == 1.0


@given(
    st.floats(0.1, 512),
    st.floats(0, 1024),
    st.floats(0, 1024),
    st.floats(0.05, 1),
    st.floats(0.05, 1),
    st.floats(0, 64),
)
def test_the_ratio_is_at_least_one_and_falls_as_usage_grows(
    alloc: float, request: float, usage: float, target: float, estimated: float, more: float
) -> None:
    low, _ = realtime_ratio(Demand(alloc, request, usage), target, estimated)
    high, _ = realtime_ratio(Demand(alloc, request, usage + more), target, estimated)
    assert 1.0 <= high <= low + 1e-9


def test_published_only_below_the_set_ratio() -> None:
    ratios = {names.RESOURCE_CPU: 1.8, names.RESOURCE_MEMORY: 1.3}
    set_two = {CPU_KEY: "2", names.MEMORY_OVERCOMMIT_RATIO_ANNOTATION: "1.2"}
    out = cnr_annotations(ratios, set_two)
    assert out == {CPU_KEY: "1.80", names.MEMORY_OVERCOMMIT_RATIO_ANNOTATION: None}
    # nothing set on the node (ratio 1) or something unreadable: nothing to bound
    assert set(cnr_annotations(ratios, {CPU_KEY: "lots"}).values()) == {None}
    assert format_ratio(1.239) == "1.23"


class _Node:
    def __init__(self, overcommit: dict[str, Any] | None = None) -> None:
        self.clock = VirtualClock(10_000)
        self.cluster = MemoryCluster(clock=self.clock)
        node = node_json("node-1")
        node["status"] = {"allocatable": {"cpu": "16", "memory": "32Gi"}}
        self.cluster.create(names.NODE, node)
        self.host = InMemoryHost(CPUTopology.synthetic(1, 8, 2, memory_per_numa=32 * GIB))
        cfg = AgentConfig.model_validate(
            {"cpu": {"ramp_up_period_s": 0}, "overcommit": overcommit or {}}
        )
        self.agent = Agent(
            "node-1",
            self.cluster,
            self.host,
            self.clock,
            cfg,
            Enforcer(self.host, None, self.clock),
        )
        self.controller = OvercommitController(self.cluster)

    def set_ratio(self, value: str) -> None:
        """A user's NodeOvercommitConfig for the node's pool, carried to the Node by the
        overcommit controller."""
        pool = {"metadata": {"labels": {names.OVERCOMMIT_NODE_POOL_LABEL: "pool-a"}}}
        self.cluster.patch(names.NODE, "node-1", pool)
        noc = {
            "metadata": {"name": "pool-a"},
            "spec": {
                "nodeOvercommitSelectorVal": "pool-a",
                "resourceOvercommitRatio": {"cpu": value},
            },
        }
        try:
            self.cluster.create(names.NODE_OVERCOMMIT_CONFIG, noc)
        except AlreadyExists:
            old = self.cluster.get(names.NODE_OVERCOMMIT_CONFIG, "pool-a")
            self.cluster.update(names.NODE_OVERCOMMIT_CONFIG, {**old, "spec": noc["spec"]})
        self.controller.run(self.clock.now())

    def pod(self, name: str, cpu: str, load: float) -> None:
        obj = self.cluster.create(names.POD, pod_json(name, cpu=cpu, memory="1Gi"), "default")
        uid = str(obj["metadata"]["uid"])
        self.host.add_pod(uid)
        self.host.set_load(uid, load)

    def run(self, ticks: int = 4) -> dict[str, Any]:
        plan = None
        for _ in range(ticks):
            plan = self.agent.reconcile(self.clock.now())
            self.clock.advance(10)
        assert plan is not None
        return plan.to_json()

    def cnr_ratio(self) -> str | None:
        cnr = self.cluster.get(names.CUSTOM_NODE_RESOURCE, "node-1")
        value = (cnr["metadata"].get("annotations") or {}).get(CPU_KEY)
        return None if value is None else str(value)


def test_the_agent_bounds_the_set_ratio_by_what_the_pods_use() -> None:
    node = _Node()
    node.set_ratio("3")
    node.pod("web", cpu="8", load=4.0)  # 8 requested, 4 used: load 0.5
    plan = node.run()
    # ((16 × 0.6 − 4) / 0.5 + 8) / 16 = 1.2
    assert node.cnr_ratio() == "1.20"
    assert plan["report"]["overcommit"]["cpu"]["ratio"] == pytest.approx(1.2)
    # the overcommit controller carries it to the Node, where the webhook reads it
    node.controller.run(node.clock.now())
    ann = node.cluster.get(names.NODE, "node-1")["metadata"]["annotations"]
    assert ann.get(names.REALTIME_CPU_OVERCOMMIT_RATIO_ANNOTATION) == "1.20"


def test_nothing_is_published_while_the_set_ratio_is_within_reach() -> None:
    node = _Node()
    node.pod("web", cpu="8", load=1.0)
    node.run()
    assert node.cnr_ratio() is None  # no ratio set on the node: nothing to bound
    node.set_ratio("1.1")
    node.run()
    assert node.cnr_ratio() is None  # 1.1 is below what usage allows


def test_switched_off() -> None:
    node = _Node({"enabled": False})
    node.set_ratio("3")
    node.pod("web", cpu="8", load=8.0)
    assert node.run()["report"]["overcommit"]["state"].startswith("off")
    assert node.cnr_ratio() is None
