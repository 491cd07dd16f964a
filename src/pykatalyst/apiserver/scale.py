"""The `scale` subresource, as kube-apiserver serves it (pure).

A kind with a scale subresource is read and written through an `autoscaling/v1` `Scale`:
`spec.replicas` (the desired count, the only field a write changes), `status.replicas`
and `status.selector` (the label selector of the pods it counts, as a string). The
workload kinds (Deployment, ReplicaSet, StatefulSet) keep them at `.spec.replicas`,
`.status.replicas` and `.spec.selector`; a CustomResourceDefinition names its own paths in
`subresources.scale` (`specReplicasPath`, `statusReplicasPath`, `labelSelectorPath`,
which for a custom resource holds the selector already as a string). This is what the
HPA controller reads and writes, and what `kubectl scale` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pykatalyst.api.names import DEPLOYMENT, REPLICA_SET, STATEFUL_SET, Kind
from pykatalyst.cluster.protocol import JSON, BadRequest, Invalid
from pykatalyst.cluster.selectors import format_label_selector

MAX_REPLICAS: Final = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ScalePaths:
    """Where a kind keeps what its Scale shows: dotted paths from the object's root."""

    spec_replicas: str
    status_replicas: str
    selector: str = ""
    # the workload kinds keep a LabelSelector object; a custom resource keeps a string
    selector_is_object: bool = False


WORKLOAD: Final = ScalePaths(".spec.replicas", ".status.replicas", ".spec.selector", True)
BUILTIN: Final[dict[tuple[str, str], ScalePaths]] = {
    (k.group, k.plural): WORKLOAD for k in (DEPLOYMENT, REPLICA_SET, STATEFUL_SET)
}


def builtin_paths(kind: Kind) -> ScalePaths | None:
    return BUILTIN.get((kind.group, kind.plural))


def crd_paths(version: Mapping[str, Any]) -> ScalePaths | None:
    """The scale paths a CRD version declares, None without a scale subresource."""
    scale = (version.get("subresources") or {}).get("scale")
    if not isinstance(scale, Mapping):
        return None
    spec, status = scale.get("specReplicasPath"), scale.get("statusReplicasPath")
    for field, value in (("specReplicasPath", spec), ("statusReplicasPath", status)):
        if not isinstance(value, str) or not value.startswith("."):
            raise Invalid(
                f"subresources.scale.{field}: Invalid value: {value!r}: a JSON path from "
                "the object's root, such as .spec.replicas"
            )
    selector = scale.get("labelSelectorPath") or ""
    return ScalePaths(str(spec), str(status), str(selector))


def _parts(path: str) -> list[str]:
    return [p for p in path.split(".") if p]


def _get(obj: Mapping[str, Any], path: str) -> Any:
    cur: Any = obj
    for p in _parts(path):
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(p)
    return cur


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def view(obj: Mapping[str, Any], paths: ScalePaths) -> JSON:
    """The object's Scale."""
    meta = obj.get("metadata") or {}
    keep = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
    status: JSON = {"replicas": _count(_get(obj, paths.status_replicas))}
    raw = _get(obj, paths.selector) if paths.selector else None
    selector = (
        format_label_selector(raw) if paths.selector_is_object and isinstance(raw, Mapping) else raw
    )
    if isinstance(selector, str) and selector:
        status["selector"] = selector
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {k: meta[k] for k in keep if k in meta},
        "spec": {"replicas": _count(_get(obj, paths.spec_replicas))},
        "status": status,
    }


def desired(scale: Any, name: str) -> int:
    """The replicas a written Scale asks for; Invalid naming the field otherwise."""
    if not isinstance(scale, Mapping):
        raise BadRequest("the body of a scale write must be a Scale object")
    value = (scale.get("spec") or {}).get("replicas", 0)
    if not isinstance(value, int) or isinstance(value, bool):
        raise Invalid(
            f'Scale.autoscaling "{name}" is invalid: spec.replicas: Invalid value: '
            f"{value!r}: must be an integer"
        )
    if not 0 <= value <= MAX_REPLICAS:
        raise Invalid(
            f'Scale.autoscaling "{name}" is invalid: spec.replicas: Invalid value: {value}: '
            "must be greater than or equal to 0"
        )
    return value


def with_replicas(obj: JSON, paths: ScalePaths, replicas: int) -> JSON:
    """A copy of `obj` whose spec replicas path holds `replicas` (the path is created)."""
    out = dict(obj)
    parts = _parts(paths.spec_replicas)
    cur = out
    for p in parts[:-1]:
        nxt = cur.get(p)
        nxt = dict(nxt) if isinstance(nxt, Mapping) else {}
        cur[p] = nxt
        cur = nxt
    cur[parts[-1]] = replicas
    return out
