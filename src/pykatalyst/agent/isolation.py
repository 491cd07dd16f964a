"""Memory and disk I/O isolation in one pass of the agent: the inputs gathered from the
pass's pod plans and sample, then the pure decisions of `memory_policy` and `io_policy`,
merged into the pass's desired knobs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pykatalyst.agent import io_policy, memory_policy
from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.host.base import Host, HostSample, Knob, KnobValue
from pykatalyst.agent.plan import PodPlan, Terms
from pykatalyst.agent.pods import PodSpec
from pykatalyst.api import names
from pykatalyst.api.qos import OOM_PRIORITY_RANGES
from pykatalyst.topology.machine import CPUTopology

GUARANTEED = "guaranteed"  # the kubelet's QoS class whose cgroup is kubepods itself


@dataclass(frozen=True, slots=True)
class IsolationResult:
    desired: dict[str, dict[Knob, KnobValue]]
    memory: Terms = field(default_factory=dict)
    io: Terms = field(default_factory=dict)
    dropped_at: Mapping[str, float] = field(default_factory=dict)


def isolation_pass(
    now: float,
    config: AgentConfig,
    cgroup_version: int,
    topology: CPUTopology,
    plans: Iterable[PodPlan],
    specs: Mapping[str, PodSpec],
    sample: HostSample,
    root: str | None,
    bound_numas: Iterable[int],
    dropped_at: Mapping[str, float],
    top: str | None,
) -> IsolationResult:
    """What memory and io knobs this pass wants (`desired` holds only those); `top` is the
    kubelet's guaranteed cgroup (`guaranteed_root`)."""
    version = cgroup_version
    pods = [_memory_pod(p, specs[p.uid], sample) for p in plans if _managed(p, specs)]
    mcfg = config.memory_advisor
    inp = memory_policy.MemoryInputs(
        now=now,
        cgroup_version=version,
        pods=tuple(pods),
        memory=sample.memory,
        numa_memory=sample.numa_memory,
        reclaimed_numas=tuple(memory_policy.unbound_mems(topology, bound_numas)),
        root=root,
        root_usage=_reclaimed_usage(pods, sample),
        top=top if mcfg.protection != "none" else None,
    )
    mem = memory_policy.decide_memory(inp, mcfg, dropped_at)
    io_desired, io_terms = io_policy.decide_io(
        [(p.key, p.level, p.cgroup, p.containers) for p in pods],
        root,
        config.io.level_values(),
        config.io.reclaimed_root.value(),
        version,
    )
    desired: dict[str, dict[Knob, KnobValue]] = {}
    for part in (mem.desired, io_desired):
        for cg, knobs in part.items():
            desired.setdefault(cg, {}).update(knobs)
    return IsolationResult(desired, mem.terms, io_terms, mem.dropped_at)


def merge(
    desired: dict[str, dict[Knob, KnobValue]], extra: Mapping[str, Mapping[Knob, KnobValue]]
) -> None:
    """Add `extra` to `desired` without touching the (shared) dicts already in it."""
    for cg, knobs in extra.items():
        desired[cg] = {**desired.get(cg, {}), **knobs}


def _managed(p: PodPlan, specs: Mapping[str, PodSpec]) -> bool:
    """Plans of pods the agent manages (the caller leaves out those it does not)."""
    return p.cgroup is not None and p.uid in specs


def _memory_pod(p: PodPlan, s: PodSpec, sample: HostSample) -> memory_policy.MemoryPod:
    assert p.cgroup is not None
    stats = sample.cgroups.get(p.cgroup)
    level = s.level
    priority = s.qos.oom_priority if s.qos is not None else OOM_PRIORITY_RANGES[level][0]
    return memory_policy.MemoryPod(
        uid=p.uid,
        key=p.key,
        level=level,
        cgroup=p.cgroup,
        containers=tuple(c.cgroup for c in p.containers if c.cgroup is not None),
        memory_request=s.memory_request,
        oom_priority=priority,
        cache=stats.memory_cache if stats is not None else None,
        numas=tuple(p.mems),
    )


def _reclaimed_usage(pods: Iterable[memory_policy.MemoryPod], sample: HostSample) -> int | None:
    """What the reclaimed pods use, from this tick's sample (None when a pod's is unknown):
    the reclaimed root's charge without reading it again."""
    total = 0
    for p in pods:
        if p.level != names.QOS_RECLAIMED_CORES:
            continue
        stats = sample.cgroups.get(p.cgroup)
        if stats is None or stats.memory_usage is None:
            return None
        total += stats.memory_usage
    return total


def guaranteed_root(host: Host) -> str | None:
    """The kubelet's guaranteed cgroup (kubepods itself), when the host can tell."""
    try:
        top = host.qos_cgroup(GUARANTEED)
    except ValueError:
        return None
    return top.strip("/") if top else None
