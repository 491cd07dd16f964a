"""Deterministic cpu allocation over a machine topology.

Two policies, both pure functions of (topology, free cpus, count):

``take_by_topology`` -- packing, for exclusive (dedicated) cpus. It keeps the result on
as few NUMA nodes as it can and keeps untouched NUMA nodes and cores whole for later
requests:

1. If some NUMA node has at least ``remaining`` free cpus, finish there: pick the NUMA
   node with the *fewest* free cpus that can still hold the rest (best fit, so a partly
   used node is filled before a pristine one is broken into), ties going to a socket
   already used by this allocation, then to the lower NUMA id.
2. Otherwise the request spans nodes. If a socket is entirely free and no larger than
   what is left, take the whole socket (lowest id first). Failing that, take every free
   cpu of the NUMA node with the most free cpus (ties: a socket already used, then
   lower id), and go back to step 1 for the rest.

Inside the NUMA node chosen in step 1, whole free cores are taken (ascending core id)
while at least a core's worth remains; the last odd threads come first from cores that
are already partly used (fewest free threads, then lowest id), so a free core is split
only when nothing else is left.

``take_numa_balanced`` -- spreading, for the reserve and reclaim pools. It hands out one
unit at a time to the NUMA node that has received the fewest cpus so far (ties: the
lower NUMA id), where a unit is a whole free core while at least a core's worth is
still needed, otherwise a single thread (again preferring partly used cores). With
``reverse=True`` NUMA nodes and cores are visited from the highest id down, which keeps
such pools away from the low cpus most other pools start from.

``take_ht_numa_balanced`` -- Katalyst's reserve pool: one hyperthread per NUMA node in
turn (NUMA nodes in ascending order, each giving its lowest free cpu, or its highest with
``reverse=True``), so that every NUMA node gets a share of the system's cpus before any
node gives a second one.
"""

from __future__ import annotations

from collections.abc import Iterable

from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology

__all__ = [
    "AllocationError",
    "take_by_topology",
    "take_ht_numa_balanced",
    "take_numa_balanced",
    "take_within_numas",
]


class AllocationError(ValueError):
    """The requested number of cpus cannot be taken from what is free."""


def _check(topo: CPUTopology, available: CPUSet, n: int) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise AllocationError(f"cannot take {n!r} cpus: the count must be an integer >= 0")
    stray = available - topo.all_cpus
    if stray:
        raise AllocationError(f"cpus {stray} are not on this machine (cpus {topo.all_cpus})")
    if n > len(available):
        raise AllocationError(
            f"cannot take {n} cpus: only {len(available)} are free ({available or 'none'})"
        )


def _take_threads(topo: CPUTopology, free: CPUSet, n: int) -> CPUSet:
    """``n`` cpus from ``free`` within one locality: whole cores, then partial-core threads."""
    if n == 0:
        return CPUSet()
    whole: list[CPUSet] = []
    partial: list[CPUSet] = []
    for core in topo.cores_in(free):
        threads = topo.cpus_in_core(core)
        mine = threads & free
        (whole if mine == threads else partial).append(mine)
    taken = 0
    remaining = n
    for core_cpus in whole:
        size = len(core_cpus)
        if size > remaining:
            continue
        taken |= core_cpus.mask
        remaining -= size
        if remaining == 0:
            return CPUSet(taken)
    # Leftover threads: already-fragmented cores first, then split the fewest free cores.
    full = topo.threads_per_core
    leftovers = [c for c in partial if c] + [c for c in whole if not c.mask & taken]
    leftovers.sort(key=lambda c: (len(c) == full, len(c)))
    for core_cpus in leftovers:
        for cpu in core_cpus:
            taken |= 1 << cpu
            remaining -= 1
            if remaining == 0:
                return CPUSet(taken)
    raise AllocationError(f"cannot take {n} cpus from {free}")  # pragma: no cover - checked


def take_by_topology(topo: CPUTopology, available: CPUSet, n: int) -> CPUSet:
    """Pack ``n`` cpus from ``available`` onto as few NUMA nodes and cores as possible."""
    _check(topo, available, n)
    free = available
    result = CPUSet()
    used_sockets: set[int] = set()
    remaining = n
    while remaining > 0:
        free_by_numa = {numa: topo.cpus_in_numa(numa) & free for numa in topo.numa_nodes}
        fits = [numa for numa, cpus in free_by_numa.items() if len(cpus) >= remaining]
        if fits:
            numa = min(
                fits,
                key=lambda m: (
                    len(free_by_numa[m]),
                    topo.socket_of_numa(m) not in used_sockets,
                    m,
                ),
            )
            return result | _take_threads(topo, free_by_numa[numa], remaining)
        chunk: CPUSet | None = None
        for socket in topo.sockets:
            socket_cpus = topo.cpus_in_socket(socket)
            if len(socket_cpus) <= remaining and socket_cpus.issubset(free):
                chunk = socket_cpus
                used_sockets.add(socket)
                break
        if chunk is None:
            numa = min(
                (m for m, cpus in free_by_numa.items() if cpus),
                key=lambda m: (
                    -len(free_by_numa[m]),
                    topo.socket_of_numa(m) not in used_sockets,
                    m,
                ),
            )
            chunk = free_by_numa[numa]
            used_sockets.add(topo.socket_of_numa(numa))
        result |= chunk
        free -= chunk
        remaining -= len(chunk)
    return result


def take_within_numas(topo: CPUTopology, available: CPUSet, numas: Iterable[int], n: int) -> CPUSet:
    """``take_by_topology`` restricted to the given NUMA nodes (e.g. a NUMA-binding hint)."""
    allowed = CPUSet()
    numa_list = sorted(set(numas))
    for numa in numa_list:
        allowed |= topo.cpus_in_numa(numa)
    _check(topo, available, n)
    scoped = available & allowed
    if n > len(scoped):
        raise AllocationError(
            f"cannot take {n} cpus on NUMA nodes {numa_list}: only {len(scoped)} are free there"
            f" ({scoped or 'none'})"
        )
    return take_by_topology(topo, scoped, n)


def _split_cores(topo: CPUTopology, free: CPUSet, reverse: bool) -> tuple[list[int], list[int]]:
    """Masks of the wholly free cores and of the partly free ones, in visiting order."""
    whole: list[int] = []
    partial: list[int] = []
    for core in topo.cores_in(free):
        threads = topo.cpus_in_core(core).mask
        mine = threads & free.mask
        (whole if mine == threads else partial).append(mine)
    if reverse:
        whole.reverse()
        partial.reverse()
    return whole, partial


def _one_thread(mask: int, reverse: bool) -> int:
    return 1 << (mask.bit_length() - 1) if reverse else mask & -mask


def take_numa_balanced(
    topo: CPUTopology, available: CPUSet, n: int, *, reverse: bool = False
) -> CPUSet:
    """Spread ``n`` cpus from ``available`` evenly over NUMA nodes, whole cores first."""
    _check(topo, available, n)
    order = sorted(topo.numa_nodes, reverse=reverse)
    whole: dict[int, list[int]] = {}
    partial: dict[int, list[int]] = {}
    for numa in order:
        w, p = _split_cores(topo, topo.cpus_in_numa(numa) & available, reverse)
        whole[numa] = w[::-1]  # popped from the end
        partial[numa] = sorted(p, key=int.bit_count, reverse=True)  # fewest free at the end
    given = dict.fromkeys(order, 0)
    rank = {numa: i for i, numa in enumerate(order)}
    result = 0
    remaining = n
    while remaining > 0:
        numa = min(
            (m for m in order if whole[m] or partial[m]),
            key=lambda m: (given[m], rank[m]),
        )
        cores, parts = whole[numa], partial[numa]
        if cores and cores[-1].bit_count() <= remaining:
            unit = cores.pop()
        elif parts:
            rest = parts.pop()
            unit = _one_thread(rest, reverse)
            if rest != unit:
                parts.append(rest ^ unit)
                parts.sort(key=int.bit_count, reverse=True)
        else:
            # Nothing fragmented is left here: split the next free core.
            core = cores.pop()
            unit = _one_thread(core, reverse)
            parts.append(core ^ unit)
        result |= unit
        count = unit.bit_count()
        given[numa] += count
        remaining -= count
    return CPUSet(result)


def take_ht_numa_balanced(
    topo: CPUTopology, available: CPUSet, n: int, *, reverse: bool = False
) -> CPUSet:
    """``n`` cpus from ``available``, one hyperthread per NUMA node in turn."""
    _check(topo, available, n)
    queues = []
    for numa in topo.numa_nodes:
        local = list(topo.cpus_in_numa(numa) & available)
        queues.append(local[::-1] if reverse else local)
    taken: list[int] = []
    while len(taken) < n:
        for queue in queues:
            if queue and len(taken) < n:
                taken.append(queue.pop(0))
    return CPUSet.of(taken)
