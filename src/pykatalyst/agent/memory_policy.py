"""Katalyst's dynamic memory policy: cpuset.mems and memory limits.

- NUMA-bound pods (dedicated_cores with numa_binding) allocate memory only on their NUMA
  nodes, so their cpus and memory stay together.
- Everyone else gets the NUMA nodes that hold no NUMA-bound pod, so that a reclaimed or
  shared pod's memory does not crowd a bound pod's node (all nodes when every node is bound).
- A reclaimed pod is held to the reclaimed_memory it asked for: the kubelet does not know
  that extended resource, so nothing else would limit it.
- Memory reserved for the system is spread over the NUMA nodes (`reserved_memory_per_numa`)
  and left out of what each NUMA zone offers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from pykatalyst.agent.advisor import MemoryUser
from pykatalyst.api import names
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology


def unbound_mems(topo: CPUTopology, bound_numas: Iterable[int]) -> CPUSet:
    """NUMA nodes without NUMA-bound pods (cpuset.mems of pods that are not bound)."""
    bound = set(bound_numas)
    free = [n for n in topo.numa_nodes if n not in bound]
    return CPUSet.of(free or topo.numa_nodes)


def bound_mems(numas: Iterable[int]) -> CPUSet:
    return CPUSet.of(numas)


def reclaimed_memory_limit(reclaimed_memory_request: int) -> int | None:
    """A reclaimed pod's memory limit: its reclaimed_memory (None when it asked for none)."""
    return reclaimed_memory_request if reclaimed_memory_request > 0 else None


def memory_user(
    level: str,
    request: int,
    usage: Mapping[str, int | None] | None,
    exclusive_memory: int | None = None,
) -> MemoryUser | None:
    """The headroom formula's view of a pod; reclaimed pods do not count against headroom.

    `exclusive_memory` is the memory of the NUMA nodes a numa_exclusive pod holds.
    """
    if level == names.QOS_RECLAIMED_CORES:
        return None
    if usage is None:
        return MemoryUser(level, request, None, None, None, exclusive_memory)
    return MemoryUser(
        level,
        request,
        usage.get("rss"),
        usage.get("cache"),
        usage.get("shmem"),
        exclusive_memory,
    )


def exclusive_memory(topo: CPUTopology, numas: Iterable[int]) -> int | None:
    """The memory of the NUMA nodes a numa_exclusive pod holds (None when unknown)."""
    if not topo.memory_per_numa:
        return None
    return sum(topo.memory_of_numa(n) for n in numas)


GIB = 1024**3


def reserved_memory_per_numa(reserved_bytes: int, numas: Iterable[int]) -> dict[int, int]:
    """Katalyst's memory reserve per NUMA node: the reserve in GiB, ceil(GiB / #NUMA) GiB on
    each node (so the whole reserve is never less than asked)."""
    ids = sorted(numas)
    if not ids or reserved_bytes <= 0:
        return dict.fromkeys(ids, 0)
    per_numa = math.ceil(reserved_bytes / GIB / len(ids) - 1e-12) * GIB
    return dict.fromkeys(ids, per_numa)
