"""What the scheduler needs to know about a pod, read once per pod version.

Parsing quantities and annotations is the expensive part of looking at a pod: the pod's
`PodDigest` (`api/digest.py`: identity, canonical requests, QoS, priority, phase) is read
once per template there, and what only the scheduler reads (non-zero requests for
scoring, affinity terms, tolerations, spread constraints, gates) once per template here.
Every plugin reads the result.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pykatalyst.api import digest as pod_digest
from pykatalyst.api import names
from pykatalyst.api.digest import (
    MAX_REQUEST as MAX_REQUEST,
)
from pykatalyst.api.digest import (
    TERMINAL_PHASES as TERMINAL_PHASES,
)
from pykatalyst.api.digest import DigestView, PodDigest, check_amounts, digest_and_key
from pykatalyst.api.gpu import NONE as GPU_NONE
from pykatalyst.api.gpu import GPURequest, gpu_request
from pykatalyst.api.objects import Pod
from pykatalyst.api.qos import PodQoS
from pykatalyst.api.quantity import QuantityError, parse_quantity

# kube-scheduler scores a container that requests no cpu/memory as if it asked for these,
# so that nodes full of request-less pods do not look empty.
DEFAULT_MILLI_CPU_REQUEST: Final = 100
DEFAULT_MEMORY_REQUEST: Final = 200 * 1024 * 1024


def amount(resource: str, quantity: Any) -> int:
    """The integer the scheduler counts for a resource: milli-cores for cpu, whole units
    (bytes, counts, or the milli-cores that reclaimed_millicpu's value already is) for the
    rest."""
    return pod_digest.amount(resource, parse_quantity(quantity))


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


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(slots=True)
class PodInfo(DigestView):
    """A pod as the scheduler sees it: its `digest` (identity, binding, QoS, priority,
    phase), and what the scheduler reads beyond it. `problem` is set when the pod cannot
    be scheduled as written (invalid QoS annotations, unreadable requests): it stays
    pending. `requests` are the digest's, with a dedicated_cores pod's cpu rounded up to
    whole cores (what the agent allocates)."""

    raw: dict[str, Any]
    digest: PodDigest
    requests: dict[str, int]
    nonzero_cpu: int
    nonzero_mem: int
    problem: str = ""
    problem_reason: str = ""
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    node_selector: dict[str, str] = field(default_factory=dict)
    required_terms: list[dict[str, Any]] | None = None
    preferred_terms: list[dict[str, Any]] = field(default_factory=list)
    spread_constraints: list[dict[str, Any]] = field(default_factory=list)
    scheduling_gates: list[str] = field(default_factory=list)
    static_signature: str = ""
    gpu: GPURequest = GPU_NONE  # nvidia.com/gpu cards and gpu_memory units (api/gpu.py)
    # Read off the digest (and again when it changes): plugins, the queue and the
    # snapshot read them for every pod at every step, and an attribute is the cheapest.
    uid: str = field(init=False)  # the pod's uid (its namespace/name when it has none)
    key: str = field(init=False)
    namespace: str = field(init=False)
    name: str = field(init=False)
    scheduler_name: str = field(init=False)
    priority: int = field(init=False)
    labels: Mapping[str, str] = field(init=False)
    qos: PodQoS | None = field(init=False)
    node_name: str = field(init=False)
    terminal: bool = field(init=False)
    deleting: bool = field(init=False)

    def __post_init__(self) -> None:
        d = self.digest
        self.key = d.key
        self.uid = d.uid or self.key
        self.namespace, self.name = d.namespace, d.name
        self.scheduler_name, self.priority = d.scheduler_name, d.priority
        self.labels, self.qos = d.labels, d.qos
        self._bound()

    def _bound(self) -> None:
        d = self.digest
        self.node_name, self.terminal, self.deleting = d.node_name, d.terminal, d.deleting

    @property
    def resource_version(self) -> str:
        return self.digest.resource_version

    def _clone(self) -> PodInfo:
        """A shallow copy, slot by slot (a third of `copy.copy`'s cost: the scheduler takes
        one for every update of a waiting or bound pod)."""
        info = object.__new__(PodInfo)
        for name in _POD_INFO_SLOTS:
            setattr(info, name, getattr(self, name))
        return info

    def rebound(self, raw: dict[str, Any]) -> PodInfo:
        """This pod at a newer version in which only its binding, status or version
        changed: what the scheduler read from its spec stands."""
        info = self._clone()
        info.raw = raw
        info.digest = pod_digest.rebound(self.digest, raw)
        info._bound()
        return info

    @property
    def is_reclaimed(self) -> bool:
        qos = self.qos
        return qos is not None and qos.is_reclaimed

    @property
    def is_dedicated_numa(self) -> bool:
        """A dedicated_cores pod with numa_binding: the pods that consume whole cpus of a
        NUMA zone under the dynamic policy."""
        qos = self.qos
        return qos is not None and qos.is_dedicated and qos.numa_binding

    @property
    def is_numa_exclusive(self) -> bool:
        qos = self.qos
        return qos is not None and qos.is_dedicated and qos.numa_binding and qos.numa_exclusive

    @property
    def k8s_qos_class(self) -> str:
        qos = self.qos
        return qos.k8s_qos_class if qos is not None else ""

    @property
    def counts_on_node(self) -> bool:
        """Whether the pod holds resources on its node (bound and not finished)."""
        return bool(self.node_name) and not self.terminal

    def request(self, resource: str) -> int:
        return self.requests.get(resource, 0)


# every slot of a PodInfo (its own and its bases'), for `PodInfo._clone`
_POD_INFO_SLOTS: Final = tuple(
    name for cls in PodInfo.__mro__ for name in getattr(cls, "__slots__", ())
)


@dataclass(frozen=True, slots=True)
class _Derived:
    """Everything read from a pod's spec and annotations: identical for all pods stamped
    from one template, so it is computed once per distinct template."""

    requests: dict[str, int]
    nonzero_cpu: int
    nonzero_mem: int
    problem: str
    problem_reason: str
    tolerations: list[dict[str, Any]]
    node_selector: dict[str, str]
    required_terms: list[dict[str, Any]] | None
    preferred_terms: list[dict[str, Any]]
    spread_constraints: list[dict[str, Any]]
    scheduling_gates: list[str]
    static_signature: str
    gpu: GPURequest


_TEMPLATE_CACHE: dict[str, _Derived] = {}
_TEMPLATE_CACHE_SIZE: Final = 4096


def _derive(raw: dict[str, Any]) -> _Derived:
    spec = raw.get("spec") or {}
    view = Pod(raw)
    digest = digest_and_key(raw)[0]
    problem, problem_reason = digest.problem, digest.problem_reason
    requests = dict(digest.requests)
    qos: PodQoS | None = digest.qos
    nz_cpu = nz_mem = 0
    if problem_reason != pod_digest.PROBLEM_INVALID_RESOURCES:
        try:
            nz_cpu, nz_mem = nonzero_requests(spec)
            check_amounts({"cpu (non-zero)": nz_cpu, "memory (non-zero)": nz_mem})
        except (QuantityError, ValueError, TypeError) as exc:
            problem = f"invalid resource requests: {exc}"
            problem_reason = pod_digest.PROBLEM_INVALID_RESOURCES
            requests, nz_cpu, nz_mem = {}, 0, 0
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
    return _Derived(
        requests=requests,
        nonzero_cpu=nz_cpu,
        nonzero_mem=nz_mem,
        problem=problem,
        problem_reason=problem_reason,
        tolerations=tolerations,
        node_selector=node_selector,
        required_terms=required_terms,
        preferred_terms=preferred,
        spread_constraints=spread,
        scheduling_gates=gates,
        static_signature=signature,
        gpu=gpu_request(spec),
    )


def _unreadable(raw: Any, d: PodDigest) -> PodInfo:
    """A pod that breaks the Pod schema: it stays pending, with the reason as its Event."""
    raw = raw if isinstance(raw, dict) else {}
    return PodInfo(raw, d, {}, 0, 0, problem=d.problem, problem_reason=d.problem_reason)


def pod_info(raw: dict[str, Any]) -> PodInfo:
    """The scheduler's view of a pod; a pod it cannot read gets `problem` set, never raises.

    The pod's digest checks it against the Pod schema and its limits when its template is
    first seen; pods stamped from a template already checked only have the fields read
    outside the template checked.
    """
    d, key = digest_and_key(raw)
    if not d.readable:
        return _unreadable(raw, d)
    derived = _TEMPLATE_CACHE.get(key) if key is not None else None
    if derived is None:
        derived = _derive(raw)
        if key is not None:
            if len(_TEMPLATE_CACHE) >= _TEMPLATE_CACHE_SIZE:
                _TEMPLATE_CACHE.clear()
            _TEMPLATE_CACHE[key] = derived
    x = derived
    return PodInfo(
        raw,
        d,
        x.requests,
        x.nonzero_cpu,
        x.nonzero_mem,
        x.problem,
        x.problem_reason,
        x.tolerations,
        x.node_selector,
        x.required_terms,
        x.preferred_terms,
        x.spread_constraints,
        x.scheduling_gates,
        x.static_signature,
        x.gpu,
    )
