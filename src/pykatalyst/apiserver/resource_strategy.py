"""resource.k8s.io/v1 (Dynamic Resource Allocation) as kube-apiserver 1.34 validates it:
a ResourceSlice names its driver and pool, one way of choosing nodes, at most 128 devices
with unique DNS-label names and attributes holding exactly one value each; its driver,
node and pool name never change. A ResourceClaim's spec never changes either."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pykatalyst.apiserver.strategy import KindState, Strategy, field_of

JSON = dict[str, Any]
MAX_DEVICES = 128
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_VALUE_LENGTH = 64
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VALUE_KEYS = ("bool", "int", "string", "version")
_NODE_FIELDS = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")


def _subdomain(value: Any, limit: int = 253) -> bool:
    return isinstance(value, str) and len(value) <= limit and bool(_SUBDOMAIN.fullmatch(value))


def _attribute_name_problem(key: str) -> str:
    domain, sep, ident = key.rpartition("/")
    if sep and not _subdomain(domain, 63):
        return "the domain must be a lower-case DNS subdomain of at most 63 characters"
    if not _C_IDENTIFIER.fullmatch(ident) or len(ident) > 32:
        return "the name must be a C identifier of at most 32 characters"
    return ""


def _attribute_problem(value: Any) -> str:
    if not isinstance(value, Mapping):
        return "must be an object with exactly one of bool, int, string, version"
    set_keys = [k for k in _VALUE_KEYS if value.get(k) is not None]
    if len(set_keys) != 1:
        return "exactly one value must be specified"
    v = value[set_keys[0]]
    if set_keys[0] in ("string", "version") and len(str(v)) > MAX_VALUE_LENGTH:
        return f"may not be more than {MAX_VALUE_LENGTH} bytes"
    return ""


def _device_problems(i: int, dev: Any, seen: set[str]) -> list[tuple[str, str]]:
    path = f"spec.devices[{i}]"
    if not isinstance(dev, Mapping):
        return [(path, "must be an object")]
    out: list[tuple[str, str]] = []
    name = dev.get("name")
    if not isinstance(name, str) or len(name) > 63 or not _LABEL.fullmatch(name):
        out.append((f"{path}.name", f"Invalid value: {name!r}: must be a DNS label"))
    elif name in seen:
        out.append((f"{path}.name", f'Duplicate value: "{name}"'))
    else:
        seen.add(name)
    attrs = dev.get("attributes") or {}
    capacity = dev.get("capacity") or {}
    if len(attrs) + len(capacity) > MAX_ATTRIBUTES_AND_CAPACITIES:
        out.append((path, "the total number of attributes and capacities must not exceed 32"))
    for key, value in dict(attrs).items():
        problem = _attribute_name_problem(str(key)) or _attribute_problem(value)
        if problem:
            out.append((f"{path}.attributes[{key}]", problem))
    return out


def slice_problems(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, message) for each way `spec` is not a valid ResourceSlice spec."""
    out: list[tuple[str, str]] = []
    if not _subdomain(spec.get("driver"), 63):
        out.append(("spec.driver", "Required value: a lower-case DNS subdomain"))
    pool = spec.get("pool")
    if not isinstance(pool, Mapping) or not _subdomain(pool.get("name")):
        out.append(("spec.pool.name", "Required value"))
    else:
        count = pool.get("resourceSliceCount")
        if not isinstance(count, int) or count < 1:
            out.append(("spec.pool.resourceSliceCount", "must be greater than zero"))
    chosen = [f for f in _NODE_FIELDS if spec.get(f) not in (None, False, "")]
    if len(chosen) != 1:
        out.append(
            (
                "spec",
                "exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
                f"`perDeviceNodeSelection` is required; set: {chosen}",
            )
        )
    devices = spec.get("devices") or []
    if not isinstance(devices, list) or len(devices) > MAX_DEVICES:
        out.append(("spec.devices", f"must be a list of at most {MAX_DEVICES} devices"))
        return out
    seen: set[str] = set()
    for i, dev in enumerate(devices):
        out.extend(_device_problems(i, dev, seen))
    return out


class ResourceSliceStrategy(Strategy):
    def validate_create(self, st: KindState, obj: JSON) -> None:
        self._check(st, obj, slice_problems(field_of(obj, "spec")))

    def validate_update(self, st: KindState, name: str, old: JSON, new: JSON) -> None:
        problems = slice_problems(field_of(new, "spec"))
        was, now = field_of(old, "spec"), field_of(new, "spec")
        for key in ("driver", "nodeName"):
            if was.get(key) != now.get(key):
                problems.append((f"spec.{key}", "field is immutable"))
        if field_of(was, "pool").get("name") != field_of(now, "pool").get("name"):
            problems.append(("spec.pool.name", "field is immutable"))
        self._check(st, new, problems)

    @staticmethod
    def _check(st: KindState, obj: JSON, problems: list[tuple[str, str]]) -> None:
        if problems:
            name = str(obj.get("metadata", {}).get("name", ""))
            path, message = problems[0]
            raise st.invalid(name, path, message)


class ResourceClaimStrategy(Strategy):
    """A claim's spec is fixed once created; the allocation is written to its status."""

    def validate_update(self, st: KindState, name: str, old: JSON, new: JSON) -> None:
        if field_of(old, "spec") != field_of(new, "spec"):
            raise st.invalid(name, "spec", "field is immutable")
