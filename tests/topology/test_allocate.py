"""Allocation results a user would see in cpusets: packed, whole-core, NUMA-aware."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.topology.allocate import (
    AllocationError,
    take_by_topology,
    take_numa_balanced,
    take_within_numas,
)
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology

SERVER = CPUTopology.synthetic(sockets=2, cores_per_socket=24, threads_per_core=2)
FOUR_NUMA = CPUTopology.synthetic(
    sockets=2, cores_per_socket=8, threads_per_core=2, numa_per_socket=2
)


def split_cores(topo: CPUTopology, available: CPUSet, result: CPUSet) -> list[int]:
    """Cores that were wholly free before but are only partly taken now."""
    return [
        core
        for core in topo.cores_in(result)
        if topo.cpus_in_core(core).issubset(available)
        and not topo.cpus_in_core(core).issubset(result)
    ]


def test_whole_socket_for_a_socket_sized_request() -> None:
    assert take_by_topology(SERVER, SERVER.all_cpus, 48) == SERVER.cpus_in_socket(0)


def test_request_that_fits_one_numa_stays_there_and_uses_whole_cores() -> None:
    got = take_by_topology(FOUR_NUMA, FOUR_NUMA.all_cpus, 6)
    assert len(FOUR_NUMA.numas_of(got)) == 1
    assert split_cores(FOUR_NUMA, FOUR_NUMA.all_cpus, got) == []


def test_partly_used_numa_is_filled_before_a_pristine_one() -> None:
    available = SERVER.all_cpus - CPUSet.parse("0")  # cpu 0 belongs to a pod
    got = take_by_topology(SERVER, available, 4)
    assert SERVER.numas_of(got) == [0]
    assert 48 not in got  # the lone sibling stays for odd requests; even ones take whole cores
    odd = take_by_topology(SERVER, available, 3)
    assert 48 in odd  # the fragment is used up first
    assert split_cores(SERVER, available, odd) == []


def test_spanning_request_takes_whole_numa_then_best_fit_on_the_same_socket() -> None:
    got = take_by_topology(FOUR_NUMA, FOUR_NUMA.all_cpus, 10)
    assert got.issuperset(FOUR_NUMA.cpus_in_numa(0))
    assert FOUR_NUMA.numas_of(got) == [0, 1]


def test_allocation_errors_are_clear() -> None:
    with pytest.raises(AllocationError, match="cannot take 5 cpus: only 4 are free"):
        take_by_topology(SERVER, CPUSet.parse("0-3"), 5)
    with pytest.raises(AllocationError, match="integer >= 0"):
        take_by_topology(SERVER, SERVER.all_cpus, -1)
    with pytest.raises(AllocationError, match="not on this machine"):
        take_by_topology(SERVER, CPUSet.parse("200"), 1)
    with pytest.raises(AllocationError, match=r"on NUMA nodes \[1\]: only 2 are free"):
        take_within_numas(SERVER, CPUSet.parse("0-3,24-25"), [1], 3)
    with pytest.raises(AllocationError, match="only 0 are free"):
        take_numa_balanced(SERVER, CPUSet(), 1)


def test_take_within_numas_honours_the_hint() -> None:
    got = take_within_numas(FOUR_NUMA, FOUR_NUMA.all_cpus, [2, 3], 10)
    assert got.issubset(FOUR_NUMA.cpus_in_numa(2) | FOUR_NUMA.cpus_in_numa(3))
    assert len(got) == 10


def test_balanced_spreads_whole_cores_over_numa_nodes() -> None:
    got = take_numa_balanced(FOUR_NUMA, FOUR_NUMA.all_cpus, 8)
    for numa in FOUR_NUMA.numa_nodes:
        assert len(got & FOUR_NUMA.cpus_in_numa(numa)) == 2
    assert split_cores(FOUR_NUMA, FOUR_NUMA.all_cpus, got) == []
    low = take_numa_balanced(FOUR_NUMA, FOUR_NUMA.all_cpus, 4)
    high = take_numa_balanced(FOUR_NUMA, FOUR_NUMA.all_cpus, 4, reverse=True)
    assert low.min() == 0 and high.max() == FOUR_NUMA.all_cpus.max()
    assert FOUR_NUMA.numas_of(low) == [0, 1]
    assert FOUR_NUMA.numas_of(high) == [2, 3]


# -- properties --------------------------------------------------------------------


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[CPUTopology, CPUSet, int]:
    numa_per_socket = draw(st.sampled_from([1, 2]))
    topo = CPUTopology.synthetic(
        sockets=draw(st.integers(1, 2)),
        cores_per_socket=numa_per_socket * draw(st.integers(1, 4)),
        threads_per_core=draw(st.integers(1, 2)),
        numa_per_socket=numa_per_socket,
    )
    whole_cores = draw(st.booleans())
    if whole_cores:
        chosen = draw(st.lists(st.sampled_from(topo.cores), unique=True))
        available = CPUSet().union(*(topo.cpus_in_core(c) for c in chosen))
    else:
        mask = draw(st.integers(0, (1 << topo.num_cpus) - 1))
        available = CPUSet(mask)
    n = draw(st.integers(0, len(available)))
    return topo, available, n


@settings(max_examples=150)
@given(scenarios())
def test_take_by_topology_properties(case: tuple[CPUTopology, CPUSet, int]) -> None:
    topo, available, n = case
    got = take_by_topology(topo, available, n)
    assert got.issubset(available)
    assert len(got) == n
    assert take_by_topology(topo, available, n) == got
    if any(len(topo.cpus_in_numa(m) & available) >= n for m in topo.numa_nodes) and n:
        assert len(topo.numas_of(got)) == 1
    whole_only = all(topo.cpus_in_core(c).issubset(available) for c in topo.cores_in(available))
    if whole_only and n % topo.threads_per_core == 0:
        assert split_cores(topo, available, got) == []
    with pytest.raises(AllocationError):
        take_by_topology(topo, available, len(available) + 1)


@settings(max_examples=150)
@given(scenarios())
def test_take_numa_balanced_properties(case: tuple[CPUTopology, CPUSet, int]) -> None:
    topo, available, n = case
    for reverse in (False, True):
        got = take_numa_balanced(topo, available, n, reverse=reverse)
        assert got.issubset(available)
        assert len(got) == n
        assert take_numa_balanced(topo, available, n, reverse=reverse) == got
        counts = {m: len(got & topo.cpus_in_numa(m)) for m in topo.numa_nodes}
        for a in topo.numa_nodes:
            for b in topo.numa_nodes:
                if counts[a] + topo.threads_per_core < counts[b]:
                    # a NUMA node may only lag behind when it has nothing more to give
                    assert (topo.cpus_in_numa(a) & available).issubset(got)
        whole_only = all(topo.cpus_in_core(c).issubset(available) for c in topo.cores_in(available))
        if whole_only and n % topo.threads_per_core == 0:
            assert split_cores(topo, available, got) == []


@settings(max_examples=60)
@given(scenarios(), st.data())
def test_take_within_numas_properties(
    case: tuple[CPUTopology, CPUSet, int], data: st.DataObject
) -> None:
    topo, available, _ = case
    numas = data.draw(st.lists(st.sampled_from(topo.numa_nodes), min_size=1, unique=True))
    scope = CPUSet().union(*(topo.cpus_in_numa(m) for m in numas)) & available
    n = data.draw(st.integers(0, len(scope)))
    got = take_within_numas(topo, available, numas, n)
    assert got.issubset(scope)
    assert len(got) == n
