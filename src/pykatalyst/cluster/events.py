"""The one way pykatalyst writes Kubernetes Events, with client-go's recorder semantics.

- **Aggregation.** An Event identical to one this recorder wrote (same object, type,
  reason and message) bumps that Event's `count` and `lastTimestamp` instead of adding a
  new one; if it was deleted meanwhile (Events expire after an hour), a new one is written.
- **Spam filter.** Each involved object has a token bucket (25 Events at once, then one
  every 5 minutes, as client-go's EventSourceObjectSpamFilter): past it, Events for that
  object are dropped and counted, so one misbehaving pod cannot flood the API server.
- **Structured records.** An Event that stands for a decision carries the decision record
  (`DecisionRecord.to_json()`) in the annotation `names.EVENT_RECORD_ANNOTATION`, so
  `katalyst explain` reads what happened without parsing the message.

Writes never raise: a failed write is logged, counted in the result, and the caller's loop
goes on. Time is passed in (`now`, seconds), never read from the wall.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import zlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from pykatalyst.api import names
from pykatalyst.api.records import DecisionRecord
from pykatalyst.api.timefmt import rfc3339
from pykatalyst.cluster.protocol import JSON, AlreadyExists, ApiError, Cluster, NotFound
from pykatalyst.cluster.ratelimit import TokenBucket

log = logging.getLogger(__name__)

# client-go's defaults (tools/record): burst and refill of the per-object spam filter, and
# how many distinct Events the aggregation cache remembers.
SPAM_BURST: Final = 25
SPAM_REFILL_S: Final = 300.0
CACHE_SIZE: Final = 4096
# A record larger than this is left out of the annotation (the message still says it all).
MAX_RECORD_BYTES: Final = 16 * 1024

Outcome = Literal["created", "updated", "throttled", "failed"]


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The Event's `involvedObject`. Nodes and other cluster-scoped objects have no
    namespace; their Events go to `default`, as the kubelet's do."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"
    resource_version: str = ""

    @classmethod
    def pod(cls, key: str, uid: str = "", resource_version: str = "") -> ObjectRef:
        """A pod by its "namespace/name" key."""
        ns, _, name = key.partition("/")
        return cls(names.POD.kind, name, ns, uid, "v1", resource_version)

    @classmethod
    def node(cls, name: str, uid: str = "") -> ObjectRef:
        return cls(names.NODE.kind, name, "", uid)

    @property
    def event_namespace(self) -> str:
        return self.namespace or names.EVENT_NAMESPACE_FOR_NODES

    def to_json(self) -> JSON:
        out: JSON = {"kind": self.kind, "name": self.name, "apiVersion": self.api_version}
        if self.namespace:
            out["namespace"] = self.namespace
        if self.uid:
            out["uid"] = self.uid
        if self.resource_version:
            out["resourceVersion"] = self.resource_version
        return out


class EventRecorder:
    """Writes core/v1 Events for one component (`source.component`, and `source.host`
    for a node's agent)."""

    def __init__(
        self,
        cluster: Cluster,
        component: str,
        host: str = "",
        *,
        burst: int = SPAM_BURST,
        refill_s: float = SPAM_REFILL_S,
        cache_size: int = CACHE_SIZE,
    ) -> None:
        self.cluster = cluster
        self.component = component
        self.host = host
        self._burst = burst
        self._refill_s = refill_s
        self._cache_size = cache_size
        self._seen: OrderedDict[tuple[str, ...], tuple[str, int]] = OrderedDict()
        self._buckets: OrderedDict[tuple[str, ...], TokenBucket] = OrderedDict()
        self._seq = itertools.count()
        self._salt = zlib.crc32(f"{component}/{host}".encode())
        # Callers may record from several threads (the scheduler's binds): the caches are
        # guarded, the requests are not serialised.
        self._lock = threading.Lock()
        self._bump_lock = threading.Lock()
        self.throttled = 0
        self.failed = 0

    def record(
        self,
        ref: ObjectRef,
        event_type: str,
        reason: str,
        message: str,
        now: float,
        *,
        action: str = "",
        decision: DecisionRecord | None = None,
    ) -> Outcome:
        """Write (or bump) one Event; what happened is returned, never raised."""
        key = (ref.kind, ref.namespace, ref.name, ref.uid, event_type, reason, message)
        with self._lock:
            if not self._allow(ref, now):
                self.throttled += 1
                return "throttled"
            seen = self._seen.get(key)
        ts = rfc3339(now)
        if seen is not None:
            # one bump at a time, from the count as the last bump left it: no lost counts
            with self._bump_lock:
                with self._lock:
                    seen = self._seen.get(key)
                outcome = self._bump(ref, key, seen, ts) if seen is not None else None
            if outcome is not None:
                return outcome
        body = self._body(ref, event_type, reason, message, now, action, decision)
        try:
            made = self.cluster.create(names.EVENT, body, ref.event_namespace)
        except AlreadyExists:
            body["metadata"]["name"] = self._name(ref, now)
            try:
                made = self.cluster.create(names.EVENT, body, ref.event_namespace)
            except ApiError as exc:
                return self._failed(ref, reason, exc)
        except ApiError as exc:
            return self._failed(ref, reason, exc)
        name = str((made.get("metadata") or {}).get("name") or body["metadata"]["name"])
        self._remember(key, (name, 1))
        return "created"

    def _bump(
        self, ref: ObjectRef, key: tuple[str, ...], seen: tuple[str, int], ts: str
    ) -> Outcome | None:
        name, count = seen
        try:
            self.cluster.patch(
                names.EVENT, name, {"count": count + 1, "lastTimestamp": ts}, ref.event_namespace
            )
        except NotFound:
            with self._lock:
                self._seen.pop(key, None)
            return None  # expired: write a new one
        except ApiError as exc:
            return self._failed(ref, key[5], exc)
        self._remember(key, (name, count + 1))
        return "updated"

    def _body(
        self,
        ref: ObjectRef,
        event_type: str,
        reason: str,
        message: str,
        now: float,
        action: str,
        decision: DecisionRecord | None,
    ) -> JSON:
        ts = rfc3339(now)
        source: JSON = {"component": self.component}
        if self.host:
            source["host"] = self.host
        meta: JSON = {"name": self._name(ref, now), "namespace": ref.event_namespace}
        if decision is not None:
            text = json.dumps(decision.to_json(), separators=(",", ":"), sort_keys=True)
            if len(text) <= MAX_RECORD_BYTES:
                meta["annotations"] = {names.EVENT_RECORD_ANNOTATION: text}
        body: JSON = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": meta,
            "involvedObject": ref.to_json(),
            "reason": reason,
            "message": message,
            "type": event_type,
            "source": source,
            "reportingComponent": self.component,
            "reportingInstance": self.host or self.component,
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "count": 1,
        }
        if action:
            body["action"] = action
        return body

    def _name(self, ref: ObjectRef, now: float) -> str:
        # client-go's form, <object>.<hex time>; the writer's identity and a sequence number
        # keep two writers (or two Events in one tick of a virtual clock) apart.
        base = ref.name[:200] or "event"
        return f"{base}.{int(now * 1e9):x}{self._salt:08x}{next(self._seq):x}"

    def _allow(self, ref: ObjectRef, now: float) -> bool:
        key = (ref.kind, ref.namespace, ref.name, ref.uid)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = TokenBucket(0.0, self._burst, period_s=self._refill_s, now=now)
            self._buckets[key] = bucket
            if len(self._buckets) > self._cache_size:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
        return bucket.try_take(now)

    def _remember(self, key: tuple[str, ...], value: tuple[str, int]) -> None:
        with self._lock:
            self._seen[key] = value
            self._seen.move_to_end(key)
            if len(self._seen) > self._cache_size:
                self._seen.popitem(last=False)

    def _failed(self, ref: ObjectRef, reason: str, exc: ApiError) -> Outcome:
        with self._lock:
            self.failed += 1
        log.warning("cannot record Event %s for %s %s: %s", reason, ref.kind, ref.name, exc)
        return "failed"


def decision_of(event: Mapping[str, Any]) -> DecisionRecord | None:
    """The decision record an Event carries in its annotation, if it has a readable one."""
    meta = event.get("metadata")
    ann = meta.get("annotations") if isinstance(meta, Mapping) else None
    text = ann.get(names.EVENT_RECORD_ANNOTATION) if isinstance(ann, Mapping) else None
    if not isinstance(text, str) or len(text) > MAX_RECORD_BYTES:
        return None
    try:
        raw = json.loads(text)
        return DecisionRecord.from_json(raw) if isinstance(raw, dict) else None
    except (ValueError, TypeError):
        return None
