"""The centralized backstop: what happens to reclaimed pods when a node's agent goes silent.

Without its agent a node's reclaimed pods are no longer throttled or evicted when shared
pods need their cpus back, and its published reclaimed capacity goes stale. The agent's
heartbeat is the `AgentReady` condition of its CustomNodeResource (`lastHeartbeatTime`,
refreshed by the reporter every period). When it is older than `taint_after_s` (10 min)
the CNR gets the taint `node.kubernetes.io/unschedulable` (qosLevel reclaimed_cores,
NoSchedule) so no new reclaimed pods land there; when older than `evict_after_s` (20 min)
the node's reclaimed pods are evicted. The taint goes as soon as the heartbeat resumes.

Like Katalyst's agent-healthz handler, actions are rate limited (taint 0.2/s, evict 0.1/s)
and held back entirely when too large a share of the nodes looks unhealthy at once —
that smells of a problem on the controller's side, not of dead agents.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from pydantic import BaseModel, ConfigDict, Field

from pykatalyst.api import names
from pykatalyst.api.digest import (
    CRITICAL_PRIORITY as CRITICAL_PRIORITY,
)
from pykatalyst.api.digest import (
    CRITICAL_PRIORITY_CLASSES as CRITICAL_PRIORITY_CLASSES,
)
from pykatalyst.api.digest import (
    MIRROR_POD_ANNOTATION as MIRROR_POD_ANNOTATION,
)
from pykatalyst.api.digest import (
    PROBLEM_INVALID_QOS,
    DigestView,
    PodDigest,
    PodDigests,
    digest_pod,
)
from pykatalyst.api.limits import PodShapeError
from pykatalyst.api.objects import CustomNodeResource, Taint
from pykatalyst.api.qos import QoSError, qos_level
from pykatalyst.api.records import DecisionLog, DecisionRecord
from pykatalyst.api.timefmt import parse_rfc3339
from pykatalyst.api.units import Seconds
from pykatalyst.cluster.events import EventRecorder, ObjectRef
from pykatalyst.cluster.informer import InformerFactory
from pykatalyst.cluster.protocol import JSON, ApiError, Cluster, NotFound
from pykatalyst.cluster.ratelimit import TokenBucket
from pykatalyst.cluster.retry import retry_on_conflict

# Kubernetes' markers of pods nobody may evict (the same rule the agent applies).

BACKSTOP_TAINT = Taint(
    key=names.UNSCHEDULABLE_TAINT_KEY, effect="NoSchedule", qos_level=names.QOS_RECLAIMED_CORES
)


class BackstopConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    taint_after_s: Seconds = Field(600.0, description="silence before the CNR taint")
    evict_after_s: Seconds = Field(1200.0, description="silence before evictions")
    taint_qps: float = Field(0.2, gt=0, description="taints (and untaints) per second")
    evict_qps: float = Field(0.1, gt=0, description="evictions per second")
    burst: int = Field(1, ge=1, description="actions that may go at once after a quiet spell")
    disruption_threshold: float = Field(
        0.2, ge=0, le=1, description="hold back when more than this share of nodes is silent"
    )
    disruption_min_nodes: int = Field(
        5, ge=1, description="the share check applies from this many nodes on"
    )
    deletion_grace_s: int | None = Field(None, ge=0, description="None: the pod's own")
    dry_run: bool = False
    records_limit: int = Field(1000, ge=1)


@dataclass(frozen=True, slots=True)
class ReclaimedPod(DigestView):
    """A reclaimed_cores pod as the backstop sees it: its digest."""

    digest: PodDigest

    @property
    def node(self) -> str:
        return self.digest.node_name

    @property
    def terminating(self) -> bool:
        """Deleting or finished: nothing to evict."""
        return self.digest.finishing

    @property
    def protected(self) -> str:
        """Why it may not be evicted; "" when it may."""
        return self.digest.protection


def reclaimed_pod(obj: JSON) -> ReclaimedPod | None:
    """The pod as the backstop sees it, or None when it is not a reclaimed_cores pod."""
    return read_reclaimed_pod(obj)[0]


def read_reclaimed_pod(
    obj: JSON, digests: PodDigests | None = None
) -> tuple[ReclaimedPod | None, str]:
    """`reclaimed_pod`, plus why a pod was passed over: "" when it is simply not
    reclaimed, "unreadable" when it breaks the Pod schema, "invalid-qos" when its QoS
    declaration is refused. Never raises. `digests` keeps the digests between calls."""
    if not isinstance(obj, Mapping):
        return None, "unreadable"
    try:
        if qos_level(obj) != names.QOS_RECLAIMED_CORES:  # cheap: most pods stop here
            return None, ""
    except PodShapeError:
        return None, "unreadable"
    except QoSError:
        return None, "invalid-qos"
    d = digests.get(obj) if digests is not None else digest_pod(obj)
    if not d.readable:
        return None, "unreadable"
    if d.problem_reason == PROBLEM_INVALID_QOS or d.qos is None:
        return None, "invalid-qos"
    return ReclaimedPod(d), ""


BACKSTOP_PLUGIN = "backstop"
HEARTBEAT_SIGNAL = "seconds since the AgentReady heartbeat"


def backstop_record(
    now: float,
    node: str,
    kind: str,
    reason: str,
    message: str,
    *,
    object_kind: str = names.NODE.kind,
    object_key: str = "",
    object_uid: str = "",
    silent_s: float | None = None,
    threshold: float | None = None,
) -> DecisionRecord:
    """Why the backstop acted (kind backstop-taint | backstop-untaint | backstop-eviction),
    in the record shape the agent's eviction manager uses, so `katalyst explain` reads both.
    The signal is always the heartbeat's age."""
    return DecisionRecord(
        time=now,
        node=node,
        kind=kind,
        plugin=BACKSTOP_PLUGIN,
        reason=reason,
        message=message,
        object_kind=object_kind,
        object_key=object_key,
        object_uid=object_uid,
        signal=HEARTBEAT_SIGNAL,
        observed=silent_s,
        threshold=threshold,
        operator=">=",
        unit="s",
    )


@dataclass(frozen=True, slots=True)
class NodeHealth:
    node: str
    last_heartbeat: float | None
    silent_s: float | None
    tainted: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "last_heartbeat": self.last_heartbeat,
            "silent_s": self.silent_s,
            "tainted": self.tainted,
        }


@dataclass(frozen=True, slots=True)
class BackstopAction:
    kind: str  # taint | untaint | evict
    node: str
    record: DecisionRecord
    pod: ReclaimedPod | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.kind, "node": self.node}
        if self.pod is not None:
            out["pod"] = self.pod.key
        out["message"] = self.record.message
        return out


@dataclass(frozen=True, slots=True)
class BackstopPlan:
    time: float
    nodes: tuple[NodeHealth, ...] = ()
    actions: tuple[BackstopAction, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    def of(self, kind: str) -> list[BackstopAction]:
        return [a for a in self.actions if a.kind == kind]

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "nodes": [n.to_json() for n in self.nodes],
            "actions": [a.to_json() for a in self.actions],
            "notes": list(self.notes),
        }


def last_heartbeat(cnr: JSON) -> float | None:
    """When the node's agent was last heard of: the AgentReady heartbeat, else the CNR's
    creation (an agent that never reported has been silent since then)."""
    view = CustomNodeResource(cnr)
    cond = view.condition(names.CNR_CONDITION_AGENT_READY)
    for text in (
        (cond or {}).get("lastHeartbeatTime"),
        view.metadata.get("creationTimestamp"),
    ):
        if isinstance(text, str) and text:
            try:
                return parse_rfc3339(text)
            except ValueError:
                continue
    return None


def _has_backstop_taint(cnr: JSON) -> bool:
    return any(
        t.key == BACKSTOP_TAINT.key and t.qos_level == BACKSTOP_TAINT.qos_level
        for t in CustomNodeResource(cnr).taints()
    )


def _name(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def decide(
    cnrs: Sequence[JSON],
    pods_by_node: Mapping[str, Sequence[ReclaimedPod]],
    now: float,
    cfg: BackstopConfig,
    *,
    max_taints: int,
    max_evictions: int,
) -> BackstopPlan:
    """Pure: which CNRs to taint or untaint and which reclaimed pods to evict now."""
    health: list[NodeHealth] = []
    for cnr in sorted(cnrs, key=lambda c: str((c.get("metadata") or {}).get("name", ""))):
        name = str((cnr.get("metadata") or {}).get("name", ""))
        hb = last_heartbeat(cnr)
        silent = None if hb is None else max(now - hb, 0.0)
        health.append(NodeHealth(name, hb, silent, _has_backstop_taint(cnr)))
    notes: list[str] = []
    if not cfg.enabled:
        return BackstopPlan(now, tuple(health), (), ("backstop disabled",))
    silent_nodes = [h for h in health if h.silent_s is not None and h.silent_s >= cfg.taint_after_s]
    hold = len(health) >= cfg.disruption_min_nodes and len(
        silent_nodes
    ) > cfg.disruption_threshold * len(health)
    if hold:
        notes.append(
            f"{len(silent_nodes)} of {len(health)} agents silent (> "
            f"{cfg.disruption_threshold:.0%}): holding taints and evictions back, this "
            "looks like trouble on the controller's side"
        )
    actions: list[BackstopAction] = []
    for h in health:
        silent = h.silent_s
        stale = silent is not None and silent >= cfg.taint_after_s
        if stale and not h.tainted and not hold:
            if max_taints <= 0:
                notes.append(f"{h.node}: taint deferred (rate limit)")
            else:
                max_taints -= 1
                actions.append(BackstopAction("taint", h.node, _taint_record(h, now, cfg)))
        elif not stale and h.tainted:
            if max_taints <= 0:
                notes.append(f"{h.node}: untaint deferred (rate limit)")
            else:
                max_taints -= 1
                actions.append(BackstopAction("untaint", h.node, _untaint_record(h, now)))
        if silent is None or silent < cfg.evict_after_s or hold:
            continue
        for pod in sorted(pods_by_node.get(h.node, ()), key=lambda p: p.key):
            if pod.terminating or pod.protected:
                continue
            if max_evictions <= 0:
                notes.append(f"{h.node}: evictions deferred (rate limit)")
                break
            max_evictions -= 1
            actions.append(BackstopAction("evict", h.node, _evict_record(h, pod, now, cfg), pod))
    return BackstopPlan(now, tuple(health), tuple(actions), tuple(notes))


def _taint_record(h: NodeHealth, now: float, cfg: BackstopConfig) -> DecisionRecord:
    return backstop_record(
        now,
        h.node,
        "backstop-taint",
        "AgentSilent",
        (
            f"agent on {h.node} silent for {h.silent_s or 0:g}s (>= {cfg.taint_after_s:g}s): "
            f"CNR tainted {BACKSTOP_TAINT.key}:{BACKSTOP_TAINT.effect} qosLevel="
            f"{BACKSTOP_TAINT.qos_level}; no new reclaimed pods will land there"
        ),
        object_key=h.node,
        silent_s=h.silent_s,
        threshold=cfg.taint_after_s,
    )


def _untaint_record(h: NodeHealth, now: float) -> DecisionRecord:
    return backstop_record(
        now,
        h.node,
        "backstop-untaint",
        "AgentBack",
        f"agent on {h.node} heartbeating again: CNR taint {BACKSTOP_TAINT.key} removed",
        object_key=h.node,
        silent_s=h.silent_s,
    )


def _evict_record(
    h: NodeHealth, pod: ReclaimedPod, now: float, cfg: BackstopConfig
) -> DecisionRecord:
    return backstop_record(
        now,
        h.node,
        "backstop-eviction",
        "AgentSilent",
        (
            f"evicting reclaimed pod {pod.key}: the agent on {h.node} has been silent for "
            f"{h.silent_s or 0:g}s (>= {cfg.evict_after_s:g}s), so nothing protects the "
            "node's shared pods from it"
        ),
        object_kind=names.POD.kind,
        object_key=pod.key,
        object_uid=pod.uid,
        silent_s=h.silent_s,
        threshold=cfg.evict_after_s,
    )


@dataclass(frozen=True, slots=True)
class BackstopResult:
    done: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"done": list(self.done), "failed": list(self.failed)}


class BackstopController:
    """`reconcile(now)` decides; `apply(plan)` acts; `run(now)` does both.

    Counters go to the `CollectorRegistry` handed in (a fresh one when none is); records
    are kept in memory (`records`) and appended to `records_path` (JSON lines, readable
    by `katalyst explain --records`) when one is given.
    """

    def __init__(
        self,
        cluster: Cluster,
        config: BackstopConfig | None = None,
        *,
        registry: CollectorRegistry | None = None,
        records_path: str | Path | None = None,
        informers: InformerFactory | None = None,
        node_selector: str | None = None,
    ) -> None:
        """`node_selector`: only the CNRs of the Nodes this label selector matches are
        watched (and only their reclaimed pods evicted); None: every CNR."""
        self.cluster = cluster
        self.config = config if config is not None else BackstopConfig()
        self.registry = registry if registry is not None else CollectorRegistry()
        self.actions_total = Counter(
            "katalyst_backstop_actions",
            "Centralized backstop actions on silent agents, by action and reason.",
            ["action", "reason"],
            registry=self.registry,
        )
        self.skipped_pods_total = Counter(
            "katalyst_backstop_skipped_pods",
            "Pods the backstop could not read (unreadable, invalid-qos), per reconcile.",
            ["reason"],
            registry=self.registry,
        )
        # Katalyst's agent-healthz gauges, under its names: nodes with a CNR, and of those
        # the ones whose agent reports (ready) or is silent past taint_after (not ready).
        self.deployed = Gauge(
            "agent_deployed_node_total",
            "Nodes with a CustomNodeResource (an agent was deployed there).",
            registry=self.registry,
        )
        self.ready = Gauge(
            "agent_ready_total",
            "Nodes whose agent reported within taint_after, by agent.",
            ["agentName"],
            registry=self.registry,
        )
        self.not_ready = Gauge(
            "agent_not_ready_total",
            "Nodes whose agent has been silent for taint_after or longer, by agent.",
            ["agentName"],
            registry=self.registry,
        )
        self.log = DecisionLog(self.config.records_limit, records_path)
        shared = informers if informers is not None else InformerFactory(cluster)
        self._cnrs = shared.informer(names.CUSTOM_NODE_RESOURCE)
        self._pods = shared.informer(names.POD)
        self._nodes = (
            shared.informer(names.NODE, label_selector=node_selector) if node_selector else None
        )
        self._digests = PodDigests()
        self.events = EventRecorder(cluster, names.CONTROLLER_COMPONENT)
        self._taint_bucket = TokenBucket(self.config.taint_qps, self.config.burst)
        self._evict_bucket = TokenBucket(self.config.evict_qps, self.config.burst)

    def reconcile(self, now: float) -> BackstopPlan:
        self._cnrs.sync()
        self._pods.sync()
        cnrs = self._cnrs.list()
        if self._nodes is not None:
            self._nodes.sync()
            mine = {_name(n) for n in self._nodes.list()}
            cnrs = [c for c in cnrs if _name(c) in mine]
        by_node: dict[str, list[ReclaimedPod]] = {}
        for obj in self._pods.list():
            pod, skipped = read_reclaimed_pod(obj, self._digests)
            if skipped:
                self.skipped_pods_total.labels(skipped).inc()
            if pod is not None and pod.node:
                by_node.setdefault(pod.node, []).append(pod)
        plan = decide(
            cnrs,
            by_node,
            now,
            self.config,
            max_taints=self._taint_bucket.available(now),
            max_evictions=self._evict_bucket.available(now),
        )
        self._taint_bucket.take(len(plan.of("taint")) + len(plan.of("untaint")))
        self._evict_bucket.take(len(plan.of("evict")))
        self._count_agents(plan)
        return plan

    def _count_agents(self, plan: BackstopPlan) -> None:
        after = self.config.taint_after_s
        silent = sum(1 for h in plan.nodes if h.silent_s is not None and h.silent_s >= after)
        self.deployed.set(len(plan.nodes))
        self.ready.labels(names.AGENT_COMPONENT).set(len(plan.nodes) - silent)
        self.not_ready.labels(names.AGENT_COMPONENT).set(silent)

    def apply(self, plan: BackstopPlan) -> BackstopResult:
        done: list[str] = []
        failed: list[str] = []
        records: list[DecisionRecord] = []
        for action in plan.actions:
            what = f"{action.kind} {action.pod.key if action.pod else action.node}"
            if self.config.dry_run:
                records.append(
                    replace(
                        action.record, dry_run=True, message=f"(dry run) {action.record.message}"
                    )
                )
                continue
            try:
                if action.kind == "evict" and action.pod is not None:
                    self.cluster.evict(
                        action.pod.namespace, action.pod.name, self.config.deletion_grace_s
                    )
                else:
                    self._set_taint(action.node, present=action.kind == "taint")
            except NotFound:
                continue
            except ApiError as exc:
                failed.append(f"{what}: {exc}")
                continue
            done.append(what)
            records.append(action.record)
            self._event(action.record)
        self._remember(records)
        return BackstopResult(tuple(done), tuple(failed))

    def run(self, now: float) -> tuple[BackstopPlan, BackstopResult]:
        plan = self.reconcile(now)
        return plan, self.apply(plan)

    @property
    def records(self) -> list[DecisionRecord]:
        """The records kept in memory, oldest first."""
        return list(self.log)

    @property
    def records_path(self) -> Path | None:
        return self.log.path

    @records_path.setter
    def records_path(self, value: Path | None) -> None:
        self.log.path = value

    def _remember(self, records: Iterable[DecisionRecord]) -> None:
        for r in self.log.add(records):
            if not r.dry_run:
                self.actions_total.labels(r.kind.removeprefix("backstop-"), r.reason).inc()

    def _set_taint(self, node: str, *, present: bool) -> None:
        # The whole list is replaced, so the patch carries the resourceVersion it was built
        # from: the agent's own CNR taints, written meanwhile, are never lost.
        def write(attempt: int) -> None:
            obj = self.cluster.get(names.CUSTOM_NODE_RESOURCE, node)
            spec = obj.get("spec") or {}
            current = [t for t in spec.get("taints") or [] if isinstance(t, dict)]
            keep = [
                t
                for t in current
                if not (
                    t.get("key") == BACKSTOP_TAINT.key
                    and t.get("qosLevel") == BACKSTOP_TAINT.qos_level
                )
            ]
            new = [*keep, BACKSTOP_TAINT.to_json()] if present else keep
            body: JSON = {"spec": {"taints": new}}
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv:
                body["metadata"] = {"resourceVersion": rv}
            self.cluster.patch(names.CUSTOM_NODE_RESOURCE, node, body)

        retry_on_conflict(write)

    def _event(self, record: DecisionRecord) -> None:
        if record.object_kind == names.POD.kind:
            ref = ObjectRef.pod(record.object_key, record.object_uid)
            reason = names.EVENT_REASON_EVICT_CREATED
        else:
            ref = ObjectRef.node(record.object_key)
            reason = record.reason
        event_type = "Normal" if record.kind == "backstop-untaint" else "Warning"
        self.events.record(ref, event_type, reason, record.message, record.time, decision=record)
