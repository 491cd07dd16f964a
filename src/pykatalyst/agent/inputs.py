"""What one tick of the node agent decides from, gathered before anything is decided.

These are value types, shared by the reading side (`agent/gather/`, which produces them),
the pure `decide` and the acting side (`agent/act/`); this module reads nothing. What a
tick carries to the next is the `AgentState` (`agent/agent_state.py`).

`Agent.reconcile(now)` is three steps: gather a `TickInputs` (the node's pods and dynamic
config from the node-state holder in `agent/node_watch.py`, the effective `AgentConfig`,
the pods parsed and matched to their cgroups, one Host sample, the kubelet's pins, the pods'
indicator targets, the GPU and NIC zones, what each eviction stage read), decide the
tick's `AgentPlan` and next `AgentState` from it and the current `AgentState`
(`agent/decide.py`, pure), then execute the plan (`agent/act/`: the eviction stages'
decisions, the enforcer, the reporter, Events). An `EvictionStage` decides on an
`EvictionInput`: the plan as decided, the pods, the metrics and the sample, and the same
`NodeView` the agent read; its memory from one tick to the next is part of the
`AgentState`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.host.base import HostSample, PodCgroup
from pykatalyst.agent.kubelet_cpu import KubeletCpuPolicy, KubeletPins
from pykatalyst.agent.metrics import MetricStore
from pykatalyst.agent.node_watch import NodeView
from pykatalyst.agent.plan import AgentPlan, PlanEvent, StageDecision
from pykatalyst.agent.pods import ContainerCgroups, PodSpec
from pykatalyst.topology.machine import CPUTopology

NO_CGROUPS = ContainerCgroups(None, {})
# CNR zones by NUMA node; the GPU report adds the cards' spec properties; each with a note
Zones = dict[int, list[dict[str, Any]]]
GpuReport = tuple[Zones, list[dict[str, Any]], str]
NicReport = tuple[Zones, str]


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What does not change while the agent runs: the node, its machine, and whether the
    agent only says what it would do."""

    node: str
    topology: CPUTopology
    cgroup_version: int
    dry_run: bool = False
    numa_of: Mapping[int, int] = field(default_factory=dict)  # cpu -> NUMA node
    terms: Mapping[str, Any] = field(default_factory=dict)  # the plan's `topology`

    @classmethod
    def of(cls, node: str, topo: CPUTopology, cgroup_version: int, dry_run: bool) -> NodeFacts:
        terms = {
            "cpus": topo.num_cpus,
            "cores": topo.num_cores,
            "sockets": topo.num_sockets,
            "numa_nodes": topo.num_numa_nodes,
            "threads_per_core": topo.threads_per_core,
            "memory_bytes": topo.total_memory,
            "numa": {str(n): str(topo.cpus_in_numa(n)) for n in topo.numa_nodes},
        }
        numa_of = {c: topo.numa_of(c) for c in topo.all_cpus}
        return cls(node, topo, cgroup_version, dry_run, numa_of, terms)


@dataclass(frozen=True, slots=True)
class TickInputs:
    """One tick's inputs: `specs` are the node's pods that have not finished, parsed once
    per resourceVersion (`order`: their uids by namespace/name), `first_seen` when the agent
    first saw each, `cgroups` and `matched` the cgroups the Host found for them; `metrics`
    holds the samples so far, this tick's included (read, never written, by `decide`);
    `pins` and `kubelet` what the kubelet's cpu manager holds; `reclaimed_root` and
    `guaranteed_root` the kubelet's QoS cgroups the agent writes to; `spd_targets` the
    indicator targets of the pods' ServiceProfileDescriptors, `reclaim_off` the pods their
    SPD keeps out of reclaim. `warnings` and `events` are
    what gathering them had to say (an unreadable config, a pod list that failed)."""

    now: float
    node: NodeView
    config: AgentConfig
    config_status: Mapping[str, Any]
    specs: Mapping[str, PodSpec]
    sample: HostSample
    facts: NodeFacts
    metrics: MetricStore
    warnings: tuple[str, ...] = ()
    events: tuple[PlanEvent, ...] = ()
    order: tuple[str, ...] = ()
    first_seen: Mapping[str, float] = field(default_factory=dict)
    cgroups: Mapping[str, PodCgroup] = field(default_factory=dict)
    matched: Mapping[str, ContainerCgroups] = field(default_factory=dict)
    pins: KubeletPins | None = None
    kubelet: KubeletCpuPolicy | None = None
    reclaimed_root: str | None = None
    guaranteed_root: str | None = None
    spd_targets: Mapping[tuple[str, str], Mapping[str, float]] = field(default_factory=dict)
    # Pods that lend nothing to reclaimed pods under their SPD (uid -> the rule): counted
    # at their requests, not their usage (a Poor business level, or a baseline pod).
    reclaim_off: Mapping[str, str] = field(default_factory=dict)
    # The eviction stages, and what each read this tick (the exception it raised reading)
    stages: tuple[EvictionStage, ...] = ()
    stage_reads: tuple[object, ...] = ()
    # the NIC zones the agent last reported: identifier -> allocatable net_bandwidth (Mbps),
    # None where a zone has none; None when the agent reads no NICs
    nics: Mapping[str, int | None] | None = None
    # the GPU zones, spec properties and how they were read, and the NIC zones and how,
    # for the CNR (None when the agent reads no such devices or publishes nothing)
    gpus: GpuReport | None = None
    nic_zones: NicReport | None = None

    def cgroups_of(self, s: PodSpec) -> ContainerCgroups:
        """The pod's cgroups, its containers' by name."""
        return self.matched.get(s.uid, NO_CGROUPS)

    def ramping(self, s: PodSpec) -> bool:
        """Whether the pod started less than the ramp-up period ago (its usage is not yet
        what it will be)."""
        start = s.started_at if s.started_at is not None else self.first_seen.get(s.uid)
        if start is None:
            return False
        return self.now - start < self.config.cpu.ramp_up_period_s


@dataclass(frozen=True, slots=True)
class EvictionInput:
    """What an eviction stage sees: the tick's plan (already advised and allocated, not yet
    enforced), the pods on the node, the metric store, the raw sample, and the node's pods
    and dynamic config as the agent read them this tick (None outside an agent)."""

    now: float
    plan: AgentPlan
    pods: Mapping[str, PodSpec]
    metrics: MetricStore
    sample: HostSample
    node: NodeView | None = None
    # the NIC zones the agent reports: identifier -> allocatable net_bandwidth (Mbps), None
    # where a zone has none; None when the agent reads no NICs
    nics: Mapping[str, int | None] | None = None
    # the GPU zones, spec properties and how they were read, and the NIC zones and how,
    # for the CNR (None when the agent reads no such devices or publishes nothing)
    gpus: GpuReport | None = None
    nic_zones: NicReport | None = None


class EvictionStage(Protocol):
    """An eviction stage of the agent's loop: `gather` reads (in the agent's gather, with
    the memory its last decision left),
    `decide` is pure (in `decide`, after the plan is made; `memory` is what its last
    decision returned, None at first), `act` performs the decision (in `agent/act/`) and
    returns what it did, recorded after the decision's actions."""

    @property
    def name(self) -> str: ...

    def gather(self, now: float, node: NodeView | None, memory: object) -> object: ...

    def decide(
        self, inp: EvictionInput, reads: object, memory: object
    ) -> tuple[StageDecision, object]: ...

    def act(self, decision: StageDecision) -> tuple[object, ...]: ...
