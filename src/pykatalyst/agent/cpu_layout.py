"""The pure steps of the agent's tick: lay the machine out, then cut the pools.

Each function takes values and returns values (and the warnings it has for the plan);
`decide` (agent/decide.py) composes them with the advisor, which sizes the share pools in
between:

    layout (reserve, dedicated, NUMA-bound) -> advise (pool sizes) -> allocate (cpusets)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pykatalyst.agent import cpu_policy, kubelet_cpu, memory_policy, regions
from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.cpu_placement import CpuState
from pykatalyst.agent.cpu_policy import DedicatedAssignment, DedicatedRequest, Layout
from pykatalyst.agent.plan import PoolPlan
from pykatalyst.agent.pods import PodSpec
from pykatalyst.api import names
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology

SYSTEM_ALL_CPUS = "(all)"  # a system_cores pod without a cpuset_pool: every cpu but dedicated


@dataclass(frozen=True, slots=True)
class Allocation:
    """The share pools' cpusets and the reclaim pool's: `reclaim` is the reclaim pool's own
    cpus, `overlap` what regions lend it (share pools in overlap mode, dedicated regions),
    `reclaimed_cpus` where reclaimed pods run, and `reclaimed_size` the cores they may use
    in all when cpus are lent (None: the pool's own size)."""

    pools: Mapping[str, CPUSet]
    reclaim: CPUSet
    overlap: CPUSet = cpu_policy.EMPTY
    warnings: tuple[str, ...] = ()
    reclaimed_size: int | None = None
    regions: Mapping[str, Any] = field(default_factory=dict)

    @property
    def reclaimed_cpus(self) -> CPUSet:
        return self.reclaim | self.overlap

    @property
    def reclaimed_cores_size(self) -> int:
        return len(self.reclaim) if self.reclaimed_size is None else self.reclaimed_size


def classify(specs: Mapping[str, PodSpec]) -> dict[str, PodSpec]:
    """The pods the agent manages: those whose QoS annotations parse."""
    return {uid: s for uid, s in specs.items() if s.error is None}


def dedicated_request(s: PodSpec) -> DedicatedRequest:
    """As Katalyst's cpu and memory plugins size a dedicated pod: by its main container's
    request (its sidecars run on the main container's cpus; init containers get none)."""
    assert s.qos is not None
    e = s.qos.enhancements
    main = s.main_container
    cores = main.request_cores if main is not None else s.request_cores
    return DedicatedRequest(
        uid=s.uid,
        key=s.key,
        cpus=max(1, math.ceil(cores - 1e-9)),
        exclusive=e.numa_exclusive,
        numa_number=e.numa_number,
        numa_ids=e.numa_ids,
        align_by_socket=e.align_by_socket,
        distribute_evenly=e.distribute_evenly_across_numa,
        memory=main.memory_request if main is not None else s.memory_request,
    )


def _requests(
    valid: Mapping[str, PodSpec],
) -> tuple[list[DedicatedRequest], list[cpu_policy.SnbRequest]]:
    """Dedicated and NUMA-bound shared requests, oldest pod first."""
    dedicated = sorted(
        (dedicated_request(s) for s in valid.values() if s.level == names.QOS_DEDICATED_CORES),
        key=lambda r: valid[r.uid].created_key,
    )
    snb = sorted(
        (
            cpu_policy.SnbRequest(
                s.uid,
                s.key,
                s.request_cores,
                s.qos.enhancements.numa_ids if s.qos else None,
                s.memory_request,
            )
            for s in valid.values()
            if s.level == names.QOS_SHARED_CORES and s.qos is not None and s.qos.numa_binding
        ),
        key=lambda r: valid[r.uid].created_key,
    )
    return dedicated, snb


def layout(
    topo: CPUTopology,
    cfg: AgentConfig,
    valid: Mapping[str, PodSpec],
    placement: CpuState,
    pins: kubelet_cpu.KubeletPins | None,
) -> tuple[Layout, list[str]]:
    """The static cut (reserve, dedicated cpus, NUMA-bound pods), keeping what `placement`
    holds; cpus the kubelet pinned are its own. A reserve that cannot be honoured is
    dropped, with a warning, rather than leaving the node without a layout."""
    dedicated_reqs, snb_reqs = _requests(valid)
    reclaim_min = cpu_policy.reclaim_minimum(
        topo, cfg.cpu, cfg.advisor.min_reclaimed_for_allocate_cpu
    )
    previous: Mapping[str, DedicatedAssignment] = placement.dedicated
    foreign, kex = CPUSet(), CPUSet()
    if pins is not None:
        previous, foreign = kubelet_cpu.kubelet_previous(topo, pins, dedicated_reqs, previous)
        kex = pins.exclusive

    def cut(cpu: Any) -> Layout:
        return cpu_policy.layout(
            topo,
            cpu,
            dedicated_reqs,
            previous,
            reclaim_min,
            snb_reqs,
            placement.snb,
            foreign=foreign,
            kubelet_exclusive=kex,
        )

    try:
        return cut(cfg.cpu), []
    except cpu_policy.CpuPolicyError as exc:
        warning = f"cpu policy: {exc}; running without a reserve pool"
        return cut(cfg.cpu.model_copy(update={"reserved_cpus": 0, "reserved_cpu_list": None})), [
            warning
        ]


def allocate(
    topo: CPUTopology,
    cfg: AgentConfig,
    lay: Layout,
    sizes: Mapping[str, int],
    snb_sizes: Mapping[int, Mapping[str, int]],
    snb_domains: Mapping[int, CPUSet],
    previous: Mapping[str, CPUSet],
) -> Allocation:
    """Give each share pool its cpus (keeping those it had where it can), and the rest
    of the share domain and of the NUMA-bound nodes to the reclaim pool."""
    warnings: list[str] = []
    pools = cpu_policy.assign_pools(topo, lay.share_domain, sizes, previous)
    for name, cpus in pools.items():
        if not cpus:
            # A machine too small for one cpu per pool: the pools share the domain.
            pools[name] = lay.share_domain
            warnings.append(f"pool {name} has no cpu of its own: it shares {lay.share_domain}")
    bound_used = CPUSet()
    for numa, z in snb_sizes.items():
        placed = cpu_policy.assign_pools(topo, snb_domains[numa], z, previous)
        for name, cpus in placed.items():
            if not cpus:
                placed[name] = snb_domains[numa]
                warnings.append(f"pool {name} has no cpu of its own")
            bound_used = bound_used | placed[name]
        pools.update(placed)
    unbound_used = CPUSet().union(*(pools[n] for n in sizes))
    reclaim = (lay.share_domain - unbound_used) | (lay.bound_leftover - bound_used)
    return Allocation(pools, reclaim, warnings=tuple(warnings))


def lend(
    lay: Layout,
    alloc: Allocation,
    borrowed: Mapping[str, CPUSet],
    borrowed_size: int,
    terms: Mapping[str, Any],
) -> Allocation:
    """The reclaim pool with what regions lend it (`regions.borrow_from_pools`, dedicated
    regions): reclaimed pods run on its own cpus and the lent ones, `borrowed_size` cores
    of the lent ones at most in all. The reclaim pool is never empty: with nothing of its
    own nor lent it overlaps the share domain (reclaimed pods run SCHED_IDLE there, so
    they only take what shared pods leave)."""
    reclaim = alloc.reclaim
    overlap = CPUSet().union(*borrowed.values()) - reclaim
    warnings = list(alloc.warnings)
    if not reclaim and not overlap:
        reclaim = lay.share_domain
        warnings.append(f"no cpu left for the reclaim pool: it overlaps {reclaim}")
    size = None
    if overlap:
        size = min(len(reclaim | overlap), len(reclaim) + borrowed_size)
    return replace(
        alloc,
        reclaim=reclaim,
        overlap=overlap,
        warnings=tuple(warnings),
        reclaimed_size=size,
        regions=dict(terms),
    )


def pool_plans(
    lay: Layout, alloc: Allocation, terms: Mapping[str, Mapping[str, Any]]
) -> list[PoolPlan]:
    """The plan's pools: reserve, the share pools by name, then reclaim with its terms."""
    out = []
    if lay.reserve:
        out.append(PoolPlan(names.POOL_RESERVE, lay.reserve))
    for name in sorted(alloc.pools):
        out.append(PoolPlan(name, alloc.pools[name], terms=terms.get(name, {})))
    # The reclaim pool is where reclaimed pods run: its own cpus and what is lent.
    out.append(
        PoolPlan(
            names.POOL_RECLAIM,
            alloc.reclaimed_cpus,
            terms={
                "own_cpus": str(alloc.reclaim),
                "share_domain_cpus": len(lay.share_domain),
                "reserved_for_reclaim": lay.reserved_for_reclaim,
                "numa_bound_leftover_cpus": len(lay.bound_leftover),
                "overlap_cpus": str(alloc.overlap),
                "reclaimed_pods_cpus": str(alloc.reclaimed_cpus),
                "reclaimed_cores_size": alloc.reclaimed_cores_size,
                "regions": dict(alloc.regions),
            },
        )
    )
    return out


def snb_groups(
    valid: Mapping[str, PodSpec], lay: Layout, isolated: frozenset[str] = frozenset()
) -> tuple[dict[str, list[PodSpec]], dict[int, dict[str, list[PodSpec]]]]:
    """Shared pods by pool: the unbound pools (an isolated pod alone in its isolation
    pool), and per NUMA node the NUMA-bound ones."""
    shared: dict[str, list[PodSpec]] = {}
    snb: dict[int, dict[str, list[PodSpec]]] = {}
    for s in valid.values():
        if s.level != names.QOS_SHARED_CORES:
            continue
        pool = s.pool or names.POOL_SHARE
        numa = lay.snb.get(s.uid)
        if s.uid in isolated:
            shared[regions.isolation_pool_name(s.uid)] = [s]
        elif numa is None:
            shared.setdefault(pool, []).append(s)
        else:
            region = cpu_policy.snb_pool_name(pool, numa)
            snb.setdefault(numa, {}).setdefault(region, []).append(s)
    return shared, snb


@dataclass(frozen=True, slots=True)
class MachineDefaults:
    """The cpus and memory nodes a pod gets when nothing narrows them."""

    mems: CPUSet  # the NUMA nodes no NUMA-bound pod holds
    all_mems: CPUSet
    all_but_dedicated: CPUSet

    @classmethod
    def of(cls, topo: CPUTopology, lay: Layout) -> MachineDefaults:
        return cls(
            memory_policy.unbound_mems(topo, lay.bound_numas),
            CPUSet.of(topo.numa_nodes),
            topo.all_cpus - lay.dedicated_cpus - lay.foreign,
        )


def pod_placement(
    s: PodSpec,
    lay: Layout,
    pools: Mapping[str, CPUSet],
    reclaim: CPUSet,
    snb_domains: Mapping[int, CPUSet],
    ramping: bool,
    machine: MachineDefaults,
    isolated: bool = False,
) -> tuple[str, CPUSet, CPUSet, tuple[int, ...]]:
    """Where one managed pod runs: its pool, cpus, memory nodes and NUMA nodes. A shared
    pod ramping up runs on every pooled cpu of its scope until its estimate is trusted; an
    isolated one in its isolation pool."""
    level = s.level
    if level == names.QOS_DEDICATED_CORES:
        a = lay.dedicated[s.uid]
        return names.POOL_DEDICATED, a.cpuset, memory_policy.bound_mems(a.numas), a.numas
    if level == names.QOS_RECLAIMED_CORES:
        return names.POOL_RECLAIM, reclaim, machine.mems, ()
    if level == names.QOS_SYSTEM_CORES:
        cpus = cpu_policy.pools_for_system(pools, s.pool) or machine.all_but_dedicated
        return s.pool or SYSTEM_ALL_CPUS, cpus, machine.all_mems, ()
    numa = lay.snb.get(s.uid)
    if numa is not None:
        domain = snb_domains.get(numa, lay.pooled)
        pool = cpu_policy.snb_pool_name(s.pool or names.POOL_SHARE, numa)
        cpus = domain if ramping else pools.get(pool, domain)
        return pool, cpus, memory_policy.bound_mems((numa,)), (numa,)
    pool = regions.isolation_pool_name(s.uid) if isolated else s.pool or names.POOL_SHARE
    cpus = lay.pooled if ramping else pools.get(pool, lay.share_domain)
    return pool, cpus, machine.mems, ()


def failed_warnings(lay: Layout, valid: Mapping[str, PodSpec]) -> Sequence[str]:
    return [f"{valid[uid].key}: {why}" for uid, why in lay.failed.items()]
