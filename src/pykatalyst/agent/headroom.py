"""The reclaimed figures the agent publishes: what reclaimed pods may use of the node's cpu
and memory, smoothed for publication, and the pods' native demand for the realtime
overcommit ratio. Pure: the smoothers are values, returned updated."""

from __future__ import annotations

from collections.abc import Mapping

from pykatalyst.agent import memory_policy
from pykatalyst.agent.advisor import (
    HeadroomSmoother,
    MemoryUser,
    Terms,
    cpu_headroom,
    memory_headroom,
)
from pykatalyst.agent.agent_state import smoother
from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.cpu_policy import DedicatedAssignment
from pykatalyst.agent.inputs import TickInputs
from pykatalyst.agent.plan import ReclaimedFigure
from pykatalyst.agent.pods import PodSpec
from pykatalyst.agent.reporter import apportion, milli_cpu
from pykatalyst.api import names
from pykatalyst.topology.cpuset import CPUSet

IGNORED = "a reclaimed figure is below its ignore threshold: all reclaimed figures are 0"


def cpu_grain(cfg: AgentConfig) -> int:
    """Per-NUMA reclaimed cpu in whole cores (Katalyst), or in milli-cores."""
    return 1000 if cfg.advisor.headroom_whole_cores else 1


def reclaimed_usage(inp: TickInputs, valid: Mapping[str, PodSpec]) -> float | None:
    """The cores reclaimed pods use now; None when none of them was measured."""
    total = 0.0
    seen = False
    for s in valid.values():
        if s.level != names.QOS_RECLAIMED_CORES:
            continue
        pc = inp.cgroups.get(s.uid)
        if pc is None:
            continue
        u = inp.metrics.cpu_usage(pc.cgroup, inp.now)
        if u is not None:
            total += u
            seen = True
    return total if seen else None


def headroom(
    inp: TickInputs,
    smoothers: tuple[HeadroomSmoother, HeadroomSmoother],
    reclaim: CPUSet,
    valid: Mapping[str, PodSpec],
    cap: float | None,
    dedicated: Mapping[str, DedicatedAssignment],
) -> tuple[ReclaimedFigure, ReclaimedFigure, tuple[HeadroomSmoother, HeadroomSmoother]]:
    """The reclaimed cpu and memory figures over the cpus reclaimed pods get (`cap`: at
    most that many cores), and the (cpu, memory) smoothers with this tick's figures."""
    cfg, now = inp.config, inp.now
    rc = cfg.reporter
    cpu_value, cpu_numa, cpu_terms = cpu_headroom(
        reclaim,
        inp.metrics.cpu_usage_ratio(now),
        reclaimed_usage(inp, valid),
        cap,
        inp.facts.numa_of,
        whole_cores=cfg.advisor.headroom_whole_cores,
    )
    mem_value, mem_numa, mem_terms = _memory_headroom(inp, valid, dedicated)
    cpu_sm, mem_sm = smoother(rc, True, smoothers[0]), smoother(rc, False, smoothers[1])
    if not cfg.advisor.enable_reclaim:
        note = "reclaim disabled (advisor.enable_reclaim=false): 0 is published"
        cpu_terms["reclaim"] = mem_terms["reclaim"] = note
        return (
            ReclaimedFigure(names.RECLAIMED_MILLICPU, cpu_value, 0.0, {}, cpu_terms),
            ReclaimedFigure(names.RECLAIMED_MEMORY, mem_value, 0.0, {}, mem_terms),
            (cpu_sm, mem_sm),
        )
    cpu_rep, cpu_terms["smoothing"], cpu_sm = cpu_sm.update(now, cpu_value)
    mem_rep, mem_terms["smoothing"], mem_sm = mem_sm.update(now, mem_value)
    if (
        cpu_rep is not None
        and mem_rep is not None
        and (cpu_rep <= rc.min_ignored_reclaimed_cpu or mem_rep <= rc.min_ignored_reclaimed_memory)
    ):
        cpu_terms["zeroed"] = mem_terms["zeroed"] = IGNORED
        cpu_rep, mem_rep = 0.0, 0.0
    cpu_fig = ReclaimedFigure(
        names.RECLAIMED_MILLICPU,
        cpu_value,
        cpu_rep,
        rescale(cpu_numa, cpu_rep, grain_milli=cpu_grain(cfg)),
        cpu_terms,
    )
    mem_fig = ReclaimedFigure(
        names.RECLAIMED_MEMORY, mem_value, mem_rep, rescale(mem_numa, mem_rep), mem_terms
    )
    return cpu_fig, mem_fig, (cpu_sm, mem_sm)


def _memory_headroom(
    inp: TickInputs, valid: Mapping[str, PodSpec], dedicated: Mapping[str, DedicatedAssignment]
) -> tuple[float, dict[int, float], Terms]:
    """Reclaimable memory: the machine's (or the sample's) memory less what pods use."""
    topo = inp.facts.topology
    users = memory_users(inp, valid, dedicated)
    capacity = topo.total_memory
    last = inp.metrics.last_sample
    if capacity <= 0 and last is not None and last.memory is not None:
        capacity = last.memory.total
    numa_free = (
        {n: m.free for n, m in last.numa_memory.items()}
        if last is not None and last.numa_memory
        else None
    )
    return memory_headroom(
        capacity, users, inp.config.advisor, topo.memory_per_numa or None, numa_free
    )


def memory_users(
    inp: TickInputs, valid: Mapping[str, PodSpec], dedicated: Mapping[str, DedicatedAssignment]
) -> list[MemoryUser]:
    """Each pod's memory as the headroom formula counts it (a numa_exclusive pod holds
    its NUMA nodes' memory whole; a pod its SPD keeps out of reclaim, its request)."""
    users: list[MemoryUser] = []
    for s in valid.values():
        pc = inp.cgroups.get(s.uid)
        mm = inp.metrics.memory(pc.cgroup, inp.now) if pc is not None else None
        usage = None if mm is None else {"rss": mm.rss, "cache": mm.cache, "shmem": mm.shmem}
        if s.uid in inp.reclaim_off:
            usage = None  # its SPD keeps it out of reclaim: held at its request
        held = dedicated.get(s.uid)
        whole = (
            memory_policy.exclusive_memory(inp.facts.topology, held.numas)
            if held is not None and held.exclusive
            else None
        )
        u = memory_policy.memory_user(s.level, s.memory_request, usage, whole)
        if u is not None:
            users.append(u)
    return users


def native_demand(inp: TickInputs, valid: Mapping[str, PodSpec]) -> dict[str, tuple[float, float]]:
    """(Σ request, Σ usage) of cpu cores and memory bytes over the pods with native
    requests (reclaimed pods ask for none), for the realtime overcommit ratio."""
    now, metrics = inp.now, inp.metrics
    cpu_req = cpu_use = mem_req = mem_use = 0.0
    for s in valid.values():
        if s.level == names.QOS_RECLAIMED_CORES or s.finished:
            continue
        cpu_req += s.request_cores
        mem_req += s.memory_request
        pc = inp.cgroups.get(s.uid)
        if pc is None:
            continue
        cpu_use += metrics.cpu_usage(pc.cgroup, now) or 0.0
        mem = metrics.memory(pc.cgroup, now)
        if mem is not None and mem.rss is not None:
            mem_use += mem.rss
    return {names.RESOURCE_CPU: (cpu_req, cpu_use), names.RESOURCE_MEMORY: (mem_req, mem_use)}


def rescale(
    per_numa: Mapping[int, float], total: float | None, *, grain_milli: int | None = None
) -> dict[int, float]:
    """Per-NUMA figures scaled to the published total, adding up to it exactly (cpu, with
    `grain_milli`: in whole grains where the total allows)."""
    if total is None:
        return {}
    zones = sorted(per_numa)
    if grain_milli is not None:
        milli = apportion(milli_cpu(total), per_numa, zones, grain_milli)
        return {k: v / 1000 for k, v in milli.items()}
    return {k: float(v) for k, v in apportion(int(total), per_numa, zones, 1).items()}
