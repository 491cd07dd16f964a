"""Whatever pods come and go, the agent's plan keeps its promises."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pykatalyst.agent.agent import UNMANAGED
from pykatalyst.api import names
from pykatalyst.topology.cpuset import CPUSet
from tests.agent.test_agent_loop import Node

BIND = '{"numa_binding": "true"}'
EXCL = '{"numa_binding": "true", "numa_exclusive": "true"}'

pod_st = st.one_of(
    st.fixed_dictionaries(
        {"level": st.just("shared_cores"), "cpu": st.sampled_from(["500m", "1", "2", "4"])}
    ),
    st.fixed_dictionaries(
        {
            "level": st.just("shared_cores"),
            "cpu": st.sampled_from(["1", "2"]),
            "annotations": st.just({names.MEMORY_ENHANCEMENT_ANNOTATION: BIND}),
        }
    ),
    st.fixed_dictionaries(
        {
            "level": st.just("reclaimed_cores"),
            "cpu": st.none(),
            "memory": st.none(),
            "reclaimed_cpu": st.sampled_from(["1k", "4k"]),
        }
    ),
    st.fixed_dictionaries(
        {
            "level": st.just("dedicated_cores"),
            "cpu": st.sampled_from(["1", "2", "8"]),
            "annotations": st.sampled_from(
                [
                    {names.MEMORY_ENHANCEMENT_ANNOTATION: BIND},
                    {names.MEMORY_ENHANCEMENT_ANNOTATION: EXCL},
                ]
            ),
        }
    ),
    st.fixed_dictionaries({"level": st.just("system_cores"), "cpu": st.just("100m")}),
    st.fixed_dictionaries({"level": st.just("platinum_cores")}),
)
step_st = st.tuples(
    st.sampled_from(["add", "add", "remove", "load", "wait"]),
    pod_st,
    st.floats(min_value=0, max_value=12),
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(steps=st.lists(step_st, min_size=1, max_size=14))
def test_plans_keep_pools_disjoint_dedicated_exclusive_and_reclaim_alive(
    steps: list[tuple[str, dict[str, Any], float]],
) -> None:
    n = Node()
    live: list[tuple[str, str]] = []
    for i, (op, kw, load) in enumerate(steps):
        if op == "add" or not live:
            name = f"p{i}"
            uid = n.pod(name, **kw)
            live.append((name, uid))
        elif op == "remove":
            name, uid = live.pop(int(load) % len(live))
            n.cluster.delete(names.POD, name, "default", grace_period_seconds=0)
            n.host.remove_pod(uid)
        elif op == "load":
            _, uid = live[int(load) % len(live)]
            n.host.set_load(uid, load)
        plan = n.run(15)
        check(plan, n)


def check(plan: Any, n: Node) -> None:
    topo = n.host.topology()
    seen = CPUSet()
    reclaim = plan.pool(names.POOL_RECLAIM)
    assert reclaim is not None and len(reclaim.cpuset) >= 1
    for pool in plan.pools:
        if pool.name == names.POOL_RECLAIM:
            continue
        assert pool.cpuset, f"empty pool {pool.name}"
        assert pool.cpuset.isdisjoint(seen)
        seen = seen | pool.cpuset
    dedicated = [p for p in plan.pods if p.pool == names.POOL_DEDICATED]
    # a dedicated region lends reclaimed pods the idle cpus of an exclusive pod, no more
    regions = reclaim.terms.get("regions", {})
    lent = CPUSet().union(
        *(CPUSet.parse(t["cpus"]) for k, t in regions.items() if k.startswith("dedicated-"))
    )
    for d in dedicated:
        for other in plan.pods:
            if other.uid != d.uid and other.pool != UNMANAGED:
                shared = other.cpuset & d.cpuset
                if other.qos_level == names.QOS_RECLAIMED_CORES:
                    assert shared <= lent, (other.key, d.key)
                else:
                    assert not shared, (other.key, d.key)
        assert d.cpuset.issubset(CPUSet().union(*(topo.cpus_in_numa(x) for x in d.numa_nodes)))
    for p in plan.pods:
        if p.pool != UNMANAGED:
            assert p.cpuset and p.mems
    assert plan.reclaimed_cpu.value >= 0 and plan.reclaimed_memory.value >= 0
    if plan.reclaimed_cpu.reported is not None:
        assert plan.reclaimed_cpu.reported >= 0
    # what the machine has is what the plan says
    for cgroup, knobs in plan.desired.items():
        for knob, value in knobs.items():
            assert n.host.knobs[cgroup][knob] == value
