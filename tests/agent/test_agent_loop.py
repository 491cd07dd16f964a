"""The agent's loop on an in-memory machine: what users of each QoS level get."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from pykatalyst.agent.agent import UNMANAGED, Agent, EvictionInput
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.agent.host.base import CpuQuota, Knob
from pykatalyst.agent.node_watch import NodeView
from pykatalyst.agent.plan import AgentPlan, StageDecision
from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology
from tests.agent.inmemory_host import GIB, InMemoryHost, node_json, pod_json, reclaiming

TOPO = CPUTopology.synthetic(2, 12, 2, memory_per_numa=96 * GIB)
DEDICATED = {names.MEMORY_ENHANCEMENT_ANNOTATION: '{"numa_binding": "true"}'}


class Node:
    def __init__(self, cfg: dict[str, Any] | None = None, dry_run: bool = False) -> None:
        self.clock = VirtualClock(50_000)
        self.cluster = MemoryCluster(clock=self.clock)
        self.cluster.create(names.NODE, node_json("node-1"))
        self.host = InMemoryHost(TOPO)
        self.agent = Agent(
            "node-1",
            self.cluster,
            self.host,
            self.clock,
            reclaiming(cfg),
            Enforcer(self.host, None, self.clock),
            dry_run=dry_run,
        )

    def pod(
        self, name: str, *, cgroup: bool = True, qos_class: str = "burstable", **kw: Any
    ) -> str:
        obj = self.cluster.create(names.POD, pod_json(name, **kw), "default")
        uid = str(obj["metadata"]["uid"])
        if cgroup:
            self.host.add_pod(uid, qos_class=qos_class)
        return uid

    def run(self, seconds: float = 0) -> AgentPlan:
        plan = self.agent.reconcile(self.clock.now())
        for _ in range(int(seconds // 5)):
            self.clock.advance(5)
            plan = self.agent.reconcile(self.clock.now())
        return plan

    def events(self, reason: str) -> list[dict[str, Any]]:
        items = self.cluster.list(names.EVENT, "default").items
        return [e for e in items if e["reason"] == reason]


def cpuset(node: Node, uid: str) -> CPUSet:
    v = node.host.knobs[node.host.pods[uid].containers["app"].cgroup][Knob.CPUSET_CPUS]
    assert isinstance(v, CPUSet)
    return v


def test_dedicated_numa_bound_pod_gets_exclusive_aligned_cpus_released_when_gone() -> None:
    n = Node()
    web = n.pod("web", cpu="2")
    batch = n.pod("batch", level="reclaimed_cores", cpu=None, memory=None, reclaimed_cpu="2k")
    sys_pod = n.pod("agent", level="system_cores", cpu="100m")
    db = n.pod("db", level="dedicated_cores", cpu="4", memory="1Gi", annotations=DEDICATED)
    plan = n.run(60)
    mine = cpuset(n, db)
    assert len(mine) == 4
    numa = TOPO.numa_of(min(mine))
    assert mine.issubset(TOPO.cpus_in_numa(numa))
    for other in (web, batch, sys_pod):
        assert cpuset(n, other).isdisjoint(mine)
    for pool in plan.pools:
        assert pool.cpuset.isdisjoint(mine)
    assert n.host.knobs[n.host.pods[db].containers["app"].cgroup][Knob.CPUSET_MEMS] == CPUSet.of(
        [numa]
    )
    # shared and reclaimed pods keep their memory off the bound NUMA node
    assert n.host.knobs[n.host.pods[web].containers["app"].cgroup][Knob.CPUSET_MEMS] == CPUSet.of(
        [1 - numa]
    )
    # the CNR shows the allocation in the NUMA zone
    zones = n.cluster.get(names.CUSTOM_NODE_RESOURCE, "node-1")["status"]["topologyZone"]
    numa_zone = next(c for z in zones for c in z["children"] if c["name"] == str(numa))
    assert numa_zone["allocations"][0]["consumer"].startswith("default/db/")
    # the pod goes: its cpus return to the pools
    n.cluster.delete(names.POD, "db", "default", grace_period_seconds=0)
    n.host.remove_pod(db)
    plan = n.run(10)
    everything = CPUSet().union(*(p.cpuset for p in plan.pools))
    assert mine.issubset(everything)
    assert mine.issubset(cpuset(n, batch) | cpuset(n, web))


def test_exclusive_pod_owns_its_numa_node() -> None:
    n = Node()
    ann = {
        names.MEMORY_ENHANCEMENT_ANNOTATION: '{"numa_binding": "true", "numa_exclusive": "true"}'
    }
    db = n.pod("db", level="dedicated_cores", cpu="2", memory="1Gi", annotations=ann)
    n.run(10)
    mine = cpuset(n, db)
    assert mine == TOPO.cpus_in_numa(TOPO.numa_of(min(mine)))


def test_invalid_qos_pod_is_left_alone_with_one_event() -> None:
    n = Node()
    bad = n.pod("bad", level="gold_cores")
    good = n.pod("good")
    plan = n.run(60)
    assert n.host.knobs.get(n.host.pods[bad].cgroup) is None
    assert cpuset(n, good) == plan.pool(names.POOL_SHARE).cpuset  # type: ignore[union-attr]
    pod = plan.pod(bad)
    assert pod is not None and pod.pool == UNMANAGED and "qos" in pod.note
    events = n.events("InvalidQoS")
    assert len(events) == 1
    assert "gold_cores" in events[0]["message"]
    assert events[0]["involvedObject"]["name"] == "bad"


def test_pod_without_metrics_is_held_at_its_request() -> None:
    n = Node()
    n.pod("ghost", cpu="6", cgroup=False)
    plan = n.run(60)
    pod = plan.pod("default/ghost")
    assert pod is not None and pod.containers[0].estimate_source == "request"
    share = plan.pool(names.POOL_SHARE)
    assert share is not None and share.size == 10  # 6 requested + 4 burst buffer
    assert plan.reclaimed_cpu.value == 38
    assert "no cgroup" in pod.note


def test_stale_metrics_fall_back_to_the_request_after_the_insurance_period() -> None:
    n = Node()
    web = n.pod("web", cpu="2")
    n.host.set_load(web, 6)
    plan = n.run(120)
    assert plan.pod(web).containers[0].estimate_source == "usage"  # type: ignore[union-attr]
    assert plan.pool(names.POOL_SHARE).size == 12  # type: ignore[union-attr]
    n.host.silent.add(n.host.pods[web].cgroup)
    plan = n.run(30)
    assert plan.pod(web).containers[0].estimate_source == "usage"  # type: ignore[union-attr]
    plan = n.run(300)
    assert plan.pod(web).containers[0].estimate_source == "request"  # type: ignore[union-attr]
    assert plan.pool(names.POOL_SHARE).size == 6  # type: ignore[union-attr]


def test_new_shared_pod_ramps_up_on_all_pooled_cpus_for_30s() -> None:
    n = Node()
    n.run(60)
    web = n.pod("web", cpu="2")
    n.host.set_load(web, 1)
    plan = n.run(5)
    assert plan.pod(web).ramping_up  # type: ignore[union-attr]
    assert cpuset(n, web) == TOPO.all_cpus
    plan = n.run(40)
    assert not plan.pod(web).ramping_up  # type: ignore[union-attr]
    assert cpuset(n, web) == plan.pool(names.POOL_SHARE).cpuset  # type: ignore[union-attr]


def test_a_dedicated_pods_sidecar_runs_on_its_main_containers_cpus() -> None:
    # Katalyst sizes a dedicated pod by its main container: a pod of two 8-cpu containers
    # gets 8 exclusive cpus, not 16, and the sidecar runs on them
    n = Node()
    obj = pod_json(
        "db", level="dedicated_cores", cpu="8", annotations=DEDICATED, containers=("app", "proxy")
    )
    created = n.cluster.create(names.POD, obj, "default")
    uid = str(created["metadata"]["uid"])
    n.host.add_pod(uid, containers=("app", "proxy"))
    n.run(60)
    knobs = n.host.knobs
    cpus = {
        c: knobs[n.host.pods[uid].containers[c].cgroup][Knob.CPUSET_CPUS] for c in ("app", "proxy")
    }
    assert isinstance(cpus["app"], CPUSet) and len(cpus["app"]) == 8
    assert cpus["proxy"] == cpus["app"]


def test_reclaimed_pods_run_idle_on_the_reclaim_pool_with_their_memory_limit() -> None:
    n = Node()
    batch = n.pod(
        "batch",
        level="reclaimed_cores",
        cpu=None,
        memory=None,
        reclaimed_cpu="4k",
        reclaimed_memory="2Gi",
        qos_class="besteffort",
    )
    n.host.set_load(batch, 10)
    plan = n.run(200)
    pod_cg = n.host.pods[batch].cgroup
    assert n.host.knobs[pod_cg][Knob.CPU_IDLE] == 1
    assert n.host.knobs[pod_cg][Knob.MEMORY_LIMIT] == 2 * GIB
    # the kubelet's best-effort cgroup is left writable for it (cpu.shares)
    assert n.host.knobs["kubepods/besteffort"][Knob.CPU_IDLE] == 0
    reclaim, share = plan.pool(names.POOL_RECLAIM), plan.pool(names.POOL_SHARE)
    # no shared pod: as Katalyst, no share pool, the reclaim pool has every cpu
    assert reclaim is not None and share is None and len(reclaim.cpuset) == 48
    assert cpuset(n, batch) == reclaim.cpuset
    # its own usage does not eat the headroom it runs on, nor inflate it beyond the pool
    assert plan.reclaimed_cpu.reported == pytest.approx(48, abs=0.5)


def test_named_cpuset_pool_gets_its_own_share_pool() -> None:
    n = Node()
    ann = {names.CPU_ENHANCEMENT_ANNOTATION: '{"cpuset_pool": "flink"}'}
    f = n.pod("flink", cpu="2", annotations=ann)
    w = n.pod("web", cpu="2")
    plan = n.run(60)
    flink, share = plan.pool("flink"), plan.pool(names.POOL_SHARE)
    assert flink is not None and share is not None
    assert cpuset(n, f) == flink.cpuset and cpuset(n, w) == share.cpuset
    assert flink.cpuset.isdisjoint(share.cpuset)


def test_system_pod_sees_every_cpu_but_dedicated_ones() -> None:
    n = Node()
    s = n.pod("sys", level="system_cores", cpu="100m")
    db = n.pod("db", level="dedicated_cores", cpu="2", memory="1Gi", annotations=DEDICATED)
    n.run(10)
    assert cpuset(n, s) == TOPO.all_cpus - cpuset(n, db)


def test_reclaim_disabled_publishes_zero() -> None:
    n = Node({"advisor": {"enable_reclaim": False}})
    plan = n.run(10)
    assert plan.reclaimed_cpu.reported == 0
    cnr = n.cluster.get(names.CUSTOM_NODE_RESOURCE, "node-1")
    assert cnr["status"]["resources"]["allocatable"][names.RECLAIMED_MILLICPU] == "0"


def test_dry_run_writes_nothing_and_publishes_nothing() -> None:
    n = Node(dry_run=True)
    web = n.pod("web")
    plan = n.run(10)
    assert n.host.writes == []
    assert plan.enforce["state"] == "dry-run" and plan.enforce["writes"] > 0
    assert any(web in line for line in plan.enforce["would_write"])
    assert n.cluster.list(names.CUSTOM_NODE_RESOURCE).items == []


def test_unwritable_knob_is_reported_once_and_the_loop_goes_on() -> None:
    n = Node()
    web = n.pod("web")
    n.host.fail_knobs.add((n.host.pods[web].containers["app"].cgroup, Knob.CPUSET_MEMS))
    n.run(120)
    assert len(n.events("KnobWriteFailed")) == 1
    assert cpuset(n, web)  # the other knobs were written


def test_vanished_cgroup_is_skipped_and_forgotten() -> None:
    n = Node()
    web = n.pod("web")
    other = n.pod("other")
    n.run(40)
    n.host.remove_pod(web)  # the runtime removed it before the API server noticed
    n.host.set_load(other, 3)
    vanished: list[str] = []
    for _ in range(12):
        n.clock.advance(5)
        plan = n.agent.reconcile(n.clock.now())
        vanished.extend(plan.enforce.get("vanished", []))
    assert vanished and all(web in cg for cg in vanished)
    assert len(vanished) == len(set(vanished))  # forgotten: not retried every tick
    assert not plan.warnings
    assert plan.pod(web).cgroup is None  # type: ignore[union-attr]
    assert cpuset(n, other) == plan.pool(names.POOL_SHARE).cpuset  # type: ignore[union-attr]


def test_pods_without_cgroups_do_not_trigger_discovery_every_tick() -> None:
    n = Node()
    n.pod("ghost", cgroup=False)
    n.run(5)
    calls = n.host.discover_calls
    n.run(20)  # within the periodic rediscovery
    assert n.host.discover_calls == calls


@dataclass
class FnStage:
    """An eviction stage deciding with `fn` (its memory: how many times it decided) and
    recording what it was asked to perform."""

    fn: Callable[[EvictionInput], StageDecision]
    name: str = "test"
    performed: list[StageDecision] = field(default_factory=list)

    def gather(self, now: float, node: NodeView | None, memory: object) -> None:
        return None

    def decide(
        self, inp: EvictionInput, reads: object, memory: object
    ) -> tuple[StageDecision, int]:
        return self.fn(inp), (memory if isinstance(memory, int) else 0) + 1

    def act(self, decision: StageDecision) -> tuple[str, ...]:
        self.performed.append(decision)
        return (f"performed {len(decision.actions)}",)


def test_eviction_stages_see_the_plan_and_a_failing_stage_does_not_stop_the_loop() -> None:
    n = Node()
    n.pod("web")
    seen: list[EvictionInput] = []

    def record(inp: EvictionInput) -> StageDecision:
        seen.append(inp)
        return StageDecision("record", (f"looked at {len(inp.pods)} pods",))

    def broken(inp: EvictionInput) -> StageDecision:
        raise RuntimeError("boom")

    recording, failing = FnStage(record), FnStage(broken, "broken")
    n.agent.eviction_stages.extend([recording, failing])
    plan = n.run(0)
    assert seen and seen[0].plan.pool(names.POOL_RECLAIM) is not None
    assert plan.eviction_actions == ("looked at 1 pods", "performed 1", "performed 0")
    assert any("eviction stage broken: boom" in w for w in plan.warnings)
    # the stages' memory is the agent state's: the failing one keeps what it had
    assert n.agent.state.stage_memory == (1, None)
    n.run(5)
    held = n.agent.state.stage_memory
    assert held[1] is None and isinstance(held[0], int) and held[0] > 1


def test_an_eviction_action_can_throttle_through_knob_overrides() -> None:
    n = Node()
    batch = n.pod("batch", level="reclaimed_cores", cpu=None, memory=None, reclaimed_cpu="2k")
    cg = n.host.pods[batch].cgroup
    quota = {cg: {Knob.CPU_QUOTA: CpuQuota(50_000)}}
    n.agent.eviction_stages.append(FnStage(lambda inp: StageDecision("t", knob_overrides=quota)))
    plan = n.run(0)
    assert n.host.knobs[cg][Knob.CPU_QUOTA] == CpuQuota(50_000)
    assert plan.desired[cg][Knob.CPU_IDLE] == 1  # the agent's own knobs stay


def test_dynamic_admin_qos_configuration_overlays_the_config() -> None:
    n = Node({"admin_qos_config": "default/aqc"})
    n.cluster.create(
        names.ADMIN_QOS_CONFIGURATION,
        {
            "apiVersion": names.ADMIN_QOS_CONFIGURATION.api_version,
            "kind": names.ADMIN_QOS_CONFIGURATION.kind,
            "metadata": {"name": "aqc", "namespace": "default"},
            "spec": {
                "config": {"reclaimedResourceConfig": {"reservedResourceForAllocate": {"cpu": "8"}}}
            },
        },
        "default",
    )
    n.pod("web")
    plan = n.run(10)
    share = plan.pool(names.POOL_SHARE)
    assert share is not None and share.terms["reserved_for_allocate"] == 8
    assert n.agent.config.advisor.reserved_for_allocate_cpu == 8
    assert n.agent.config.advisor.enable_reclaim  # fields it does not set keep their value


def test_plan_json_carries_pools_pods_and_terms() -> None:
    n = Node()
    n.pod("web")
    data = n.run(100).to_json()
    assert {p["name"] for p in data["pools"]} == {names.POOL_SHARE, names.POOL_RECLAIM}
    assert data["pods"][0]["pod"] == "default/web"
    assert data["reclaimed"]["cpu"]["terms"]["formula"]
    assert data["topology"]["cpus"] == 48


def test_shared_pod_with_numa_binding_gets_a_pool_on_its_numa_node() -> None:
    n = Node()
    snb = n.pod("snb", cpu="2", annotations=DEDICATED)
    web = n.pod("web", cpu="2")
    plan = n.run(60)
    pod = plan.pod(snb)
    assert pod is not None and len(pod.numa_nodes) == 1
    numa = pod.numa_nodes[0]
    assert pod.pool == f"share-NUMA{numa}"
    pool = plan.pool(pod.pool)
    assert pool is not None and pool.cpuset.issubset(TOPO.cpus_in_numa(numa))
    assert cpuset(n, snb) == pool.cpuset
    assert n.host.knobs[n.host.pods[snb].containers["app"].cgroup][Knob.CPUSET_MEMS] == CPUSet.of(
        [numa]
    )
    # unbound pods stay off the bound node, memory included
    assert cpuset(n, web).isdisjoint(TOPO.cpus_in_numa(numa))
    assert n.host.knobs[n.host.pods[web].containers["app"].cgroup][Knob.CPUSET_MEMS] == CPUSet.of(
        [1 - numa]
    )
    # the rest of the bound node is reclaim
    reclaim = plan.pool(names.POOL_RECLAIM)
    assert reclaim is not None
    assert TOPO.cpus_in_numa(numa) - pool.cpuset == reclaim.cpuset & TOPO.cpus_in_numa(numa)
    zones = n.cluster.get(names.CUSTOM_NODE_RESOURCE, "node-1")["status"]["topologyZone"]
    numa_zone = next(c for z in zones for c in z["children"] if c["name"] == str(numa))
    assert numa_zone["allocations"][0]["consumer"].startswith("default/snb/")


HUGE = "1" * 5000


@pytest.mark.parametrize(
    ("kw", "seen"),
    [
        ({"cpu": "1e400"}, "1e400"),
        ({"annotations": {names.MEMORY_ENHANCEMENT_ANNOTATION: f'{{"oom_priority": "{HUGE}"}}'}},
         "oom_priority"),
        ({"annotations": {names.NUMA_NUMBER_ANNOTATION: HUGE, **DEDICATED}}, "NUMA number"),
        ({"annotations": {names.CPU_ENHANCEMENT_ANNOTATION: f'{{"cpu_burst_percent": "{HUGE}"}}'}},
         "cpu_burst_percent"),
    ],
)  # fmt: skip
def test_a_hostile_pod_is_left_alone_and_the_others_run(kw: dict[str, Any], seen: str) -> None:
    n = Node()
    bad = n.pod("bad", **kw)
    good = n.pod("good")
    plan = n.run(60)
    assert n.host.knobs.get(n.host.pods[bad].cgroup) is None
    assert cpuset(n, good) == plan.pool(names.POOL_SHARE).cpuset  # type: ignore[union-attr]
    events = n.events("InvalidQoS")
    assert len(events) == 1 and seen in events[0]["message"]


def test_a_pod_katalyst_runs_is_managed_with_a_warning_event() -> None:
    n = Node()
    db = n.pod("db", level="dedicated_cores", cpu="1500m", memory="1Gi", annotations=DEDICATED)
    n.run(10)
    assert len(cpuset(n, db)) == 2  # rounded up to whole cores, as Katalyst does
    (event,) = n.events("QoSWarning")
    assert event["involvedObject"]["name"] == "db" and "rounded up to 2" in event["message"]
