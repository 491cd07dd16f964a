"""A pod's QoS as Katalyst reads it, plus the Kubernetes QoS class as the kubelet computes it.

Katalyst itself tolerates many mistakes silently (a malformed enhancement is ignored, an
unknown key is dropped). Here every such mistake becomes a `QoSProblem` that names the field,
the bad value and what would have been accepted, so a user learns about it before the pod
lands on a node and behaves differently from what the manifest seems to say.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator, Mapping
from typing import Any, Final

from pykatalyst.api import names
from pykatalyst.api.qos_model import K8S_QOS_BEST_EFFORT as K8S_QOS_BEST_EFFORT
from pykatalyst.api.qos_model import K8S_QOS_BURSTABLE as K8S_QOS_BURSTABLE
from pykatalyst.api.qos_model import K8S_QOS_GUARANTEED as K8S_QOS_GUARANTEED
from pykatalyst.api.qos_model import OOM_PRIORITY_IGNORE as OOM_PRIORITY_IGNORE
from pykatalyst.api.qos_model import OOM_PRIORITY_RANGES as OOM_PRIORITY_RANGES
from pykatalyst.api.qos_model import OOM_PRIORITY_TOP as OOM_PRIORITY_TOP
from pykatalyst.api.qos_model import Enhancements as Enhancements
from pykatalyst.api.qos_model import PodQoS as PodQoS
from pykatalyst.api.qos_model import QoSError as QoSError
from pykatalyst.api.qos_model import QoSProblem as QoSProblem
from pykatalyst.api.qos_model import annotation_field as annotation_field
from pykatalyst.api.qos_model import kube_qos_class
from pykatalyst.api.quantity import MAX_UNITS, NANO, Quantity, QuantityError, parse_quantity
from pykatalyst.api.yamlio import load_json

_TRUE_FALSE: Final = ("true", "false")

# Which enhancement annotation each known key is read from.
_KEY_HOME: Final[Mapping[str, str]] = {
    names.ENH_NUMA_BINDING: names.MEMORY_ENHANCEMENT_ANNOTATION,
    names.ENH_NUMA_EXCLUSIVE: names.MEMORY_ENHANCEMENT_ANNOTATION,
    names.ENH_OOM_PRIORITY: names.MEMORY_ENHANCEMENT_ANNOTATION,
    names.ENH_RSS_OVERUSE_THRESHOLD: names.MEMORY_ENHANCEMENT_ANNOTATION,
    names.ENH_CPUSET_POOL: names.CPU_ENHANCEMENT_ANNOTATION,
    names.ENH_NUMA_SHARE: names.CPU_ENHANCEMENT_ANNOTATION,
    names.ENH_SUPPRESSION_TOLERANCE_RATE: names.CPU_ENHANCEMENT_ANNOTATION,
    names.ENH_CPU_BURST_POLICY: names.CPU_ENHANCEMENT_ANNOTATION,
    names.ENH_CPU_BURST_PERCENT: names.CPU_ENHANCEMENT_ANNOTATION,
    names.ENH_ALIGN_BY_SOCKET: names.CPU_ENHANCEMENT_ANNOTATION,
    names.ENH_DISTRIBUTE_EVENLY_ACROSS_NUMA: names.CPU_ENHANCEMENT_ANNOTATION,
    names.ENH_FULL_PCPUS_PAIRING: names.CPU_ENHANCEMENT_ANNOTATION,
    names.ENH_NAMESPACE_TYPE: names.NETWORK_ENHANCEMENT_ANNOTATION,
    names.ENH_TOPOLOGY_AFFINITY_RESTRICTED: names.NETWORK_ENHANCEMENT_ANNOTATION,
}
_BOOL_KEYS: Final = frozenset(
    {
        names.ENH_NUMA_BINDING,
        names.ENH_NUMA_EXCLUSIVE,
        names.ENH_NUMA_SHARE,
        names.ENH_ALIGN_BY_SOCKET,
        names.ENH_DISTRIBUTE_EVENLY_ACROSS_NUMA,
        names.ENH_FULL_PCPUS_PAIRING,
        names.ENH_TOPOLOGY_AFFINITY_RESTRICTED,
    }
)
_NUMA_BINDING_LEVELS: Final = (
    names.QOS_DEDICATED_CORES,
    names.QOS_SHARED_CORES,
    names.QOS_RECLAIMED_CORES,
)
_CPUSET_POOL_LEVELS: Final = (names.QOS_SHARED_CORES, names.QOS_SYSTEM_CORES)
_POOL_NAME_CHARS: Final = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."
)
_QOS_RESOURCES: Final = (names.RESOURCE_CPU, names.RESOURCE_MEMORY)
# Go's strconv.Atoi reads 64-bit integers: at most 19 digits.
_MAX_INT_DIGITS: Final = 19
# Linux numbers NUMA nodes below MAX_NUMNODES (1024); a longer id list is not a NUMA list.
MAX_NUMA_ID: Final = 1023
_MAX_NUMA_IDS_CHARS: Final = 4096
_MAX_QUANTITY_NANOS: Final = MAX_UNITS * NANO

# --- helpers over plain pod JSON --------------------------------------------------------


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = pod.get("metadata")
    if not isinstance(meta, Mapping):
        return {}
    ann = meta.get("annotations")
    return ann if isinstance(ann, Mapping) else {}


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = pod.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _containers(pod: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    items = _spec(pod).get(key)
    if not isinstance(items, list):
        return []
    return [c for c in items if isinstance(c, Mapping)]


def _to_quantity(value: Any) -> Quantity:
    if not isinstance(value, str | int | float):
        raise QuantityError(value, f"unsupported type {type(value).__name__}")
    return parse_quantity(value)


def _bounded(quantity: Quantity) -> Quantity:
    """A quantity a pod may ask for: at most 2**63-1 units, what an int64 holds."""
    if abs(quantity.nanos) > _MAX_QUANTITY_NANOS:
        raise QuantityError(str(quantity), f"more than {MAX_UNITS} units")
    return quantity


def bounded_quantity(value: Any) -> Quantity:
    """A manifest value read as a quantity a pod may hold; `QuantityError` otherwise."""
    return _bounded(_to_quantity(value))


def container_resources(
    container: Mapping[str, Any], field_path: str
) -> tuple[dict[str, Quantity], dict[str, Quantity], list[QoSProblem]]:
    """A container's (requests, limits), requests defaulted from limits as the API server does."""
    problems: list[QoSProblem] = []
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        resources = {}
    out: list[dict[str, Quantity]] = []
    for part in ("requests", "limits"):
        values = resources.get(part)
        parsed: dict[str, Quantity] = {}
        if isinstance(values, Mapping):
            for name, raw in values.items():
                try:
                    parsed[str(name)] = _bounded(_to_quantity(raw))
                except (QuantityError, ValueError) as exc:
                    problems.append(
                        QoSProblem(
                            "error",
                            f"{field_path}.resources.{part}[{name}]",
                            _shorten(str(raw)),
                            "a Kubernetes quantity such as 500m, 2, 1Gi",
                            f"invalid quantity: {exc}",
                        )
                    )
        out.append(parsed)
    requests, limits = out
    for name, limit in limits.items():
        requests.setdefault(name, limit)
    return requests, limits, problems


def _all_containers(pod: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for key in ("initContainers", "containers"):
        for i, container in enumerate(_containers(pod, key)):
            yield f"spec.{key}[{i}]", container


def k8s_qos_class(pod: Mapping[str, Any]) -> str:
    """The Kubernetes QoS class, computed the way the kubelet does.

    Only cpu and memory count; a zero quantity counts as absent; init containers count too.
    """

    def shapes() -> Iterator[tuple[Mapping[str, Quantity], Mapping[str, Quantity]]]:
        for path, container in _all_containers(pod):
            reqs, lims, _ = container_resources(container, path)
            yield reqs, lims

    return kube_qos_class(shapes(), Quantity.from_milli(0))


def guaranteed_cpus(pod: Mapping[str, Any]) -> int:
    """The cpus the kubelet's static cpu manager pins for this pod, as Katalyst's agent
    counts them for the CNR's `guaranteed_cpus`: 0 unless the pod is Guaranteed; else the
    larger of its largest init container and the sum of its app containers, each counting
    its cpu request when that is a whole number of cpus (else 0)."""
    if k8s_qos_class(pod) != K8S_QOS_GUARANTEED:
        return 0

    def whole(path: str, container: Mapping[str, Any]) -> int:
        cpu = container_resources(container, path)[0].get(names.RESOURCE_CPU)
        if cpu is None:
            return 0
        milli = cpu.milli_value()
        return milli // 1000 if milli % 1000 == 0 else 0

    inits = _containers(pod, "initContainers")
    init = max((whole(f"spec.initContainers[{i}]", c) for i, c in enumerate(inits)), default=0)
    apps = _containers(pod, "containers")
    return max(init, sum(whole(f"spec.containers[{i}]", c) for i, c in enumerate(apps)))


# --- parsing ----------------------------------------------------------------------------


class _Collector:
    def __init__(self) -> None:
        self.problems: list[QoSProblem] = []

    def error(self, field_path: str, value: str | None, accepted: str, message: str) -> None:
        self.problems.append(QoSProblem("error", field_path, value, accepted, message))

    def warn(self, field_path: str, value: str | None, accepted: str, message: str) -> None:
        self.problems.append(QoSProblem("warning", field_path, value, accepted, message))


def _level(ann: Mapping[str, Any], out: _Collector) -> str:
    if names.QOS_LEVEL_ANNOTATION not in ann:
        return names.DEFAULT_QOS_LEVEL
    value = ann[names.QOS_LEVEL_ANNOTATION]
    if isinstance(value, str) and value in names.QOS_LEVELS:
        return value
    out.error(
        annotation_field(names.QOS_LEVEL_ANNOTATION),
        str(value),
        ", ".join(names.QOS_LEVELS),
        f"can't get valid qos level from annotation {names.QOS_LEVEL_ANNOTATION}",
    )
    return names.DEFAULT_QOS_LEVEL


_ENHANCEMENT_SHAPE: Final = (
    f'a JSON object of string values, e.g. {{"{names.ENH_NUMA_BINDING}": "true"}}'
)


def _decode_enhancement(annotation: str, text: str, out: _Collector) -> dict[str, Any]:
    """The JSON object of an enhancement annotation; {} (with a warning) when it is not one.

    Katalyst reads a malformed annotation as empty, and runs the pod without it.
    """
    path = annotation_field(annotation)
    try:
        decoded = load_json(text)
    except ValueError as exc:
        detail = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        out.warn(
            path,
            _shorten(text),
            _ENHANCEMENT_SHAPE,
            f"malformed JSON in annotation {annotation} ({detail}): Katalyst reads it as empty, "
            "so none of its enhancements apply",
        )
        return {}
    if not isinstance(decoded, dict):
        out.warn(
            path,
            _shorten(text),
            _ENHANCEMENT_SHAPE,
            f"annotation {annotation} must hold a JSON object, not a JSON "
            f"{_json_type(decoded)}: Katalyst reads it as empty",
        )
        return {}
    return decoded


def _enhancement_maps(ann: Mapping[str, Any], out: _Collector) -> dict[str, dict[str, str]]:
    maps: dict[str, dict[str, str]] = {}
    for annotation in names.ENHANCEMENT_ANNOTATIONS:
        if annotation not in ann:
            continue
        text = ann[annotation]
        if not isinstance(text, str):
            out.error(
                annotation_field(annotation),
                type(text).__name__,
                "a JSON object string",
                "annotation value must be a string",
            )
            continue
        values: dict[str, str] = {}
        for key, value in _decode_enhancement(annotation, text, out).items():
            if isinstance(value, str):
                values[key] = value
                continue
            out.warn(
                annotation_field(annotation, key),
                _shorten(json.dumps(value)),
                f'a JSON string, e.g. "{_stringify(value)}"',
                "enhancement values must be JSON strings: Katalyst reads a string-to-string "
                "map and takes this one as empty",
            )
        maps[annotation] = values
    return maps


def _shorten(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if value is None:
        return "null"
    return "string"


def _stringify(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return "..."


def _parse_int(text: str) -> int | None:
    stripped = text.strip()
    if not stripped or stripped != text:
        return None
    body = stripped[1:] if stripped[0] in "+-" else stripped
    if not body.isascii() or not body.isdigit() or len(body.lstrip("0")) > _MAX_INT_DIGITS:
        return None
    value = int(stripped)
    return value if -(2**63) <= value < 2**63 else None


def _parse_float(text: str) -> float | None:
    # Python's float() also takes non-ASCII digits, underscores and spaces; Go's does not.
    if not text.isascii() or "_" in text or text.strip() != text or len(text) > 64:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_numa_ids(text: str) -> tuple[int, ...] | None:
    """Read a NUMA id list such as "0,2-3"; None when it is not one.

    Ids run from 0 to `MAX_NUMA_ID`, so reading any list costs at most that many ids.
    """
    if len(text) > _MAX_NUMA_IDS_CHARS:
        return None
    ids: set[int] = set()
    for part in text.split(","):
        bounds = part.split("-")
        if len(bounds) > 2:
            return None
        nums = [_parse_int(b) for b in bounds]
        if any(n is None or n < 0 for n in nums):
            return None
        lo, hi = nums[0], nums[-1]
        assert lo is not None and hi is not None
        if hi < lo or hi > MAX_NUMA_ID:
            return None
        ids.update(range(lo, hi + 1))
    return tuple(sorted(ids))


def _typed_enhancements(
    level: str, maps: Mapping[str, Mapping[str, str]], ann: Mapping[str, Any], out: _Collector
) -> Enhancements:
    known: dict[str, Any] = {}
    for annotation, values in maps.items():
        for key, text in values.items():
            path = annotation_field(annotation, key)
            home = _KEY_HOME.get(key)
            if home is None:
                out.warn(
                    path,
                    _shorten(text),
                    ", ".join(k for k, h in _KEY_HOME.items() if h == annotation),
                    f"unknown key {key!r} in {annotation} is kept but has no effect here",
                )
                continue
            if home != annotation:
                out.warn(
                    path,
                    _shorten(text),
                    f"put {key} in {home}",
                    f"{key} is read from {home}, so it has no effect in {annotation}",
                )
                continue
            parsed = _parse_known(level, key, text, path, out)
            if parsed is not None:
                known[key] = parsed
    for annotation, key in (
        (names.NUMA_NUMBER_ANNOTATION, names.ENH_NUMA_NUMBER),
        (names.NUMA_IDS_ANNOTATION, names.ENH_NUMA_IDS),
    ):
        if annotation not in ann:
            continue
        raw = ann[annotation]
        text = raw if isinstance(raw, str) else str(raw)
        path = annotation_field(annotation)
        if key == names.ENH_NUMA_NUMBER:
            number = _parse_int(text) if isinstance(raw, str) else None
            if number is None or number <= 0:
                out.error(path, _shorten(text), "a positive integer", "invalid NUMA number")
            else:
                known[key] = number
        else:
            ids = parse_numa_ids(text) if isinstance(raw, str) else None
            if ids is None:
                out.error(
                    path,
                    _shorten(text),
                    f'a NUMA id list such as "0" or "0,2-3", ids 0 to {MAX_NUMA_ID}',
                    "invalid NUMA ids",
                )
            else:
                known[key] = ids
    raw_maps = {a: dict(v) for a, v in maps.items()}
    return Enhancements(raw=raw_maps, **known)


def _parse_known(level: str, key: str, text: str, path: str, out: _Collector) -> Any:
    if key in _BOOL_KEYS:
        if text not in _TRUE_FALSE:
            default = "unset" if key == names.ENH_NUMA_SHARE else '"false"'
            out.warn(
                path,
                _shorten(text),
                '"true" or "false"',
                f"invalid value for {key}: Katalyst only acts on the exact strings, "
                f"so it reads this as {default}",
            )
            return None
        return text == "true"
    if key == names.ENH_OOM_PRIORITY:
        number = _parse_int(text)
        if number is None:
            out.error(path, _shorten(text), "a 64-bit integer", f"invalid value for {key}")
            return None
        return _align_oom_priority(level, number, path, text, out)
    if key in (names.ENH_RSS_OVERUSE_THRESHOLD, names.ENH_SUPPRESSION_TOLERANCE_RATE):
        number_f = _parse_float(text)
        if number_f is None or number_f <= 0:
            out.error(path, _shorten(text), "a number greater than 0", f"invalid value for {key}")
            return None
        return number_f
    if key == names.ENH_CPUSET_POOL:
        if not text or not set(text) <= _POOL_NAME_CHARS:
            out.error(
                path, text, "a pool name of letters, digits, '-', '_' or '.'", "invalid pool name"
            )
            return None
        return text
    if key == names.ENH_CPU_BURST_POLICY:
        if text not in names.CPU_BURST_POLICIES:
            out.error(
                path,
                _shorten(text),
                ", ".join(names.CPU_BURST_POLICIES),
                "unknown cpu burst policy",
            )
            return None
        return text
    if key == names.ENH_CPU_BURST_PERCENT:
        number = _parse_int(text)
        if number is None or number < 0:
            out.error(path, _shorten(text), "an integer from 0 to 100", f"invalid value for {key}")
            return None
        if number > 100:
            out.warn(path, text, "an integer from 0 to 100", "cpu burst percent is capped at 100")
            return 100
        return number
    if key == names.ENH_NAMESPACE_TYPE:
        if text not in names.NETWORK_NAMESPACE_TYPES:
            out.error(
                path, text, ", ".join(names.NETWORK_NAMESPACE_TYPES), "unknown namespace type"
            )
            return None
        return text
    raise AssertionError(f"no parser for {key}")  # pragma: no cover - table is exhaustive


def _align_oom_priority(level: str, value: int, path: str, text: str, out: _Collector) -> int:
    if value in (OOM_PRIORITY_IGNORE, OOM_PRIORITY_TOP):
        return value
    low, high = OOM_PRIORITY_RANGES[level]
    aligned = min(max(value, low), high - 1)
    if aligned != value:
        out.warn(
            path,
            _shorten(text),
            f"{low}..{high - 1} for {level}, or {OOM_PRIORITY_IGNORE} / {OOM_PRIORITY_TOP}",
            f"{names.ENH_OOM_PRIORITY} {value} is outside the range of {level}; using {aligned}",
        )
    return aligned


def _ignored_enhancements(level: str, enh: Enhancements, out: _Collector) -> Enhancements:
    """Drop the enhancements Katalyst ignores at this level, with a warning for each."""
    mem = names.MEMORY_ENHANCEMENT_ANNOTATION
    cpu = names.CPU_ENHANCEMENT_ANNOTATION
    changes: dict[str, Any] = {}
    if enh.numa_binding and level not in _NUMA_BINDING_LEVELS:
        out.warn(
            annotation_field(mem, names.ENH_NUMA_BINDING),
            "true",
            ", ".join(_NUMA_BINDING_LEVELS),
            f"{names.ENH_NUMA_BINDING} has no effect on {level}: Katalyst gives it no NUMA "
            "preference",
        )
        changes[names.ENH_NUMA_BINDING] = False
    binding = changes.get(names.ENH_NUMA_BINDING, enh.numa_binding)
    if enh.numa_exclusive and (not binding or level != names.QOS_DEDICATED_CORES):
        why = (
            f"only {names.QOS_DEDICATED_CORES} pods"
            if level != names.QOS_DEDICATED_CORES
            else f"only together with {names.ENH_NUMA_BINDING}"
        )
        out.warn(
            annotation_field(mem, names.ENH_NUMA_EXCLUSIVE),
            "true",
            f'{names.ENH_NUMA_EXCLUSIVE} "true" on {names.QOS_DEDICATED_CORES} with '
            f'{names.ENH_NUMA_BINDING} "true"',
            f"{names.ENH_NUMA_EXCLUSIVE} has no effect: Katalyst honours it for {why}",
        )
        changes[names.ENH_NUMA_EXCLUSIVE] = False
    if (
        level == names.QOS_RECLAIMED_CORES
        and enh.cpu_burst_policy is not None
        and enh.cpu_burst_policy != names.CPU_BURST_POLICY_CLOSED
    ):
        out.warn(
            annotation_field(cpu, names.ENH_CPU_BURST_POLICY),
            enh.cpu_burst_policy,
            names.CPU_BURST_POLICY_CLOSED,
            f"cpu burst is always closed for {names.QOS_RECLAIMED_CORES}: Katalyst reads "
            f"{enh.cpu_burst_policy!r} as closed",
        )
        changes[names.ENH_CPU_BURST_POLICY] = names.CPU_BURST_POLICY_CLOSED
    if enh.cpuset_pool is not None and level not in _CPUSET_POOL_LEVELS:
        out.warn(
            annotation_field(cpu, names.ENH_CPUSET_POOL),
            enh.cpuset_pool,
            ", ".join(_CPUSET_POOL_LEVELS),
            f"{names.ENH_CPUSET_POOL} has no effect on {level}: its pods run in the "
            f"{PodQoS(level, enh, '').cpuset_pool} pool",
        )
        changes[names.ENH_CPUSET_POOL] = None
    return dataclasses.replace(enh, **changes) if changes else enh


def _level_rules(level: str, enh: Enhancements, pod: Mapping[str, Any], out: _Collector) -> None:
    mem = names.MEMORY_ENHANCEMENT_ANNOTATION
    cpu = names.CPU_ENHANCEMENT_ANNOTATION
    if enh.numa_exclusive:
        for key in (names.ENH_DISTRIBUTE_EVENLY_ACROSS_NUMA, names.ENH_FULL_PCPUS_PAIRING):
            if getattr(enh, key):
                out.error(
                    annotation_field(cpu, key),
                    "true",
                    f"{key} without {names.ENH_NUMA_EXCLUSIVE}",
                    f"{key} cannot be combined with {names.ENH_NUMA_EXCLUSIVE}",
                )
    if enh.suppression_tolerance_rate is not None and level != names.QOS_RECLAIMED_CORES:
        out.error(
            annotation_field(cpu, names.ENH_SUPPRESSION_TOLERANCE_RATE),
            str(enh.suppression_tolerance_rate),
            f"{names.QOS_RECLAIMED_CORES} pods",
            f"{names.ENH_SUPPRESSION_TOLERANCE_RATE} is only allowed for "
            f"{names.QOS_RECLAIMED_CORES}",
        )
    if (enh.numa_number is not None or enh.numa_ids is not None) and not enh.numa_binding:
        annotation = (
            names.NUMA_IDS_ANNOTATION if enh.numa_ids is not None else names.NUMA_NUMBER_ANNOTATION
        )
        out.warn(
            annotation_field(annotation),
            None,
            f'{names.ENH_NUMA_BINDING} "true" in {mem}',
            f"NUMA hints only apply to pods with {names.ENH_NUMA_BINDING}",
        )
    if level == names.QOS_DEDICATED_CORES:
        if not enh.numa_binding:
            out.error(
                annotation_field(mem, names.ENH_NUMA_BINDING),
                None,
                f'{names.ENH_NUMA_BINDING} "true"',
                f"{names.QOS_DEDICATED_CORES} requires {names.ENH_NUMA_BINDING}",
            )
        _dedicated_resources(pod, out)
    if level == names.QOS_RECLAIMED_CORES:
        _reclaimed_resources(pod, out)


def _dedicated_resources(pod: Mapping[str, Any], out: _Collector) -> None:
    for path, container in _all_containers(pod):
        if path.startswith("spec.initContainers") and container.get("restartPolicy") != "Always":
            continue
        reqs, lims, _ = container_resources(container, path)
        name = container.get("name", "")
        cpu = reqs.get(names.RESOURCE_CPU)
        if cpu is None or cpu.milli_value() <= 0:
            out.error(
                f"{path}.resources.requests.cpu",
                None if cpu is None else str(cpu),
                "a cpu request of at least one core (1, 2, ...)",
                f"{names.QOS_DEDICATED_CORES} container {name!r} must request cpu",
            )
        elif cpu.milli_value() % 1000 != 0:
            out.warn(
                f"{path}.resources.requests.cpu",
                str(cpu),
                "a whole number of cores (1, 2, ...)",
                f"{names.QOS_DEDICATED_CORES} container {name!r} gets whole CPUs: its request "
                f"is rounded up to {cpu.value()}, as Katalyst does",
            )
        for resource in _QOS_RESOURCES:
            req, lim = reqs.get(resource), lims.get(resource)
            if req is None or lim is None or req != lim:
                out.warn(
                    f"{path}.resources.limits.{resource}",
                    None if lim is None else str(lim),
                    f"equal to the {resource} request ({req})"
                    if req is not None
                    else f"a {resource} request and an equal limit",
                    f"{names.QOS_DEDICATED_CORES} container {name!r} is not Guaranteed "
                    f"({resource} limit differs from its request): it runs on its requests, "
                    "as Katalyst runs it",
                )


def _reclaimed_resources(pod: Mapping[str, Any], out: _Collector) -> None:
    replacement = {
        names.RESOURCE_CPU: names.RECLAIMED_MILLICPU,
        names.RESOURCE_MEMORY: names.RECLAIMED_MEMORY,
    }
    zero = Quantity.from_milli(0)
    for path, container in _all_containers(pod):
        reqs, lims, _ = container_resources(container, path)
        name = container.get("name", "")
        for resource in _QOS_RESOURCES:
            for part, values in (("requests", reqs), ("limits", lims)):
                quantity = values.get(resource)
                if quantity is None or not quantity > zero:
                    continue
                out.warn(
                    f"{path}.resources.{part}.{resource}",
                    str(quantity),
                    f"{replacement[resource]} instead of {resource}",
                    f"{names.QOS_RECLAIMED_CORES} container {name!r} asks for native "
                    f"{resource}: it is counted against the node's native {resource} too",
                )
                break


def _overhead(pod: Mapping[str, Any], out: _Collector) -> None:
    overhead = _spec(pod).get("overhead")
    if not isinstance(overhead, Mapping):
        return
    for name, raw in overhead.items():
        try:
            bounded_quantity(raw)
        except (QuantityError, ValueError) as exc:
            out.error(
                f"spec.overhead[{name}]",
                _shorten(str(raw)),
                "a Kubernetes quantity such as 500m, 2, 1Gi",
                f"invalid quantity: {exc.reason if isinstance(exc, QuantityError) else exc}",
            )


def _shape_problem(pod: Any, raise_it: bool) -> QoSProblem | None:
    from pykatalyst.api.limits import PodShapeError, check_pod

    try:
        check_pod(pod)
    except PodShapeError as exc:
        if raise_it:
            raise
        return QoSProblem("error", exc.field, exc.value, exc.accepted, exc.reason)
    return None


def _check(pod: Mapping[str, Any], raise_shape: bool = False) -> tuple[PodQoS, list[QoSProblem]]:
    """The QoS and every problem; a pod that breaks the Pod schema gets that one problem
    (or, with `raise_shape`, raises `PodShapeError`)."""
    out = _Collector()
    shape = _shape_problem(pod, raise_shape)
    if shape is not None:
        out.problems.append(shape)
        return PodQoS(names.DEFAULT_QOS_LEVEL, Enhancements(), K8S_QOS_BEST_EFFORT), out.problems
    ann = _annotations(pod)
    level = _level(ann, out)
    level_ok = not out.problems
    maps = _enhancement_maps(ann, out)
    enh = _typed_enhancements(level, maps, ann, out)
    for path, container in _all_containers(pod):
        out.problems.extend(container_resources(container, path)[2])
    _overhead(pod, out)
    if level_ok:
        enh = _ignored_enhancements(level, enh, out)
        _level_rules(level, enh, pod, out)
    qos_class = k8s_qos_class(pod)
    warnings = tuple(p for p in out.problems if p.severity == "warning")
    return PodQoS(level, enh, qos_class, warnings), out.problems


def inspect_pod_qos(pod: Mapping[str, Any]) -> tuple[PodQoS, list[QoSProblem]]:
    """The QoS as far as it can be read, with every problem found (errors and warnings).

    The QoS is only meaningful when no problem is an error.
    """
    return _check(pod)


def validate_pod_qos(pod: Mapping[str, Any]) -> list[QoSProblem]:
    """Every problem with a pod's QoS declaration: errors first, then warnings."""
    problems = _check(pod)[1]
    return [p for p in problems if p.severity == "error"] + [
        p for p in problems if p.severity == "warning"
    ]


def parse_pod_qos(pod: Mapping[str, Any]) -> PodQoS:
    """A pod's (or pod template's) QoS; raises `QoSError` for the first problem found
    (`PodShapeError`, a `QoSError`, when the pod breaks the Pod schema or its limits)."""
    qos, problems = _check(pod, raise_shape=True)
    for problem in problems:
        if problem.severity == "error":
            raise QoSError.from_problem(problem)
    return qos


def qos_level(pod: Mapping[str, Any]) -> str:
    """Just the level, for hot paths that trust pods already admitted."""
    out = _Collector()
    level = _level(_annotations(pod), out)
    if out.problems:
        raise QoSError.from_problem(out.problems[0])
    return level
