"""The pod's strategy and subresources, as kube-apiserver's pod registry has them:
defaults, the status reset and QoS class on create, an immutable spec, `status` and
`resize` writes, graceful deletion, `pods/binding` and the budget check of
`pods/eviction`. Pure functions of the stored objects; the store commits what they
return."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from pykatalyst.api.qos_model import K8S_QOS_RESOURCES, kube_qos_class
from pykatalyst.api.quantity import Quantity, QuantityError
from pykatalyst.api.timefmt import rfc3339
from pykatalyst.apiserver.strategy import KindState, Strategy, field_of, grace_seconds
from pykatalyst.cluster.protocol import (
    JSON,
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    TooManyRequests,
)
from pykatalyst.cluster.selectors import label_selector_from_dict

DEFAULT_SCHEDULER: Final = "default-scheduler"
DEFAULT_TERMINATION_GRACE_SECONDS: Final = 30

_POD_MUTABLE_SPEC = (
    "activeDeadlineSeconds",
    "terminationGracePeriodSeconds",
    "tolerations",
    "schedulingGates",
)
_IMMUTABLE_SPEC_MESSAGE: Final = (
    "Forbidden: pod updates may not change fields other than "
    "`spec.containers[*].image`, `spec.initContainers[*].image`, "
    "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing "
    "tolerations), `spec.terminationGracePeriodSeconds` and removals from "
    "`spec.schedulingGates`; use pods/binding to set spec.nodeName and pods/resize "
    "to change container resources"
)


class PodStrategy(Strategy):
    node_indexed = True
    graceful = True
    patch_subresources = ("status", "resize")

    def prepare_for_create(self, st: KindState, obj: JSON, now: float) -> None:
        default_pod(obj)
        obj["status"] = {"phase": "Pending", "qosClass": pod_qos_class(obj["spec"])}

    def prepare_for_update(self, obj: JSON) -> None:
        default_pod(obj)

    def validate_update(self, st: KindState, name: str, old: JSON, new: JSON) -> None:
        if not spec_update_allowed(old.get("spec") or {}, new.get("spec") or {}):
            raise st.invalid(name, "spec", _IMMUTABLE_SPEC_MESSAGE)

    def write_subresource(self, st: KindState, sub: str, old: JSON, new: JSON, ns: str) -> JSON:
        if sub == "resize":
            out = resized(old, new)
            problem = resize_problem(old, new, out)
            if problem is not None:
                raise st.invalid(old["metadata"]["name"], *problem)
            return out
        return self.status_write(st, old, new, ns)

    def status_write(self, st: KindState, old: JSON, new: JSON, ns: str) -> JSON:
        """Everything but spec; the pod's ownerReferences stay as they were, and so does
        its QoS class, fixed at creation, when the write leaves it out."""
        out = super().status_write(st, old, new, ns)
        old_meta, meta = old["metadata"], out["metadata"]
        if "ownerReferences" in old_meta:
            meta["ownerReferences"] = old_meta["ownerReferences"]
        else:
            meta.pop("ownerReferences", None)
        old_qos = field_of(old, "status").get("qosClass")
        status = out.get("status")
        if old_qos and isinstance(status, dict) and not status.get("qosClass"):
            out["status"] = {**status, "qosClass": old_qos}
        return out

    def deletion_grace(self, old: JSON, requested: int | None) -> int:
        """The grace asked for, else the pod's own; none for a pod that never ran on a
        node or has finished."""
        spec = old.get("spec") or {}
        phase = (old.get("status") or {}).get("phase")
        if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            return 0
        if requested is not None:
            return requested
        try:
            return grace_seconds(
                spec.get("terminationGracePeriodSeconds", DEFAULT_TERMINATION_GRACE_SECONDS) or 0,
                "spec.terminationGracePeriodSeconds",
            )
        except ApiError:  # stored before it was checked: never undeletable
            return DEFAULT_TERMINATION_GRACE_SECONDS


# --- create and update ------------------------------------------------------------------


def _nanos(value: Any) -> int:
    try:
        return Quantity.parse(str(value)).nanos
    except QuantityError:
        return 0


def pod_qos_class(spec: Mapping[str, Any]) -> str:
    """The Kubernetes QoS class the API server writes to a new pod's status.qosClass, from
    the cpu and memory requests and limits of its containers and init containers (an
    amount that does not parse counts as none)."""

    def shapes() -> Iterable[tuple[dict[str, int], dict[str, int]]]:
        for key in ("initContainers", "containers"):
            for c in spec.get(key) or []:
                res = (c.get("resources") if isinstance(c, dict) else None) or {}
                reqs, lims = res.get("requests") or {}, res.get("limits") or {}
                yield (
                    {n: _nanos(reqs.get(n, 0)) for n in K8S_QOS_RESOURCES},
                    {n: _nanos(lims.get(n, 0)) for n in K8S_QOS_RESOURCES},
                )

    return kube_qos_class(shapes(), 0)


def default_pod(obj: JSON) -> None:
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
            res = c.get("resources") if isinstance(c, dict) else None
            if isinstance(res, dict) and res.get("limits"):
                requests = res.setdefault("requests", {})
                for rname, q in res["limits"].items():
                    requests.setdefault(rname, q)


def spec_update_allowed(old_spec: JSON, new_spec: Any) -> bool:
    """A pod's spec is immutable but for a few fields, as on a real server: binding
    goes through `bind`, resource changes through the `resize` subresource."""
    if old_spec == new_spec:
        return True
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
            normalized[key] = [_with_image_of(o, n) for o, n in zip(olds, news, strict=True)]
    old_tol = old_spec.get("tolerations") or []
    new_tol = new_spec.get("tolerations") or []
    old_gates = old_spec.get("schedulingGates") or []
    gates_added = [g for g in new_spec.get("schedulingGates") or [] if g not in old_gates]
    return normalized == old_spec and all(t in new_tol for t in old_tol) and not gates_added


def _with_image_of(old: Any, new: Any) -> Any:
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return new
    out = {k: v for k, v in new.items() if k != "image"}
    if "image" in old:
        out["image"] = old["image"]
    return out


def resized(old: JSON, new: JSON) -> JSON:
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


_RESIZABLE: Final = ("cpu", "memory")


def resize_problem(old: JSON, asked: JSON, out: JSON) -> tuple[str, str] | None:
    """Why kube-apiserver (v1.34) refuses a `pods/resize` write, as (field, message), or
    None: containers added or removed, anything but cpu/memory changed (resizePolicy
    included), a request or limit removed, a negative figure, a request above its limit,
    or a change of the pod's QoS class."""
    old_cs = (old.get("spec") or {}).get("containers") or []
    asked_cs = [c for c in (asked.get("spec") or {}).get("containers") or [] if isinstance(c, dict)]
    if len(asked_cs) != len(old_cs) or {c.get("name") for c in asked_cs} != {
        c.get("name") for c in old_cs
    }:
        return "spec.containers", "Forbidden: containers may not be added or removed on resize"
    for i, (before, after) in enumerate(
        zip(old_cs, (out.get("spec") or {}).get("containers") or [], strict=False)
    ):
        problem = _container_resize_problem(i, before, after)
        if problem is not None:
            return problem
    before_qos = pod_qos_class(old.get("spec") or {})
    if pod_qos_class(out.get("spec") or {}) != before_qos:
        return (
            "spec",
            f'Invalid value: "{before_qos}": Pod QOS Class may not change as a result of resizing',
        )
    return None


def _container_resize_problem(i: int, before: JSON, after: JSON) -> tuple[str, str] | None:
    if before.get("resizePolicy") != after.get("resizePolicy"):
        return "spec", "Forbidden: only cpu and memory resources are mutable"
    old_res, new_res = before.get("resources") or {}, after.get("resources") or {}
    for part in ("requests", "limits"):
        was, now = old_res.get(part) or {}, new_res.get(part) or {}
        changed = {r for r in set(was) | set(now) if was.get(r) != now.get(r)}
        if changed - set(_RESIZABLE):
            return "spec", "Forbidden: only cpu and memory resources are mutable"
        if any(r not in now for r in was):
            return (
                f"spec.containers[{i}].resources.{part}",
                f"Forbidden: resource {part} cannot be removed",
            )
        for r, q in now.items():
            if _nanos(q) < 0:
                return (
                    f"spec.containers[{i}].resources.{part}[{r}]",
                    f'Invalid value: "{q}": must be greater than or equal to 0',
                )
    req, lim = new_res.get("requests") or {}, new_res.get("limits") or {}
    for r in _RESIZABLE:
        if r in req and r in lim and _nanos(req[r]) > _nanos(lim[r]):
            return (
                f"spec.containers[{i}].resources.requests",
                f'Invalid value: "{req[r]}": must be less than or equal to {r} limit of {lim[r]}',
            )
    return None


# --- pods/binding -----------------------------------------------------------------------


def bound(
    old: JSON, node_name: str, now: float, annotations: Mapping[str, str] | None = None
) -> JSON:
    """The pod bound to `node_name`: spec.nodeName, the PodScheduled condition and the
    Binding's annotations (each set over the pod's own, as kube-apiserver does). A 409 if
    it is bound already or being deleted."""
    name = old["metadata"]["name"]
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
            "lastTransitionTime": rfc3339(now),
        }
    )
    status["conditions"] = conds
    meta = dict(old["metadata"])
    if annotations:
        meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    # The binding writes spec.nodeName past the pod strategy: generation stays.
    return {
        **old,
        "metadata": meta,
        "spec": {**spec, "nodeName": node_name},
        "status": status,
    }


# --- pods/eviction ----------------------------------------------------------------------


def guard_refusal(reason: str) -> TooManyRequests:
    return TooManyRequests(
        f"Cannot evict pod as it would violate the pod's disruption budget. {reason}",
        details={"causes": [{"reason": "DisruptionBudget", "message": reason}]},
        retry_after_seconds=10.0,
    )


def needs_budget(pod: JSON) -> bool:
    """Pending, finished and terminating pods are evicted without a budget check."""
    phase = (pod.get("status") or {}).get("phase")
    terminating = "deletionTimestamp" in pod["metadata"]
    return not terminating and phase not in ("Pending", "Succeeded", "Failed")


def _count(status: Mapping[str, Any], key: str) -> int:
    value = status.get(key, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _pdb_selects(pdb: JSON, labels: Mapping[str, str]) -> bool:
    """Whether a PodDisruptionBudget covers a pod with these labels (an unreadable
    selector covers nothing, as the eviction subresource reads it)."""
    try:
        return label_selector_from_dict(field_of(pdb, "spec").get("selector")).matches(labels)
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


def spend_disruption(budgets: Iterable[JSON], pod: JSON, now: float) -> JSON | None:
    """The budget check of an eviction among the budgets of the pod's namespace: raise if
    the pod's budget refuses it; else the budget with the disruption spent and recorded,
    or None when no budget is spent."""
    labels = pod["metadata"].get("labels") or {}
    matching = [b for b in budgets if _pdb_selects(b, labels)]
    if len(matching) > 1:
        raise ApiError(
            "This pod has more than one PodDisruptionBudget, which the eviction "
            "subresource does not support.",
            "",
            500,
        )
    if not matching:
        return None
    pdb = matching[0]
    spec, status = field_of(pdb, "spec"), dict(field_of(pdb, "status"))
    current, desired = _count(status, "currentHealthy"), _count(status, "desiredHealthy")
    if not _pod_ready(pod) and (
        spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow" or current >= desired > 0
    ):
        return None
    allowed = _allowed_disruptions(pdb, status, current, desired)
    status["disruptionsAllowed"] = allowed - 1
    if allowed == 1:
        status["conditions"] = _insufficient_pods(status, now)
    status["disruptedPods"] = {
        **(status.get("disruptedPods") or {}),
        pod["metadata"]["name"]: rfc3339(now),
    }
    return {**pdb, "status": status}


def _allowed_disruptions(pdb: JSON, status: JSON, current: int, desired: int) -> int:
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
    return allowed


def _insufficient_pods(status: JSON, now: float) -> list[JSON]:
    conditions = status.get("conditions") or []
    was: JSON = next((c for c in conditions if c.get("type") == "DisruptionAllowed"), {})
    return [
        *(c for c in conditions if c.get("type") != "DisruptionAllowed"),
        {
            "type": "DisruptionAllowed",
            "status": "False",
            "reason": "InsufficientPods",
            "message": was.get("message", ""),
            "observedGeneration": status.get("observedGeneration", 0),
            "lastTransitionTime": was.get("lastTransitionTime")
            if was.get("status") == "False"
            else rfc3339(now),
        },
    ]


def disruption_target(pod: JSON, now: float) -> JSON | None:
    """The pod with the condition `DisruptionTarget=True` (reason
    `EvictionByEvictionAPI`), or None when it has that condition already."""
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
        return None
    stamp = rfc3339(now)
    wanted["lastProbeTime"] = None
    wanted["lastTransitionTime"] = (
        current.get("lastTransitionTime", stamp)
        if current is not None and current.get("status") == "True"
        else stamp
    )
    status["conditions"] = [c for c in conditions if c.get("type") != "DisruptionTarget"]
    status["conditions"].append(wanted)
    return {**pod, "status": status}
