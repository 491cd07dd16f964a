"""The memory policy: cpuset.mems and reclaimed memory limits."""

from __future__ import annotations

from pykatalyst.agent.memory_policy import (
    bound_mems,
    memory_user,
    reclaimed_memory_limit,
    unbound_mems,
)
from pykatalyst.api import names
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology

QUAD = CPUTopology.synthetic(2, 8, 2, numa_per_socket=2)


def test_unbound_pods_avoid_numa_nodes_holding_bound_pods() -> None:
    assert unbound_mems(QUAD, []) == CPUSet.parse("0-3")
    assert unbound_mems(QUAD, [1, 2]) == CPUSet.parse("0,3")


def test_when_every_node_is_bound_unbound_pods_may_use_all() -> None:
    assert unbound_mems(QUAD, [0, 1, 2, 3]) == CPUSet.parse("0-3")


def test_bound_pods_use_their_numa_nodes() -> None:
    assert bound_mems((2, 3)) == CPUSet.parse("2-3")


def test_reclaimed_limit_comes_from_reclaimed_memory() -> None:
    assert reclaimed_memory_limit(1 << 30) == 1 << 30
    assert reclaimed_memory_limit(0) is None


def test_reclaimed_pods_do_not_count_against_memory_headroom() -> None:
    assert memory_user(names.QOS_RECLAIMED_CORES, 0, {"rss": 10}) is None
    u = memory_user(names.QOS_SHARED_CORES, 5, None)
    assert u is not None and u.rss is None and u.request == 5
