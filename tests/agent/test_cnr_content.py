"""The CNR as Katalyst's agent writes it: topologyPolicy from the kubelet's topology manager,
reclaimed figures per NUMA zone adding up to the node's, NUMA memory net of the reserve,
and the zones' allocations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.agent.agent import Agent
from pykatalyst.agent.config import AgentConfig, ConfigError, parse_config
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.agent.host.kubelet import KubeletCpuAssignments
from pykatalyst.agent.kubelet_cpu import KubeletConfigError, parse_kubelet_config
from pykatalyst.agent.memory_policy import reserved_memory_per_numa
from pykatalyst.agent.reporter import ReportInput, apportion, build_status
from pykatalyst.api import names
from pykatalyst.api.quantity import parse_quantity
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology
from tests.agent.inmemory_host import GIB, InMemoryHost, node_json, pod_json

TOPO = CPUTopology.synthetic(2, 8, 2, memory_per_numa=16 * GIB)
BIND = {names.MEMORY_ENHANCEMENT_ANNOTATION: '{"numa_binding": "true"}'}
EXCLUSIVE = {
    names.MEMORY_ENHANCEMENT_ANNOTATION: '{"numa_binding": "true", "numa_exclusive": "true"}'
}


class NoPins:
    def cpu_assignments(self) -> KubeletCpuAssignments:
        return KubeletCpuAssignments((), TOPO.all_cpus)


class Node:
    def __init__(
        self, tmp_path: Path, kubelet_config: str | None, cfg: dict[str, Any] | None = None
    ) -> None:
        conf = tmp_path / "kubelet-config.yaml"
        if kubelet_config is not None:
            conf.write_text(kubelet_config)
        self.clock = VirtualClock(10_000)
        self.cluster = MemoryCluster(clock=self.clock)
        self.cluster.create(names.NODE, node_json("node-1"))
        self.host = InMemoryHost(TOPO)
        data: dict[str, Any] = {
            "kubelet": {"config_path": str(conf)},
            "cpu": {"ramp_up_period_s": 0},
            "advisor": {"enable_reclaim": True},
            **(cfg or {}),
        }
        self.agent = Agent(
            "node-1",
            self.cluster,
            self.host,
            self.clock,
            AgentConfig.model_validate(data),
            Enforcer(self.host, None, self.clock),
            kubelet=NoPins(),
        )

    def pod(self, name: str, qos_class: str = "burstable", **kw: Any) -> str:
        obj = self.cluster.create(names.POD, pod_json(name, **kw), "default")
        uid = str(obj["metadata"]["uid"])
        self.host.add_pod(uid, qos_class=qos_class)
        return uid

    def run(self, ticks: int = 2) -> Any:
        plan = None
        for _ in range(ticks):
            plan = self.agent.reconcile(self.clock.now())
            self.clock.advance(5)
        return plan

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = self.cluster.get(names.CUSTOM_NODE_RESOURCE, "node-1")["status"]
        return status

    def numa(self, n: int) -> dict[str, Any]:
        for socket in self.status()["topologyZone"]:
            for zone in socket["children"]:
                if zone["name"] == str(n):
                    return dict(zone)
        raise AssertionError(f"no NUMA zone {n}")


# --- a. topologyPolicy --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "scope", "expected"),
    [
        ("single-numa-node", "container", "SingleNUMANodeContainerLevel"),
        ("single-numa-node", "pod", "SingleNUMANodePodLevel"),
        ("restricted", "container", "RestrictedContainerLevel"),
        ("restricted", "pod", "RestrictedPodLevel"),
        ("best-effort", "container", "BestEffortContainerLevel"),
        ("best-effort", "pod", "BestEffortPodLevel"),
        ("numeric", "container", "NumericContainerLevel"),
        ("numeric", "pod", "NumericPodLevel"),
        ("none", "pod", "None"),
        ("single-numa-node", None, "SingleNUMANodeContainerLevel"),  # the kubelet's default
    ],
)
def test_the_kubelets_topology_manager_names_katalysts_topology_policy(
    policy: str, scope: str | None, expected: str
) -> None:
    text = f"topologyManagerPolicy: {policy}\n"
    if scope is not None:
        text += f"topologyManagerScope: {scope}\n"
    assert parse_kubelet_config(text, "k").topology_policy == expected


def test_a_bad_topology_manager_field_is_refused_naming_it() -> None:
    with pytest.raises(KubeletConfigError, match="topologyManagerScope 'node': accepted"):
        parse_kubelet_config("topologyManagerScope: node\n", "k")
    with pytest.raises(ConfigError, match="topology_policy_name"):
        parse_config({"reporter": {"topology_policy_name": "single-numa"}})


def test_the_cnr_says_the_kubelets_topology_policy(tmp_path: Path) -> None:
    node = Node(tmp_path, "topologyManagerPolicy: single-numa-node\ntopologyManagerScope: pod\n")
    plan = node.run()
    assert node.status()["topologyPolicy"] == "SingleNUMANodePodLevel"
    assert "topologyManagerScope=pod" in plan.report["topology_policy"]["source"]


def test_without_the_kubelets_config_the_policy_is_none(tmp_path: Path) -> None:
    node = Node(tmp_path, None)
    node.run()
    assert node.status()["topologyPolicy"] == names.TOPOLOGY_POLICY_NONE


def test_a_declared_policy_name_wins_at_container_scope(tmp_path: Path) -> None:
    node = Node(
        tmp_path,
        "topologyManagerPolicy: none\n",
        {"reporter": {"topology_policy_name": "numeric"}},
    )
    node.run()
    assert node.status()["topologyPolicy"] == names.TOPOLOGY_POLICY_NUMERIC_CONTAINER


# --- b. reclaimed per NUMA zone -------------------------------------------------------------


def _zone_sum(status: dict[str, Any], side: str, resource: str) -> int:
    total = 0
    for socket in status["topologyZone"]:
        for zone in socket["children"]:
            q = parse_quantity(zone["resources"][side][resource])
            total += q.value()
    return total


@settings(max_examples=80, deadline=None)
@given(
    cpu=st.floats(0, 64, allow_nan=False),
    mem=st.integers(0, 64 * GIB),
    w=st.lists(st.floats(0, 100, allow_nan=False), min_size=2, max_size=2),
    whole=st.booleans(),
)
def test_per_numa_reclaimed_figures_add_up_to_the_nodes_in_both_lists(
    cpu: float, mem: int, w: list[float], whole: bool
) -> None:
    inp = ReportInput(
        TOPO,
        CPUSet(),
        cpu,
        float(mem),
        {0: w[0], 1: w[1]},
        {0: w[1], 1: w[0]},
        cpu_grain_milli=1000 if whole else 1,
    )
    status = build_status(inp, names.TOPOLOGY_POLICY_NONE)
    node_milli = parse_quantity(status["resources"]["allocatable"][names.RECLAIMED_MILLICPU])
    for side in ("allocatable", "capacity"):
        assert _zone_sum(status, side, names.RECLAIMED_MILLICPU) == node_milli.value()
        assert _zone_sum(status, side, names.RECLAIMED_MEMORY) == mem
    if whole:
        # Whole cores per zone where the total allows: at most one zone has a fraction.
        parts = [
            parse_quantity(z["resources"]["allocatable"][names.RECLAIMED_MILLICPU]).value()
            for s in status["topologyZone"]
            for z in s["children"]
        ]
        assert sum(1 for p in parts if p % 1000) <= 1


def test_five_reclaimed_cores_on_two_numa_nodes_are_all_in_the_zones() -> None:
    inp = ReportInput(TOPO, CPUSet(), 5.0, 3.0 * GIB, {0: 2.5, 1: 2.5}, {0: GIB, 1: 2 * GIB})
    status = build_status(inp, names.TOPOLOGY_POLICY_NONE)
    zones = [z for s in status["topologyZone"] for z in s["children"]]
    cpu = [z["resources"]["capacity"][names.RECLAIMED_MILLICPU] for z in zones]
    assert sorted(cpu) == ["2k", "3k"]
    assert [z["resources"]["allocatable"][names.RECLAIMED_MEMORY] for z in zones] == [
        "1Gi",
        "2Gi",
    ]


@settings(max_examples=150, deadline=None)
@given(
    total=st.integers(0, 10**7),
    weights=st.dictionaries(st.integers(0, 7), st.floats(0, 1e6, allow_nan=False), max_size=8),
    grain=st.sampled_from([1, 1000]),
)
def test_apportion_keeps_the_total_and_the_order_of_the_weights(
    total: int, weights: dict[int, float], grain: int
) -> None:
    zones = sorted(set(weights) | {0})
    parts = apportion(total, weights, zones, grain)
    assert sum(parts.values()) == total
    assert all(v >= 0 for v in parts.values())
    for a in zones:
        for b in zones:
            if weights.get(a, 0) > weights.get(b, 0):
                # a heavier zone never gets less than a lighter one, give or take a grain
                assert parts[a] + grain >= parts[b] - (total % grain)


# --- c. NUMA memory net of the reserve ------------------------------------------------------


def test_reserve_is_spread_as_whole_gib_per_numa_node() -> None:
    assert reserved_memory_per_numa(3 * GIB, [0, 1]) == {0: 2 * GIB, 1: 2 * GIB}
    assert reserved_memory_per_numa(0, [0, 1]) == {0: 0, 1: 0}


def test_numa_memory_is_net_of_the_configured_reserve(tmp_path: Path) -> None:
    node = Node(tmp_path, None, {"memory": {"reserved_memory_gb": 3}})
    node.run()
    zone = node.numa(1)["resources"]
    assert zone["capacity"]["memory"] == "16Gi"
    assert zone["allocatable"]["memory"] == "14Gi"


def test_numa_memory_reserve_can_come_from_the_kubelet(tmp_path: Path) -> None:
    node = Node(
        tmp_path,
        "kubeReserved: {memory: 1Gi}\nsystemReserved: {memory: 3Gi}\n",
        {"memory": {"use_kubelet_reserved": True, "reserved_memory_gb": 9}},
    )
    node.run()
    assert node.numa(0)["resources"]["allocatable"]["memory"] == "14Gi"


# --- d. allocations -------------------------------------------------------------------------


def _allocations(node: Node) -> dict[str, list[tuple[int, dict[str, str]]]]:
    out: dict[str, list[tuple[int, dict[str, str]]]] = {}
    for n in TOPO.numa_nodes:
        for a in node.numa(n).get("allocations", []):
            out.setdefault(a["consumer"].split("/")[1], []).append((n, a["requests"]))
    return out


def _colocated(tmp_path: Path, cfg: dict[str, Any]) -> Node:
    node = Node(tmp_path, None, cfg)
    node.pod("db", "guaranteed", level="dedicated_cores", cpu="4", memory="2Gi", annotations=BIND)
    node.pod("snb", level="shared_cores", cpu="1500m", memory="1Gi", annotations=BIND)
    node.pod("web", level="shared_cores", cpu="2", memory="1Gi")
    node.pod("batch", "besteffort", level="reclaimed_cores", cpu=None, memory=None)
    node.run()
    return node


def test_numa_bound_pods_are_listed_with_what_they_hold(tmp_path: Path) -> None:
    got = _allocations(_colocated(tmp_path, {}))
    assert set(got) == {"db", "snb"}
    [(_, db)] = got["db"]
    assert db == {"cpu": "4", "memory": "2Gi"}
    # A NUMA-bound shared pod is listed with its requests, as Katalyst revises them.
    [(_, snb)] = got["snb"]
    assert snb == {"cpu": "1500m", "memory": "1Gi"}


def test_without_the_filter_every_placed_pod_is_listed(tmp_path: Path) -> None:
    node = _colocated(tmp_path, {"reporter": {"enable_pod_resources_filter": False}})
    got = _allocations(node)
    assert set(got) == {"db", "snb", "web", "batch"}
    plan = node.agent.reconcile(node.clock.now())
    cpus = {p.key.split("/")[1]: p.cpuset for p in plan.pods}
    for name in ("web", "batch"):
        listed = {n: int(r["cpu"]) for n, r in got[name]}
        assert "memory" not in got[name][0][1]
        expected = {n: len(cpus[name] & TOPO.cpus_in_numa(n)) for n in TOPO.numa_nodes}
        assert listed == {n: c for n, c in expected.items() if c}


def test_a_numa_exclusive_pod_holds_its_nodes_memory_net_of_the_reserve(tmp_path: Path) -> None:
    node = Node(tmp_path, None, {"memory": {"reserved_memory_gb": 2}})
    node.pod(
        "db", "guaranteed", level="dedicated_cores", cpu="4", memory="2Gi", annotations=EXCLUSIVE
    )
    node.run()
    [(_, db)] = _allocations(node)["db"]
    assert db["memory"] == "15Gi"
