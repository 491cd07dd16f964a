"""Dedicated regions, partial overlap and isolation pools, through the agent's loop."""

from __future__ import annotations

from typing import Any

from pykatalyst.agent.regions import isolation_pool_name
from pykatalyst.api import names
from pykatalyst.topology.cpuset import CPUSet
from tests.agent.test_agent_loop import TOPO, Node, cpuset

EXCLUSIVE = {
    names.MEMORY_ENHANCEMENT_ANNOTATION: '{"numa_binding": "true", "numa_exclusive": "true"}'
}
RECLAIMED: dict[str, Any] = {
    "level": "reclaimed_cores",
    "cpu": None,
    "memory": None,
    "reclaimed_cpu": "2k",
}


def _dedicated_world(cfg: dict[str, Any] | None = None) -> tuple[Node, str, str, str]:
    n = Node(cfg)
    web = n.pod("web", cpu="2")
    batch = n.pod("batch", **RECLAIMED)
    db = n.pod("db", level="dedicated_cores", cpu="4", memory="1Gi", annotations=EXCLUSIVE)
    n.host.set_load(db, 2.0)
    return n, web, batch, db


def _region(plan: Any) -> tuple[str, dict[str, Any]]:
    reclaim = plan.pool(names.POOL_RECLAIM)
    assert reclaim is not None
    (item,) = [(k, t) for k, t in reclaim.terms["regions"].items() if k.startswith("dedicated-")]
    return item


def test_reclaimed_pods_use_the_idle_cpus_of_an_exclusive_dedicated_pod() -> None:
    n, web, batch, db = _dedicated_world()
    plan = n.run(90)
    mine = cpuset(n, db)
    numa = TOPO.numa_of(min(mine))
    assert mine == TOPO.cpus_in_numa(numa)  # exclusive: the whole node
    name, terms = _region(plan)
    assert name == f"dedicated-default/db-NUMA{numa}"
    lent = cpuset(n, batch) & mine
    # max(reservedForReclaim, available - requirement): the pod uses ~2 cores, needs 5
    requirement = terms["regulator"]["size"]
    assert len(lent) == terms["size"] == max(terms["reserved_for_reclaim"], 24 - requirement)
    assert CPUSet.parse(terms["cpus"]) == lent
    assert cpuset(n, web).isdisjoint(mine)  # shared pods never go there
    # and the node publishes that capacity: more than the reclaim pool alone holds
    reclaim = plan.pool(names.POOL_RECLAIM)
    assert reclaim is not None
    assert reclaim.cpuset == cpuset(n, batch)
    assert plan.reclaimed_cpu.value > len(CPUSet.parse(reclaim.terms["own_cpus"]))


def test_a_busier_dedicated_pod_lends_fewer_cpus() -> None:
    n, _, batch, db = _dedicated_world()
    n.run(90)
    before = len(cpuset(n, batch) & cpuset(n, db))
    n.host.set_load(db, 16.0)
    plan = n.run(120)
    after = len(cpuset(n, batch) & cpuset(n, db))
    _, terms = _region(plan)
    assert after < before
    assert after == terms["size"] >= terms["reserved_for_reclaim"]


def test_no_dedicated_region_without_sched_idle_or_without_reclaim() -> None:
    for cfg in ({"reclaimed_cpu_idle": False}, {"advisor": {"enable_reclaim": False}}):
        n, _, batch, db = _dedicated_world(cfg)
        plan = n.run(90)
        assert cpuset(n, batch).isdisjoint(cpuset(n, db)), cfg
        _, terms = _region(plan)
        assert terms["size"] == 0 and "reclaim" in terms


def test_a_noisy_shared_pod_gets_its_own_pool_and_goes_back_when_calm() -> None:
    n = Node({"advisor": {"isolation": {"enabled": True}}, "cpu": {"ramp_up_period_s": 0}})
    quiet = [n.pod(f"q{i}", cpu="2") for i in range(9)]
    noisy = n.pod("noisy", cpu="2")
    for q in quiet:
        n.host.set_load(q, 1.0)
    n.host.set_load(noisy, 8.0)  # 8 runnable threads > 1.5 x 2
    plan = n.run(5)  # two ticks: not yet
    assert plan.pool(isolation_pool_name(noisy)) is None
    plan = n.run(5)  # third tick over the threshold: locked in
    pool = plan.pool(isolation_pool_name(noisy))
    assert pool is not None and pool.size == 2  # max(limit, request)
    assert pool.terms["isolated"] is True
    share = plan.pool(names.POOL_SHARE)
    assert share is not None and share.cpuset.isdisjoint(pool.cpuset)
    assert cpuset(n, noisy) == pool.cpuset
    assert all(cpuset(n, q) == share.cpuset for q in quiet)
    # calm again: it stays isolated for the lock-out period (120 s), then goes back
    n.host.set_load(noisy, 1.0)
    plan = n.run(110)
    assert plan.pool(isolation_pool_name(noisy)) is not None
    plan = n.run(15)
    assert plan.pool(isolation_pool_name(noisy)) is None
    assert cpuset(n, noisy) == cpuset(n, quiet[0])


def test_isolation_is_off_by_default() -> None:
    n = Node({"cpu": {"ramp_up_period_s": 0}})
    pods = [n.pod(f"q{i}", cpu="2") for i in range(4)]
    n.host.set_load(pods[0], 20.0)
    plan = n.run(60)
    assert not [p for p in plan.pools if p.name.startswith("isolation")]
