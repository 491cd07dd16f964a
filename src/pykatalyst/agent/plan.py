"""The agent's plan: an immutable record of one reconcile and of the reasons behind it.

A plan is what tests assert on, what `katalyst agent --output json` prints and what the
simulator reads. Each figure carries its `terms` (the inputs of the formula that produced
it) so a user can see why the agent decided what it did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pykatalyst.agent.host.base import CpuQuota, IoLatency, IoLimits, Knob, KnobValue
from pykatalyst.topology.cpuset import CPUSet

if TYPE_CHECKING:
    from pykatalyst.agent.net_policy import NetPlan
    from pykatalyst.agent.reporter import ReportInput

Terms = Mapping[str, Any]
DesiredKnobs = Mapping[str, Mapping[Knob, KnobValue]]


def knob_value_json(value: KnobValue) -> Any:
    if isinstance(value, CPUSet):
        return str(value)
    if isinstance(value, CpuQuota):
        return {"quota_us": value.quota_us, "period_us": value.period_us}
    if isinstance(value, IoLimits):
        return {
            lim.device: " ".join(
                f"{k}={getattr(lim, k)}"
                for k in ("rbps", "wbps", "riops", "wiops")
                if getattr(lim, k) is not None
            )
            for lim in value.devices
        }
    if isinstance(value, IoLatency):
        return {d: f"target={t}us" for d, t in value.targets}
    return value


def knobs_json(knobs: Mapping[Knob, KnobValue]) -> dict[str, Any]:
    return {k.value: knob_value_json(v) for k, v in knobs.items()}


@dataclass(frozen=True, slots=True)
class PoolPlan:
    """A cpu pool: its cpus and how its size came about."""

    name: str
    cpuset: CPUSet
    numa: int | None = None  # set for pools bound to one NUMA node
    terms: Terms = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.cpuset)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "cpuset": str(self.cpuset), "size": self.size}
        if self.numa is not None:
            out["numa"] = self.numa
        if self.terms:
            out["terms"] = dict(self.terms)
        return out


@dataclass(frozen=True, slots=True)
class ContainerPlan:
    name: str
    cgroup: str | None
    estimate_cores: float | None = None
    estimate_source: str | None = None
    knobs: Mapping[Knob, KnobValue] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "cgroup": self.cgroup}
        if self.estimate_cores is not None:
            out["estimate_cores"] = round(self.estimate_cores, 3)
            out["estimate_source"] = self.estimate_source
        if self.knobs:
            out["knobs"] = knobs_json(self.knobs)
        return out


@dataclass(frozen=True, slots=True)
class PodPlan:
    """Where one pod runs and which knobs the agent wants on its cgroups."""

    uid: str
    key: str  # namespace/name
    qos_level: str
    pool: str
    cpuset: CPUSet
    mems: CPUSet
    cgroup: str | None
    numa_nodes: tuple[int, ...] = ()
    ramping_up: bool = False
    knobs: Mapping[Knob, KnobValue] = field(default_factory=dict)
    containers: tuple[ContainerPlan, ...] = ()
    note: str = ""
    reclaim_off: str = ""  # why its SPD keeps it from lending to reclaimed pods

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "pod": self.key,
            "uid": self.uid,
            "qos_level": self.qos_level,
            "pool": self.pool,
            "cpuset": str(self.cpuset),
            "mems": str(self.mems),
            "cgroup": self.cgroup,
        }
        if self.numa_nodes:
            out["numa_nodes"] = list(self.numa_nodes)
        if self.ramping_up:
            out["ramping_up"] = True
        if self.knobs:
            out["knobs"] = knobs_json(self.knobs)
        if self.containers:
            out["containers"] = [c.to_json() for c in self.containers]
        if self.note:
            out["note"] = self.note
        if self.reclaim_off:
            out["reclaim_off"] = self.reclaim_off
        return out


@dataclass(frozen=True, slots=True)
class ReclaimedFigure:
    """One reclaimed resource: the raw headroom of this tick and what is published.

    `value` is in cores for cpu and bytes for memory; `reported` is None while the
    reporting window is still filling (nothing is published then, as in Katalyst).
    """

    resource: str
    value: float
    reported: float | None
    per_numa: Mapping[int, float] = field(default_factory=dict)
    terms: Terms = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "value": round(self.value, 3),
            "reported": None if self.reported is None else round(self.reported, 3),
            "per_numa": {str(k): round(v, 3) for k, v in sorted(self.per_numa.items())},
            "terms": dict(self.terms),
        }


@dataclass(frozen=True, slots=True)
class PlanEvent:
    """A Kubernetes Event the agent raised (or would raise) this tick."""

    object_kind: str
    object_key: str
    reason: str
    message: str
    type: str = "Warning"
    api_version: str = "v1"
    uid: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "object": f"{self.object_kind}/{self.object_key}",
            "type": self.type,
            "reason": self.reason,
            "message": self.message,
        }


# The pool of a pod the agent leaves as placed (invalid QoS, a failed placement).
UNMANAGED = "(unmanaged)"


@dataclass(frozen=True, slots=True)
class AgentPlan:
    node: str
    time: float
    topology: Terms
    pools: tuple[PoolPlan, ...]
    pods: tuple[PodPlan, ...]
    reclaimed_cpu: ReclaimedFigure
    reclaimed_memory: ReclaimedFigure
    desired: DesiredKnobs = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    events: tuple[PlanEvent, ...] = ()
    eviction_actions: tuple[Any, ...] = ()
    enforce: Terms = field(default_factory=dict)
    report: Terms = field(default_factory=dict)
    dry_run: bool = False
    config: Terms = field(default_factory=dict)
    # memory guard, pressure, cache drops, protection, OOM ladder; disk I/O per pod
    memory: Terms = field(default_factory=dict)
    io: Terms = field(default_factory=dict)
    # What `agent/act/` performs besides the knobs (not in the plan's JSON): the egress
    # plan (the device's shape, the terms), each eviction stage's decision (evictions,
    # taints, Events), the CNR status and node extended resources to publish with the
    # terms of how they were worked out, and the pods' native demand (Σ request, Σ usage
    # of cpu and memory) for the overcommit advice (None while that is off).
    net: NetPlan | None = None
    evictions: tuple[StageDecision, ...] = ()
    cnr: ReportInput | None = None
    cnr_terms: Terms = field(default_factory=dict)
    native_demand: Mapping[str, tuple[float, float]] | None = None

    def pool(self, name: str) -> PoolPlan | None:
        for p in self.pools:
            if p.name == name:
                return p
        return None

    def pod(self, key_or_uid: str) -> PodPlan | None:
        for p in self.pods:
            if key_or_uid in (p.key, p.uid):
                return p
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "time": self.time,
            "dry_run": self.dry_run,
            "topology": dict(self.topology),
            "pools": [p.to_json() for p in self.pools],
            "pods": [p.to_json() for p in self.pods],
            "reclaimed": {
                "cpu": self.reclaimed_cpu.to_json(),
                "memory": self.reclaimed_memory.to_json(),
            },
            "writes": {cg: knobs_json(k) for cg, k in sorted(self.desired.items())},
            "warnings": list(self.warnings),
            "events": [e.to_json() for e in self.events],
            "eviction_actions": [_action_json(a) for a in self.eviction_actions],
            "enforce": dict(self.enforce),
            "report": dict(self.report),
            "config": dict(self.config),
            "memory": dict(self.memory),
            "io": dict(self.io),
        }


@runtime_checkable
class JsonAction(Protocol):
    """An eviction action that says itself as JSON (the eviction stages' records)."""

    def to_json(self) -> Any: ...


def _action_json(action: object) -> Any:
    if isinstance(action, JsonAction):
        return action.to_json()
    return repr(action)


@dataclass(frozen=True, slots=True)
class StageDecision:
    """What one eviction stage decided for a tick: `actions` recorded in the plan
    (`AgentPlan.eviction_actions`), `knob_overrides` (cgroup -> {Knob: value}) narrowing
    this tick's knobs (throttling before evicting), and the stage's own `plan` for its
    `act` to perform (the manager's `EvictionPlan`: evictions, taints, Events)."""

    stage: str
    actions: tuple[object, ...] = ()
    knob_overrides: Mapping[str, Mapping[Knob, KnobValue]] = field(default_factory=dict)
    plan: object = None
