"""An in-process Kubernetes API server: the simulator's cluster and most tests' substrate.

It keeps the semantics components rely on, so that code proven here behaves the same
against a real API server: a global resourceVersion, optimistic concurrency, watch from a
version with a bounded history (410 Gone past it), selector-filtered watches that turn
"stops matching" into DELETED, status subresources, `pods/binding`, `pods/eviction`,
finalizers and graceful deletion, and a mutating-then-validating admission chain.

Stored objects are never mutated in place: every write builds a new dict and replaces the
old one. That lets the watch history and the per-node index share them safely, and every
object handed to a caller is a fresh deep copy.
"""

from __future__ import annotations

import builtins
import contextlib
import gc
import math
import random
import re
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from pykatalyst.api.names import (
    CONFIG_MAP,
    CRD,
    DEFAULT_NAMESPACE,
    EVENT,
    KATALYST_KINDS,
    KUBE_SYSTEM_NAMESPACE,
    LEASE,
    NAMESPACE,
    NODE,
    POD,
    POD_DISRUPTION_BUDGET,
    SYSTEM_NAMESPACE,
    Kind,
)
from pykatalyst.api.quantity import Quantity, QuantityError
from pykatalyst.api.timefmt import parse_rfc3339, rfc3339
from pykatalyst.cluster.admission import (
    AdmissionPlugin,
    AdmissionRequest,
    AdmissionResponse,
    AdmissionResult,
    Operation,
)
from pykatalyst.cluster.clock import Clock, VirtualClock
from pykatalyst.cluster.decode import decode
from pykatalyst.cluster.patch import (
    PatchError,
    copy_json,
    copy_object,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)
from pykatalyst.cluster.protocol import (
    JSON,
    AlreadyExists,
    ApiError,
    BadRequest,
    Cluster,
    Conflict,
    EventType,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    ObjectList,
    PatchType,
    TooManyRequests,
    WatchEvent,
)
from pykatalyst.cluster.selectors import (
    FieldSelector,
    LabelSelector,
    label_selector_from_dict,
    parse_field_selector,
    parse_label_selector,
    valid_label_key,
    valid_label_value,
)

DEFAULT_NAMESPACES: Final = (DEFAULT_NAMESPACE, KUBE_SYSTEM_NAMESPACE, SYSTEM_NAMESPACE)
DEFAULT_SCHEDULER: Final = "default-scheduler"
DEFAULT_TERMINATION_GRACE_SECONDS: Final = 30

_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_POD_MUTABLE_SPEC = (
    "activeDeadlineSeconds",
    "terminationGracePeriodSeconds",
    "tolerations",
    "schedulingGates",
)
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# The alphabet the API server draws generateName suffixes from (no vowels, no look-alikes).
_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


@contextlib.contextmanager
def _bulk_copy(n: int) -> Iterator[None]:
    """Pause the cyclic garbage collector while copying many objects. Copies build no
    cycles, yet their allocations trigger full collections that rescan the whole store:
    that more than doubles the cost of listing 50,000 pods."""
    if n < 1000 or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class _NotJSON(Exception):
    pass


_JSON_SCALARS = (str, int, float, bool, type(None))
_EXACT_SCALARS = (str, int, bool, type(None))  # floats are checked: NaN and Inf are not JSON

MAX_DEPTH: Final = 128
"""The deepest nesting of objects and arrays a stored object may have (Kubernetes objects
nest a few dozen levels at most; a 900-deep body is refused, not a crash)."""

MAX_GRACE_SECONDS: Final = (2**63 - 1) // 1_000_000_000
"""The longest grace period: kube-apiserver turns seconds into a Go time.Duration (int64
nanoseconds), about 292 years."""


def _ingest_fast(value: Any, depth: int = 0) -> Any:
    t = type(value)
    if depth > MAX_DEPTH:
        raise _NotJSON
    if t is dict:
        out = {}
        for k, v in value.items():
            if type(k) is not str:
                raise _NotJSON
            out[k] = v if type(v) in _EXACT_SCALARS else _ingest_fast(v, depth + 1)
        return out
    if t is list or t is tuple:
        return [v if type(v) in _EXACT_SCALARS else _ingest_fast(v, depth + 1) for v in value]
    if t is float:
        if not math.isfinite(value):
            raise _NotJSON
        return value
    if t in _JSON_SCALARS:
        return value
    if isinstance(value, Mapping):
        return _ingest_fast(dict(value), depth)
    raise _NotJSON


def _locate_non_json(value: Any, path: str, depth: int = 0) -> None:
    """The slow walk that runs only to explain a rejection."""
    if depth > MAX_DEPTH:
        raise BadRequest(
            f"{path or 'object'}: nested deeper than {MAX_DEPTH} levels of objects and arrays"
        )
    if isinstance(value, Mapping):
        for k, v in value.items():
            if type(k) is not str:
                raise BadRequest(f"{path or 'object'}: key {k!r} is not a string")
            _locate_non_json(v, f"{path}.{k}" if path else k, depth + 1)
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _locate_non_json(v, f"{path}[{i}]", depth + 1)
    elif isinstance(value, float) and not math.isfinite(value):
        raise BadRequest(
            f"{path or 'object'}: {value!r} is not a JSON number (NaN and Infinity are refused)"
        )
    elif type(value) not in _JSON_SCALARS:
        raise BadRequest(
            f"{path or 'object'}: {type(value).__name__} {value!r} is not a JSON value "
            "(accepted: object, array, string, number, boolean, null)"
        )


def grace_seconds(value: Any, field: str) -> int:
    """A grace period as kube-apiserver reads one: an integer number of seconds that fits a
    Go time.Duration; a negative one means the shortest, 1 second."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise BadRequest(f"{field}: invalid value {value!r}: expected an integer of seconds")
    if value > MAX_GRACE_SECONDS:
        raise Invalid(
            f"{field}: Invalid value: {value}: must be at most {MAX_GRACE_SECONDS} seconds"
        )
    return 1 if value < 0 else value


def resource_name(kind: Kind) -> str:
    """The qualified resource the API server names in messages: `pods`,
    `customnoderesources.node.katalyst.kubewharf.io`."""
    return f"{kind.plural}.{kind.group}" if kind.group else kind.plural


EvictionGuard = Callable[[JSON], str | None]


# --- internal state -----------------------------------------------------------------------


@dataclass(slots=True)
class _KindState:
    kind: Kind
    resource: str
    status_subresource: bool
    unconditional_update: bool
    builtin: bool
    # namespace ("" for cluster-scoped) -> name -> stored object (never mutated)
    objects: dict[str, dict[str, JSON]] = field(default_factory=dict)
    watchers: list[MemoryWatch] = field(default_factory=list)
    # pods only: watchers pinned to one spec.nodeName, and pods indexed by node
    node_watchers: dict[str, list[MemoryWatch]] = field(default_factory=dict)
    by_node: dict[str, dict[tuple[str, str], JSON]] = field(default_factory=dict)

    def count(self) -> int:
        return sum(len(v) for v in self.objects.values())


@dataclass(frozen=True, slots=True)
class _Event:
    rv: int
    key: tuple[str, str]
    type: EventType
    obj: JSON
    old: JSON | None  # the previous state, for MODIFIED


def _is_core(st: _KindState, plural: str) -> bool:
    return st.kind.group == "" and st.kind.plural == plural


def _is_pod(st: _KindState) -> bool:
    return st.kind.group == "" and st.kind.plural == "pods"


def _is_crd(st: _KindState) -> bool:
    return st.kind.group == CRD.group and st.kind.plural == CRD.plural


# Of the core group only these kinds' strategies set metadata.generation (kube-apiserver
# 1.34): nodes, namespaces, config maps and events have none. Neither have leases nor
# events.k8s.io events; CRDs, custom resources and the workload kinds have it.
_CORE_WITH_GENERATION: Final = frozenset({"pods", "replicationcontrollers", "podtemplates"})
_GROUPS_WITHOUT_GENERATION: Final = frozenset({"coordination.k8s.io", "events.k8s.io"})


def _is_custom_resource(st: _KindState) -> bool:
    """Served from a CRD (Katalyst kinds included) rather than built into the server."""
    group = st.kind.group
    return group not in ("", "apps", "batch", "policy", "autoscaling") and not group.endswith(
        ".k8s.io"
    )


def _tracks_generation(st: _KindState) -> bool:
    if st.kind.group == "":
        return st.kind.plural in _CORE_WITH_GENERATION
    return st.kind.group not in _GROUPS_WITHOUT_GENERATION


def _field(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """A stored object's `spec` or `status` as a mapping; one of another type (which only a
    kind without a typed decode can hold) reads as empty."""
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def _count(status: Mapping[str, Any], key: str) -> int:
    value = status.get(key, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _pdb_selects(pdb: JSON, labels: Mapping[str, str]) -> bool:
    """Whether a PodDisruptionBudget covers a pod with these labels (an unreadable
    selector covers nothing, as the eviction subresource reads it)."""
    try:
        return label_selector_from_dict(_field(pdb, "spec").get("selector")).matches(labels)
    except BadRequest:
        return False


def _pod_ready(pod: JSON) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _budget_refusal(cause: str, retry_after: float | None) -> TooManyRequests:
    return TooManyRequests(
        "Cannot evict pod as it would violate the pod's disruption budget.",
        details={"causes": [{"reason": "DisruptionBudget", "message": cause}]},
        retry_after_seconds=retry_after,
    )


def _nanos(value: Any) -> int:
    try:
        return Quantity.parse(str(value)).nanos
    except QuantityError:
        return 0


def pod_qos_class(spec: Mapping[str, Any]) -> str:
    """The Kubernetes QoS class the API server writes to a new pod's status.qosClass, from
    the cpu and memory requests and limits of its containers and init containers."""
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    guaranteed = True
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            res = (c.get("resources") if isinstance(c, dict) else None) or {}
            for name in ("cpu", "memory"):
                req = _nanos((res.get("requests") or {}).get(name, 0))
                lim = _nanos((res.get("limits") or {}).get(name, 0))
                if req > 0:
                    requests[name] = requests.get(name, 0) + req
                if lim > 0:
                    limits[name] = limits.get(name, 0) + lim
                else:
                    guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and requests == limits:
        return "Guaranteed"
    return "Burstable"


def _drop_empty_meta(meta: JSON) -> None:
    """ObjectMeta's lists and maps are omitted when empty, as the API server writes them."""
    for key in ("labels", "annotations", "finalizers", "ownerReferences"):
        if key in meta and not meta[key]:
            del meta[key]


def _bump_generation(meta: JSON, old_meta: Mapping[str, Any]) -> None:
    if "generation" in old_meta:
        meta["generation"] = int(old_meta["generation"]) + 1


def _with_rv(obj: JSON, rv: str) -> JSON:
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": rv}}


class MemoryWatch:
    """An open watch on a MemoryCluster. Events queue here as they happen; a watcher that
    lets more than the cluster's history window pile up is cut off with 410 Gone, like a
    slow client of a real API server."""

    def __init__(
        self,
        cluster: MemoryCluster,
        state: _KindState,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        allow_bookmarks: bool,
        node_key: str | None,
    ) -> None:
        self._cluster = cluster
        self._state = state
        self._namespace = namespace
        self._labels = labels
        self._fields = fields
        self.allow_bookmarks = allow_bookmarks
        self._node_key = node_key
        self._pending: deque[tuple[EventType, JSON]] = deque()
        self._closed = False
        self._gone: str | None = None
        self._limit = cluster.watch_history

    def _match(self, obj: JSON) -> bool:
        meta = obj["metadata"]
        if self._namespace is not None and meta.get("namespace") != self._namespace:
            return False
        if not self._labels.empty and not self._labels.matches(meta.get("labels")):
            return False
        return self._fields.empty or self._fields.matches(obj)

    def _push(self, etype: EventType, obj: JSON) -> None:
        if self._gone is not None:
            return
        if len(self._pending) >= self._limit:
            self._pending.clear()
            self._gone = (
                f"watch of {self._state.resource} fell more than {self._limit} events "
                "behind and was closed; list again and watch from the new resourceVersion"
            )
            return
        self._pending.append((etype, obj))

    def _offer(self, ev: _Event) -> None:
        if self._closed:
            return
        if ev.type == "MODIFIED":
            assert ev.old is not None
            now_ok = self._match(ev.obj)
            was_ok = self._match(ev.old)
            if now_ok:
                self._push("MODIFIED" if was_ok else "ADDED", ev.obj)
            elif was_ok:
                # As the watch cache does: the old content, stamped with the new version.
                self._push("DELETED", _with_rv(ev.old, ev.obj["metadata"]["resourceVersion"]))
        elif self._match(ev.obj) or (ev.type == "DELETED" and ev.old and self._match(ev.old)):
            # A delete is reported to whoever saw the object, even if the final write
            # (say, dropping the last finalizer) also changed what the selector looks at.
            self._push(ev.type, ev.obj)

    def next_events(self, timeout: float = 0.0) -> list[WatchEvent]:
        cond = self._cluster._cond
        with cond:
            if self._gone is None and not self._pending and not self._closed and timeout > 0:
                cond.wait_for(
                    lambda: bool(self._pending) or self._closed or self._gone is not None,
                    timeout,
                )
            if self._gone is not None:
                # Keeps raising until closed: a stream that lost events must not look healthy.
                self._unsubscribe()
                raise Gone(self._gone)
            if self._closed:
                return []
            with _bulk_copy(len(self._pending)):
                out = [WatchEvent(t, copy_object(o)) for t, o in self._pending]
            self._pending.clear()
            return out

    def close(self) -> None:
        with self._cluster._cond:
            self._detach()
            self._cluster._cond.notify_all()

    def _detach(self) -> None:
        self._closed = True
        self._gone = None
        self._pending.clear()
        self._unsubscribe()

    def _unsubscribe(self) -> None:
        st = self._state
        if self._node_key is not None:
            lst = st.node_watchers.get(self._node_key, [])
            if self in lst:
                lst.remove(self)
        elif self in st.watchers:
            st.watchers.remove(self)

    def __enter__(self) -> MemoryWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- the cluster --------------------------------------------------------------------------


class MemoryCluster:
    """`Cluster` in memory with API-server semantics. Thread-safe: one re-entrant lock
    guards everything (admission plugins may read the cluster while a write is under way).

    `clock` stamps creationTimestamp/deletionTimestamp and drives graceful pod deletion
    (default: a VirtualClock at 0, so tests and the simulator share one notion of time).
    `watch_history` bounds both the replayable event history and how far a single watcher
    may fall behind. `seed` makes uids and generateName suffixes reproducible;
    `uid_factory` replaces uid generation entirely.
    """

    def __init__(
        self,
        clock: Clock | None = None,
        watch_history: int = 1000,
        *,
        seed: int | None = None,
        uid_factory: Callable[[], str] | None = None,
        namespaces: Iterable[str] = DEFAULT_NAMESPACES,
    ) -> None:
        if watch_history < 1:
            raise ValueError(f"watch_history must be at least 1, got {watch_history}")
        self.clock: Clock = clock if clock is not None else VirtualClock()
        self.watch_history = watch_history
        self._rng = random.Random(seed)
        self._seeded = seed is not None
        self._uid_factory = uid_factory
        self._cond = threading.Condition(threading.RLock())
        self._rv = 0
        self._history: deque[_Event] = deque(maxlen=watch_history)
        self._floor = 0  # events with rv <= floor are no longer replayable
        self._kinds: dict[tuple[str, str], _KindState] = {}
        self._terminating: dict[tuple[str, str], float] = {}
        self._mutating: list[tuple[str, AdmissionPlugin]] = []
        self._validating: list[tuple[str, AdmissionPlugin]] = []
        self.eviction_guard: EvictionGuard | None = None
        for k in (POD, NODE, NAMESPACE, CRD):
            self.register_kind(k, status_subresource=True, unconditional_update=k != CRD)
        for k in (EVENT, CONFIG_MAP, LEASE):
            self.register_kind(k, status_subresource=False, unconditional_update=True)
        self.register_kind(
            POD_DISRUPTION_BUDGET, status_subresource=True, unconditional_update=True
        )
        for k in KATALYST_KINDS:
            self.register_kind(k, status_subresource=True, unconditional_update=False)
        for st in self._kinds.values():
            st.builtin = True
        for ns in namespaces:
            self.create(NAMESPACE, {"metadata": {"name": ns}})

    # --- kinds ----------------------------------------------------------------------------

    def register_kind(
        self,
        kind: Kind,
        status_subresource: bool = True,
        unconditional_update: bool = False,
    ) -> None:
        """Serve `kind`. `unconditional_update=False` (the custom-resource behaviour) makes
        an update without metadata.resourceVersion a 422, as for real custom resources."""
        with self._cond:
            key = (kind.group, kind.plural)
            st = self._kinds.get(key)
            if st is None:
                self._kinds[key] = _KindState(
                    kind, resource_name(kind), status_subresource, unconditional_update, False
                )
            else:
                st.kind = kind
                st.status_subresource = status_subresource

    def registered_kinds(self) -> list[Kind]:
        with self._cond:
            return [st.kind for st in self._kinds.values()]

    def lookup_kind(self, group: str, plural: str) -> Kind:
        """The served kind for an API path's group and resource (NotFound if unknown)."""
        with self._cond:
            return self._state(Kind(group, "", "", plural, False)).kind

    def has_status_subresource(self, kind: Kind) -> bool:
        with self._cond:
            return self._state(kind).status_subresource

    def _state(self, kind: Kind, verb: str = "get") -> _KindState:
        st = self._kinds.get((kind.group, kind.plural))
        if st is None:
            raise NotFound(
                f"the server could not find the requested resource ({verb} {resource_name(kind)})",
                details={"group": kind.group, "kind": kind.plural},
            )
        return st

    def _register_crd(self, crd: JSON) -> None:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        versions = spec.get("versions") or []
        storage = next((v for v in versions if v.get("storage")), versions[0] if versions else {})
        plural, group = names.get("plural"), spec.get("group")
        if not plural or not group or not names.get("kind"):
            raise Invalid(
                f'CustomResourceDefinition "{crd["metadata"].get("name", "")}" is invalid: '
                "spec.group, spec.names.plural and spec.names.kind are required",
            )
        kind = Kind(
            group,
            str(storage.get("name", "v1")),
            str(names["kind"]),
            str(plural),
            spec.get("scope", "Namespaced") == "Namespaced",
            tuple(names.get("shortNames") or ()),
        )
        has_status = "status" in (storage.get("subresources") or {})
        existing = self._kinds.get((group, plural))
        if existing is not None and existing.builtin:
            existing.status_subresource = has_status or existing.status_subresource
            return
        self.register_kind(kind, status_subresource=has_status, unconditional_update=False)

    # --- helpers --------------------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        with self._cond:
            return str(self._rv)

    def _new_uid(self) -> str:
        if self._uid_factory is not None:
            return self._uid_factory()
        if self._seeded:
            return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
        return str(uuid.uuid4())

    def _namespace_of(self, st: _KindState, namespace: str | None, required: bool) -> str:
        if not st.kind.namespaced:
            return ""
        if not namespace:
            if required:
                raise BadRequest(f"a namespace is required for {st.resource}")
            return ""
        return namespace

    def _get_stored(self, st: _KindState, name: str, ns: str) -> JSON:
        obj = st.objects.get(ns, {}).get(name)
        if obj is None:
            raise NotFound(
                f'{st.resource} "{name}" not found',
                details={"name": name, "group": st.kind.group, "kind": st.kind.plural},
            )
        return obj

    def _invalid(self, st: _KindState, name: str, field_path: str, message: str) -> Invalid:
        return Invalid(
            f'{st.kind.kind} "{name}" is invalid: {field_path}: {message}',
            details={
                "name": name,
                "group": st.kind.group,
                "kind": st.kind.kind,
                "causes": [
                    {"reason": "FieldValueInvalid", "message": message, "field": field_path}
                ],
            },
        )

    def _conflict(self, st: _KindState, name: str, why: str) -> Conflict:
        return Conflict(
            f'Operation cannot be fulfilled on {st.resource} "{name}": {why}',
            details={"name": name, "group": st.kind.group, "kind": st.kind.plural},
        )

    def _ingest(self, st: _KindState, value: Any) -> Any:
        """Copy a caller's value into the store's own JSON, rejecting what JSON cannot hold
        with a message naming where it sits."""
        try:
            return _ingest_fast(value)
        except _NotJSON:
            _locate_non_json(value, "")
            raise BadRequest("the object is not JSON") from None  # pragma: no cover

    # --- reads ----------------------------------------------------------------------------

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> JSON:
        with self._cond:
            st = self._state(kind)
            ns = self._namespace_of(st, namespace, required=True)
            return copy_object(self._get_stored(st, name, ns))

    def _select(
        self, st: _KindState, ns: str | None, labels: LabelSelector, fields: FieldSelector
    ) -> list[JSON]:
        node = fields.exact("spec.nodeName") if _is_pod(st) else None
        if node is not None:
            pool = sorted(st.by_node.get(node, {}).items())
            candidates: Iterable[JSON] = (o for _, o in pool)
        elif ns is not None:
            candidates = (o for _, o in sorted(st.objects.get(ns, {}).items()))
        else:
            candidates = (o for n in sorted(st.objects) for _, o in sorted(st.objects[n].items()))
        out = []
        for obj in candidates:
            meta = obj["metadata"]
            if ns is not None and meta.get("namespace", "") != ns:
                continue
            if not labels.empty and not labels.matches(meta.get("labels")):
                continue
            if not fields.empty and not fields.matches(obj):
                continue
            out.append(obj)
        return out

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ObjectList:
        with self._cond:
            st = self._state(kind, "list")
            labels = parse_label_selector(label_selector)
            fields = parse_field_selector(field_selector, st.resource)
            ns = namespace if st.kind.namespaced and namespace else None
            items = self._select(st, ns, labels, fields)
            with _bulk_copy(len(items)):
                copies = [copy_object(o) for o in items]
            return ObjectList(copies, str(self._rv))

    def watch(
        self,
        kind: Kind,
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        allow_bookmarks: bool = False,
    ) -> MemoryWatch:
        """Unset or "0" resourceVersion: synthetic ADDED for every matching object, then
        the changes. A specific version: every change after it (410 Gone when it is older
        than the history window)."""
        with self._cond:
            st = self._state(kind, "watch")
            labels = parse_label_selector(label_selector)
            fields = parse_field_selector(field_selector, st.resource)
            ns = namespace if st.kind.namespaced and namespace else None
            node_key = fields.exact("spec.nodeName") if _is_pod(st) else None
            w = MemoryWatch(self, st, ns, labels, fields, allow_bookmarks, node_key)
            if resource_version in (None, "", "0"):
                w._pending.extend(("ADDED", o) for o in self._select(st, ns, labels, fields))
            else:
                try:
                    since = int(str(resource_version))
                except ValueError:
                    raise BadRequest(
                        f"resourceVersion: invalid value {resource_version!r}: "
                        "it must be a version returned by this server"
                    ) from None
                if since < self._floor:
                    raise Gone(f"too old resource version: {since} ({self._floor + 1})")
                key = (st.kind.group, st.kind.plural)
                for ev in self._history:
                    if ev.rv > since and ev.key == key:
                        w._offer(ev)
            # Catching up is not falling behind: the window counts from here.
            w._limit = len(w._pending) + self.watch_history
            if node_key is not None:
                st.node_watchers.setdefault(node_key, []).append(w)
            else:
                st.watchers.append(w)
            return w

    def bookmark(self) -> str:
        """Send a BOOKMARK with the current resourceVersion to every watch that asked for
        bookmarks (a real server does this about once a minute); returns the version."""
        with self._cond:
            rv = str(self._rv)
            for st in self._kinds.values():
                ws = list(st.watchers)
                for lst in st.node_watchers.values():
                    ws.extend(lst)
                bm = {
                    "apiVersion": st.kind.api_version,
                    "kind": st.kind.kind,
                    "metadata": {"resourceVersion": rv},
                }
                for w in ws:
                    if w.allow_bookmarks and not w._closed:
                        w._push("BOOKMARK", bm)
            self._cond.notify_all()
            return rv

    # --- the write path -------------------------------------------------------------------

    def _commit(self, st: _KindState, etype: EventType, obj: JSON, old: JSON | None) -> JSON:
        """Stamp a new resourceVersion on `obj` (a store-owned dict) and publish it."""
        self._rv += 1
        rv = str(self._rv)
        meta = obj["metadata"]
        if etype == "DELETED":
            obj = _with_rv(obj, rv)
            meta = obj["metadata"]
        else:
            meta["resourceVersion"] = rv
        ns = meta.get("namespace", "")
        name = meta["name"]
        is_pod = _is_pod(st)
        if is_pod:
            prev = st.objects.get(ns, {}).get(name)
            if prev is not None:
                prev_node = (prev.get("spec") or {}).get("nodeName") or ""
                st.by_node.get(prev_node, {}).pop((ns, name), None)
        if etype == "DELETED":
            bucket = st.objects.get(ns)
            if bucket is not None:
                bucket.pop(name, None)
                if not bucket and st.kind.namespaced:
                    del st.objects[ns]
            if is_pod:
                self._terminating.pop((ns, name), None)
        else:
            st.objects.setdefault(ns, {})[name] = obj
            if is_pod:
                node = (obj.get("spec") or {}).get("nodeName") or ""
                st.by_node.setdefault(node, {})[(ns, name)] = obj
        if len(self._history) == self._history.maxlen:
            self._floor = self._history[0].rv
        ev = _Event(self._rv, (st.kind.group, st.kind.plural), etype, obj, old)
        self._history.append(ev)
        for w in st.watchers:
            w._offer(ev)
        if st.node_watchers:
            nodes = {(obj.get("spec") or {}).get("nodeName") or ""}
            if old is not None:
                nodes.add((old.get("spec") or {}).get("nodeName") or "")
            for node in nodes:
                for w in st.node_watchers.get(node, ()):
                    w._offer(ev)
        self._cond.notify_all()
        return obj

    def _admit(
        self,
        st: _KindState,
        operation: Operation,
        obj: JSON | None,
        old: JSON | None,
        name: str,
        namespace: str,
        sub_resource: str = "",
        kind: Kind | None = None,
    ) -> JSON | None:
        """Run mutating plugins, then validating ones; returns the (possibly mutated)
        object or raises the denial. Plugins get copies, so a plugin can never reach into
        the store."""
        if not self._mutating and not self._validating:
            return obj
        req_kind = kind or st.kind

        def request(current: JSON | None) -> AdmissionRequest:
            return AdmissionRequest(
                uid=self._new_uid(),
                kind=req_kind,
                operation=operation,
                name=name,
                namespace=namespace,
                object=copy_json(current),
                old_object=copy_json(old),
                sub_resource=sub_resource,
            )

        for plugin_name, plugin in self._mutating:
            result = plugin(request(obj))
            obj = self._apply_admission(st, plugin_name, result, obj, mutating=True)
        for plugin_name, plugin in self._validating:
            self._apply_admission(st, plugin_name, plugin(request(obj)), obj, mutating=False)
        return obj

    def _apply_admission(
        self,
        st: _KindState,
        plugin_name: str,
        result: AdmissionResult,
        obj: JSON | None,
        mutating: bool,
    ) -> JSON | None:
        if result is None:
            return obj
        patch: list[JSON] | None = None
        if isinstance(result, AdmissionResponse):
            if not result.allowed:
                msg = f'admission webhook "{plugin_name}" denied the request: {result.message}'
                if result.code == 422:
                    raise Invalid(msg)
                if result.code == 429:
                    raise TooManyRequests(msg)
                if result.code == 400:
                    raise BadRequest(msg)
                if result.code == 403:
                    raise Forbidden(msg)
                raise ApiError(
                    msg, "InternalError" if result.code >= 500 else "Forbidden", result.code
                )
            patch = result.patch
        elif isinstance(result, list):
            patch = result
        elif isinstance(result, dict):
            if not mutating:
                return obj
            mutated = self._ingest(st, result)
            if not isinstance(mutated.get("metadata"), dict):
                raise ApiError(
                    f'admission webhook "{plugin_name}" returned an object without metadata',
                    "InternalError",
                    500,
                )
            return dict(mutated)
        if patch and mutating and obj is not None:
            try:
                return dict(json_patch(obj, patch))
            except PatchError as e:
                raise ApiError(
                    f'admission webhook "{plugin_name}" returned a patch that does not apply: {e}',
                    "InternalError",
                    500,
                ) from None
        return obj

    def add_mutating_admission(self, fn: AdmissionPlugin, name: str | None = None) -> None:
        """Plugins run in the order added, each seeing the previous one's result."""
        with self._cond:
            self._mutating.append((name or str(getattr(fn, "__name__", "mutating")), fn))

    def add_validating_admission(self, fn: AdmissionPlugin, name: str | None = None) -> None:
        with self._cond:
            self._validating.append((name or str(getattr(fn, "__name__", "validating")), fn))

    def clear_admission(self) -> None:
        with self._cond:
            self._mutating.clear()
            self._validating.clear()

    # --- validation and defaulting ----------------------------------------------------------

    def _validate_meta(self, st: _KindState, obj: JSON) -> None:
        meta = obj["metadata"]
        name = meta.get("name", "")
        if not isinstance(name, str) or not name:
            raise self._invalid(
                st, "", "metadata.name", "Required value: name or generateName is required"
            )
        label_kind = _is_core(st, "namespaces")
        pattern = _DNS1123_LABEL if label_kind else _DNS1123_SUBDOMAIN
        limit = 63 if label_kind else 253
        if len(name) > limit or not pattern.match(name):
            what = "RFC 1123 label" if label_kind else "RFC 1123 subdomain"
            raise self._invalid(
                st,
                name,
                "metadata.name",
                f'Invalid value: "{name}": a lowercase {what} must consist of lower case '
                "alphanumeric characters, '-'"
                + ("" if label_kind else " or '.'")
                + f", must start and end with an alphanumeric character and be at most {limit} "
                "characters",
            )
        for key in ("labels", "annotations"):
            value = meta.get(key)
            if value is None:
                continue
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise self._invalid(
                    st,
                    name,
                    f"metadata.{key}",
                    f"Invalid value: {value!r}: must be a map of string keys to string values",
                )
            for k, v in value.items():
                if not valid_label_key(k):
                    raise self._invalid(
                        st,
                        name,
                        f"metadata.{key}",
                        f'Invalid value: "{k}": a key must be an optional DNS subdomain prefix '
                        "and '/', then up to 63 characters of [A-Za-z0-9-_.] starting and "
                        "ending alphanumeric",
                    )
                if key == "labels" and not valid_label_value(v):
                    raise self._invalid(
                        st,
                        name,
                        f"metadata.labels.{k}",
                        f'Invalid value: "{v}": a label value must be empty or up to 63 '
                        "characters of [A-Za-z0-9-_.] starting and ending alphanumeric",
                    )
        fins = meta.get("finalizers")
        if fins is not None and (
            not isinstance(fins, list) or not all(isinstance(f, str) for f in fins)
        ):
            raise self._invalid(
                st,
                name,
                "metadata.finalizers",
                f"Invalid value: {fins!r}: must be a list of strings",
            )

    def _validate_event(self, st: _KindState, event: JSON) -> None:
        """kube-apiserver's checks of a core/v1 Event: its namespace must be its object's
        (an event about a cluster-scoped object goes to "default"; with an eventTime,
        "kube-system" too), and an event with an eventTime names who reported it."""
        meta = event["metadata"]
        name, ns = meta["name"], meta.get("namespace", "")
        involved = event.get("involvedObject") or {}
        involved_ns = str(involved.get("namespace") or "") if isinstance(involved, dict) else ""
        timed = bool(event.get("eventTime"))
        allowed = {involved_ns} if involved_ns else {"", DEFAULT_NAMESPACE}
        if timed and not involved_ns:
            allowed = {DEFAULT_NAMESPACE, KUBE_SYSTEM_NAMESPACE}
        if ns not in allowed:
            raise self._invalid(
                st,
                name,
                "involvedObject.namespace",
                f'Invalid value: "{involved_ns}": does not match event.namespace',
            )
        if timed:
            for key in ("reportingComponent", "reportingInstance", "action", "reason"):
                if not event.get(key):
                    raise self._invalid(st, name, key, "Required value")

    @staticmethod
    def _default_pod(obj: JSON) -> None:
        """The API server's pod defaulting that scheduling and QoS depend on."""
        spec = obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            raise BadRequest(f"spec: invalid value {spec!r}: expected an object (a PodSpec)")
        spec.setdefault("schedulerName", DEFAULT_SCHEDULER)
        spec.setdefault("terminationGracePeriodSeconds", DEFAULT_TERMINATION_GRACE_SECONDS)
        spec["terminationGracePeriodSeconds"] = grace_seconds(
            spec["terminationGracePeriodSeconds"], "spec.terminationGracePeriodSeconds"
        )
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("dnsPolicy", "ClusterFirst")
        if "priorityClassName" not in spec:
            spec.setdefault("priority", 0)
        for key in ("containers", "initContainers"):
            for c in spec.get(key) or []:
                if not isinstance(c, dict):
                    continue
                res = c.get("resources")
                if not isinstance(res, dict):
                    continue
                limits = res.get("limits") or {}
                if limits:
                    requests = res.setdefault("requests", {})
                    for rname, q in limits.items():
                        requests.setdefault(rname, q)

    # --- create ---------------------------------------------------------------------------

    def create(self, kind: Kind, obj: JSON, namespace: str | None = None) -> JSON:
        with self._cond:
            st = self._state(kind, "create")
            new = self._ingest(st, obj)
            if not isinstance(new, dict):
                raise BadRequest(f"a {st.kind.kind} must be a JSON object")
            meta = new.setdefault("metadata", {})
            if not isinstance(meta, dict):
                raise BadRequest("metadata must be a JSON object")
            self._check_type(st, new)
            new = self._decode(st, new)
            meta = new["metadata"]
            ns = ""
            if st.kind.namespaced:
                body_ns = meta.get("namespace")
                if namespace and body_ns and body_ns != namespace:
                    raise BadRequest(
                        "the namespace of the provided object does not match the namespace "
                        f"sent on the request ({body_ns!r} vs {namespace!r})"
                    )
                ns = namespace or body_ns or ""
                if not ns:
                    raise BadRequest(f"a namespace is required to create {st.resource}")
                if ns not in self._kinds[("", "namespaces")].objects.get("", {}):
                    raise NotFound(
                        f'namespaces "{ns}" not found',
                        details={"name": ns, "kind": "namespaces"},
                    )
                meta["namespace"] = ns
            else:
                meta.pop("namespace", None)
            if meta.get("resourceVersion"):
                raise ApiError("resourceVersion should not be set on objects to be created")
            if _is_pod(st):
                self._default_pod(new)
                new["status"] = {"phase": "Pending", "qosClass": pod_qos_class(new["spec"])}
            elif _is_core(st, "namespaces"):
                new["status"] = {"phase": "Active"}
            elif st.status_subresource and st.kind.group not in ("", CRD.group):
                # Custom resources with a status subresource drop status on create.
                new.pop("status", None)
            admitted = self._admit(st, "CREATE", new, None, meta.get("name", ""), ns)
            if admitted is not None and admitted is not new:
                new = self._decode(st, admitted)
            meta = new.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = self._generate_name(st, str(meta["generateName"]), ns)
            self._validate_meta(st, new)
            if _is_core(st, "events"):
                self._validate_event(st, new)
            _drop_empty_meta(meta)
            name = meta["name"]
            if name in st.objects.get(ns, {}):
                raise AlreadyExists(
                    f'{st.resource} "{name}" already exists',
                    details={"name": name, "group": st.kind.group, "kind": st.kind.plural},
                )
            if _is_crd(st):
                self._register_crd(new)
            meta["uid"] = self._new_uid()
            meta["creationTimestamp"] = rfc3339(self.clock.now())
            if _tracks_generation(st):
                meta["generation"] = 1
            meta.pop("deletionTimestamp", None)
            meta.pop("deletionGracePeriodSeconds", None)
            meta.pop("resourceVersion", None)
            new = {"apiVersion": new.pop("apiVersion"), "kind": new.pop("kind"), **new}
            stored = self._commit(st, "ADDED", new, None)
            return copy_object(stored)

    @staticmethod
    def _decode(st: _KindState, obj: JSON) -> JSON:
        """The typed decode of a built-in kind's body (`cluster/decode.py`)."""
        return decode(st.kind.plural, obj) if st.kind.group == "" else obj

    def _check_type(self, st: _KindState, obj: JSON) -> None:
        k = obj.setdefault("kind", st.kind.kind)
        api = obj.setdefault("apiVersion", st.kind.api_version)
        for what, value in (("kind", k), ("apiVersion", api)):
            if not isinstance(value, str):
                raise BadRequest(f"{what}: invalid value {value!r}: expected a string")
        if k != st.kind.kind or api.rpartition("/")[0] != st.kind.group:
            raise BadRequest(
                f"the object is a {api} {k}, but this request is for {st.kind.api_version} "
                f"{st.kind.kind}"
            )
        obj["apiVersion"] = st.kind.api_version

    def _generate_name(self, st: _KindState, prefix: str, ns: str) -> str:
        taken = st.objects.get(ns, {})
        base = prefix[: 253 - 5]
        while True:
            suffix = "".join(self._rng.choice(_NAME_SUFFIX_ALPHABET) for _ in range(5))
            if base + suffix not in taken:
                return base + suffix

    # --- update ---------------------------------------------------------------------------

    def update(self, kind: Kind, obj: JSON) -> JSON:
        with self._cond:
            st = self._state(kind, "update")
            new = self._ingest(st, obj)
            return self._update(st, new, "", require_rv=True)

    def update_status(self, kind: Kind, obj: JSON) -> JSON:
        with self._cond:
            st = self._state(kind, "update")
            if not st.status_subresource:
                raise NotFound(
                    f"the server could not find the requested resource (put {st.resource}/status)"
                )
            new = self._ingest(st, obj)
            return self._update(st, new, "status", require_rv=True)

    def _update(
        self,
        st: _KindState,
        new: JSON,
        sub_resource: str,
        require_rv: bool,
        url_name: str | None = None,
        url_ns: str | None = None,
    ) -> JSON:
        if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
            raise BadRequest(f"a {st.kind.kind} must be a JSON object with metadata")
        self._check_type(st, new)
        new = self._decode(st, new)
        meta = new["metadata"]
        name = meta.get("name") or ""
        if not name:
            raise self._invalid(st, "", "metadata.name", "Required value: name is required")
        ns = self._namespace_of(st, meta.get("namespace"), required=True)
        if url_name is not None and (name != url_name or (st.kind.namespaced and ns != url_ns)):
            raise BadRequest(
                f"the name of the object ({ns + '/' if ns else ''}{name}) does not match the "
                f"name on the URL ({url_ns + '/' if url_ns else ''}{url_name})"
            )
        old = self._get_stored(st, name, ns)
        old_meta = old["metadata"]
        rv = meta.get("resourceVersion")
        if rv:
            if str(rv) != old_meta["resourceVersion"]:
                raise self._conflict(
                    st,
                    name,
                    "the object has been modified; please apply your changes to the latest "
                    "version and try again",
                )
        elif require_rv and not st.unconditional_update:
            raise self._invalid(
                st,
                name,
                "metadata.resourceVersion",
                "Invalid value: 0: must be specified for an update",
            )
        if meta.get("uid") and meta["uid"] != old_meta["uid"]:
            raise self._invalid(
                st, name, "metadata.uid", f'Invalid value: "{meta["uid"]}": field is immutable'
            )
        if sub_resource == "status":
            new = self._status_write(st, old, new, ns)
        elif sub_resource == "resize":
            new = self._resized(old, new)
        else:
            if st.status_subresource:
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
            self._keep_system_meta(st, meta, old_meta, ns)
            if _is_pod(st):
                self._default_pod(new)
        admitted = self._admit(st, "UPDATE", new, old, name, ns, sub_resource)
        if admitted is not None and admitted is not new:
            new = self._decode(st, admitted)
        if sub_resource == "status":
            # Whatever a plugin did, the status subresource still writes only what it may.
            new = self._status_write(st, old, new, ns)
        elif sub_resource == "resize":
            new = self._resized(old, new)
        elif _is_pod(st):
            self._check_pod_update(st, name, old, new)
        meta = new["metadata"] = dict(new["metadata"])
        self._validate_meta(st, new)
        _drop_empty_meta(meta)
        if meta["name"] != name or meta.get("namespace", "") != ns:
            raise BadRequest("an update cannot change an object's name or namespace")
        if "deletionTimestamp" in old_meta:
            added = set(meta.get("finalizers") or ()) - set(old_meta.get("finalizers") or ())
            if added:
                raise self._invalid(
                    st,
                    name,
                    "metadata.finalizers",
                    "Forbidden: no new finalizers can be added if the object is being deleted, "
                    f"found new finalizers {sorted(added)}",
                )
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if new == old:
            return copy_object(old)  # a no-op write changes nothing, not even the version
        if self._spec_changed(st, old, new):
            _bump_generation(meta, old_meta)
        if _is_crd(st):
            self._register_crd(new)
        if (
            "deletionTimestamp" in meta
            and not meta.get("finalizers")
            and int(meta.get("deletionGracePeriodSeconds") or 0) == 0
        ):
            self._commit(st, "DELETED", new, old)
            return copy_object(_with_rv(new, str(self._rv)))
        return copy_object(self._commit(st, "MODIFIED", new, old))

    @staticmethod
    def _keep_system_meta(st: _KindState, meta: JSON, old_meta: Mapping[str, Any], ns: str) -> None:
        """An update cannot set the fields the server owns: they keep their stored values."""
        meta["namespace"] = ns
        if not st.kind.namespaced:
            meta.pop("namespace", None)
        for key in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)

    def _status_write(self, st: _KindState, old: JSON, new: JSON, ns: str) -> JSON:
        """What a write to the status subresource keeps. For custom resources and CRDs only
        status; for the built-in kinds (pods, nodes, namespaces) everything but spec, so
        label and annotation changes are written too, as kube-apiserver's status strategies
        do (a pod's ownerReferences stay as they were)."""
        old_meta = old["metadata"]
        if st.kind.group != "":
            out = {**old, "status": new.get("status"), "metadata": dict(old_meta)}
        else:
            meta = dict(new.get("metadata") or {})
            self._keep_system_meta(st, meta, old_meta, ns)
            if _is_pod(st):
                if "ownerReferences" in old_meta:
                    meta["ownerReferences"] = old_meta["ownerReferences"]
                else:
                    meta.pop("ownerReferences", None)
            out = {**new, "metadata": meta}
            if "spec" in old:
                out["spec"] = old["spec"]
            else:
                out.pop("spec", None)
        if out.get("status") is None:
            out.pop("status", None)
        old_qos = _field(old, "status").get("qosClass")
        status = out.get("status")
        # The QoS class is fixed at creation: a status write without it keeps it.
        if _is_pod(st) and old_qos and isinstance(status, dict) and not status.get("qosClass"):
            out["status"] = {**status, "qosClass": old_qos}
        return out

    def _check_pod_update(self, st: _KindState, name: str, old: JSON, new: JSON) -> None:
        """A pod's spec is immutable but for a few fields, as on a real server: binding
        goes through `bind`, resource changes through the `resize` subresource."""
        old_spec = old.get("spec") or {}
        new_spec = new.get("spec") or {}
        if old_spec == new_spec:
            return
        if not isinstance(new_spec, dict):
            raise BadRequest(f"spec: invalid value {new_spec!r}: expected an object (a PodSpec)")
        if "terminationGracePeriodSeconds" in new_spec:
            grace_seconds(
                new_spec["terminationGracePeriodSeconds"], "spec.terminationGracePeriodSeconds"
            )
        normalized = dict(new_spec)
        for key in _POD_MUTABLE_SPEC:
            if key in old_spec:
                normalized[key] = old_spec[key]
            else:
                normalized.pop(key, None)
        for key in ("containers", "initContainers"):
            olds, news = old_spec.get(key), normalized.get(key)
            if isinstance(olds, list) and isinstance(news, list) and len(olds) == len(news):
                fixed = []
                for o, n in zip(olds, news, strict=True):
                    if isinstance(o, dict) and isinstance(n, dict):
                        n = {k: v for k, v in n.items() if k != "image"}
                        if "image" in o:
                            n["image"] = o["image"]
                    fixed.append(n)
                normalized[key] = fixed
        old_tol = old_spec.get("tolerations") or []
        new_tol = new_spec.get("tolerations") or []
        gates_added = [
            g
            for g in new_spec.get("schedulingGates") or []
            if g not in (old_spec.get("schedulingGates") or [])
        ]
        if normalized != old_spec or any(t not in new_tol for t in old_tol) or gates_added:
            raise self._invalid(
                st,
                name,
                "spec",
                "Forbidden: pod updates may not change fields other than "
                "`spec.containers[*].image`, `spec.initContainers[*].image`, "
                "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing "
                "tolerations), `spec.terminationGracePeriodSeconds` and removals from "
                "`spec.schedulingGates`; use pods/binding to set spec.nodeName and pods/resize "
                "to change container resources",
            )

    @staticmethod
    def _resized(old: JSON, new: JSON) -> JSON:
        """`pods/resize`: take the containers' resources (and resizePolicy), nothing else."""
        old_spec = old.get("spec") or {}
        wanted = {
            c.get("name"): c
            for c in (new.get("spec") or {}).get("containers") or []
            if isinstance(c, dict)
        }
        containers = []
        for c in old_spec.get("containers") or []:
            c2 = dict(c)
            nc = wanted.get(c.get("name"))
            if nc is not None:
                for key in ("resources", "resizePolicy"):
                    if key in nc:
                        c2[key] = nc[key]
                    else:
                        c2.pop(key, None)
            containers.append(c2)
        return {
            **old,
            "metadata": dict(old["metadata"]),
            "spec": {**old_spec, "containers": containers},
        }

    @staticmethod
    def _spec_changed(st: _KindState, old: JSON, new: JSON) -> bool:
        skip = ("metadata", "status") if st.status_subresource else ("metadata",)
        keys = (set(old) | set(new)) - set(skip)
        return any(old.get(k) != new.get(k) for k in keys)

    # --- patch ----------------------------------------------------------------------------

    def patch(
        self,
        kind: Kind,
        name: str,
        patch: Any,
        namespace: str | None = None,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
    ) -> JSON:
        """A patch is applied to the current object and then written as an update: it is
        checked against metadata.resourceVersion only when the patch itself sets one."""
        with self._cond:
            st = self._state(kind, "patch")
            if subresource not in (None, "", "status") and not (
                subresource == "resize" and _is_pod(st)
            ):
                raise NotFound(
                    "the server could not find the requested resource "
                    f"(patch {st.resource}/{subresource})"
                )
            if subresource == "status" and not st.status_subresource:
                raise NotFound(
                    f"the server could not find the requested resource (patch {st.resource}/status)"
                )
            ns = self._namespace_of(st, namespace, required=True)
            old = self._get_stored(st, name, ns)
            try:
                if patch_type == "merge":
                    if not isinstance(patch, dict):
                        raise PatchError("a merge patch must be a JSON object", malformed=True)
                    result = merge_patch(old, self._ingest(st, patch))
                elif patch_type == "strategic":
                    if _is_custom_resource(st):
                        raise ApiError(
                            "the body of the request was in an unknown format - accepted media "
                            "types include: application/json-patch+json, "
                            "application/merge-patch+json, application/apply-patch+yaml",
                            "UnsupportedMediaType",
                            415,
                        )
                    if not isinstance(patch, dict):
                        raise PatchError(
                            "a strategic merge patch must be a JSON object", malformed=True
                        )
                    result = strategic_merge_patch(old, self._ingest(st, patch))
                elif patch_type == "json":
                    result = json_patch(old, self._ingest(st, patch))
                else:
                    raise BadRequest(
                        f"unsupported patch type {patch_type!r}; accepted: merge, json, strategic"
                    )
            except PatchError as e:
                if e.malformed:
                    raise BadRequest(str(e)) from None
                raise Invalid(f'{st.kind.kind} "{name}" is invalid: {e}') from None
            new = copy_json(result)
            if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
                raise Invalid(f'{st.kind.kind} "{name}" is invalid: the patch removed metadata')
            rv_changed = (
                new["metadata"].get("resourceVersion") != old["metadata"]["resourceVersion"]
            )
            if not rv_changed:
                new["metadata"].pop("resourceVersion", None)
            try:
                new = self._decode(st, new)
            except BadRequest as e:
                # the real server reports a patched object that fails to decode as an
                # invalid patch (422), where the same body on a create is a 400
                reason = e.message.partition(": ")[2] or e.message
                raise Invalid(
                    f'{st.kind.kind} "{name}" is invalid: patch: Invalid value: {reason}',
                    details={
                        "causes": [
                            {"reason": "FieldValueInvalid", "message": reason, "field": "patch"}
                        ]
                    },
                ) from None
            return self._update(
                st, new, subresource or "", require_rv=False, url_name=name, url_ns=ns
            )

    # --- delete ---------------------------------------------------------------------------

    def delete(
        self,
        kind: Kind,
        name: str,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> JSON | None:
        """Pods bound to a node are deleted gracefully, as on a real cluster: they keep
        running with deletionTimestamp = now + grace (grace_period_seconds, else
        spec.terminationGracePeriodSeconds) until the kubelet — here
        `finalize_pod_deletions` or a delete with grace 0 — removes them. Unbound pods and
        grace 0 delete at once. Objects with finalizers stay, marked, until the last
        finalizer is removed."""
        with self._cond:
            st = self._state(kind, "delete")
            ns = self._namespace_of(st, namespace, required=True)
            old = self._get_stored(st, name, ns)
            self._admit(st, "DELETE", None, old, name, ns)
            return self._delete(st, old, grace_period_seconds)

    def _delete(self, st: _KindState, old: JSON, grace: int | None) -> JSON | None:
        meta = old["metadata"]
        if grace is not None:
            grace = grace_seconds(grace, "gracePeriodSeconds")
        ns, name = meta.get("namespace", ""), meta["name"]
        is_pod = _is_pod(st)
        if is_pod:
            spec = old.get("spec") or {}
            if grace is None:
                try:
                    grace = grace_seconds(
                        spec.get("terminationGracePeriodSeconds", DEFAULT_TERMINATION_GRACE_SECONDS)
                        or 0,
                        "spec.terminationGracePeriodSeconds",
                    )
                except ApiError:  # stored before it was checked: never undeletable
                    grace = DEFAULT_TERMINATION_GRACE_SECONDS
            phase = (old.get("status") or {}).get("phase")
            if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
                grace = 0
        else:
            grace = 0
        finalizers = meta.get("finalizers") or []
        now = self.clock.now()
        marked = "deletionTimestamp" in meta
        current = int(meta.get("deletionGracePeriodSeconds") or 0)
        if marked and grace >= current:
            return copy_object(old)
        # A pod's deletion is always written first (deletionTimestamp, the grace period), even
        # with grace 0: watchers see MODIFIED, then DELETED, as from a real API server.
        if grace > 0 or finalizers or (is_pod and not (marked and current == 0)):
            new = {**old, "metadata": dict(meta)}
            nmeta = new["metadata"]
            nmeta["deletionTimestamp"] = rfc3339(now + grace)
            nmeta["deletionGracePeriodSeconds"] = grace
            if not marked:
                _bump_generation(nmeta, meta)
            if grace > 0 and is_pod:
                self._terminating[(ns, name)] = now + grace
            elif is_pod:
                self._terminating.pop((ns, name), None)
            stored = self._commit(st, "MODIFIED", new, old)
            if grace > 0 or finalizers:
                return copy_object(stored)
            old = stored
        if _is_core(st, "namespaces"):
            self._purge_namespace(name)
        if _is_crd(st):
            self._unregister_crd(old)
        self._commit(st, "DELETED", old, None)
        return None

    def _purge_namespace(self, ns: str) -> None:
        # Simplification: a real namespace lingers in Terminating while its content goes.
        for st in list(self._kinds.values()):
            if not st.kind.namespaced:
                continue
            for obj in list(st.objects.get(ns, {}).values()):
                self._commit(st, "DELETED", obj, None)

    def _unregister_crd(self, crd: JSON) -> None:
        spec = crd.get("spec") or {}
        key = (spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
        st = self._kinds.get(key)
        if st is None or st.builtin:
            return
        for bucket in list(st.objects.values()):
            for obj in list(bucket.values()):
                self._commit(st, "DELETED", obj, None)
        for w in [*st.watchers, *(w for lst in st.node_watchers.values() for w in lst)]:
            w._closed = True
        del self._kinds[key]

    def finalize_pod_deletions(self, now: float | None = None) -> builtins.list[tuple[str, str]]:
        """Play the kubelet: remove terminating pods whose grace period has ended (pods
        with finalizers left stay until those are removed). Returns (namespace, name)."""
        with self._cond:
            t = self.clock.now() if now is None else now
            due = sorted(k for k, deadline in self._terminating.items() if deadline <= t)
            pods = self._kinds[("", "pods")]
            done = []
            for ns, name in due:
                obj = pods.objects.get(ns, {}).get(name)
                self._terminating.pop((ns, name), None)
                if obj is None:
                    continue
                self._delete(pods, obj, 0)
                if name not in pods.objects.get(ns, {}):
                    done.append((ns, name))
            return done

    # --- subresources ---------------------------------------------------------------------

    def bind(self, namespace: str, name: str, node_name: str) -> None:
        with self._cond:
            st = self._state(POD, "create")
            old = self._get_stored(st, name, namespace)
            binding = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name, "namespace": namespace},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
            }
            if not node_name:
                raise self._invalid(st, name, "target.name", "Required value")
            self._admit(
                st,
                "CREATE",
                binding,
                None,
                name,
                namespace,
                "binding",
                Kind("", "v1", "Binding", "bindings", True),
            )
            spec = old.get("spec") or {}
            if "deletionTimestamp" in old["metadata"]:
                raise Conflict(
                    f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is '
                    "being deleted, cannot be assigned to a host",
                    details={"name": name, "kind": "pods/binding"},
                )
            if spec.get("nodeName"):
                raise Conflict(
                    f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is '
                    f'already assigned to node "{spec["nodeName"]}"',
                    details={"name": name, "kind": "pods/binding"},
                )
            # Structural sharing: only the touched branches are new dicts.
            status = dict(old.get("status") or {})
            conds = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
            conds.append(
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": rfc3339(self.clock.now()),
                }
            )
            status["conditions"] = conds
            # The binding writes spec.nodeName past the pod strategy: generation stays.
            new = {
                **old,
                "metadata": dict(old["metadata"]),
                "spec": {**spec, "nodeName": node_name},
                "status": status,
            }
            self._commit(st, "MODIFIED", new, old)

    def evict(self, namespace: str, name: str, grace_period_seconds: int | None = None) -> None:
        """The `pods/eviction` subresource, as kube-apiserver answers it. `eviction_guard`
        (when set) may refuse any pod not yet terminating with a 429. A pod that is
        Pending, finished or terminating is then deleted without a budget check. For any
        other, the one PodDisruptionBudget whose selector matches its labels decides: none
        lets it go, more than one is a 500, a budget whose status is not yet observed or
        that allows no disruption is a 429; otherwise the eviction spends one allowed
        disruption (recorded in the budget's `status.disruptedPods`). The pod gets the
        condition `DisruptionTarget=True` (reason `EvictionByEvictionAPI`), then is deleted
        with the eviction's grace period."""
        with self._cond:
            st = self._state(POD, "create")
            old = self._get_stored(st, name, namespace)
            eviction: JSON = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace},
            }
            if grace_period_seconds is not None:
                eviction["deleteOptions"] = {"gracePeriodSeconds": grace_period_seconds}
            self._admit(
                st,
                "CREATE",
                eviction,
                None,
                name,
                namespace,
                "eviction",
                Kind("policy", "v1", "Eviction", "evictions", True),
            )
            terminating = "deletionTimestamp" in old["metadata"]
            if self.eviction_guard is not None and not terminating:
                reason = self.eviction_guard(copy_json(old))
                if reason:
                    raise TooManyRequests(
                        f"Cannot evict pod as it would violate the pod's disruption budget. "
                        f"{reason}",
                        details={"causes": [{"reason": "DisruptionBudget", "message": reason}]},
                        retry_after_seconds=10.0,
                    )
            phase = (old.get("status") or {}).get("phase")
            if not terminating and phase not in ("Pending", "Succeeded", "Failed"):
                self._spend_disruption(old)
            self._delete(st, self._mark_disruption_target(st, old), grace_period_seconds)

    def _spend_disruption(self, pod: JSON) -> None:
        """The budget check of an eviction: raise if the pod's budget refuses it, else
        record the disruption in the budget's status."""
        pdbs = self._kinds.get((POD_DISRUPTION_BUDGET.group, POD_DISRUPTION_BUDGET.plural))
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        matching = [
            b
            for b in (pdbs.objects.get(meta["namespace"], {}).values() if pdbs else ())
            if _pdb_selects(b, labels)
        ]
        if len(matching) > 1:
            raise ApiError(
                "This pod has more than one PodDisruptionBudget, which the eviction "
                "subresource does not support.",
                "",
                500,
            )
        if not matching or pdbs is None:
            return
        pdb = matching[0]
        spec, status = _field(pdb, "spec"), dict(_field(pdb, "status"))
        current, desired = _count(status, "currentHealthy"), _count(status, "desiredHealthy")
        if not _pod_ready(pod) and (
            spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow" or current >= desired > 0
        ):
            return
        name = pdb["metadata"]["name"]
        allowed = _count(status, "disruptionsAllowed")
        if _count(status, "observedGeneration") < _count(pdb["metadata"], "generation"):
            raise _budget_refusal(
                f"The disruption budget {name} is still being processed by the server.", 10.0
            )
        if allowed < 0:
            raise Forbidden(
                f'poddisruptionbudgets.policy "{name}" is forbidden: pdb disruptions allowed '
                "is negative"
            )
        if allowed == 0:
            raise _budget_refusal(
                f"The disruption budget {name} needs {desired} healthy pods and has "
                f"{current} currently",
                None,
            )
        status["disruptionsAllowed"] = allowed - 1
        if allowed == 1:
            conditions = status.get("conditions") or []
            was: JSON = next((c for c in conditions if c.get("type") == "DisruptionAllowed"), {})
            status["conditions"] = [
                *(c for c in conditions if c.get("type") != "DisruptionAllowed"),
                {
                    "type": "DisruptionAllowed",
                    "status": "False",
                    "reason": "InsufficientPods",
                    "message": was.get("message", ""),
                    "observedGeneration": status.get("observedGeneration", 0),
                    "lastTransitionTime": was.get("lastTransitionTime")
                    if was.get("status") == "False"
                    else rfc3339(self.clock.now()),
                },
            ]
        status["disruptedPods"] = {
            **(status.get("disruptedPods") or {}),
            meta["name"]: rfc3339(self.clock.now()),
        }
        self._commit(pdbs, "MODIFIED", {**pdb, "status": status}, pdb)

    def _mark_disruption_target(self, st: _KindState, pod: JSON) -> JSON:
        status = dict(pod.get("status") or {})
        conditions = list(status.get("conditions") or [])
        current = next((c for c in conditions if c.get("type") == "DisruptionTarget"), None)
        wanted: JSON = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting",
        }
        if current is not None and all(current.get(k) == v for k, v in wanted.items()):
            return pod
        now = rfc3339(self.clock.now())
        wanted["lastProbeTime"] = None
        wanted["lastTransitionTime"] = (
            current.get("lastTransitionTime", now)
            if current is not None and current.get("status") == "True"
            else now
        )
        status["conditions"] = [c for c in conditions if c.get("type") != "DisruptionTarget"]
        status["conditions"].append(wanted)
        return self._commit(st, "MODIFIED", {**pod, "status": status}, pod)

    # --- persistence ----------------------------------------------------------------------

    def snapshot(self) -> JSON:
        """The whole store as JSON (kinds and objects, not the watch history)."""
        with self._cond:
            kinds = []
            for st in self._kinds.values():
                k = st.kind
                kinds.append(
                    {
                        "group": k.group,
                        "version": k.version,
                        "kind": k.kind,
                        "plural": k.plural,
                        "namespaced": k.namespaced,
                        "shortNames": list(k.short_names),
                        "statusSubresource": st.status_subresource,
                        "unconditionalUpdate": st.unconditional_update,
                        "items": [
                            copy_json(o)
                            for ns in sorted(st.objects)
                            for _, o in sorted(st.objects[ns].items())
                        ],
                    }
                )
            return {"resourceVersion": str(self._rv), "kinds": kinds}

    @classmethod
    def from_snapshot(
        cls,
        data: Mapping[str, Any],
        clock: Clock | None = None,
        watch_history: int = 1000,
        *,
        seed: int | None = None,
        uid_factory: Callable[[], str] | None = None,
    ) -> MemoryCluster:
        """Rebuild a cluster from `snapshot()`; watches must start from a fresh list."""
        mc = cls(clock, watch_history, seed=seed, uid_factory=uid_factory, namespaces=())
        with mc._cond:
            for st in mc._kinds.values():
                st.objects.clear()
                st.by_node.clear()
            mc._history.clear()
            for entry in data.get("kinds", []):
                kind = Kind(
                    entry["group"],
                    entry["version"],
                    entry["kind"],
                    entry["plural"],
                    bool(entry["namespaced"]),
                    tuple(entry.get("shortNames") or ()),
                )
                mc.register_kind(
                    kind,
                    bool(entry.get("statusSubresource", True)),
                    bool(entry.get("unconditionalUpdate", False)),
                )
                st = mc._kinds[(kind.group, kind.plural)]
                for obj in entry.get("items", []):
                    o = mc._ingest(st, obj)
                    meta = o["metadata"]
                    ns, name = meta.get("namespace", ""), meta["name"]
                    st.objects.setdefault(ns, {})[name] = o
                    if kind.plural == "pods" and not kind.group:
                        node = (o.get("spec") or {}).get("nodeName") or ""
                        st.by_node.setdefault(node, {})[(ns, name)] = o
                        if "deletionTimestamp" in meta and meta.get("deletionGracePeriodSeconds"):
                            mc._terminating[(ns, name)] = parse_rfc3339(meta["deletionTimestamp"])
            mc._rv = int(data.get("resourceVersion", 0))
            mc._floor = mc._rv
        return mc

    # --- introspection --------------------------------------------------------------------

    def count(self, kind: Kind) -> int:
        with self._cond:
            return self._state(kind).count()


if TYPE_CHECKING:  # the type checker proves MemoryCluster is a Cluster
    _conforms: Cluster = MemoryCluster()
