"""What one tick of the node agent decides from, gathered before anything is decided, and
what it carries from one tick to the next.

`Agent.reconcile(now)` is three steps: gather a `TickInputs` (the node's pods and dynamic
config from the node-state holder in `agent/node_watch.py`, the effective `AgentConfig`,
the pods parsed and matched to their cgroups, one Host sample, the kubelet's pins, the pods'
indicator targets, the GPU and NIC zones, what each eviction stage read), decide the
tick's `AgentPlan` and next `AgentState` from it and the current `AgentState`
(`agent/decide.py`, pure), then execute the plan (the eviction stages' decisions, the
enforcer, the reporter, Events). An `EvictionStage` decides on an `EvictionInput`: the plan
as decided, the pods, the metrics and the sample, and the same `NodeView` the agent read;
its memory from one tick to the next is part of the `AgentState`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pykatalyst.agent.advisor import HeadroomSmoother, RegulatorState
from pykatalyst.agent.config import AgentConfig, ReporterConfig
from pykatalyst.agent.cpu_placement import CpuState
from pykatalyst.agent.host.base import HostSample, Knob, KnobValue, PodCgroup
from pykatalyst.agent.kubelet_cpu import KubeletCpuPolicy, KubeletPins
from pykatalyst.agent.metrics import MetricStore
from pykatalyst.agent.node_watch import NodeView
from pykatalyst.agent.plan import AgentPlan, PlanEvent, PodPlan, StageDecision
from pykatalyst.agent.pods import ContainerCgroups, PodSpec
from pykatalyst.agent.rama import PIDState
from pykatalyst.agent.regions import IsolationState
from pykatalyst.topology.cpuset import CPUSet
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


# One pod's plan and its cgroups' knobs, with the inputs they were made from.
PlanCacheEntry = tuple[tuple[Any, ...], PodPlan, tuple[tuple[str, dict[Knob, KnobValue]], ...]]


def smoother(
    rc: ReporterConfig, cpu: bool, held: HeadroomSmoother | None = None
) -> HeadroomSmoother:
    """A headroom smoother with the reporter's window, steps and report floors, keeping
    `held`'s history."""
    base = held if held is not None else HeadroomSmoother(0, 0, 0, 0, 0, 0)
    return base.tuned(
        rc.sliding_window_s,
        rc.headroom_sync_period_s,
        rc.min_step_cpu if cpu else float(rc.min_step_memory),
        rc.max_step_cpu if cpu else float(rc.max_step_memory),
        rc.reserved_for_report_cpu if cpu else float(rc.reserved_for_report_memory),
        rc.min_reclaimed_for_report_cpu if cpu else float(rc.min_reclaimed_for_report_memory),
    )


@dataclass(frozen=True, slots=True)
class AgentState:
    """What one tick hands the next, as a value: the cpu placement, the regulators' and
    rama's controllers per pool, the provision step that last sized each pool, the
    isolated pods, the cpus lent to the reclaim pool, the headroom smoothers, the Events
    already sent, when each reclaimed pod's cache was last dropped, and the pods' plans
    with the inputs they came from. `decide` returns a new one; nothing changes one."""

    placement: CpuState = field(default_factory=CpuState)
    regulators: Mapping[str, RegulatorState] = field(default_factory=dict)
    dedicated_regulators: Mapping[str, RegulatorState] = field(default_factory=dict)
    rama: Mapping[str, Mapping[str, PIDState]] = field(default_factory=dict)
    steps: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    isolated: frozenset[str] = frozenset()
    isolation_states: Mapping[tuple[str, str], IsolationState] = field(default_factory=dict)
    borrowed: Mapping[str, CPUSet] = field(default_factory=dict)
    cpu_smoother: HeadroomSmoother = field(default_factory=lambda: smoother(ReporterConfig(), True))
    mem_smoother: HeadroomSmoother = field(
        default_factory=lambda: smoother(ReporterConfig(), False)
    )
    events_sent: frozenset[tuple[str, str, str]] = frozenset()
    dropped_at: Mapping[str, float] = field(default_factory=dict)
    plans: Mapping[str, PlanCacheEntry] = field(default_factory=dict)
    # what each eviction stage's last decision left the next (by the stage's place)
    stage_memory: tuple[object, ...] = ()


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
    decision returned, None at first), `act` performs the decision (in the executor) and
    returns what it did, recorded after the decision's actions."""

    @property
    def name(self) -> str: ...

    def gather(self, now: float, node: NodeView | None, memory: object) -> object: ...

    def decide(
        self, inp: EvictionInput, reads: object, memory: object
    ) -> tuple[StageDecision, object]: ...

    def act(self, decision: StageDecision) -> tuple[object, ...]: ...
