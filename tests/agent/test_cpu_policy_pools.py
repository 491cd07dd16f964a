"""The dynamic cpu policy: reserve, dedicated NUMA binding, pool cpusets that move little."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.agent import cpu_policy
from pykatalyst.agent.config import CpuPolicyConfig
from pykatalyst.agent.cpu_policy import (
    DedicatedAssignment,
    DedicatedRequest,
    SnbRequest,
    assign_pools,
    fit_reclaim_reserve,
    layout,
    numa_hints,
    place_dedicated,
    place_snb,
    reclaim_minimum,
    reserve_cpus,
)
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology

TOPO = CPUTopology.synthetic(sockets=2, cores_per_socket=12, threads_per_core=2)
# 2 sockets x 2 NUMA nodes each, 4 cores per NUMA node
QUAD = CPUTopology.synthetic(sockets=2, cores_per_socket=8, threads_per_core=2, numa_per_socket=2)


def test_reserve_count_is_a_hyperthread_per_numa_in_turn() -> None:
    cpus = reserve_cpus(TOPO, CpuPolicyConfig(reserved_cpus=4))
    assert len(cpus) == 4
    per_numa = [len(cpus & TOPO.cpus_in_numa(n)) for n in TOPO.numa_nodes]
    assert per_numa == [2, 2]
    quad = reserve_cpus(QUAD, CpuPolicyConfig(reserved_cpus=4))
    assert [len(quad & QUAD.cpus_in_numa(n)) for n in QUAD.numa_nodes] == [1, 1, 1, 1]


def test_reserve_list_and_reversed_reserve() -> None:
    assert reserve_cpus(TOPO, CpuPolicyConfig(reserved_cpu_list="0-1")) == CPUSet.parse("0-1")
    high = reserve_cpus(TOPO, CpuPolicyConfig(reserved_cpus=2, reserve_cpus_reversely=True))
    low = reserve_cpus(TOPO, CpuPolicyConfig(reserved_cpus=2))
    assert max(high) > max(low)


def test_exclusive_pod_needs_a_wholly_free_numa_node() -> None:
    req = DedicatedRequest("a", "ns/a", cpus=2, exclusive=True)
    avail = {n: TOPO.cpus_in_numa(n) for n in TOPO.numa_nodes}
    assert numa_hints(TOPO, req, avail, frozenset({0})) == [(1,)]
    assert numa_hints(TOPO, req, avail, frozenset({0, 1})) == []


def test_non_exclusive_pod_must_fit_one_numa_unless_it_asks_for_more() -> None:
    avail = {n: TOPO.cpus_in_numa(n) for n in TOPO.numa_nodes}
    big = DedicatedRequest("a", "ns/a", cpus=30)
    assert numa_hints(TOPO, big, avail, frozenset()) == []
    two = DedicatedRequest("a", "ns/a", cpus=30, numa_number=2)
    assert numa_hints(TOPO, two, avail, frozenset()) == [(0, 1)]


def test_hints_do_not_cross_sockets_when_a_socket_would_do() -> None:
    avail = {n: QUAD.cpus_in_numa(n) for n in QUAD.numa_nodes}
    req = DedicatedRequest("a", "ns/a", cpus=12, exclusive=True)
    hints = numa_hints(QUAD, req, avail, frozenset())
    # preferred first: the fewest NUMA nodes; among those, none crosses a socket
    assert hints[0] == (0, 1)
    pairs = [h for h in hints if len(h) == 2]
    assert pairs == [(0, 1), (2, 3)]


def test_numa_ids_pin_the_hint() -> None:
    avail = {n: TOPO.cpus_in_numa(n) for n in TOPO.numa_nodes}
    req = DedicatedRequest("a", "ns/a", cpus=2, numa_ids=(1,))
    assert numa_hints(TOPO, req, avail, frozenset()) == [(1,)]


def test_dedicated_cpus_are_numa_aligned_exclusive_and_sticky() -> None:
    reqs = [
        DedicatedRequest("a", "ns/a", cpus=4),
        DedicatedRequest("b", "ns/b", cpus=4),
        DedicatedRequest("x", "ns/x", cpus=2, exclusive=True),
    ]
    got, failed = place_dedicated(TOPO, CPUSet(), reqs, {}, min_left=4)
    assert not failed
    assert got["a"].cpuset.isdisjoint(got["b"].cpuset)
    for a in got.values():
        assert len(a.numas) == 1
        assert a.cpuset.issubset(TOPO.cpus_in_numa(a.numas[0]))
    # the exclusive pod owns a whole NUMA node nobody else uses
    x = got["x"]
    assert x.cpuset == TOPO.cpus_in_numa(x.numas[0])
    assert all(x.numas[0] not in got[u].numas for u in ("a", "b"))
    # placed again with the same requests in another order: nothing moves
    again, _ = place_dedicated(TOPO, CPUSet(), list(reversed(reqs)), got, min_left=4)
    assert again == got


def test_dedicated_placement_leaves_the_reclaim_minimum() -> None:
    reqs = [
        DedicatedRequest("x", "ns/x", cpus=2, exclusive=True),
        DedicatedRequest("y", "ns/y", cpus=2, exclusive=True),
    ]
    got, failed = place_dedicated(TOPO, CPUSet(), reqs, {}, min_left=4)
    assert set(got) == {"x"}
    assert "y" in failed


def test_layout_keeps_share_pools_off_numa_bound_nodes() -> None:
    cfg = CpuPolicyConfig()
    lay = layout(TOPO, cfg, [DedicatedRequest("a", "ns/a", cpus=4)], {}, 4)
    bound = lay.bound_numas[0]
    assert lay.share_domain.isdisjoint(TOPO.cpus_in_numa(bound))
    assert lay.bound_leftover == TOPO.cpus_in_numa(bound) - lay.dedicated["a"].cpuset
    # a pod that left releases its cpus
    lay2 = layout(TOPO, cfg, [], lay.dedicated, 4)
    assert not lay2.dedicated and lay2.share_domain == TOPO.all_cpus


def test_reclaim_reserve_gives_way_to_one_cpu_per_pool() -> None:
    assert fit_reclaim_reserve(48, 4, 1) == 4
    assert fit_reclaim_reserve(2, 2, 1) == 1
    assert fit_reclaim_reserve(2, 2, 3) == 0


sizes_st = st.dictionaries(
    st.sampled_from(["share", "flink", "web"]), st.integers(min_value=0, max_value=16), min_size=1
)


@settings(max_examples=60, deadline=None)
@given(before=sizes_st, after=sizes_st, reserved=st.integers(min_value=0, max_value=8))
def test_pool_cpusets_are_disjoint_sized_and_move_little(
    before: dict[str, int], after: dict[str, int], reserved: int
) -> None:
    domain = TOPO.all_cpus - reserve_cpus(TOPO, CpuPolicyConfig(reserved_cpus=reserved))
    first = assign_pools(TOPO, domain, before, {})
    second = assign_pools(TOPO, domain, after, first)
    for result, sizes in ((first, before), (second, after)):
        seen = CPUSet()
        for cpus in result.values():
            assert cpus.issubset(domain)
            assert cpus.isdisjoint(seen)
            seen = seen | cpus
        assert sum(len(c) for c in result.values()) == min(sum(sizes.values()), len(domain))
    # a pool that fits keeps min(old, new) of its cpus: resizing moves only the difference
    if sum(after.values()) <= len(domain):
        for name, size in after.items():
            kept = len(second[name] & first.get(name, CPUSet()))
            assert kept == min(len(first.get(name, CPUSet())), size)
    # deterministic
    assert assign_pools(TOPO, domain, after, first) == second


def _shrink_by_rescan(topo: CPUTopology, cpus: CPUSet, n: int) -> CPUSet:
    """The pool-edge rule written plainly (every pick recounts and re-sorts the pool): the
    reference the incremental `_shrink` must match cpu for cpu."""
    if n <= 0:
        return CPUSet()
    members = set(cpus)
    while len(members) > n:
        per_numa: dict[int, int] = {}
        for c in members:
            per_numa[topo.numa_of(c)] = per_numa.get(topo.numa_of(c), 0) + 1
        biggest = max(per_numa.values())
        candidates = [c for c in members if per_numa[topo.numa_of(c)] == biggest]

        def lone(c: int) -> bool:
            return all(s == c or s not in members for s in topo.siblings(c))

        candidates.sort(key=lambda c: (not lone(c), -c))
        members.discard(candidates[0])
    return CPUSet.of(members)


def _grow_by_rescan(topo: CPUTopology, cpus: CPUSet, free: CPUSet, need: int) -> CPUSet:
    """The growth rule written plainly, the reference for the incremental `_grow`."""
    members, avail, added = set(cpus), set(free), set()
    while len(added) < need and avail:
        pick = next((s for c in sorted(members) for s in topo.siblings(c) if s in avail), None)
        if pick is None:
            per_numa = {numa: 0 for numa in topo.numa_nodes}
            for c in members:
                per_numa[topo.numa_of(c)] += 1
            numa = min(sorted({topo.numa_of(c) for c in avail}), key=lambda x: (per_numa[x], x))
            local = sorted(c for c in avail if topo.numa_of(c) == numa)
            whole = [c for c in local if all(s in avail for s in topo.siblings(c))]
            pick = (whole or local)[0]
        members.add(pick)
        added.add(pick)
        avail.discard(pick)
    return CPUSet.of(added)


@settings(max_examples=200, deadline=None)
@given(
    topo=st.sampled_from([TOPO, QUAD]),
    data=st.data(),
)
def test_pool_edges_move_cpu_for_cpu_as_the_plain_rule_says(
    topo: CPUTopology, data: st.DataObject
) -> None:
    cpus = sorted(topo.all_cpus)

    # pools and free cpus of whole cores and of lone threads, so both rules' cases come up
    def cpusets(label: str) -> CPUSet:
        cores = data.draw(st.sets(st.sampled_from(cpus)), f"{label} cores")
        lone = data.draw(st.sets(st.sampled_from(cpus)), f"{label} threads")
        return CPUSet.of(lone).union(*(topo.siblings(c) for c in cores))

    pool = cpusets("pool")
    free = cpusets("free") - pool
    n = data.draw(st.integers(min_value=-1, max_value=len(cpus)), "n")
    assert cpu_policy._shrink(topo, pool, n) == _shrink_by_rescan(topo, pool, n)
    need = data.draw(st.integers(min_value=0, max_value=len(cpus)), "need")
    assert cpu_policy._grow(topo, pool, free, need) == _grow_by_rescan(topo, pool, free, need)


def test_pools_grow_by_siblings_and_stay_numa_balanced() -> None:
    four = assign_pools(TOPO, TOPO.all_cpus, {"share": 4}, {})
    for c in four["share"]:
        assert TOPO.siblings(c).issubset(four["share"])
    per_numa = [len(four["share"] & TOPO.cpus_in_numa(n)) for n in TOPO.numa_nodes]
    assert per_numa == [2, 2]


def test_assignment_value_is_immutable_record() -> None:
    a = DedicatedAssignment("u", CPUSet.parse("1-2"), (0,), False)
    assert a.cpuset == CPUSet.parse("1-2")


def test_snb_pods_spread_keep_their_node_and_leave_one_node_unbound() -> None:
    reqs = [SnbRequest("a", "ns/a", 2.0), SnbRequest("b", "ns/b", 2.0)]
    got, failed = place_snb(QUAD, CPUSet(), {}, reqs, {})
    assert not failed
    assert got["a"] != got["b"]  # spreading over the 4 NUMA nodes
    again, _ = place_snb(QUAD, CPUSet(), {}, list(reversed(reqs)), got)
    assert again == got
    # on two nodes, the second pod joins the first rather than binding the last free node
    two, _ = place_snb(TOPO, CPUSet(), {}, reqs, {})
    assert two["a"] == two["b"]


def test_snb_pods_avoid_exclusive_nodes_and_need_room_for_twice_their_request() -> None:
    excl = DedicatedAssignment("x", QUAD.cpus_in_numa(0), (0,), True)
    got, _ = place_snb(QUAD, CPUSet(), {"x": excl}, [SnbRequest("a", "ns/a", 2.0)], {})
    assert got == {"a": 1}
    # with two nodes, binding the only node left without bound pods is refused
    excl2 = DedicatedAssignment("x", TOPO.cpus_in_numa(0), (0,), True)
    got, failed = place_snb(TOPO, CPUSet(), {"x": excl2}, [SnbRequest("a", "ns/a", 2.0)], {})
    assert not got and "a" in failed
    got, failed = place_snb(TOPO, CPUSet(), {}, [SnbRequest("big", "ns/big", 13.0)], {})
    assert not got and "big" in failed  # 26 > 24 cpus of a node


def test_layout_with_snb_binds_the_node_and_keeps_its_reclaim_share() -> None:
    lay = layout(TOPO, CpuPolicyConfig(), [], {}, 4, [SnbRequest("a", "ns/a", 2.0)], {})
    n = lay.snb["a"]
    assert lay.bound_numas == (n,)
    assert lay.share_domain == TOPO.cpus_in_numa(1 - n)
    assert lay.snb_reserved_for_reclaim == {n: 2}
    assert lay.reserved_for_reclaim == 2


def test_a_reclaim_minimum_of_zero_lets_the_share_pools_have_every_cpu() -> None:
    small = CPUTopology.synthetic(sockets=1, cores_per_socket=2, threads_per_core=1)
    assert reclaim_minimum(small, CpuPolicyConfig(), 4.0) == 4  # Katalyst's defaults
    # one of the two at 0 keeps a reclaim cpu per NUMA node
    assert reclaim_minimum(small, CpuPolicyConfig(min_reclaim_pool_cpus=0), 0.5) == 1
    assert reclaim_minimum(QUAD, CpuPolicyConfig(min_reclaim_pool_cpus=1), 0.0) == 4
    zero = CpuPolicyConfig(min_reclaim_pool_cpus=0)
    assert reclaim_minimum(small, zero, 0.0) == 0
    lay = layout(small, zero, [], {}, 0)
    assert lay.reserved_for_reclaim == 0 and lay.share_domain == small.all_cpus
    assert layout(small, CpuPolicyConfig(), [], {}, 1).reserved_for_reclaim == 1
