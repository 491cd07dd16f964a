"""The pure steps of the agent's tick: whatever the pool sizes asked for, the pools and the
reclaim pool are cut from the machine as a user expects — inside the share domain, apart
from each other, and the reclaim pool never empty."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.agent import cpu_layout, regions
from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.cpu_placement import CpuState
from pykatalyst.agent.eviction.stage import StageMemory
from pykatalyst.agent.eviction.types import EvictionPlan
from pykatalyst.agent.pods import parse_pod
from pykatalyst.api import names
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology
from tests.agent.test_eviction_agent_scenario import Node as EvictionNode

POOLS = ("share", "share-web", "share-batch")


@settings(max_examples=60, deadline=None)
@given(
    sockets=st.integers(1, 2),
    cores=st.integers(2, 8),
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=len(POOLS)),
    overlap=st.booleans(),
)
def test_pools_stay_apart_inside_the_share_domain(
    sockets: int, cores: int, sizes: list[int], overlap: bool
) -> None:
    topo = CPUTopology.synthetic(sockets, cores, 2)
    cfg = AgentConfig.model_validate({"cpu": {"overlap_reclaim_with_share": overlap}})
    lay, _ = cpu_layout.layout(topo, cfg, {}, CpuState(), None)
    wanted = dict(zip(POOLS, sizes, strict=False))
    alloc = cpu_layout.allocate(topo, cfg, lay, wanted, {}, {}, {})
    borrowed: dict[str, CPUSet] = {}
    size = 0
    if overlap:
        borrowed, size, _ = regions.borrow_from_pools(
            topo,
            alloc.pools,
            dict.fromkeys(alloc.pools, 1),
            len(lay.share_domain),
            lay.reserved_for_reclaim,
            {},
            reclaim_enabled=True,
        )
    alloc = cpu_layout.lend(lay, alloc, borrowed, size, {})
    assert set(alloc.pools) == set(wanted)
    assert alloc.reclaimed_cpus, "reclaimed pods always have somewhere to run"
    assert 1 <= alloc.reclaimed_cores_size <= len(alloc.reclaimed_cpus)
    shared_domain = any("shares" in w for w in alloc.warnings)
    seen = CPUSet()
    for name, cpus in alloc.pools.items():
        assert cpus and cpus <= lay.share_domain
        assert len(cpus) <= max(wanted[name], 1) or shared_domain
        if not shared_domain:
            assert not (cpus & seen), f"pool {name} overlaps another"
        seen = seen | cpus
    if not any("overlaps" in w for w in alloc.warnings):
        assert not (alloc.reclaim & seen)
    lent = CPUSet().union(*borrowed.values())
    assert lent <= seen  # only pools' cpus are lent, never more than a pool has
    assert all(len(c) <= len(alloc.pools[p]) for p, c in borrowed.items())
    assert alloc.reclaimed_cpus == alloc.reclaim | lent
    names_in_plan = [p.name for p in cpu_layout.pool_plans(lay, alloc, {})]
    assert names_in_plan[-1] == names.POOL_RECLAIM and sorted(POOLS[: len(sizes)]) == sorted(
        n for n in names_in_plan if n in wanted
    )


@settings(max_examples=40, deadline=None)
@given(previous=st.integers(1, 6), grow=st.integers(0, 6))
def test_a_pool_keeps_the_cpus_it_had_when_it_grows(previous: int, grow: int) -> None:
    topo = CPUTopology.synthetic(1, 8, 2)
    cfg = AgentConfig()
    lay, _ = cpu_layout.layout(topo, cfg, {}, CpuState(), None)
    first = cpu_layout.allocate(topo, cfg, lay, {"share": previous}, {}, {}, {})
    second = cpu_layout.allocate(topo, cfg, lay, {"share": previous + grow}, {}, {}, first.pools)
    assert first.pools["share"] <= second.pools["share"]


def test_invalid_pods_are_left_out_of_the_managed_set() -> None:
    good = parse_pod(
        {
            "metadata": {"name": "a", "namespace": "d", "uid": "u1"},
            "spec": {"containers": [{"name": "c"}]},
        }
    )
    bad = parse_pod(
        {
            "metadata": {
                "name": "b",
                "namespace": "d",
                "uid": "u2",
                "annotations": {names.QOS_LEVEL_ANNOTATION: "gold_cores"},
            },
            "spec": {"containers": [{"name": "c"}]},
        }
    )
    assert bad.error is not None
    assert cpu_layout.classify({"u1": good, "u2": bad}) == {"u1": good}


def dedicated_pod(main: str | None = None) -> dict[str, object]:
    def container(name: str, cpu: str, mem: str) -> dict[str, object]:
        res = {"cpu": cpu, "memory": mem}
        return {"name": name, "resources": {"requests": res, "limits": res}}

    ann = {
        names.QOS_LEVEL_ANNOTATION: names.QOS_DEDICATED_CORES,
        names.MEMORY_ENHANCEMENT_ANNOTATION: '{"numa_binding": "true"}',
    }
    if main is not None:
        ann[names.MAIN_CONTAINER_ANNOTATION] = main
    return {
        "metadata": {"name": "d", "namespace": "n", "uid": "u", "annotations": ann},
        "spec": {
            "initContainers": [container("init", "8", "8Gi")],
            "containers": [container("app", "2", "2Gi"), container("proxy", "3", "1Gi")],
        },
    }


def test_a_dedicated_pod_is_sized_by_its_main_container() -> None:
    # Katalyst's cpu and memory plugins allocate the main container's request; sidecars
    # share its cpus and init containers get none
    req = cpu_layout.dedicated_request(parse_pod(dedicated_pod()))
    assert (req.cpus, req.memory) == (2, 2 * 2**30)
    req = cpu_layout.dedicated_request(parse_pod(dedicated_pod(main="proxy")))
    assert (req.cpus, req.memory) == (3, 2**30)
    req = cpu_layout.dedicated_request(parse_pod(dedicated_pod(main="nosuch")))
    assert req.cpus == 2  # a name matching no container falls back to the first


def test_a_periodic_stage_runs_at_most_once_per_period() -> None:
    node = EvictionNode()
    node.stage.period_s = 60
    ran: list[float] = []
    # A tick a hair short of the period (float drift of a virtual clock) counts as due.
    for t in (0, 30, 60 - 1e-9, 100, 121):
        node.clock.set(50_000 + t)
        plan = node.agent.reconcile()
        if any(isinstance(a, EvictionPlan) for a in plan.eviction_actions):
            ran.append(t)
        memory = node.agent.state.stage_memory[0]
        assert isinstance(memory, StageMemory) and memory.last_run == 50_000 + ran[-1]
    assert ran == [0, 60 - 1e-9, 121]
