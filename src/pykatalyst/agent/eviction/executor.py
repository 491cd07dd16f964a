"""Applying an eviction plan through the `Cluster` protocol: `pods/eviction` for victims,
the Node's and the CNR's taint lists for conditions, and an Event for every decision.

Only taints under `node.katalyst.kubewharf.io/` are this manager's: the rest of each taint
list (the kubelet's, an operator's, the backstop's) is kept as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pykatalyst.agent.eviction.records import EvictionRecorder
from pykatalyst.agent.eviction.types import EvictionPlan, EvictionRecord
from pykatalyst.api import names
from pykatalyst.api.names import Kind
from pykatalyst.api.objects import Taint
from pykatalyst.cluster.events import EventRecorder, ObjectRef
from pykatalyst.cluster.protocol import JSON, ApiError, Cluster, NotFound
from pykatalyst.cluster.retry import retry_on_conflict

TAINT_RESYNC_S = 30.0


def record_ref(record: EvictionRecord) -> ObjectRef:
    """The object a decision record is about, as an Event's involvedObject."""
    if record.object_kind == names.POD.kind:
        return ObjectRef.pod(record.object_key, record.object_uid)
    return ObjectRef(record.object_kind, record.object_key, "", record.object_uid)


def _taint_key(t: Mapping[str, Any]) -> tuple[str, str, str, str]:
    return (
        str(t.get("key", "")),
        str(t.get("effect", "")),
        str(t.get("value", "") or ""),
        str(t.get("qosLevel", "") or ""),
    )


def sync_taints(
    cluster: Cluster,
    kind: Kind,
    name: str,
    desired: Sequence[Taint],
    owns: str,
) -> str:
    """Make the object's taints whose key starts with `owns` exactly `desired`, keeping
    the others. Returns "unchanged" or "patched".

    A merge patch replaces the whole list, so it carries the resourceVersion it was
    computed from: a taint someone else added meanwhile is never overwritten; the write is
    recomputed instead (a few times, then the Conflict goes to the caller)."""
    want = [t.to_json() for t in desired]

    def write(attempt: int) -> str:
        obj = cluster.get(kind, name)
        current = [t for t in (obj.get("spec") or {}).get("taints") or [] if isinstance(t, dict)]
        ours = sorted(_taint_key(t) for t in current if str(t.get("key", "")).startswith(owns))
        if ours == sorted(_taint_key(t) for t in want):
            return "unchanged"
        keep = [t for t in current if not str(t.get("key", "")).startswith(owns)]
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        body: JSON = {"spec": {"taints": keep + want}}
        if rv:
            body["metadata"] = {"resourceVersion": rv}
        cluster.patch(kind, name, body)
        return "patched"

    return retry_on_conflict(write)


@dataclass(frozen=True, slots=True)
class ExecutionResult:
    time: float
    evicted: tuple[str, ...] = ()
    failed: tuple[tuple[str, str], ...] = ()
    node_taints: str = "unchanged"
    cnr_taints: str = "unchanged"
    events: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "eviction-execution",
            "time": self.time,
            "evicted": list(self.evicted),
            "failed": [{"pod": p, "error": e} for p, e in self.failed],
            "node_taints": self.node_taints,
            "cnr_taints": self.cnr_taints,
            "events": self.events,
            "notes": list(self.notes),
        }


class EvictionExecutor:
    """Carries out plans for one node. `dry_run` writes nothing (records are still kept)."""

    def __init__(
        self,
        cluster: Cluster,
        node: str,
        recorder: EvictionRecorder,
        *,
        dry_run: bool = False,
        component: str = names.AGENT_COMPONENT,
    ) -> None:
        self.cluster = cluster
        self.node = node
        self.recorder = recorder
        self.dry_run = dry_run
        self.component = component
        self.events = EventRecorder(cluster, component, node)
        self._applied: dict[str, tuple[tuple[str, str, str, str], ...]] = {}
        self._applied_at: dict[str, float] = {}

    def apply(self, plan: EvictionPlan) -> ExecutionResult:
        records: list[EvictionRecord] = list(plan.records)
        notes: list[str] = []
        evicted: list[str] = []
        failed: list[tuple[str, str]] = []
        node_state = self._taints("node", names.NODE, plan.node_taints, plan.time, notes)
        cnr_state = self._taints(
            "cnr", names.CUSTOM_NODE_RESOURCE, plan.cnr_taints, plan.time, notes
        )
        for victim in plan.evictions:
            pod = victim.pod
            if self.dry_run:
                evicted.append(pod.key)
                continue
            try:
                self.cluster.evict(pod.namespace, pod.name, victim.deletion_grace_s)
                evicted.append(pod.key)
            except NotFound:
                notes.append(f"{pod.key}: already gone")
            except ApiError as exc:
                failed.append((pod.key, str(exc)))
                records.append(
                    EvictionRecord(
                        time=plan.time,
                        node=self.node,
                        kind="eviction-failed",
                        plugin=victim.plugin,
                        reason=exc.reason,
                        message=f"eviction of {pod.key} refused: {exc}",
                        object_key=pod.key,
                        object_uid=pod.uid,
                    )
                )
        self.recorder.add(records)
        events = 0 if self.dry_run else self._events(records)
        return ExecutionResult(
            plan.time, tuple(evicted), tuple(failed), node_state, cnr_state, events, tuple(notes)
        )

    def _taints(
        self, what: str, kind: Kind, desired: Sequence[Taint], now: float, notes: list[str]
    ) -> str:
        key = tuple(sorted(_taint_key(t.to_json()) for t in desired))
        fresh = now - self._applied_at.get(what, -1e18) < TAINT_RESYNC_S
        if self._applied.get(what) == key and fresh:
            return "unchanged"
        if self.dry_run:
            return "dry run"
        try:
            state = sync_taints(self.cluster, kind, self.node, desired, names.TAINT_PREFIX)
        except NotFound:
            return "not found"
        except ApiError as exc:
            notes.append(f"{what} taints: {exc}")
            return "error"
        self._applied[what] = key
        self._applied_at[what] = now
        return state

    def _events(self, records: Iterable[EvictionRecord]) -> int:
        count = 0
        for record in records:
            if record.dry_run:
                continue
            reason = {
                "eviction": names.EVENT_REASON_EVICT_CREATED,
                "eviction-succeeded": names.EVENT_REASON_EVICT_SUCCEEDED,
                "eviction-failed": names.EVENT_REASON_EVICT_FAILED,
            }.get(record.kind)
            if self.events.record(
                record_ref(record),
                "Normal" if record.kind.endswith(("cleared", "succeeded")) else "Warning",
                reason or record.reason,
                record.message,
                record.time,
                decision=record,
            ) in ("created", "updated"):
                count += 1
        return count
