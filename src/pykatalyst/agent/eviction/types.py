"""The values eviction decisions are made of: what the manager sees, what plugins report,
and the plan it returns. All immutable; all JSON-printable for `katalyst explain`."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pykatalyst.agent.host.base import HostSample
from pykatalyst.api import names
from pykatalyst.api.digest import (
    CONFIG_SOURCE_ANNOTATION as CONFIG_SOURCE_ANNOTATION,
)
from pykatalyst.api.digest import (
    CRITICAL_PRIORITY as CRITICAL_PRIORITY,
)
from pykatalyst.api.digest import (
    CRITICAL_PRIORITY_CLASSES as CRITICAL_PRIORITY_CLASSES,
)
from pykatalyst.api.digest import (
    MIRROR_POD_ANNOTATION as MIRROR_POD_ANNOTATION,
)
from pykatalyst.api.digest import DigestView, PodDigest, digest_pod
from pykatalyst.api.objects import Taint
from pykatalyst.api.records import DecisionRecord
from pykatalyst.api.records import RankEntry as RankEntry
from pykatalyst.cluster.protocol import JSON

# The record shape is shared with the backstop controller and `katalyst explain`.
EvictionRecord = DecisionRecord


@dataclass(frozen=True, slots=True)
class PodInfo(DigestView):
    """One pod on the node: its `PodDigest` (identity, priority, protection, requests,
    annotations), the QoS level the agent manages it at, and what ranking and plugins
    need beyond the digest: its pool and NUMA nodes, and the latest measurements (None
    when the machine could not tell). `memory` is the working set when known.

    A pod whose QoS declaration is invalid reads as shared_cores: the agent leaves it as
    the kubelet placed it, and for eviction it ranks like the default level. A pod that
    breaks the Pod schema is known by identity only and is `static` (its digest says so),
    so that no plugin evicts what the agent could not read.
    """

    digest: PodDigest
    qos_level: str = names.DEFAULT_QOS_LEVEL
    pool: str = ""
    numa_nodes: tuple[int, ...] = ()
    cpu_usage: float | None = None
    load1: float | None = None
    memory: int | None = None
    numa_memory: Mapping[int, int] = field(default_factory=dict)
    memory_psi_avg10: float | None = None

    @property
    def priority(self) -> int:
        return self.digest.priority

    @property
    def priority_class_name(self) -> str:
        return self.digest.priority_class_name

    @property
    def static(self) -> bool:
        return self.digest.static

    @property
    def annotations(self) -> Mapping[str, str]:
        return self.digest.annotations

    @property
    def labels(self) -> Mapping[str, str]:
        return self.digest.labels

    @property
    def request_milli_cpu(self) -> int:
        return self.digest.request(names.RESOURCE_CPU)

    @property
    def request_memory(self) -> int:
        return self.digest.request(names.RESOURCE_MEMORY)

    @property
    def evict_score(self) -> float:
        """Katalyst's pod_evict_score annotation: lower is evicted first (default 0)."""
        raw = self.annotations.get(names.POD_EVICT_SCORE_ANNOTATION)
        try:
            return float(raw) if raw is not None else 0.0
        except ValueError:
            return 0.0


def pod_info(obj: JSON, **overrides: Any) -> PodInfo:
    """A `PodInfo` from Kubernetes JSON, over the pod's `PodDigest`; `overrides` fills
    the QoS level, usage, pool and NUMA fields."""
    return from_digest(digest_pod(obj), **overrides)


def from_digest(d: PodDigest, **overrides: Any) -> PodInfo:
    """`pod_info` for a pod already digested."""
    level = d.level if d.readable else names.DEFAULT_QOS_LEVEL
    return PodInfo(d, **{"qos_level": level, **overrides})


@dataclass(frozen=True, slots=True)
class NumaReclaimed:
    milli_cpu: int
    memory: int


@dataclass(frozen=True, slots=True)
class ReclaimedCapacity:
    """Reclaimed allocatable as published (smoothed by the reporter), node and per NUMA."""

    milli_cpu: int
    memory: int
    per_numa: Mapping[int, NumaReclaimed] = field(default_factory=dict)
    source: str = "cnr"

    def get(self, resource: str) -> int:
        return self.milli_cpu if resource == names.RECLAIMED_MILLICPU else self.memory


@dataclass(frozen=True, slots=True)
class PoolState:
    """A cpu pool this round: its size and the summed 1-minute load of its pods."""

    name: str
    size: int
    load: float | None


@dataclass(frozen=True, slots=True)
class EvictionSnapshot:
    """Everything one eviction round decides on."""

    now: float
    node: str
    pods: tuple[PodInfo, ...]
    sample: HostSample | None = None
    reclaimed: ReclaimedCapacity | None = None
    pools: tuple[PoolState, ...] = ()
    reclaim_pool_cpus: int | None = None
    reclaim_pool_floor: int | None = None
    # NIC identifier -> allocatable net_bandwidth (Mbps) of its zone as reported; None for
    # a zone that reports none. None: the node's NICs are not known.
    nic_allocatable: Mapping[str, int | None] | None = None


class Met(enum.IntEnum):
    NOT = 0
    SOFT = 1
    HARD = 2

    @property
    def label(self) -> str:
        return {0: "not-met", 1: "soft", 2: "hard"}[int(self)]


@dataclass(frozen=True, slots=True)
class ConditionSpec:
    """A condition a plugin raises; it becomes taints while active.

    `scope` "node": a Node taint `node.katalyst.kubewharf.io/<name>` per effect.
    `scope` "cnr": a CNR taint with the same key, per "<qosLevel>/<effect>" effect.
    """

    name: str
    scope: str
    effects: tuple[str, ...]

    def taints(self) -> list[Taint]:
        key = names.TAINT_PREFIX + self.name
        out: list[Taint] = []
        for effect in self.effects:
            if self.scope == "cnr":
                qos, _, eff = effect.partition("/")
                out.append(Taint(key=key, effect=eff, qos_level=qos))
            else:
                out.append(Taint(key=key, effect=effect))
        return out


@dataclass(frozen=True, slots=True)
class Threshold:
    """One signal a plugin checked this round, and whether (and how) it is met.

    `threshold` is the limit for the level reported (hard limit when HARD, soft limit
    when SOFT or NOT). `overage`, when set, is how much of `resource` must be released
    (in the units `usage_of` reads) to drop back under the hard limit: the manager then
    picks the fewest ranked victims that cover it. Without it, one victim per round.
    """

    plugin: str
    key: str
    met: Met
    signal: str
    observed: float
    threshold: float
    operator: str = ">"
    unit: str = ""
    window: str = ""
    resource: str = names.RESOURCE_MEMORY
    grace_period_s: float = 0.0
    condition: ConditionSpec | None = None
    victim_levels: tuple[str, ...] = (names.QOS_RECLAIMED_CORES,)
    candidates: frozenset[str] | None = None
    numa: int | None = None
    overage: float | None = None
    deletion_grace_s: int | None = None
    cool_down_s: float = 0.0
    terms: Mapping[str, Any] = field(default_factory=dict)
    # victims of thresholds with one scope wait for each other; "" = the plugin's (or, per
    # NUMA, the NUMA node's)
    scope: str = ""

    @property
    def id(self) -> str:
        return f"{self.plugin}:{self.key}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "plugin": self.plugin,
            "key": self.key,
            "met": self.met.label,
            "signal": self.signal,
            "observed": _round(self.observed),
            "operator": self.operator,
            "threshold": _round(self.threshold),
            "unit": self.unit,
            "window": self.window,
            "grace_period_s": self.grace_period_s,
        }
        if self.condition is not None:
            out["condition"] = self.condition.name
        if self.overage is not None:
            out["overage"] = _round(self.overage)
        if self.terms:
            out["terms"] = dict(self.terms)
        return out


@dataclass(frozen=True, slots=True)
class Victim:
    pod: PodInfo
    plugin: str
    threshold: str
    deletion_grace_s: int | None
    record: EvictionRecord
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod.key,
            "uid": self.pod.uid,
            "plugin": self.plugin,
            "threshold": self.threshold,
            "deletion_grace_s": self.deletion_grace_s,
            "dry_run": self.dry_run,
            "message": self.record.message,
        }


@dataclass(frozen=True, slots=True)
class ActiveCondition:
    spec: ConditionSpec
    plugin: str
    since: float
    last_seen: float
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "condition": self.spec.name,
            "scope": self.spec.scope,
            "effects": list(self.spec.effects),
            "plugin": self.plugin,
            "since": self.since,
            "last_seen": self.last_seen,
            "dry_run": self.dry_run,
        }


@dataclass(frozen=True, slots=True)
class LadderState:
    """The response ladder, in order: throttle (the advisor shrinks the reclaim pool),
    condition (taints keep new pods away), evict (hard thresholds only)."""

    reclaim_pool_cpus: int | None
    reclaim_pool_floor: int | None
    last_shrink: float | None
    throttle_settled: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "reclaim_pool_cpus": self.reclaim_pool_cpus,
            "reclaim_pool_floor": self.reclaim_pool_floor,
            "last_shrink": self.last_shrink,
            "throttle_settled": self.throttle_settled,
        }


@dataclass(frozen=True, slots=True)
class EvictionPlan:
    """One round's decisions. `node_taints` / `cnr_taints` are the complete sets this
    manager wants (keys under node.katalyst.kubewharf.io/); others' taints are untouched."""

    time: float
    node: str
    ran: bool
    thresholds: tuple[Threshold, ...] = ()
    conditions: tuple[ActiveCondition, ...] = ()
    node_taints: tuple[Taint, ...] = ()
    cnr_taints: tuple[Taint, ...] = ()
    victims: tuple[Victim, ...] = ()
    records: tuple[EvictionRecord, ...] = ()
    ladder: LadderState | None = None
    notes: tuple[str, ...] = ()

    @property
    def evictions(self) -> tuple[Victim, ...]:
        return tuple(v for v in self.victims if not v.dry_run)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "eviction-plan",
            "time": self.time,
            "node": self.node,
            "ran": self.ran,
            "thresholds": [t.to_json() for t in self.thresholds if t.met != Met.NOT],
            "conditions": [c.to_json() for c in self.conditions],
            "node_taints": [t.to_json() for t in self.node_taints],
            "cnr_taints": [t.to_json() for t in self.cnr_taints],
            "victims": [v.to_json() for v in self.victims],
            "records": [r.to_json() for r in self.records],
            "ladder": self.ladder.to_json() if self.ladder else None,
            "notes": list(self.notes),
        }


def _round(value: float) -> float:
    return round(float(value), 3)
