"""One node-state holder per agent: the agent and its eviction stage watch the node's pods
once and act on one read of the node's dynamic config, switching configs on the same tick."""

from __future__ import annotations

from collections import Counter
from typing import Any

from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.eviction import EvictionConfig, EvictionStage
from pykatalyst.agent.factory import build_agent
from pykatalyst.agent.node_watch import NodeState
from pykatalyst.api import names
from pykatalyst.api.names import Kind
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.protocol import JSON
from pykatalyst.topology.machine import CPUTopology
from tests.agent.inmemory_host import GIB, InMemoryHost, node_json, pod_json

TOPO = CPUTopology.synthetic(1, 8, 2, memory_per_numa=32 * GIB)
NODE = "node-1"


class CountingCluster:
    """A MemoryCluster that counts the calls made to it, by verb and kind."""

    def __init__(self, inner: MemoryCluster) -> None:
        self.inner = inner
        self.calls: Counter[tuple[str, str]] = Counter()

    def __getattr__(self, verb: str) -> Any:
        fn = getattr(self.inner, verb)

        def call(*args: Any, **kwargs: Any) -> Any:
            kind = args[0] if args and isinstance(args[0], Kind) else None
            self.calls[(verb, kind.kind if kind is not None else "")] += 1
            return fn(*args, **kwargs)

        return call


def aqc(name: str, enable_reclaim: bool, cpu_threshold: float) -> JSON:
    return {
        "apiVersion": names.ADMIN_QOS_CONFIGURATION.api_version,
        "kind": names.ADMIN_QOS_CONFIGURATION.kind,
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "config": {
                "reclaimedResourceConfig": {"enableReclaim": enable_reclaim},
                "evictionConfig": {
                    "reclaimedResourcesEvictionConfig": {
                        "evictionThreshold": {names.RECLAIMED_MILLICPU: cpu_threshold}
                    }
                },
            }
        },
    }


def cnc(target: str) -> JSON:
    return {
        "apiVersion": names.CUSTOM_NODE_CONFIG.api_version,
        "kind": names.CUSTOM_NODE_CONFIG.kind,
        "metadata": {"name": NODE},
        "status": {
            "katalystCustomConfigList": [
                {
                    "configType": {
                        "group": names.ADMIN_QOS_CONFIGURATION.group,
                        "version": "v1alpha1",
                        "resource": names.ADMIN_QOS_CONFIGURATION.plural,
                    },
                    "configNamespace": "kube-system",
                    "configName": target,
                }
            ]
        },
    }


def cluster_with_configs(clock: VirtualClock) -> MemoryCluster:
    cluster = MemoryCluster(clock=clock, namespaces=("default", "kube-system"))
    cluster.create(names.NODE, node_json(NODE))
    cluster.create(names.ADMIN_QOS_CONFIGURATION, aqc("a", True, 3.0), "kube-system")
    cluster.create(names.ADMIN_QOS_CONFIGURATION, aqc("b", False, 7.0), "kube-system")
    cluster.create(names.CUSTOM_NODE_CONFIG, cnc("a"))
    retarget(cluster, "a")
    return cluster


def retarget(cluster: MemoryCluster, target: str) -> None:
    current = cluster.get(names.CUSTOM_NODE_CONFIG, NODE)
    current["status"] = cnc(target)["status"]
    cluster.update_status(names.CUSTOM_NODE_CONFIG, current)


def test_agent_and_eviction_stage_switch_to_the_new_target_on_the_same_tick() -> None:
    clock = VirtualClock(0)
    cluster = cluster_with_configs(clock)
    host = InMemoryHost(TOPO)
    agent = build_agent(NODE, cluster, host, clock, AgentConfig(), eviction=EvictionConfig())
    (stage,) = agent.eviction_stages
    assert isinstance(stage, EvictionStage)

    def eviction_threshold() -> float:
        return stage.manager.config.reclaimed_resource.eviction_threshold[names.RECLAIMED_MILLICPU]

    plan = agent.reconcile(0)
    assert plan.config["source"] == "kube-system/a"
    assert agent.config.advisor.enable_reclaim is True and eviction_threshold() == 3.0
    retarget(cluster, "b")
    agent.reconcile(10)  # within the TTL: neither reads again
    assert agent.config_status["source"] == "kube-system/a" and eviction_threshold() == 3.0
    plan = agent.reconcile(16)
    assert plan.config["source"] == "kube-system/b"
    assert agent.config.advisor.enable_reclaim is False and eviction_threshold() == 7.0


def test_one_pod_watch_and_one_config_read_per_ttl_for_agent_and_stage() -> None:
    clock = VirtualClock(0)
    counting = CountingCluster(cluster_with_configs(clock))
    counting.inner.create(names.POD, pod_json("web"), "default")
    host = InMemoryHost(TOPO)
    agent = build_agent(
        NODE,
        counting,
        host,
        clock,
        AgentConfig(),
        eviction=EvictionConfig(),  # type: ignore[arg-type]
    )
    for t in range(0, 30, 5):
        plan = agent.reconcile(float(t))
    assert plan.pod("default/web") is not None
    pod_reads = counting.calls[("list", "Pod")] + counting.calls[("watch", "Pod")]
    assert pod_reads == 2  # one list, one watch: the stage reads the agent's
    # Ticks at 0..25 with a 15 s TTL: the CustomNodeConfig and its target are read twice.
    assert counting.calls[("get", names.CUSTOM_NODE_CONFIG.kind)] == 2
    assert counting.calls[("get", names.ADMIN_QOS_CONFIGURATION.kind)] == 2


def test_a_stage_on_its_own_keeps_a_holder_of_its_own() -> None:
    clock = VirtualClock(0)
    cluster = cluster_with_configs(clock)
    stage = EvictionStage(NODE, cluster, EvictionConfig())
    stage.refresh_config(0)
    assert stage.manager.config.reclaimed_resource.eviction_threshold[names.RECLAIMED_MILLICPU] == 3
    shared = NodeState(NODE, cluster, admin_qos="kube-system/b")
    other = EvictionStage(NODE, cluster, EvictionConfig(), node_state=shared)
    other.refresh_config(0)
    assert other.manager.config.reclaimed_resource.eviction_threshold[names.RECLAIMED_MILLICPU] == 7


def test_the_holder_sees_the_node_s_pods_come_and_go() -> None:
    clock = VirtualClock(0)
    cluster = MemoryCluster(clock=clock, namespaces=("default",))
    state = NodeState(NODE, cluster)
    first = state.refresh(0)
    assert dict(first.pods) == {} and first.config.ref is None
    created = cluster.create(names.POD, pod_json("web"), "default")
    cluster.create(names.POD, pod_json("elsewhere", node="node-2"), "default")
    second = state.refresh(1)
    uid = created["metadata"]["uid"]
    assert set(second.pods) == {uid} and second.pods_version != first.pods_version
    third = state.refresh(2)
    assert third.pods_version == second.pods_version  # nothing changed: no re-parse
    cluster.delete(names.POD, "web", "default", grace_period_seconds=0)
    assert dict(state.refresh(3).pods) == {}
