"""What the reporter publishes of a tick's plan: the zones' allocations, the memory kept
for the system on each NUMA node, and the topology policy, worked out from the plan, the
layout and the kubelet's config (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pykatalyst.agent import kubelet_cpu, memory_policy
from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.cpu_policy import Layout
from pykatalyst.agent.headroom import cpu_grain
from pykatalyst.agent.inputs import TickInputs
from pykatalyst.agent.plan import UNMANAGED, AgentPlan, ReclaimedFigure
from pykatalyst.agent.pods import PodSpec
from pykatalyst.agent.reporter import NumaAllocation, PodCpus, ReportInput
from pykatalyst.api import names
from pykatalyst.api.timefmt import rfc3339
from pykatalyst.topology.machine import CPUTopology


def report_input(
    inp: TickInputs,
    lay: Layout,
    valid: Mapping[str, PodSpec],
    plan: AgentPlan,
    steps: Mapping[str, Mapping[str, Any]],
) -> tuple[ReportInput, dict[str, Any]]:
    """The reporter's input for the plan, and the terms of where its topology policy and
    memory reserve came from."""
    cpu: ReclaimedFigure = plan.reclaimed_cpu
    mem: ReclaimedFigure = plan.reclaimed_memory
    topo = inp.facts.topology
    reserved_mem, reserve_terms = memory_reserve(topo, inp.config, inp.kubelet)
    policy, policy_source = topology_policy(inp.config, inp.kubelet)
    terms = {
        names.RECLAIMED_MILLICPU: {"value": cpu.reported, **dict(cpu.terms)},
        names.RECLAIMED_MEMORY: {"value": mem.reported, **dict(mem.terms)},
        "time": rfc3339(inp.now),
    }
    pools = {p.name for p in plan.pools}
    report = ReportInput(
        topo,
        lay.reserve,
        cpu.reported,
        mem.reported,
        cpu.per_numa,
        mem.per_numa,
        allocations(topo, inp.config, lay, valid, plan, reserved_mem),
        terms,
        {p.name: p.cpuset for p in plan.pools},
        [
            PodCpus(p.key, p.uid, p.pool, p.cpuset, p.ramping_up, p.note, p.reclaim_off)
            for p in plan.pods
        ],
        reserved_mem,
        policy,
        cpu_grain(inp.config),
        {p: t for p, t in steps.items() if p in pools},
        manager_annotations=manager_annotations(
            inp.kubelet, (s.digest.guaranteed_cpus for s in inp.specs.values())
        ),
    )
    return report, {
        "topology_policy": {"value": policy, "source": policy_source},
        "numa_memory_reserve": reserve_terms,
    }


def manager_annotations(
    kp: kubelet_cpu.KubeletCpuPolicy | None, pinned: Iterable[int]
) -> dict[str, str]:
    """Katalyst's CNR annotations on the kubelet's managers: its cpu manager policy (`none`
    unless the CPUManager gate is on and a policy set), its memory manager policy (`None`
    likewise), and, under a cpu manager other than `none`, the cpus it pins for the node's
    pods (`pinned`: each unfinished pod's `guaranteed_cpus`), else 0. The overcommit
    controller reads them. Empty while the kubelet's config is unknown."""
    if kp is None or kp.memory_manager_policy is None:
        return {}
    cpu = kp.policy if kp.cpu_manager_gate else "none"
    memory = kp.memory_manager_policy if kp.memory_manager_gate else "None"
    guaranteed = sum(pinned) if cpu != "none" else 0
    return {
        names.CNR_OVERCOMMIT_CPU_MANAGER_ANNOTATION: cpu,
        names.CNR_OVERCOMMIT_MEMORY_MANAGER_ANNOTATION: memory,
        names.CNR_GUARANTEED_CPUS_ANNOTATION: str(guaranteed),
    }


def topology_policy(cfg: AgentConfig, kp: kubelet_cpu.KubeletCpuPolicy | None) -> tuple[str, str]:
    """The CNR's topologyPolicy and where it came from."""
    name = cfg.reporter.topology_policy_name
    if name:
        policy = kubelet_cpu.topology_policy_of(name, "container")
        return policy, f"reporter.topology_policy_name={name} (container scope)"
    if kp is None or kp.topology_manager_policy is None:
        return names.TOPOLOGY_POLICY_NONE, "unknown: the kubelet's config was not read"
    return kp.topology_policy, (
        f"kubelet topologyManagerPolicy={kp.topology_manager_policy}, "
        f"topologyManagerScope={kp.topology_manager_scope}"
    )


def memory_reserve(
    topo: CPUTopology, cfg: AgentConfig, kp: kubelet_cpu.KubeletCpuPolicy | None
) -> tuple[dict[int, int], dict[str, Any]]:
    """Memory kept for the system on each NUMA node (Katalyst's memory plugin reserve)."""
    mc = cfg.memory
    total = mc.reserved_memory_gb * memory_policy.GIB
    source = "memory.reserved_memory_gb"
    if mc.use_kubelet_reserved:
        if kp is not None and kp.topology_manager_policy is not None:
            total, source = kp.reserved_memory, "kubelet kubeReserved + systemReserved"
        else:
            source = "memory.reserved_memory_gb (the kubelet's config was not read)"
    per_numa = memory_policy.reserved_memory_per_numa(total, topo.numa_nodes)
    return per_numa, {"source": source, "per_numa_bytes": next(iter(per_numa.values()), 0)}


def allocations(
    topo: CPUTopology,
    cfg: AgentConfig,
    lay: Layout,
    valid: Mapping[str, PodSpec],
    plan: AgentPlan,
    reserved_mem: Mapping[int, int],
) -> list[NumaAllocation]:
    """The zones' allocations, as Katalyst's reporter lists them: NUMA-bound pods with
    their cpus and memory there (an SNB pod with its requests, a numa_exclusive pod with
    its nodes' memory whole); without the pod-resources filter, every other pod the
    agent places too, with the cpus it runs on in each zone."""
    out: list[NumaAllocation] = []
    for uid, a in lay.dedicated.items():
        s = valid[uid]
        consumer = f"{s.namespace}/{s.name}/{uid}"
        main = s.main_container
        held = main.memory_request if main is not None else s.memory_request
        per_numa_mem = held // max(len(a.numas), 1)
        for n in a.numas:
            mem = per_numa_mem
            if a.exclusive and topo.memory_per_numa:
                mem = max(topo.memory_of_numa(n) - reserved_mem.get(n, 0), 0)
            cpus = len(a.cpuset & topo.cpus_in_numa(n))
            out.append(NumaAllocation(consumer, n, float(cpus), mem))
    for uid, numa in lay.snb.items():
        s = valid[uid]
        consumer = f"{s.namespace}/{s.name}/{uid}"
        out.append(NumaAllocation(consumer, numa, s.request_cores, s.memory_request))
    if cfg.reporter.enable_pod_resources_filter:
        return out
    bound = set(lay.dedicated) | set(lay.snb)
    for p in plan.pods:
        if p.uid in bound or p.uid not in valid or p.pool == UNMANAGED or not p.cpuset:
            continue
        for n in topo.numa_nodes:
            cpus = len(p.cpuset & topo.cpus_in_numa(n))
            if cpus:
                out.append(NumaAllocation(f"{p.key}/{p.uid}", n, float(cpus), None))
    return out
