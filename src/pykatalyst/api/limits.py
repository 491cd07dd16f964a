"""What a pod may cost to read, and the shape every reader of a pod relies on.

An API server only stores pods of the published schema, within its size limits. Pods also
reach pykatalyst from manifest files, extender requests and the in-memory cluster, where
nothing has checked them; `check_pod` holds every pod to the API server's rules before a
component reads it, so that a hostile or broken pod is refused with an error naming the
field, never a crash or a slow tick:

* at most `MAX_POD_NODES` values, `MAX_POD_BYTES` bytes of strings and `MAX_DEPTH` levels;
* annotations at most 256 KiB in total (keys plus values), as the API server counts them;
* integers within 64 bits (JSON numbers from the API server are int64);
* the fields components read have the types of the Pod schema (a map where a map is
  expected, a string where a string is).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pykatalyst.api.qos_model import QoSError

MAX_POD_NODES: Final = 200_000
MAX_POD_BYTES: Final = 3 * 1024 * 1024
MAX_DEPTH: Final = 64
MAX_ANNOTATIONS_BYTES: Final = 256 * 1024
MAX_INT: Final = 2**63 - 1

_OBJECT: Final = "an object"
_STRING: Final = "a string"
_LIST: Final = "a list of objects"
_STR_MAP: Final = "a map of strings"
_QUANTITIES: Final = "a map of quantities"
_INT: Final = "an integer"

# field -> expected type, for the parts of a pod components read
_METADATA: Final[Mapping[str, str]] = {
    "name": _STRING,
    "namespace": _STRING,
    "uid": _STRING,
    "resourceVersion": _STRING,
    "generateName": _STRING,
    "creationTimestamp": _STRING,
    "deletionTimestamp": _STRING,
    "labels": _STR_MAP,
    "annotations": _STR_MAP,
    "ownerReferences": _LIST,
}
_SPEC: Final[Mapping[str, str]] = {
    "containers": _LIST,
    "initContainers": _LIST,
    "overhead": _QUANTITIES,
    "nodeName": _STRING,
    "schedulerName": _STRING,
    "priorityClassName": _STRING,
    "priority": _INT,
    "tolerations": _LIST,
    "nodeSelector": _STR_MAP,
    "affinity": _OBJECT,
    "topologySpreadConstraints": _LIST,
    "schedulingGates": _LIST,
}
_STATUS: Final[Mapping[str, str]] = {
    "phase": _STRING,
    "startTime": _STRING,
    "containerStatuses": _LIST,
    "initContainerStatuses": _LIST,
}
_CONTAINER: Final[Mapping[str, str]] = {
    "name": _STRING,
    "restartPolicy": _STRING,
    "resources": _OBJECT,
}
_RESOURCES: Final[Mapping[str, str]] = {"requests": _QUANTITIES, "limits": _QUANTITIES}
_NODE_AFFINITY: Final[Mapping[str, str]] = {
    "requiredDuringSchedulingIgnoredDuringExecution": _OBJECT,
    "preferredDuringSchedulingIgnoredDuringExecution": _LIST,
}


class PodShapeError(QoSError):
    """A pod that breaks the API server's schema or size limits; nothing of it is read."""


def _refuse(field: str, value: Any, accepted: str, message: str) -> PodShapeError:
    shown: str | None
    if value is None or isinstance(value, str):
        shown = value if value is None or len(value) <= 64 else value[:64] + "..."
    else:
        shown = f"a {type(value).__name__}"
    return PodShapeError(message, field=field, value=shown, accepted=accepted)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _locate(pod: Any, bad: Any) -> str:
    """The path of the first value in `pod` for which `bad(value, depth)` holds."""
    stack: list[tuple[Any, int, str]] = [(pod, 0, "")]
    while stack:
        value, depth, path = stack.pop()
        if bad(value, depth):
            return path
        if depth > MAX_DEPTH:
            continue
        if isinstance(value, Mapping):
            items = [(f"{path}.{k}" if path else str(k), v) for k, v in value.items()]
        elif isinstance(value, list | tuple):
            items = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
        else:
            continue
        stack.extend((v, depth + 1, p) for p, v in reversed(items))
    return ""


def _out_of_range(value: Any, depth: int) -> bool:
    return _is_int(value) and not -MAX_INT - 1 <= value <= MAX_INT


def _measure(pod: Any) -> None:
    """Refuse a pod too big, too deep or holding out-of-range integers; O(min(size, limit))."""
    nodes = 0
    size = 0
    level: list[Any] = [pod]
    depth = 0
    while level:
        if depth > MAX_DEPTH:
            where = _locate(pod, lambda _, d: d > MAX_DEPTH)
            raise _refuse(where, None, f"at most {MAX_DEPTH} levels", "pod nested too deeply")
        nodes += len(level)
        if nodes > MAX_POD_NODES:
            raise _refuse("(pod)", None, f"at most {MAX_POD_NODES} values", "pod too large")
        below: list[Any] = []
        for value in level:
            if isinstance(value, str):
                size += len(value)
            elif isinstance(value, Mapping):
                for key in value:
                    size += len(key) if isinstance(key, str) else 8
                below.extend(value.values())
            elif isinstance(value, list | tuple):
                below.extend(value)
            elif _out_of_range(value, depth):
                where = _locate(pod, _out_of_range)
                raise _refuse(where, None, "a 64-bit integer", "integer out of range")
        if size > MAX_POD_BYTES:
            raise _refuse("(pod)", None, f"at most {MAX_POD_BYTES} bytes", "pod too large")
        level = below
        depth += 1


def _typed(value: Any, expected: str) -> bool:
    if expected == _OBJECT:
        return isinstance(value, Mapping)
    if expected == _STRING:
        return isinstance(value, str)
    if expected == _INT:
        return _is_int(value)
    if expected == _LIST:
        return isinstance(value, list) and all(isinstance(v, Mapping) for v in value)
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        return False
    if expected == _STR_MAP:
        return all(isinstance(v, str) for v in value.values())
    # quantities: strings or plain numbers, as YAML hands them over
    return all(isinstance(v, str | int | float) and not isinstance(v, bool) for v in value.values())


def _fields(obj: Mapping[str, Any], schema: Mapping[str, str], prefix: str) -> None:
    for key, expected in schema.items():
        value = obj.get(key)
        if value is None or _typed(value, expected):
            continue
        raise _refuse(f"{prefix}{key}", value, expected, f"{prefix}{key} must be {expected}")


def _section(pod: Mapping[str, Any], key: str, schema: Mapping[str, str]) -> Mapping[str, Any]:
    value = pod.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _refuse(key, value, "an object", f"{key} must be an object")
    _fields(value, schema, f"{key}.")
    return value


def _annotation_bytes(annotations: Mapping[str, str]) -> None:
    total = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
    if total > MAX_ANNOTATIONS_BYTES:
        raise _refuse(
            "metadata.annotations",
            None,
            f"at most {MAX_ANNOTATIONS_BYTES} bytes in total, as the API server allows",
            f"annotations take {total} bytes",
        )


def check_pod_instance(pod: Any) -> None:
    """`check_pod` for the fields one pod has apart from its template (metadata, status,
    spec.nodeName): what a reader that checked the template once checks per pod."""
    if not isinstance(pod, Mapping):
        raise _refuse("(pod)", pod, "a pod object", "not a pod object")
    _measure({k: v for k, v in pod.items() if k != "spec"})
    _section(pod, "metadata", _METADATA)
    _section(pod, "status", _STATUS)
    spec = pod.get("spec")
    if isinstance(spec, Mapping) and "nodeName" in spec:
        _fields({"nodeName": spec["nodeName"]}, {"nodeName": _STRING}, "spec.")


def check_pod(pod: Any) -> None:
    """Raise `PodShapeError` (a `QoSError`) unless `pod` is a pod an API server would store."""
    if not isinstance(pod, Mapping):
        raise _refuse("(pod)", pod, "a pod object", "not a pod object")
    _measure(pod)
    meta = _section(pod, "metadata", _METADATA)
    _annotation_bytes(meta.get("annotations") or {})
    spec = _section(pod, "spec", _SPEC)
    _section(pod, "status", _STATUS)
    for key in ("containers", "initContainers"):
        for i, container in enumerate(spec.get(key) or []):
            _fields(container, _CONTAINER, f"spec.{key}[{i}].")
            resources = container.get("resources") or {}
            _fields(resources, _RESOURCES, f"spec.{key}[{i}].resources.")
    affinity = spec.get("affinity") or {}
    for key in ("nodeAffinity", "podAffinity", "podAntiAffinity"):
        _fields(affinity, {key: _OBJECT}, "spec.affinity.")
    node_affinity = affinity.get("nodeAffinity") or {}
    _fields(node_affinity, _NODE_AFFINITY, "spec.affinity.nodeAffinity.")
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    _fields(
        required,
        {"nodeSelectorTerms": _LIST},
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.",
    )
