"""The values a pod's QoS declaration reads as: its Katalyst level and enhancements
(`PodQoS`), the problems found in it (`QoSProblem`, `QoSError`), and the levels' OOM
priority bands. `api/qos.py` reads pods into these."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol, TypeVar

from pykatalyst.api import names

K8S_QOS_GUARANTEED: Final = "Guaranteed"
K8S_QOS_BURSTABLE: Final = "Burstable"
K8S_QOS_BEST_EFFORT: Final = "BestEffort"
# the resources the Kubernetes QoS class is judged on
K8S_QOS_RESOURCES: Final = (names.RESOURCE_CPU, names.RESOURCE_MEMORY)


class _Amount(Protocol):
    def __add__(self, other: Any, /) -> Any: ...
    def __gt__(self, other: Any, /) -> bool: ...


A = TypeVar("A", bound=_Amount)


def kube_qos_class(containers: Iterable[tuple[Mapping[str, A], Mapping[str, A]]], zero: A) -> str:
    """The Kubernetes QoS class of a pod whose containers (init containers too) have these
    cpu and memory (requests, limits), computed as the kubelet does (`GetPodQOS`): an
    amount of `zero` or less counts as absent; Guaranteed when every container limits both
    and the summed requests equal the summed limits; BestEffort when nothing is set."""
    requests: dict[str, A] = {}
    limits: dict[str, A] = {}
    guaranteed = True
    for reqs, lims in containers:
        for name in K8S_QOS_RESOURCES:
            if name in reqs and reqs[name] > zero:
                requests[name] = requests[name] + reqs[name] if name in requests else reqs[name]
        found: set[str] = set()
        for name in K8S_QOS_RESOURCES:
            if name in lims and lims[name] > zero:
                found.add(name)
                limits[name] = limits[name] + lims[name] if name in limits else lims[name]
        if found != set(K8S_QOS_RESOURCES):
            guaranteed = False
    if not requests and not limits:
        return K8S_QOS_BEST_EFFORT
    if guaranteed:
        for name, req in requests.items():
            if name not in limits or limits[name] != req:
                guaranteed = False
                break
    if guaranteed and len(requests) == len(limits):
        return K8S_QOS_GUARANTEED
    return K8S_QOS_BURSTABLE


# OOM priority bands per level: [low, high). Two values outside every band are kept as
# they are: the "ignore this pod" and the "never kill this pod" markers.
OOM_PRIORITY_IGNORE: Final = -300
OOM_PRIORITY_TOP: Final = 300
OOM_PRIORITY_RANGES: Final[Mapping[str, tuple[int, int]]] = {
    names.QOS_RECLAIMED_CORES: (-100, 0),
    names.QOS_SHARED_CORES: (0, 100),
    names.QOS_DEDICATED_CORES: (100, 200),
    names.QOS_SYSTEM_CORES: (200, 300),
}

Severity = Literal["error", "warning"]


def annotation_field(annotation: str, key: str | None = None) -> str:
    """The path of an annotation (or a key inside a JSON annotation) in a pod."""
    path = f"metadata.annotations[{annotation}]"
    return f"{path}.{key}" if key is not None else path


@dataclass(frozen=True, slots=True)
class QoSProblem:
    """One thing wrong with (or worth knowing about) a pod's QoS declaration."""

    severity: Severity
    field: str
    value: str | None
    accepted: str
    message: str

    def __str__(self) -> str:
        return _format_problem(self.message, self.field, self.value, self.accepted, None)


class QoSError(ValueError):
    """A pod's QoS declaration is invalid. `object` is filled in by whoever knows the pod."""

    def __init__(
        self,
        message: str,
        *,
        field: str,
        value: str | None,
        accepted: str,
        object: str | None = None,
    ) -> None:
        self.reason = message
        self.field = field
        self.value = value
        self.accepted = accepted
        self.object = object
        super().__init__(message)

    @classmethod
    def from_problem(cls, problem: QoSProblem, object: str | None = None) -> QoSError:
        return cls(
            problem.message,
            field=problem.field,
            value=problem.value,
            accepted=problem.accepted,
            object=object,
        )

    def __str__(self) -> str:
        return _format_problem(self.reason, self.field, self.value, self.accepted, self.object)


def _format_problem(
    message: str, field_path: str, value: str | None, accepted: str, obj: str | None
) -> str:
    parts = [f"{obj}: " if obj else "", message, f" (field {field_path}"]
    if value is not None:
        parts.append(f", value {value!r}")
    if accepted:
        parts.append(f"; accepted: {accepted}")
    parts.append(")")
    return "".join(parts)


@dataclass(frozen=True, slots=True)
class Enhancements:
    """The typed view of the three enhancement annotations and the NUMA hint annotations.

    `raw` keeps every key as written (unknown ones included) so that a pod passed on keeps
    what a newer Katalyst would read from it.
    """

    numa_binding: bool = False
    numa_exclusive: bool = False
    oom_priority: int | None = None
    rss_overuse_threshold: float | None = None
    cpuset_pool: str | None = None
    numa_share: bool | None = None
    suppression_tolerance_rate: float | None = None
    cpu_burst_policy: str | None = None
    cpu_burst_percent: int | None = None
    align_by_socket: bool = False
    distribute_evenly_across_numa: bool = False
    full_pcpus_pairing: bool = False
    namespace_type: str | None = None
    topology_affinity_restricted: bool = False
    numa_number: int | None = None
    numa_ids: tuple[int, ...] | None = None
    raw: Mapping[str, Mapping[str, str]] = field(default_factory=dict, hash=False)

    def as_dict(self) -> dict[str, Any]:
        """The enhancements that are set, keyed by their Katalyst names."""
        out: dict[str, Any] = {}
        for key in _ENHANCEMENT_FIELDS:
            value = getattr(self, key)
            if value is None or value is False:
                continue
            out[key] = list(value) if isinstance(value, tuple) else value
        return out


_ENHANCEMENT_FIELDS: Final = (
    names.ENH_NUMA_BINDING,
    names.ENH_NUMA_EXCLUSIVE,
    names.ENH_OOM_PRIORITY,
    names.ENH_RSS_OVERUSE_THRESHOLD,
    names.ENH_CPUSET_POOL,
    names.ENH_NUMA_SHARE,
    names.ENH_SUPPRESSION_TOLERANCE_RATE,
    names.ENH_CPU_BURST_POLICY,
    names.ENH_CPU_BURST_PERCENT,
    names.ENH_ALIGN_BY_SOCKET,
    names.ENH_DISTRIBUTE_EVENLY_ACROSS_NUMA,
    names.ENH_FULL_PCPUS_PAIRING,
    names.ENH_NAMESPACE_TYPE,
    names.ENH_TOPOLOGY_AFFINITY_RESTRICTED,
    names.ENH_NUMA_NUMBER,
    names.ENH_NUMA_IDS,
)


@dataclass(frozen=True, slots=True)
class CPUBurst:
    """The cpu burst Katalyst's cpu plugin gives a pod: the policy and the percent of
    its cpu quota it may burst by."""

    policy: str
    percent: int


@dataclass(frozen=True, slots=True)
class PodQoS:
    """A pod's Katalyst QoS level, its enhancements and its Kubernetes QoS class."""

    level: str
    enhancements: Enhancements
    k8s_qos_class: str
    warnings: tuple[QoSProblem, ...] = ()

    @property
    def is_dedicated(self) -> bool:
        return self.level == names.QOS_DEDICATED_CORES

    @property
    def is_shared(self) -> bool:
        return self.level == names.QOS_SHARED_CORES

    @property
    def is_reclaimed(self) -> bool:
        return self.level == names.QOS_RECLAIMED_CORES

    @property
    def is_system(self) -> bool:
        return self.level == names.QOS_SYSTEM_CORES

    @property
    def numa_binding(self) -> bool:
        return self.enhancements.numa_binding

    @property
    def numa_exclusive(self) -> bool:
        return self.enhancements.numa_exclusive

    def cpu_burst(
        self,
        default_percent: int = names.DEFAULT_CPU_BURST_PERCENT,
        dedicated_default: bool | None = None,
        shared_default: bool | None = None,
        sole_shared: bool = False,
    ) -> CPUBurst:
        """Katalyst's cpu burst for this pod (its cpu plugin's rules). A declared policy
        stands (a reclaimed pod's is already read as closed); otherwise a dedicated pod
        takes the dynamic config's `enableDedicatedCoresDefaultCPUBurst` (`dedicated_default`:
        true static, false closed, unset default), a shared pod `enableSharedCoresDefaultCPUBurst`
        (static only for the node's sole shared pod, else closed). The percent is the
        declared one, else the dynamic config's `defaultCPUBurstPercent` — also when the
        cpu_enhancement annotation is malformed, as Katalyst then finds no percent."""
        e = self.enhancements
        policy = e.cpu_burst_policy or names.CPU_BURST_POLICY_DEFAULT
        if policy == names.CPU_BURST_POLICY_DEFAULT:
            if self.is_dedicated and dedicated_default is not None:
                policy = _on_off(dedicated_default)
            elif self.is_shared and shared_default is not None:
                policy = _on_off(shared_default and sole_shared)
        percent = e.cpu_burst_percent if e.cpu_burst_percent is not None else default_percent
        return CPUBurst(policy, percent)

    @property
    def cpuset_pool(self) -> str:
        """The cpu pool the pod runs in under the dynamic cpu policy."""
        if self.level == names.QOS_DEDICATED_CORES:
            return names.POOL_DEDICATED
        if self.level == names.QOS_RECLAIMED_CORES:
            return names.POOL_RECLAIM
        if self.enhancements.cpuset_pool:
            return self.enhancements.cpuset_pool
        return names.POOL_SHARE if self.level == names.QOS_SHARED_CORES else ""

    @property
    def oom_priority(self) -> int:
        """The effective OOM priority: the declared one (already clamped) or the level's floor."""
        if self.enhancements.oom_priority is not None:
            return self.enhancements.oom_priority
        return OOM_PRIORITY_RANGES[self.level][0]


def _on_off(enabled: bool) -> str:
    return names.CPU_BURST_POLICY_STATIC if enabled else names.CPU_BURST_POLICY_CLOSED
