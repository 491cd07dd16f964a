"""What the scheduler needs to know about a pod, read once per pod version.

Parsing quantities and annotations is the expensive part of looking at a pod, so it
happens here, once, and every plugin reads the result.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pykatalyst.api import names
from pykatalyst.api.limits import PodShapeError, check_pod
from pykatalyst.api.objects import Pod
from pykatalyst.api.qos import PodQoS, QoSError, parse_pod_qos
from pykatalyst.api.quantity import QuantityError, parse_quantity
from pykatalyst.scheduler.config import canonical_resource

# kube-scheduler scores a container that requests no cpu/memory as if it asked for these,
# so that nodes full of request-less pods do not look empty.
DEFAULT_MILLI_CPU_REQUEST: Final = 100
DEFAULT_MEMORY_REQUEST: Final = 200 * 1024 * 1024

TERMINAL_PHASES: Final = ("Succeeded", "Failed")
# The largest request counted (2**53: 8 PiB of memory, 9e12 cores): node totals are sums
# of such amounts in int64 arrays, which must not overflow.
MAX_REQUEST: Final = 2**53


def amount(resource: str, quantity: Any) -> int:
    """The integer the scheduler counts for a resource: milli-cores for cpu, whole units
    (bytes, counts, or the milli-cores that reclaimed_millicpu's value already is) for the
    rest."""
    q = parse_quantity(quantity)
    return q.milli_value() if resource == names.RESOURCE_CPU else q.value()


def _nonzero(container: Mapping[str, Any]) -> tuple[int, int]:
    res = container.get("resources") or {}
    reqs = res.get("requests") or {}
    lims = res.get("limits") or {}
    cpu_q = reqs.get(names.RESOURCE_CPU, lims.get(names.RESOURCE_CPU))
    mem_q = reqs.get(names.RESOURCE_MEMORY, lims.get(names.RESOURCE_MEMORY))
    cpu = amount(names.RESOURCE_CPU, cpu_q) if cpu_q is not None else DEFAULT_MILLI_CPU_REQUEST
    mem = amount(names.RESOURCE_MEMORY, mem_q) if mem_q is not None else DEFAULT_MEMORY_REQUEST
    return cpu, mem


def nonzero_requests(spec: Mapping[str, Any]) -> tuple[int, int]:
    """kube-scheduler's "non-zero" cpu/memory request, used for scoring only: the pod
    request rule (app containers plus sidecars, or the largest classic init container
    with the sidecars started before it, plus `spec.overhead`) with the default
    request standing in for each container that asks for nothing."""
    cpu = mem = 0
    for c in spec.get("containers") or []:
        if isinstance(c, Mapping):
            a, b = _nonzero(c)
            cpu += a
            mem += b
    side_cpu = side_mem = init_cpu = init_mem = 0
    for c in spec.get("initContainers") or []:
        if not isinstance(c, Mapping):
            continue
        a, b = _nonzero(c)
        if c.get("restartPolicy") == "Always":
            # a sidecar keeps running next to the app containers
            cpu, mem = cpu + a, mem + b
            side_cpu, side_mem = side_cpu + a, side_mem + b
            a, b = side_cpu, side_mem
        else:
            a, b = a + side_cpu, b + side_mem
        init_cpu, init_mem = max(init_cpu, a), max(init_mem, b)
    cpu, mem = max(cpu, init_cpu), max(mem, init_mem)
    overhead = spec.get("overhead") or {}
    if isinstance(overhead, Mapping):
        if names.RESOURCE_CPU in overhead:
            cpu += amount(names.RESOURCE_CPU, overhead[names.RESOURCE_CPU])
        if names.RESOURCE_MEMORY in overhead:
            mem += amount(names.RESOURCE_MEMORY, overhead[names.RESOURCE_MEMORY])
    return cpu, mem


def _check_amounts(amounts: Mapping[str, int]) -> None:
    """Refuse amounts the node arrays (int64, summed over a node's pods) cannot hold."""
    for resource, value in amounts.items():
        if not 0 <= value <= MAX_REQUEST:
            raise ValueError(
                f"{resource} request {value} is outside 0..{MAX_REQUEST} "
                "(milli-cores for cpu, units for the rest)"
            )


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(slots=True)
class PodInfo:
    """A pod as the scheduler sees it. `problem` is set when the pod cannot be scheduled
    as written (invalid QoS annotations, unreadable requests): it stays pending."""

    raw: dict[str, Any]
    key: str
    uid: str
    namespace: str
    name: str
    resource_version: str
    scheduler_name: str
    node_name: str
    priority: int
    labels: Mapping[str, str]
    requests: dict[str, int]
    nonzero_cpu: int
    nonzero_mem: int
    qos: PodQoS | None
    problem: str = ""
    problem_reason: str = ""
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    node_selector: dict[str, str] = field(default_factory=dict)
    required_terms: list[dict[str, Any]] | None = None
    preferred_terms: list[dict[str, Any]] = field(default_factory=list)
    spread_constraints: list[dict[str, Any]] = field(default_factory=list)
    scheduling_gates: list[str] = field(default_factory=list)
    static_signature: str = ""
    terminal: bool = False
    deleting: bool = False

    @property
    def is_reclaimed(self) -> bool:
        return self.qos is not None and self.qos.is_reclaimed

    @property
    def is_dedicated_numa(self) -> bool:
        """A dedicated_cores pod with numa_binding: the pods that consume whole cpus of a
        NUMA zone under the dynamic policy."""
        return self.qos is not None and self.qos.is_dedicated and self.qos.numa_binding

    @property
    def is_numa_exclusive(self) -> bool:
        return self.is_dedicated_numa and self.qos is not None and self.qos.numa_exclusive

    @property
    def k8s_qos_class(self) -> str:
        return self.qos.k8s_qos_class if self.qos is not None else ""

    @property
    def counts_on_node(self) -> bool:
        """Whether the pod holds resources on its node (bound and not finished)."""
        return bool(self.node_name) and not self.terminal

    def request(self, resource: str) -> int:
        return self.requests.get(resource, 0)


@dataclass(frozen=True, slots=True)
class _Derived:
    """Everything read from a pod's spec and annotations: identical for all pods stamped
    from one template, so it is computed once per distinct template."""

    requests: dict[str, int]
    nonzero_cpu: int
    nonzero_mem: int
    qos: PodQoS | None
    problem: str
    problem_reason: str
    tolerations: list[dict[str, Any]]
    node_selector: dict[str, str]
    required_terms: list[dict[str, Any]] | None
    preferred_terms: list[dict[str, Any]]
    spread_constraints: list[dict[str, Any]]
    scheduling_gates: list[str]
    static_signature: str
    scheduler_name: str
    priority: int


_TEMPLATE_CACHE: dict[str, _Derived] = {}
_TEMPLATE_CACHE_SIZE: Final = 4096


def _derive(raw: dict[str, Any]) -> _Derived:
    spec = raw.get("spec") or {}
    view = Pod(raw)
    problem = ""
    problem_reason = ""
    requests: dict[str, int] = {}
    nz_cpu = nz_mem = 0
    try:
        for res, q in view.requests().items():
            canon = canonical_resource(res)
            requests[canon] = requests.get(canon, 0) + amount(canon, q)
        nz_cpu, nz_mem = nonzero_requests(spec)
        _check_amounts({**requests, "cpu (non-zero)": nz_cpu, "memory (non-zero)": nz_mem})
    except (QuantityError, ValueError, TypeError) as exc:
        problem = f"invalid resource requests: {exc}"
        problem_reason = "InvalidResources"
        requests, nz_cpu, nz_mem = {}, 0, 0
    qos: PodQoS | None = None
    try:
        qos = parse_pod_qos(raw)
    except QoSError as exc:
        if not problem:
            problem = f"invalid QoS annotations: {exc}"
            problem_reason = "InvalidQoS"
    if qos is not None and qos.is_dedicated and requests.get(names.RESOURCE_CPU, 0) % 1000:
        # dedicated_cores get whole cores on the node: count what the agent will allocate
        requests[names.RESOURCE_CPU] = -(-requests[names.RESOURCE_CPU] // 1000) * 1000
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    required_terms = None
    if isinstance(required, Mapping):
        required_terms = [t for t in required.get("nodeSelectorTerms") or [] if isinstance(t, dict)]
    preferred = [
        t
        for t in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        if isinstance(t, dict)
    ]
    tolerations = view.tolerations
    node_selector = view.node_selector
    signature = _canonical_json([tolerations, node_selector, required_terms, preferred])
    gates = [
        str(g.get("name", "")) for g in spec.get("schedulingGates") or [] if isinstance(g, dict)
    ]
    spread = [
        c
        for c in spec.get("topologySpreadConstraints") or []
        if isinstance(c, dict) and c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
    ]
    priority = spec.get("priority")
    return _Derived(
        requests=requests,
        nonzero_cpu=nz_cpu,
        nonzero_mem=nz_mem,
        qos=qos,
        problem=problem,
        problem_reason=problem_reason,
        tolerations=tolerations,
        node_selector=node_selector,
        required_terms=required_terms,
        preferred_terms=preferred,
        spread_constraints=spread,
        scheduling_gates=gates,
        static_signature=signature,
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        priority=priority if isinstance(priority, int) else 0,
    )


# The ServiceAccount admission plugin gives every pod its own token volume,
# `kube-api-access-<5 random characters>`, named in `volumes` and in every container's
# `volumeMounts`: without this, no two pods of a real API server share a template.
_TOKEN_VOLUME: Final = re.compile(r'"kube-api-access-[a-z0-9]{5}"')


def _template_key(raw: dict[str, Any]) -> str | None:
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    if "nodeName" in spec:
        spec = {k: v for k, v in spec.items() if k != "nodeName"}
    try:
        key = _canonical_json([meta.get("annotations"), spec])
    except (TypeError, ValueError, RecursionError):
        return None
    return _TOKEN_VOLUME.sub('"kube-api-access-"', key) if "kube-api-access-" in key else key


_SECTIONS: Final = ("metadata", "spec", "status")


def _checked_unreadable(raw: Any) -> PodInfo:
    try:
        check_pod(raw)
    except PodShapeError as exc:
        return _unreadable(raw, exc)
    # check_pod accepts absent sections; the caller found a present one that is not a map
    return _unreadable(raw, PodShapeError("not a pod", field="", value=None, accepted="a pod"))


def _unreadable(raw: Any, exc: PodShapeError) -> PodInfo:
    """A pod that breaks the Pod schema: it stays pending, with the reason as its Event."""
    meta = raw.get("metadata") if isinstance(raw, Mapping) else None
    ident = {
        k: v
        for k, v in (meta.items() if isinstance(meta, Mapping) else ())
        if k in ("uid", "namespace", "name", "resourceVersion") and isinstance(v, str)
    }
    namespace, name = ident.get("namespace", ""), ident.get("name", "")
    spec = raw.get("spec") if isinstance(raw, Mapping) else None
    scheduler = spec.get("schedulerName") if isinstance(spec, Mapping) else None
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    exc.object = f"Pod {namespace}/{name}"
    return PodInfo(
        raw=raw if isinstance(raw, dict) else {},
        key=f"{namespace}/{name}",
        uid=ident.get("uid") or f"{namespace}/{name}",
        namespace=namespace,
        name=name,
        resource_version=ident.get("resourceVersion", ""),
        scheduler_name=scheduler if isinstance(scheduler, str) else "default-scheduler",
        node_name=node if isinstance(node, str) else "",
        priority=0,
        labels={},
        requests={},
        nonzero_cpu=0,
        nonzero_mem=0,
        qos=None,
        problem=f"unreadable pod: {exc}",
        problem_reason="InvalidPod",
    )


def pod_info(raw: dict[str, Any]) -> PodInfo:
    """The scheduler's view of a pod; a pod it cannot read gets `problem` set, never raises.

    A pod is checked against the Pod schema and its limits (`check_pod`) when its template
    is first seen; pods stamped from a template already checked only have the fields read
    here outside the template checked.
    """
    if not isinstance(raw, dict):
        return _checked_unreadable(raw)
    sections: list[Any] = [raw.get(k) for k in _SECTIONS]
    if not all(x is None or isinstance(x, dict) for x in sections):
        return _checked_unreadable(raw)
    meta: dict[str, Any]
    spec: dict[str, Any]
    status: dict[str, Any]
    meta, spec, status = (x or {} for x in sections)
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        return _checked_unreadable(raw)
    key = _template_key(raw)
    derived = _TEMPLATE_CACHE.get(key) if key is not None else None
    if derived is None:
        try:
            check_pod(raw)
        except PodShapeError as exc:
            return _unreadable(raw, exc)
        derived = _derive(raw)
        if key is not None:
            if len(_TEMPLATE_CACHE) >= _TEMPLATE_CACHE_SIZE:
                _TEMPLATE_CACHE.clear()
            _TEMPLATE_CACHE[key] = derived
    d = derived
    namespace = str(meta.get("namespace", "") or "")
    name = str(meta.get("name", ""))
    return PodInfo(
        raw=raw,
        key=f"{namespace}/{name}",
        uid=str(meta.get("uid", "") or f"{namespace}/{name}"),
        namespace=namespace,
        name=name,
        resource_version=str(meta.get("resourceVersion", "")),
        scheduler_name=d.scheduler_name,
        node_name=str(spec.get("nodeName", "") or ""),
        priority=d.priority,
        labels=dict(labels),
        requests=d.requests,
        nonzero_cpu=d.nonzero_cpu,
        nonzero_mem=d.nonzero_mem,
        qos=d.qos,
        problem=d.problem,
        problem_reason=d.problem_reason,
        tolerations=d.tolerations,
        node_selector=d.node_selector,
        required_terms=d.required_terms,
        preferred_terms=d.preferred_terms,
        spread_constraints=d.spread_constraints,
        scheduling_gates=d.scheduling_gates,
        static_signature=d.static_signature,
        terminal=str(status.get("phase", "")) in TERMINAL_PHASES,
        deleting="deletionTimestamp" in meta,
    )
