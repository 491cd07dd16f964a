"""The agent with its eviction stage, on the tutorial's 48-cpu node: a load spike on a shared
pod is answered in order — the reclaim pool shrinks, the CNR gets its reclaimed-only
taint, and only then the fewest reclaimed pods leave, each with its explanation. A single
short spike evicts nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from pykatalyst.agent.agent import Agent
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.agent.eviction import EvictionPlan, EvictionStage
from pykatalyst.agent.eviction.stage import StageMemory
from pykatalyst.api import names
from pykatalyst.apiserver.kubelet import StandInKubelet
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.topology.machine import CPUTopology
from tests.agent.inmemory_host import GIB, InMemoryHost, node_json, pod_json, reclaiming

NODE = "node-1"
OVERCOMMIT_KEY = names.TAINT_PREFIX + names.CONDITION_RECLAIMED_RESOURCE_PRESSURE


@dataclass
class Timeline:
    reclaim_sizes: list[tuple[float, int]] = field(default_factory=list)
    cnr_taint_at: float | None = None
    evictions: list[tuple[float, str]] = field(default_factory=list)


class Node:
    def __init__(self) -> None:
        self.clock = VirtualClock(50_000)
        self.cluster = MemoryCluster(clock=self.clock)
        self.kubelet = StandInKubelet(self.cluster, self.clock)
        self.cluster.create(names.NODE, node_json(NODE))
        topo = CPUTopology.synthetic(
            sockets=2, cores_per_socket=12, threads_per_core=2, memory_per_numa=96 * GIB
        )
        self.host = InMemoryHost(topo)
        self.registry = CollectorRegistry()
        self.stage = EvictionStage(NODE, self.cluster, registry=self.registry)
        self.agent = Agent(
            NODE,
            self.cluster,
            self.host,
            self.clock,
            reclaiming({"advisor": {"reserved_for_allocate_cpu": 4}}),
            Enforcer(self.host, None, self.clock),
            eviction_stages=[self.stage],
        )
        self.timeline = Timeline()

    def add(self, name: str, **kw: object) -> str:
        pod = self.cluster.create(names.POD, pod_json(name, **kw), "default")  # type: ignore[arg-type]
        uid = str(pod["metadata"]["uid"])
        self.host.add_pod(uid)
        return uid

    def tick(self) -> None:
        now = self.clock.now()
        plan = self.agent.reconcile(now)
        reclaim = plan.pool(names.POOL_RECLAIM)
        assert reclaim is not None
        self.timeline.reclaim_sizes.append((now, reclaim.size))
        cnr = self.cluster.get(names.CUSTOM_NODE_RESOURCE, NODE)
        keys = [t.get("key") for t in cnr.get("spec", {}).get("taints", [])]
        if OVERCOMMIT_KEY in keys and self.timeline.cnr_taint_at is None:
            self.timeline.cnr_taint_at = now
        for action in plan.eviction_actions:
            if isinstance(action, EvictionPlan):
                for v in action.evictions:
                    self.timeline.evictions.append((now, v.pod.name))
        # the kubelet's part: evicted pods stop and their cgroups go
        if self.kubelet.finish_deletions():
            live = {p["metadata"]["uid"] for p in self.cluster.list(names.POD).items}
            for uid in [u for u in self.host.pods if u not in live]:
                self.host.remove_pod(uid)
        self.clock.advance(5)

    def run(self, seconds: float) -> None:
        for _ in range(int(seconds // 5)):
            self.tick()


def setup_node() -> tuple[Node, str]:
    node = Node()
    web = node.add("web", cpu="4", memory="8Gi")
    node.host.set_load(web, 1.0)
    node.add(
        "reclaimed-large-pod-1",
        level="reclaimed_cores",
        cpu=None,
        memory=None,
        reclaimed_cpu="12k",
        reclaimed_memory="24Gi",
    )
    node.add(
        "reclaimed-large-pod-2",
        level="reclaimed_cores",
        cpu=None,
        memory=None,
        reclaimed_cpu="24k",
        reclaimed_memory="48Gi",
    )
    node.run(300)  # settle: about 42k reclaimed cpu published, nothing evicted
    assert not node.timeline.evictions and node.timeline.cnr_taint_at is None
    return node, web


@pytest.fixture(scope="module")
def spiked() -> Node:
    node, web = setup_node()
    node.timeline = Timeline()
    spike_at = node.clock.now()
    node.host.set_load(web, 40.0)
    node.run(900)
    node.spike_at = spike_at  # type: ignore[attr-defined]
    return node


def test_reclaim_pool_shrinks_first(spiked: Node) -> None:
    sizes = spiked.timeline.reclaim_sizes
    pairs = zip(sizes[1:], sizes[:-1], strict=True)
    first_shrink = next(t for (t, s), (_, prev) in pairs if s < prev)
    assert spiked.timeline.cnr_taint_at is not None
    assert first_shrink < spiked.timeline.cnr_taint_at
    assert sizes[-1][1] == 4  # squeezed to the reclaim pool's floor


def test_condition_taint_comes_before_any_eviction(spiked: Node) -> None:
    assert spiked.timeline.evictions
    assert spiked.timeline.cnr_taint_at is not None
    assert spiked.timeline.cnr_taint_at < spiked.timeline.evictions[0][0]


def test_only_the_minimal_set_is_evicted(spiked: Node) -> None:
    # 36k requested against the 4k floor: 5 x 4k = 20k, so 16k must go: the 24k pod does it
    assert [name for _, name in spiked.timeline.evictions] == ["reclaimed-large-pod-2"]
    left = {p["metadata"]["name"] for p in spiked.cluster.list(names.POD).items}
    assert left == {"web", "reclaimed-large-pod-1"}


def test_each_step_is_explained(spiked: Node) -> None:
    records = spiked.stage.recorder.records()
    kinds = [r.kind for r in records]
    assert kinds.index("condition-set") < kinds.index("eviction")
    eviction = next(r for r in records if r.kind == "eviction")
    assert eviction.plugin == names.EVICTION_PLUGIN_RECLAIMED_RESOURCE
    assert eviction.ranking[0].pod == "default/reclaimed-large-pod-2"
    events = spiked.cluster.list(names.EVENT).items
    evicted = [e for e in events if e["reason"] == names.EVENT_REASON_EVICT_CREATED]
    assert [e["involvedObject"]["name"] for e in evicted] == ["reclaimed-large-pod-2"]
    assert "hard threshold" in evicted[0]["message"]
    assert any(e["reason"] == "ConditionSet" for e in events)


def test_a_single_short_spike_evicts_nothing() -> None:
    node, web = setup_node()
    node.timeline = Timeline()
    node.host.set_load(web, 40.0)
    node.tick()
    node.host.set_load(web, 1.0)
    node.run(600)
    assert not node.timeline.evictions
    assert node.timeline.cnr_taint_at is None


def test_the_stage_reads_the_cnr_only_while_the_agent_has_no_figures() -> None:
    node, _ = setup_node()
    cnr_reads: list[float] = []
    get = node.cluster.get

    def counting(kind: Any, name: str, namespace: str | None = None) -> Any:
        if kind == names.CUSTOM_NODE_RESOURCE:
            cnr_reads.append(node.clock.now())
        return get(kind, name, namespace)

    node.cluster.get = counting  # type: ignore[method-assign]
    plan = node.agent.reconcile()
    # the agent publishes its own figures: the next round needs none of the CNR's
    assert plan.reclaimed_cpu.reported is not None
    memory = node.agent.state.stage_memory[0]
    assert isinstance(memory, StageMemory) and not memory.cnr_wanted
    cnr_reads.clear()
    reads = node.stage.gather(node.clock.now(), None, memory)
    assert reads.cnr_reclaimed is None and cnr_reads == []
    reads = node.stage.gather(node.clock.now(), None, StageMemory())
    assert reads.cnr_reclaimed is not None and len(cnr_reads) == 1
