"""The one parsed view of a pod: `PodDigest`.

Every component reads the same facts off a pod — its identity, canonical requests, QoS
declaration, priority, whether it is protected from eviction, static or mirror, deleting
or finished — and reads them here, the same way, so that the scheduler, the eviction
manager and the backstop cannot disagree about a pod. Components extend a digest by
composition (the scheduler's affinity terms, the agent's cgroups) and never re-parse.

Reading never raises: a pod that breaks the Pod schema is known by identity only
(`problem_reason` "InvalidPod"); one whose QoS declaration is refused has no `qos`
("InvalidQoS"); one whose requests cannot be read has none ("InvalidResources"). The first
problem found is the one named, in that order of precedence for the schema, then requests,
then QoS, as the scheduler reports them.

`PodDigests` keeps digests per (uid, resourceVersion): a pod is parsed again only when it
changes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from pykatalyst.api import names
from pykatalyst.api.limits import PodShapeError, check_pod, check_pod_instance
from pykatalyst.api.objects import TERMINAL_PHASES as TERMINAL_PHASES
from pykatalyst.api.objects import Pod
from pykatalyst.api.qos import PodQoS, QoSError, guaranteed_cpus, parse_pod_qos
from pykatalyst.api.quantity import Quantity, QuantityError

# Kubernetes' markers of pods that no node agent or controller may evict.
CRITICAL_PRIORITY: Final = 2_000_000_000
CRITICAL_PRIORITY_CLASSES: Final = ("system-node-critical", "system-cluster-critical")
# The kubelet's: a mirror pod stands for a static pod it runs from a file or URL.
MIRROR_POD_ANNOTATION: Final = "kubernetes.io/config.mirror"
CONFIG_SOURCE_ANNOTATION: Final = "kubernetes.io/config.source"
# The largest request counted (2**53: 8 PiB of memory, 9e12 cores): node totals are sums
# of such amounts in int64 arrays, which must not overflow.
MAX_REQUEST: Final = 2**53

PROBLEM_INVALID_POD: Final = "InvalidPod"
PROBLEM_INVALID_RESOURCES: Final = "InvalidResources"
PROBLEM_INVALID_QOS: Final = "InvalidQoS"

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def canonical_resource(name: str) -> str:
    """The current spelling of a resource name (legacy Katalyst names are aliases)."""
    return names.RESOURCE_ALIASES.get(name, name)


def amount(resource: str, quantity: Quantity) -> int:
    """The integer counted for a resource: milli-cores for cpu, whole units (bytes,
    counts, or the milli-cores that reclaimed_millicpu's value already is) for the rest."""
    return quantity.milli_value() if resource == names.RESOURCE_CPU else quantity.value()


def check_amounts(amounts: Mapping[str, int]) -> None:
    """Refuse amounts outside 0..MAX_REQUEST (ValueError)."""
    for resource, value in amounts.items():
        if not 0 <= value <= MAX_REQUEST:
            raise ValueError(
                f"{resource} request {value} is outside 0..{MAX_REQUEST} "
                "(milli-cores for cpu, units for the rest)"
            )


def canonical_requests(pod: Pod) -> dict[str, int]:
    """The pod's effective requests (kube-scheduler's rule) under canonical names, a
    legacy name's amount added to its current name's; raises QuantityError/ValueError,
    also for an amount outside 0..MAX_REQUEST."""
    out: dict[str, int] = {}
    for res, q in pod.requests().items():
        canon = canonical_resource(res)
        out[canon] = out.get(canon, 0) + amount(canon, q)
    check_amounts(out)
    return out


@dataclass(frozen=True, slots=True)
class PodDigest:
    """One pod as every component reads it (immutable per resourceVersion)."""

    uid: str
    namespace: str
    name: str
    resource_version: str
    node_name: str = ""
    scheduler_name: str = "default-scheduler"
    phase: str = ""
    priority: int = 0
    priority_class_name: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    qos: PodQoS | None = None
    requests: Mapping[str, int] = field(default_factory=dict)  # canonical names
    problem: str = ""  # why the pod cannot be read as written; "" when it can
    problem_reason: str = ""  # PROBLEM_*
    mirror: bool = False  # the API server's copy of a static pod
    static: bool = False  # run by the kubelet itself (file, URL, or owned by the Node)
    deleting: bool = False  # deletionTimestamp set
    terminal: bool = False  # phase Succeeded or Failed
    # the cpus the kubelet's static cpu manager pins for it (api.qos.guaranteed_cpus)
    guaranteed_cpus: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def readable(self) -> bool:
        """Whether the pod fits the Pod schema (false: known by identity only)."""
        return self.problem_reason != PROBLEM_INVALID_POD

    @property
    def level(self) -> str:
        """The QoS level; the default one when the declaration is refused."""
        return self.qos.level if self.qos is not None else names.DEFAULT_QOS_LEVEL

    @property
    def critical(self) -> bool:
        return (
            self.priority >= CRITICAL_PRIORITY
            or self.priority_class_name in CRITICAL_PRIORITY_CLASSES
        )

    @property
    def protection(self) -> str:
        """Why nothing may evict the pod ("critical pod", "static pod"), or ""."""
        if self.critical:
            return "critical pod"
        if self.static:
            return "static pod"
        return ""

    @property
    def finishing(self) -> bool:
        """Deleting or finished: it will not run (much) longer."""
        return self.deleting or self.terminal

    def request(self, resource: str) -> int:
        return self.requests.get(canonical_resource(resource), 0)


class DigestView:
    """What a component's view of a pod reads off the `PodDigest` the view holds (its
    identity, deletion, reclaimed requests): views extend the digest by composition and
    read it no other way."""

    __slots__ = ()
    digest: PodDigest

    @property
    def uid(self) -> str:
        return self.digest.uid

    @property
    def namespace(self) -> str:
        return self.digest.namespace

    @property
    def name(self) -> str:
        return self.digest.name

    @property
    def key(self) -> str:
        return self.digest.key

    @property
    def terminating(self) -> bool:
        """Whether its deletion has begun."""
        return self.digest.deleting

    @property
    def reclaimed_milli_cpu(self) -> int:
        return self.digest.request(names.RECLAIMED_MILLICPU)

    @property
    def reclaimed_memory(self) -> int:
        return self.digest.request(names.RECLAIMED_MEMORY)


def _str(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def _unreadable(raw: Any, exc: PodShapeError) -> PodDigest:
    meta = raw.get("metadata") if isinstance(raw, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else _EMPTY
    spec = raw.get("spec") if isinstance(raw, Mapping) else None
    spec = spec if isinstance(spec, Mapping) else _EMPTY
    namespace, name = _str(meta.get("namespace")), _str(meta.get("name"))
    exc.object = f"Pod {namespace}/{name}"
    return PodDigest(
        uid=_str(meta.get("uid")),
        namespace=namespace,
        name=name,
        resource_version=_str(meta.get("resourceVersion")),
        node_name=_str(spec.get("nodeName")),
        scheduler_name=_str(spec.get("schedulerName")) or "default-scheduler",
        problem=f"unreadable pod: {exc}",
        problem_reason=PROBLEM_INVALID_POD,
        # what cannot be read cannot be shown safe to evict
        static=True,
    )


def is_static(pod: Pod) -> tuple[bool, bool]:
    """(mirror, static): a mirror pod, one whose config source is not the API server,
    or one a Node owns is run by the kubelet itself."""
    ann = pod.annotations
    mirror = MIRROR_POD_ANNOTATION in ann
    static = (
        mirror
        or ann.get(CONFIG_SOURCE_ANNOTATION, "api") != "api"
        or any(o.get("kind") == names.NODE.kind for o in pod.owner_references)
    )
    return mirror, static


@dataclass(frozen=True, slots=True)
class _Template:
    """What every pod stamped from one template (annotations and spec) reads the same."""

    requests: Mapping[str, int]
    qos: PodQoS | None
    problem: str
    reason: str
    priority: int
    priority_class_name: str
    scheduler_name: str
    guaranteed_cpus: int


def _template(raw: dict[str, Any]) -> _Template:
    pod = Pod(raw)
    problem, reason = "", ""
    requests: dict[str, int] = {}
    try:
        requests = canonical_requests(pod)
    except (QuantityError, ValueError, TypeError) as exc:
        problem, reason = f"invalid resource requests: {exc}", PROBLEM_INVALID_RESOURCES
    qos: PodQoS | None = None
    try:
        qos = parse_pod_qos(raw)
    except QoSError as exc:
        if not problem:
            problem, reason = f"invalid QoS annotations: {exc}", PROBLEM_INVALID_QOS
    try:
        pinned = guaranteed_cpus(raw)
    except (QuantityError, ValueError, TypeError):
        pinned = 0
    return _Template(
        MappingProxyType(requests),
        qos,
        problem,
        reason,
        pod.priority,
        pod.priority_class_name,
        pod.scheduler_name,
        pinned,
    )


# The ServiceAccount admission plugin gives every pod its own token volume,
# `kube-api-access-<5 random characters>`, named in `volumes` and in every container's
# `volumeMounts`: without this, no two pods of a real API server share a template.
_TOKEN_VOLUME: Final = re.compile(r'"kube-api-access-[a-z0-9]{5}"')
_SECTIONS: Final = ("metadata", "spec", "status")
_TEMPLATES: dict[str, _Template] = {}
_TEMPLATES_SIZE: Final = 4096


def template_key(raw: Mapping[str, Any]) -> str | None:
    """The text of what pods stamped from one template share (annotations, and the spec
    without nodeName or the token volume's random suffix); None when not JSON."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    if "nodeName" in spec:
        spec = {k: v for k, v in spec.items() if k != "nodeName"}
    try:
        key = json.dumps([meta.get("annotations"), spec], sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        return None
    return _TOKEN_VOLUME.sub('"kube-api-access-"', key) if "kube-api-access-" in key else key


def _checked_unreadable(raw: Any) -> PodDigest:
    try:
        check_pod(raw)
    except PodShapeError as exc:
        return _unreadable(raw, exc)
    # check_pod accepts absent sections; the caller found a present one that is not a map
    return _unreadable(raw, PodShapeError("not a pod", field="", value=None, accepted="a pod"))


def digest_and_key(raw: Any) -> tuple[PodDigest, str | None]:
    """`digest_pod`, and the pod's `template_key` (for callers that cache more per
    template). The Pod schema and limits are checked (`check_pod`) when a template is
    first seen; later pods of it have their own fields checked (`check_pod_instance`)."""
    if not isinstance(raw, dict):
        return _checked_unreadable(raw), None
    sections: list[Any] = [raw.get(k) for k in _SECTIONS]
    if not all(x is None or isinstance(x, dict) for x in sections):
        return _checked_unreadable(raw), None
    meta: dict[str, Any]
    status: dict[str, Any]
    meta, _, status = (x or {} for x in sections)
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        return _checked_unreadable(raw), None
    key = template_key(raw)
    t = _TEMPLATES.get(key) if key is not None else None
    try:
        # the whole pod once per template; its own fields every time
        check_pod(raw) if t is None else check_pod_instance(raw)
    except PodShapeError as exc:
        return _unreadable(raw, exc), key
    if t is None:
        t = _template(raw)
        if key is not None:
            if len(_TEMPLATES) >= _TEMPLATES_SIZE:
                _TEMPLATES.clear()
            _TEMPLATES[key] = t
    pod = Pod(raw)
    mirror, static = is_static(pod)
    phase = _str(status.get("phase"))
    digest = PodDigest(
        uid=_str(meta.get("uid")),
        namespace=_str(meta.get("namespace")),
        name=_str(meta.get("name")),
        resource_version=_str(meta.get("resourceVersion")),
        node_name=pod.node_name,
        scheduler_name=t.scheduler_name,
        phase=phase,
        priority=t.priority,
        priority_class_name=t.priority_class_name,
        labels=dict(labels),
        annotations=pod.annotations,
        qos=t.qos,
        requests=t.requests,
        problem=t.problem,
        problem_reason=t.reason,
        mirror=mirror,
        static=static,
        deleting=bool(meta.get("deletionTimestamp")),
        terminal=phase in TERMINAL_PHASES,
        guaranteed_cpus=t.guaranteed_cpus,
    )
    return digest, key


def rebound(d: PodDigest, raw: Mapping[str, Any]) -> PodDigest:
    """The digest of a newer version of `d`'s pod in which only its binding, status or
    version changed (its labels, annotations and the rest of its spec are as `d` read
    them): the instance fields read again, without reading the template."""
    meta = raw.get("metadata") or {}
    phase = _str((raw.get("status") or {}).get("phase"))
    # built field by field: a scheduler sees every binding, and replace() is slow
    return PodDigest(
        d.uid,
        d.namespace,
        d.name,
        _str(meta.get("resourceVersion")),
        _str((raw.get("spec") or {}).get("nodeName")),
        d.scheduler_name,
        phase,
        d.priority,
        d.priority_class_name,
        d.labels,
        d.annotations,
        d.qos,
        d.requests,
        d.problem,
        d.problem_reason,
        d.mirror,
        d.static,
        bool(meta.get("deletionTimestamp")),
        phase in TERMINAL_PHASES,
        d.guaranteed_cpus,
    )


def digest_pod(raw: Any) -> PodDigest:
    """Read one pod; never raises (see the module's notes on problems)."""
    return digest_and_key(raw)[0]


class PodDigests:
    """Digests by uid, re-read only when a pod's resourceVersion changes. `refresh`
    forgets the pods not among those given; `get` keeps up to `limit` pods."""

    def __init__(self, limit: int = 65536) -> None:
        self._items: dict[str, tuple[str, PodDigest]] = {}
        self._limit = limit

    def get(self, raw: Any) -> PodDigest:
        uid, rv = _version(raw)
        hit = self._items.get(uid)
        if hit is not None and hit[0] == rv and uid:
            return hit[1]
        digest = digest_pod(raw)
        if uid:
            if len(self._items) >= self._limit:
                self._items.clear()
            self._items[uid] = (rv, digest)
        return digest

    def refresh(self, objects: Iterable[Any]) -> dict[str, PodDigest]:
        out: dict[str, PodDigest] = {}
        kept: dict[str, tuple[str, PodDigest]] = {}
        for raw in objects:
            uid, rv = _version(raw)
            hit = self._items.get(uid)
            if hit is None or hit[0] != rv or not uid:
                hit = (rv, digest_pod(raw))
            kept[uid] = hit
            out[uid] = hit[1]
        self._items = kept
        return out


def _version(raw: Any) -> tuple[str, str]:
    meta = raw.get("metadata") if isinstance(raw, Mapping) else None
    if not isinstance(meta, Mapping):
        return "", ""
    return _str(meta.get("uid")), _str(meta.get("resourceVersion"))
