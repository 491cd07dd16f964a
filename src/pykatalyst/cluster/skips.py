"""Stored objects a component cannot read: skipped, counted, and told on the object.

A daemon that meets a config object it cannot read (one that breaks its kind's schema, or
holds a value the component refuses) leaves it out of the tick and goes on with the
others. Each skip is said two ways:

- **a counter**, one per component: `katalyst_<component>_objects_skipped_total` with the
  labels `kind` and `reason` (`unreadable`, `invalid`), bumped on every reconcile that
  skips the object, so that it climbs for as long as the object stays bad;
- **a Warning Event on the object** (`InvalidConfig` unless the component has its own
  reason), with the message `katalyst validate` gives for it, once per generation of the
  object (its resourceVersion when it has none): a status write does not repeat it, a
  new spec that breaks it anew does.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter

from pykatalyst.api import names
from pykatalyst.api.names import Kind
from pykatalyst.cluster.events import EventRecorder, ObjectRef

# How many (object version, reason) pairs are remembered as already told about.
TOLD_CACHE: Final = 4096


def skipped_metric(component: str) -> str:
    """The counter's name without the `_total` prometheus-client adds."""
    return f"katalyst_{component}_objects_skipped"


def skip_reason(obj: Mapping[str, Any]) -> str:
    """`unreadable` when the object's metadata, spec or status is not an object (it breaks
    any schema), else `invalid` (a field's value is refused)."""
    for key in ("metadata", "spec", "status"):
        if obj.get(key) is not None and not isinstance(obj.get(key), Mapping):
            return names.SKIP_REASON_UNREADABLE
    return names.SKIP_REASON_INVALID


@dataclass(frozen=True, slots=True)
class Skip:
    """One stored object a reconcile left out, and why."""

    kind: Kind
    name: str
    namespace: str
    uid: str
    resource_version: str
    reason: str  # names.SKIP_REASON_*
    message: str
    event_reason: str = names.EVENT_REASON_INVALID_CONFIG
    generation: int = 0
    tell: bool = True  # False: another part of the component writes the object's Event

    @classmethod
    def of(
        cls,
        kind: Kind,
        obj: Mapping[str, Any],
        reason: str,
        message: str,
        event_reason: str = names.EVENT_REASON_INVALID_CONFIG,
        *,
        tell: bool = True,
    ) -> Skip:
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        gen = meta.get("generation")
        return cls(
            kind,
            str(meta.get("name") or ""),
            str(meta.get("namespace") or "") if kind.namespaced else "",
            str(meta.get("uid") or ""),
            str(meta.get("resourceVersion") or ""),
            reason,
            message,
            event_reason,
            gen if isinstance(gen, int) and not isinstance(gen, bool) else 0,
            tell,
        )

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def ref(self) -> ObjectRef:
        return ObjectRef(
            self.kind.kind,
            self.name,
            self.namespace,
            self.uid,
            self.kind.api_version,
            self.resource_version,
        )

    def to_json(self) -> dict[str, str]:
        return {
            "kind": self.kind.kind,
            "object": self.key,
            "reason": self.reason,
            "message": self.message,
        }


class SkippedObjects:
    """One component's counter and Events for the objects its reconciles skip.

    `component` names the counter (`agent`, `controller`, `webhook`); `recorder` writes
    the Events (None: counted only). The counter is registered in `registry` (none: kept
    unregistered, still readable through `count`)."""

    def __init__(
        self,
        component: str,
        recorder: EventRecorder | None,
        registry: CollectorRegistry | None = None,
        *,
        told_cache: int = TOLD_CACHE,
    ) -> None:
        self.recorder = recorder
        self.total = Counter(
            skipped_metric(component),
            "Stored objects a reconcile skipped because it cannot read them, by kind and "
            "reason (unreadable: breaks the kind's schema; invalid: a value is refused).",
            ["kind", "reason"],
            registry=registry,
        )
        self.counts: dict[tuple[str, str], int] = {}
        self._told: OrderedDict[tuple[str, ...], None] = OrderedDict()
        self._cache = told_cache
        self._lock = threading.Lock()

    def report(self, skips: Iterable[Skip], now: float, *, event: bool = True) -> list[str]:
        """Count every skip; write the Event of each object version not told about yet
        (unless `event` is False: another part of the component writes it). Returns
        what could not be told ("kind name: throttled|failed"); never raises."""
        problems: list[str] = []
        for s in skips:
            self.total.labels(s.kind.kind, s.reason).inc()
            with self._lock:
                got = self.counts.get((s.kind.kind, s.reason), 0)
                self.counts[(s.kind.kind, s.reason)] = got + 1
            if not event or not s.tell or self.recorder is None:
                continue
            version = str(s.generation) if s.generation else s.resource_version
            told = (s.kind.kind, s.namespace, s.name, s.uid, version, s.reason)
            with self._lock:
                if told in self._told:
                    continue
            outcome = self.recorder.record(s.ref(), "Warning", s.event_reason, s.message, now)
            if outcome in ("throttled", "failed"):
                problems.append(f"{s.kind.kind} {s.key}: {outcome}")
                continue
            with self._lock:
                self._told[told] = None
                if len(self._told) > self._cache:
                    self._told.popitem(last=False)
        return problems

    def count(self, kind: str, reason: str) -> int:
        """How many skips of `kind` for `reason` this process counted."""
        with self._lock:
            return self.counts.get((kind, reason), 0)
