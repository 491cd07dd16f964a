"""KatalystVerticalPodAutoscaler (KVPA) semantics shared by the controllers and the webhook.

Katalyst's controllers and webhooks read and write the `v1alpha1` shape of a KVPA (the CRD
stores `v1alpha2`), so this module reads that shape: `read_kvpa` turns the object into a
`KVPA` view or raises `KVPAError` naming the field and what is accepted. The rest are pure
functions with Katalyst's rules:

- `crop`: a recommendation clipped to the container policy's `[minAllowed, maxAllowed]`
  over its `controlledResources`, with `controlledValues` choosing requests, limits or both;
  `lowerBound`/`upperBound` are the policy's bounds (not confidence bounds);
- `pod_targets`: what a pod's containers should become, pod-level recommendations over
  container-level ones (the latter dropped with `podApplyStrategy: Pod`);
- `check_legal`: Katalyst's `CheckVPAStatusLegal`: no QoS class change, no negative value,
  no request above its limit.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pykatalyst.api import names
from pykatalyst.api.quantity import Quantity, QuantityError
from pykatalyst.api.timefmt import parse_rfc3339

JSON = dict[str, Any]
Resources = Mapping[str, Quantity]

STRATEGY_OFF: Final = "Off"
STRATEGY_RECREATE: Final = "Recreate"
STRATEGY_INPLACE: Final = "Inplace"
STRATEGY_BEST_EFFORT_INPLACE: Final = "BestEffortInplace"
UPDATING_STRATEGIES: Final = (
    STRATEGY_OFF,
    STRATEGY_RECREATE,
    STRATEGY_INPLACE,
    STRATEGY_BEST_EFFORT_INPLACE,
)
MATCH_ALL: Final = "All"
MATCH_FRESH: Final = "ForFreshPod"
MATCH_HISTORICAL: Final = "ForHistoricalPod"
# The CRD's enum spells the two with a prefix while Katalyst's code compares the short
# names; a user can only write the long ones through the API server, so both are read.
_MATCHING_SPELLINGS: Final = {
    MATCH_ALL: MATCH_ALL,
    MATCH_FRESH: MATCH_FRESH,
    MATCH_HISTORICAL: MATCH_HISTORICAL,
    "PodMatchingStrategyForFreshPod": MATCH_FRESH,
    "PodMatchingStrategyForHistoricalPod": MATCH_HISTORICAL,
}
APPLY_GROUP: Final = "Group"
APPLY_POD: Final = "Pod"
VALUES_BOTH: Final = "RequestsAndLimits"
VALUES_REQUESTS: Final = "RequestsOnly"
VALUES_LIMITS: Final = "LimitsOnly"
RESIZE_POLICY_NONE: Final = "None"
RESIZE_POLICY_RESTART: Final = "Restart"
SUPPORTED_RESOURCES: Final = ("cpu", "memory")
# The in-tree recommender Katalyst registers (`algorithm/recommenders/avg_load_to_cpu.go`).
RECOMMENDER_AVG_LOAD_TO_CPU: Final = "AvgLoadToCpuRequest"

# Conditions and reasons, Katalyst's spelling (`pkg/controller/vpa/util/api.go`).
COND_NO_PODS_MATCHED: Final = "NoPodsMatched"
COND_RECOMMENDATION_UPDATED: Final = "RecommendationUpdated"
COND_RECOMMENDATION_APPLIED: Final = "RecommendationApplied"
REASON_NO_PODS_MATCHED: Final = "NoPodsMatched"
REASON_PODS_MATCHED: Final = "PodsMatched"
REASON_UPDATED: Final = "Updated"
REASON_ILLEGAL: Final = "Illegal"
REASON_POD_SPEC_UPDATED: Final = "PodSpecUpdated"
REASON_POD_SPEC_NO_UPDATE: Final = "PodSpecNoUpdate"
COND_NO_VPA_MATCHED: Final = "NoVPAMatched"
COND_UPDATED_TO_VPA: Final = "RecommendationUpdatedToVPA"
RECOMMENDATION_REASON_UPDATED: Final = "Updated"
RECOMMENDATION_REASON_ILLEGAL: Final = "Illegal"


class KVPAError(ValueError):
    """A KVPA field that cannot be read: `field` is its path, the message says why and
    what is accepted."""

    def __init__(self, field_path: str, message: str) -> None:
        super().__init__(f"{field_path}: {message}")
        self.field = field_path


@dataclass(frozen=True, slots=True)
class ContainerPolicy:
    container: str
    min_allowed: Resources = field(default_factory=dict)
    max_allowed: Resources = field(default_factory=dict)
    controlled_resources: tuple[str, ...] = ("cpu",)
    controlled_values: str = VALUES_BOTH
    resize_policy: str = RESIZE_POLICY_NONE


@dataclass(frozen=True, slots=True)
class KVPA:
    """The v1alpha1 shape of one KVPA, read and checked."""

    namespace: str
    name: str
    uid: str
    created: float
    target_kind: str
    target_name: str
    target_api_version: str
    updating: str
    matching: str
    apply: str
    recommender: str
    policies: Mapping[str, ContainerPolicy]
    annotations: Mapping[str, str]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Target:
    """What one container's requests and limits should become (None: leave that part)."""

    requests: Resources | None = None
    limits: Resources | None = None

    def to_json(self) -> JSON:
        out: JSON = {}
        if self.requests is not None:
            out["requests"] = {r: str(q) for r, q in sorted(self.requests.items())}
        if self.limits is not None:
            out["limits"] = {r: str(q) for r, q in sorted(self.limits.items())}
        return out


def _obj(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise KVPAError(where, f"expected an object, got {value!r}")
    return value


def _choice(value: Any, where: str, accepted: Iterable[str], default: str) -> str:
    if value in (None, ""):
        return default
    accepted = tuple(accepted)
    if value not in accepted:
        raise KVPAError(where, f"{value!r} is not accepted (accepted: {', '.join(accepted)})")
    return str(value)


def read_resources(value: Any, where: str, *, negative: bool = False) -> dict[str, Quantity]:
    """A ResourceList: name -> quantity. Negative figures are refused unless `negative`."""
    out: dict[str, Quantity] = {}
    for name, text in _obj(value, where).items():
        try:
            q = Quantity.parse(str(text)) if isinstance(text, str | int | float) else None
        except QuantityError:
            q = None
        if q is None:
            raise KVPAError(f"{where}.{name}", f"{text!r} is not a quantity (e.g. 500m, 1Gi)")
        if q.sign() < 0 and not negative:
            raise KVPAError(f"{where}.{name}", f"{text!r} is negative")
        out[str(name)] = q
    return out


def read_policy(raw: Any, where: str) -> ContainerPolicy:
    p = _obj(raw, where)
    name = p.get("containerName")
    if not isinstance(name, str) or not name:
        raise KVPAError(f"{where}.containerName", "required: the container this policy is for")
    lo = read_resources(p.get("minAllowed"), f"{where}.minAllowed")
    hi = read_resources(p.get("maxAllowed"), f"{where}.maxAllowed")
    controlled = p.get("controlledResources")
    if controlled is None:
        controlled = ["cpu"]
    if not isinstance(controlled, list) or not all(isinstance(r, str) for r in controlled):
        raise KVPAError(f"{where}.controlledResources", "expected a list of resource names")
    for i, r in enumerate(controlled):
        if r not in SUPPORTED_RESOURCES:
            raise KVPAError(
                f"{where}.controlledResources[{i}]",
                f"{r!r} is not accepted (accepted: {', '.join(SUPPORTED_RESOURCES)})",
            )
    for r in SUPPORTED_RESOURCES:
        if r in lo and r in hi and lo[r] > hi[r]:
            raise KVPAError(f"{where}.minAllowed.{r}", f"{lo[r]} is above maxAllowed.{r} {hi[r]}")
    values = _choice(
        p.get("controlledValues"),
        f"{where}.controlledValues",
        (VALUES_BOTH, VALUES_REQUESTS, VALUES_LIMITS),
        VALUES_BOTH,
    )
    resize = _choice(
        p.get("resourceResizePolicy"),
        f"{where}.resourceResizePolicy",
        (RESIZE_POLICY_NONE, RESIZE_POLICY_RESTART),
        RESIZE_POLICY_NONE,
    )
    return ContainerPolicy(name, lo, hi, tuple(controlled), values, resize)


def _created(meta: Mapping[str, Any]) -> float:
    text = meta.get("creationTimestamp")
    try:
        return parse_rfc3339(text) if isinstance(text, str) else 0.0
    except ValueError:
        return 0.0


def read_kvpa(obj: Mapping[str, Any]) -> KVPA:
    """The KVPA's v1alpha1 view; `KVPAError` names the first field that cannot be read."""
    meta = _obj(obj.get("metadata"), "metadata")
    spec = _obj(obj.get("spec"), "spec")
    ref = _obj(spec.get("targetRef"), "spec.targetRef")
    for key in ("kind", "name"):
        if not isinstance(ref.get(key), str) or not ref.get(key):
            raise KVPAError(f"spec.targetRef.{key}", "required: the workload to scale")
    update = _obj(spec.get("updatePolicy"), "spec.updatePolicy")
    updating = _choice(
        update.get("podUpdatingStrategy"),
        "spec.updatePolicy.podUpdatingStrategy",
        UPDATING_STRATEGIES,
        STRATEGY_OFF,
    )
    matching = _MATCHING_SPELLINGS[
        _choice(
            update.get("podMatchingStrategy"),
            "spec.updatePolicy.podMatchingStrategy",
            _MATCHING_SPELLINGS,
            MATCH_ALL,
        )
    ]
    apply = _choice(
        update.get("podApplyStrategy"),
        "spec.updatePolicy.podApplyStrategy",
        (APPLY_GROUP, APPLY_POD),
        APPLY_GROUP,
    )
    rp = _obj(spec.get("resourcePolicy"), "spec.resourcePolicy")
    algo = _obj(rp.get("algorithmPolicy"), "spec.resourcePolicy.algorithmPolicy")
    raw_policies = rp.get("containerPolicies") or []
    if not isinstance(raw_policies, list):
        raise KVPAError("spec.resourcePolicy.containerPolicies", "expected a list")
    policies: dict[str, ContainerPolicy] = {}
    for i, raw in enumerate(raw_policies):
        pol = read_policy(raw, f"spec.resourcePolicy.containerPolicies[{i}]")
        policies[pol.container] = pol
    ann = meta.get("annotations")
    return KVPA(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        created=_created(meta),
        target_kind=str(ref["kind"]),
        target_name=str(ref["name"]),
        target_api_version=str(ref.get("apiVersion") or ""),
        updating=updating,
        matching=matching,
        apply=apply,
        recommender=str(algo.get("recommender") or ""),
        policies=policies,
        annotations=dict(ann) if isinstance(ann, Mapping) else {},
    )


# --- cropping (VPARec -> KVPA status) -----------------------------------------------------


def crop_to_bounds(
    uncapped: Resources, lo: Resources, hi: Resources, controlled: Iterable[str]
) -> dict[str, Quantity]:
    """Katalyst's cropResourcesWithBounds: only the controlled resources, each clipped."""
    out: dict[str, Quantity] = {}
    for r in controlled:
        if r not in uncapped:
            continue
        q = uncapped[r]
        if r in lo and q < lo[r]:
            q = lo[r]
        if r in hi and q > hi[r]:
            q = hi[r]
        out[r] = q
    return out


def _res_json(res: Resources) -> JSON:
    return {r: str(q) for r, q in sorted(res.items())}


def _part(uncapped: Resources, pol: ContainerPolicy | None, current: Any) -> JSON:
    out: JSON = {"uncappedTarget": _res_json(uncapped), "target": _res_json(uncapped)}
    if pol is not None:
        out["target"] = _res_json(
            crop_to_bounds(uncapped, pol.min_allowed, pol.max_allowed, pol.controlled_resources)
        )
        if pol.min_allowed:
            out["lowerBound"] = _res_json(pol.min_allowed)
        if pol.max_allowed:
            out["upperBound"] = _res_json(pol.max_allowed)
    if isinstance(current, Mapping) and current:
        out["current"] = dict(current)
    return out


def container_status(
    container: str,
    requests: Resources | None,
    limits: Resources | None,
    pol: ContainerPolicy | None,
    old: Mapping[str, Any] | None = None,
) -> JSON:
    """One `ContainerResources` of the KVPA status from a recommendation: uncappedTarget is
    the recommendation, target its cropped value, `current` kept from `old`."""
    old = old or {}
    out: JSON = {"containerName": container}
    keep_req = pol is None or pol.controlled_values != VALUES_LIMITS
    keep_lim = pol is None or pol.controlled_values != VALUES_REQUESTS
    if requests is not None and keep_req:
        out["requests"] = _part(requests, pol, _obj(old.get("requests"), "").get("current"))
    if limits is not None and keep_lim:
        out["limits"] = _part(limits, pol, _obj(old.get("limits"), "").get("current"))
    return out


# --- targets per pod ----------------------------------------------------------------------


def _target_of(entry: Mapping[str, Any], where: str) -> Target:
    def part(key: str) -> Resources | None:
        raw = entry.get(key)
        if not isinstance(raw, Mapping):
            return None
        return read_resources(raw.get("target"), f"{where}.{key}.target", negative=True)

    return Target(part("requests"), part("limits"))


def status_targets(
    status: Mapping[str, Any],
) -> tuple[dict[tuple[str, str], Target], dict[str, Target]]:
    """(pod, container) -> target and container -> target from a KVPA's v1alpha1 status
    (Katalyst's GenerateVPAResourceMap); a nameless entry is refused, naming it."""
    pods: dict[tuple[str, str], Target] = {}
    for i, pr in enumerate(status.get("podResources") or []):
        pod = pr.get("podName") if isinstance(pr, Mapping) else None
        if not isinstance(pod, str) or not pod:
            raise KVPAError(f"status.podResources[{i}].podName", "required")
        for j, cr in enumerate(pr.get("containerRecommendations") or []):
            where = f"status.podResources[{i}].containerRecommendations[{j}]"
            name = cr.get("containerName") if isinstance(cr, Mapping) else None
            if not isinstance(name, str) or not name:
                raise KVPAError(f"{where}.containerName", "required")
            pods[(pod, name)] = _target_of(cr, where)
    containers: dict[str, Target] = {}
    for i, cr in enumerate(status.get("containerResources") or []):
        name = cr.get("containerName") if isinstance(cr, Mapping) else None
        if not isinstance(name, str) or not name:
            raise KVPAError(f"status.containerResources[{i}].containerName", "required")
        containers[name] = _target_of(cr, f"status.containerResources[{i}]")
    return pods, containers


def containers_of(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    return [c for c in spec.get("containers") or [] if isinstance(c, Mapping)]


def old_annotation(pod: Mapping[str, Any]) -> dict[str, Target]:
    """The pod's `pod.kubernetes.io/resizeResources` as written before ({} when unreadable)."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    text = (meta.get("annotations") or {}).get(names.POD_RESIZE_RESOURCES_ANNOTATION)
    if not isinstance(text, str) or not text:
        return {}
    try:
        raw = json.loads(text)
        return {
            str(c): Target(
                read_resources(r.get("requests"), "requests", negative=True)
                if "requests" in r
                else None,
                read_resources(r.get("limits"), "limits", negative=True) if "limits" in r else None,
            )
            for c, r in raw.items()
            if isinstance(r, Mapping)
        }
    except (ValueError, AttributeError, KVPAError):
        return {}


def pod_targets(
    pod: Mapping[str, Any],
    pod_level: Mapping[tuple[str, str], Target],
    container_level: Mapping[str, Target],
) -> dict[str, Target]:
    """Katalyst's GenerateVPAPodResizeResourceAnnotations: the old annotation, overwritten
    by container-level then pod-level targets for the pod's containers."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    name = str(meta.get("name") or "")
    out = old_annotation(pod)
    for c in containers_of(pod):
        cname = str(c.get("name") or "")
        if cname in container_level:
            out[cname] = container_level[cname]
        if (name, cname) in pod_level:
            out[cname] = pod_level[(name, cname)]
    return out


def annotation_text(targets: Mapping[str, Target]) -> str:
    return json.dumps({c: t.to_json() for c, t in sorted(targets.items())}, sort_keys=True)


def resize_policy_text(pod: Mapping[str, Any], policies: Mapping[str, ContainerPolicy]) -> str:
    """`pod.kubernetes.io/resizePolicy`: container -> "Restart" ("" when none)."""
    out = {
        str(c.get("name")): RESIZE_POLICY_RESTART
        for c in containers_of(pod)
        if (p := policies.get(str(c.get("name")))) is not None
        and p.resize_policy == RESIZE_POLICY_RESTART
    }
    return json.dumps(out, sort_keys=True) if out else ""


# --- applying targets to a pod's containers -------------------------------------------------


def spec_resources(container: Mapping[str, Any]) -> tuple[dict[str, Quantity], dict[str, Quantity]]:
    res = container.get("resources") if isinstance(container.get("resources"), Mapping) else {}
    assert isinstance(res, Mapping)
    try:
        return (
            read_resources(res.get("requests"), "requests", negative=True),
            read_resources(res.get("limits"), "limits", negative=True),
        )
    except KVPAError:
        return {}, {}


def applied(
    pod: Mapping[str, Any], targets: Mapping[str, Target]
) -> dict[str, tuple[dict[str, Quantity], dict[str, Quantity]]]:
    """Katalyst's ApplyPodResources: per container, its requests and limits with the
    targets' entries written over them."""
    out: dict[str, tuple[dict[str, Quantity], dict[str, Quantity]]] = {}
    for c in containers_of(pod):
        name = str(c.get("name") or "")
        req, lim = spec_resources(c)
        t = targets.get(name)
        if t is not None:
            req.update(t.requests or {})
            lim.update(t.limits or {})
        out[name] = (req, lim)
    return out


def differs(pod: Mapping[str, Any], targets: Mapping[str, Target]) -> bool:
    """Katalyst's PodResourceDiff: a target entry the pod's spec does not already have."""
    now = {str(c.get("name") or ""): spec_resources(c) for c in containers_of(pod)}
    for cname, t in targets.items():
        if cname not in now:
            continue
        req, lim = now[cname]
        for have, want in ((req, t.requests or {}), (lim, t.limits or {})):
            if any(r not in have or have[r] != q for r, q in want.items()):
                return True
    return False


def qos_class(shapes: Mapping[str, tuple[Resources, Resources]]) -> str:
    """The Kubernetes QoS class of containers with these requests and limits."""
    any_set = False
    guaranteed = True
    for req, lim in shapes.values():
        for r in SUPPORTED_RESOURCES:
            rq, lq = req.get(r), lim.get(r)
            if (rq is not None and rq.sign() > 0) or (lq is not None and lq.sign() > 0):
                any_set = True
            if lq is None or lq.sign() <= 0 or (rq is not None and rq != lq):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def check_legal(pod: Mapping[str, Any], targets: Mapping[str, Target]) -> str:
    """Why Katalyst refuses these targets for the pod ("" when legal): a QoS class change,
    a negative value, a request above its limit."""
    before = applied(pod, {})
    after = applied(pod, targets)
    if qos_class(before) != qos_class(after):
        return f"qos changed ({qos_class(before)} -> {qos_class(after)})"
    for cname, (req, lim) in after.items():
        for r in SUPPORTED_RESOURCES:
            rq, lq = req.get(r), lim.get(r)
            if rq is not None and rq.sign() < 0:
                return f"resource {r} request value is negative (container {cname})"
            if lq is not None and lq.sign() < 0:
                return f"resource {r} limit value is negative (container {cname})"
            if rq is not None and lq is not None and lq.sign() > 0 and rq > lq:
                return f"resource {r} request greater than limit (container {cname})"
    return ""


def pod_created(pod: Mapping[str, Any]) -> float:
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    return _created(meta)


def pod_matches(kvpa: KVPA, pod: Mapping[str, Any]) -> bool:
    """podMatchingStrategy: All, ForFreshPod (created after the KVPA), ForHistoricalPod
    (created before it); creation timestamps compared as Katalyst does (strictly)."""
    if kvpa.matching == MATCH_FRESH:
        return kvpa.created < pod_created(pod)
    if kvpa.matching == MATCH_HISTORICAL:
        return pod_created(pod) < kvpa.created
    return True
