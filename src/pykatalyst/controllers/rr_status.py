"""ResourceRecommend, the pure part: validation with Katalyst's reasons, the conditions,
and the status katalyst-core writes.

Validation runs in Katalyst's order and stops at the first problem, which becomes the
`Validated` condition (False, reason = Katalyst's error code, message = Katalyst's text
followed by the field and the value found):

- WorkloadNameIsEmpty: spec.targetRef.name is empty;
- WorkloadsUnsupported: spec.targetRef.kind is not Deployment;
- AlgorithmUnsupported: algorithmPolicy.algorithm is not percentile (empty: percentile);
- ContainerPoliciesNotFound: containerPolicies is empty;
- WorkloadNotFound / WorkloadMatchError: the Deployment is not there / cannot be read;
- ContainerDuplicate, ContainerNameEmpty, ContainersNotFound: a container policy names a
  container twice, none, or one the pod template lacks (`*` stands for the rest);
- ControlledResourcesPoliciesEmpty: a container policy has no controlledResourcesPolicies;
- ResourceNameUnsupported, ControlledValuesUnsupported, ResourceBuffersUnsupported:
  resourceName not cpu/memory, controlledValues not RequestsOnly, bufferPercent outside
  0-100 (default 30).

A valid object gets `Validated` and `Initialized` True, then `RecommendationProvided`: True
with `status.recommendResources.containerRecommendations[].requests.target` and
`lastRecommendationTime`, or False with reason `RecommendationNotReady` and the
recommender's message. Conditions are sorted by type; a condition keeps its
lastTransitionTime while its status, reason and message stay the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pykatalyst.api import names
from pykatalyst.api.quantity import Quantity, QuantityFormat
from pykatalyst.api.timefmt import rfc3339

VALIDATED = names.RR_CONDITION_VALIDATED
INITIALIZED = names.RR_CONDITION_INITIALIZED
PROVIDED = names.RR_CONDITION_RECOMMENDATION_PROVIDED
DEFAULT_BUFFER = 30
WILDCARD = "*"
NOT_READY = "RecommendationNotReady"


@dataclass(frozen=True, slots=True)
class RRError:
    """A failure as Katalyst's CustomError: the condition it sets, its reason, message."""

    condition: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class ResourcePolicy:
    resource: str  # cpu | memory
    buffer_percent: int


@dataclass(frozen=True, slots=True)
class ContainerConfig:
    name: str
    resources: tuple[ResourcePolicy, ...]

    def buffer(self, resource: str) -> int:
        return next((r.buffer_percent for r in self.resources if r.resource == resource), 30)


@dataclass(frozen=True, slots=True)
class RRConfig:
    """A valid ResourceRecommend: its workload, containers and algorithm settings."""

    namespace: str
    workload: str
    kind: str
    recommender: str
    containers: tuple[ContainerConfig, ...]
    extensions: Mapping[str, Any] = field(default_factory=dict)


def _err(code: str, message: str) -> RRError:
    return RRError(VALIDATED, code, message)


def _go_list(items: Sequence[str]) -> str:
    return "[" + " ".join(items) + "]"


def _spec(rr: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = rr.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _policy(rr: Mapping[str, Any]) -> Mapping[str, Any]:
    p = _spec(rr).get("resourcePolicy")
    return p if isinstance(p, Mapping) else {}


def algorithm_policy(rr: Mapping[str, Any]) -> Mapping[str, Any]:
    a = _policy(rr).get("algorithmPolicy")
    return a if isinstance(a, Mapping) else {}


def recommender_of(rr: Mapping[str, Any]) -> str:
    return str(algorithm_policy(rr).get("recommender") or "")


def validate_target(rr: Mapping[str, Any]) -> RRError | None:
    """targetRef, algorithm and the presence of container policies, in Katalyst's order."""
    ref = _spec(rr).get("targetRef")
    ref = ref if isinstance(ref, Mapping) else {}
    if not ref.get("name"):
        return _err("WorkloadNameIsEmpty", "spec.targetRef.name cannot be empty")
    kind = str(ref.get("kind", ""))
    if kind != "Deployment":
        return _err(
            "WorkloadsUnsupported",
            f"spec.targetRef.kind {kind} is currently unsupported, only support in [Deployment]",
        )
    algorithm = str(algorithm_policy(rr).get("algorithm") or "percentile")
    if algorithm != "percentile":
        return _err(
            "AlgorithmUnsupported",
            f"spec.resourcePolicy.algorithmPolicy.algorithm {algorithm} is currently "
            "unsupported, only support in [percentile]",
        )
    policies = _policy(rr).get("containerPolicies")
    if not isinstance(policies, list) or not policies:
        return _err("ContainerPoliciesNotFound", "spec.containerPolicies cannot be empty")
    api_version = str(ref.get("apiVersion") or names.DEPLOYMENT.api_version)
    if api_version != names.DEPLOYMENT.api_version:
        return _err(
            "WorkloadMatchError",
            f"workload matched err: spec.targetRef.apiVersion {api_version!r} serves no "
            f"Deployment (accepted: {names.DEPLOYMENT.api_version})",
        )
    return None


def template_containers(workload: Mapping[str, Any]) -> list[str] | None:
    """The pod template's container names (None: the Deployment cannot be read)."""
    spec = workload.get("spec")
    template = spec.get("template") if isinstance(spec, Mapping) else None
    pod_spec = template.get("spec") if isinstance(template, Mapping) else None
    items = pod_spec.get("containers") if isinstance(pod_spec, Mapping) else None
    if not isinstance(items, list):
        return None
    return [str(c.get("name", "")) for c in items if isinstance(c, Mapping)]


def _container_policies(
    policies: Sequence[Any], existing: Sequence[str]
) -> tuple[list[tuple[str, Mapping[str, Any], int]], RRError | None]:
    seen: dict[str, tuple[str, Mapping[str, Any], int]] = {}
    base = "spec.resourcePolicy.containerPolicies"
    for i, p in enumerate(policies):
        p = p if isinstance(p, Mapping) else {}
        name = str(p.get("containerName") or "")
        if name in seen:
            return [], _err("ContainerDuplicate", f"container name {name} is duplicate")
        if not name:
            return [], _err(
                "ContainerNameEmpty", f"empty container name ({base}[{i}].containerName)"
            )
        if name != WILDCARD and name not in existing:
            return [], _err(
                "ContainersNotFound",
                f"container {name} is not found ({base}[{i}].containerName; the pod template "
                f"has {', '.join(existing) or 'none'})",
            )
        crps = p.get("controlledResourcesPolicies")
        if not isinstance(crps, list) or not crps:
            return [], _err(
                "ControlledResourcesPoliciesEmpty",
                f"container({name}) Resources Policies is empty "
                f"({base}[{i}].controlledResourcesPolicies)",
            )
        seen[name] = (name, p, i)
    out = [v for k, v in seen.items() if k != WILDCARD]
    if WILDCARD in seen:
        _, p, i = seen[WILDCARD]
        out += [(c, p, i) for c in existing if c not in seen]
    return out, None


def _resources(name: str, p: Mapping[str, Any], i: int) -> ContainerConfig | RRError:
    out: list[ResourcePolicy] = []
    base = f"spec.resourcePolicy.containerPolicies[{i}].controlledResourcesPolicies"
    for j, r in enumerate(p.get("controlledResourcesPolicies") or []):
        r = r if isinstance(r, Mapping) else {}
        resource = r.get("resourceName")
        if resource not in (names.RESOURCE_CPU, names.RESOURCE_MEMORY):
            return _err(
                "ResourceNameUnsupported",
                "unsupported ResourceName, current supported values: [cpu memory] "
                f"({base}[{j}].resourceName: {resource!r})",
            )
        values = r.get("controlledValues")
        if values is not None and values != "RequestsOnly":
            # Katalyst's text here is its ResourceName one, kept as it is.
            return _err(
                "ControlledValuesUnsupported",
                "unsupported ResourceName, current supported values: [RequestsOnly] "
                f"({base}[{j}].controlledValues: {values!r})",
            )
        buffer = r.get("bufferPercent")
        if buffer is None:
            buffer = DEFAULT_BUFFER
        elif isinstance(buffer, bool) or not isinstance(buffer, int) or not 0 <= buffer <= 100:
            return _err(
                "ResourceBuffersUnsupported",
                "resource buffers should be in the range from 0 to 100 "
                f"({base}[{j}].bufferPercent: {buffer!r})",
            )
        out.append(ResourcePolicy(str(resource), buffer))
    return ContainerConfig(name, tuple(out))


def validate(
    rr: Mapping[str, Any], workload: Mapping[str, Any] | None, workload_error: str = ""
) -> RRConfig | RRError:
    """The RR as the controller will serve it, or the first problem Katalyst reports.
    `workload` is the targeted Deployment (None: not found, or `workload_error`)."""
    problem = validate_target(rr)
    if problem is not None:
        return problem
    if workload is None:
        if workload_error:
            return _err("WorkloadMatchError", f"workload matched err: {workload_error}")
        return _err("WorkloadNotFound", "workload not found")
    existing = template_containers(workload)
    if existing is None:
        return _err("ContainersMatchErrorCode", "containers matched err")
    policies = _policy(rr).get("containerPolicies") or []
    chosen, problem = _container_policies(policies, existing)
    if problem is not None:
        return problem
    containers: list[ContainerConfig] = []
    for name, p, i in chosen:
        got = _resources(name, p, i)
        if isinstance(got, RRError):
            return got
        containers.append(got)
    meta = rr.get("metadata") or {}
    ext = algorithm_policy(rr).get("extensions")
    return RRConfig(
        str(meta.get("namespace", "")),
        str(_spec(rr)["targetRef"]["name"]),
        "Deployment",
        recommender_of(rr),
        tuple(containers),
        ext if isinstance(ext, Mapping) else {},
    )


def half_life_hours(extensions: Mapping[str, Any]) -> int | RRError:
    """The `decayHalfLife` extension (whole hours, default 24)."""
    value = extensions.get("decayHalfLife", 24)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return RRError(
            INITIALIZED,
            "ValidateProcessConfigFailed",
            "register data process task failed, get error when validate, err: "
            f"spec.resourcePolicy.algorithmPolicy.extensions.decayHalfLife: {value!r} is not a "
            "positive number of hours",
        )
    if value != int(value):
        return RRError(
            INITIALIZED,
            "ValidateProcessConfigFailed",
            "register data process task failed, get error when validate, err: "
            f"spec.resourcePolicy.algorithmPolicy.extensions.decayHalfLife: {value!r} is not a "
            "whole number of hours",
        )
    return int(value)


# --- status -----------------------------------------------------------------------------


def condition(kind: str, ok: bool, reason: str = "", message: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "status": "True" if ok else "False"}
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


def merge_conditions(
    old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]], now: float
) -> list[dict[str, Any]]:
    """`new`, sorted by type, each keeping the old lastTransitionTime when nothing changed."""
    before = {str(c.get("type")): c for c in old if isinstance(c, Mapping)}
    out = []
    for c in sorted(new, key=lambda c: str(c["type"])):
        prev = before.get(str(c["type"]))
        same = prev is not None and all(
            prev.get(k) == c.get(k) for k in ("status", "reason", "message")
        )
        stamp = prev.get("lastTransitionTime") if same and prev is not None else None
        out.append({**c, "lastTransitionTime": stamp or rfc3339(now)})
    return out


@dataclass(frozen=True, slots=True)
class ContainerTarget:
    """What a recommender gave one container: cores and bytes (None: not recommended)."""

    name: str
    cpu: float | None
    memory: float | None
    # limits, where the recommender changes the declared ones (None: left as declared)
    cpu_limit: float | None = None
    memory_limit: float | None = None


def cpu_quantity(cores: float) -> str:
    return str(Quantity.from_milli(int(round(cores * 1000, 6))))


def memory_quantity(value: float) -> str:
    return str(Quantity.from_int(int(value), QuantityFormat.BINARY_SI))


def recommend_resources(targets: Sequence[ContainerTarget]) -> dict[str, Any]:
    recs = []
    for t in targets:
        target: dict[str, str] = {}
        if t.cpu is not None:
            target[names.RESOURCE_CPU] = cpu_quantity(t.cpu)
        if t.memory is not None:
            target[names.RESOURCE_MEMORY] = memory_quantity(t.memory)
        entry: dict[str, Any] = {"containerName": t.name, "requests": {"target": target}}
        limits: dict[str, str] = {}
        if t.cpu_limit is not None:
            limits[names.RESOURCE_CPU] = cpu_quantity(t.cpu_limit)
        if t.memory_limit is not None:
            limits[names.RESOURCE_MEMORY] = memory_quantity(t.memory_limit)
        if limits:
            entry["limits"] = {"target": limits}
        recs.append(entry)
    return {"containerRecommendations": recs}
