"""What each kind means to the API server, as kube-apiserver's registry splits it: a
`Strategy` per kind prepares and validates an object for create, update and the status
subresource and says how it is deleted. Strategies never reach into the store: they read
only what `KindState` offers of their kind, and what a write does beyond its own object (a
CRD serves a new kind, a namespace takes its objects with it) is a store hook
(`apiserver/hooks.py`). The store (`apiserver/store.py`) stays generic;
`memory.strategy_for(kind)` picks the strategy."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, Protocol

from pykatalyst.api.names import CRD, DEFAULT_NAMESPACE, KUBE_SYSTEM_NAMESPACE, Kind
from pykatalyst.apiserver.decode import decode
from pykatalyst.apiserver.scale import ScalePaths, crd_paths
from pykatalyst.cluster.protocol import JSON, BadRequest, Invalid
from pykatalyst.cluster.selectors import valid_label_key, valid_label_value


class KindState(Protocol):
    """What a strategy reads of the store's record of its kind (`store.KindState`)."""

    kind: Kind
    strategy: Strategy
    status_subresource: bool

    def invalid(self, name: str, field_path: str, message: str) -> Invalid: ...


_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

MAX_GRACE_SECONDS: Final = (2**63 - 1) // 1_000_000_000
"""The longest grace period: kube-apiserver turns seconds into a Go time.Duration (int64
nanoseconds), about 292 years."""

# Of the core group only these kinds' strategies set metadata.generation (kube-apiserver
# 1.34): nodes, namespaces, config maps and events have none. Neither have leases nor
# events.k8s.io events; CRDs, custom resources and the workload kinds have it.
_CORE_WITH_GENERATION: Final = frozenset({"pods", "replicationcontrollers", "podtemplates"})
_GROUPS_WITHOUT_GENERATION: Final = frozenset({"coordination.k8s.io", "events.k8s.io"})
_SYSTEM_META: Final = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
)


def grace_seconds(value: Any, field: str) -> int:
    """A grace period as kube-apiserver reads one: an integer number of seconds that fits a
    Go time.Duration; a negative one means the shortest, 1 second."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise BadRequest(f"{field}: invalid value {value!r}: expected an integer of seconds")
    if value > MAX_GRACE_SECONDS:
        raise Invalid(
            f"{field}: Invalid value: {value}: must be at most {MAX_GRACE_SECONDS} seconds"
        )
    return 1 if value < 0 else value


def field_of(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """A stored object's `spec` or `status` as a mapping; one of another type (which only a
    kind without a typed decode can hold) reads as empty."""
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def is_custom_resource(kind: Kind) -> bool:
    """Served from a CRD (Katalyst kinds included) rather than built into the server."""
    group = kind.group
    return group not in ("", "apps", "batch", "policy", "autoscaling") and not group.endswith(
        ".k8s.io"
    )


def tracks_generation(kind: Kind) -> bool:
    if kind.group == "":
        return kind.plural in _CORE_WITH_GENERATION
    return kind.group not in _GROUPS_WITHOUT_GENERATION


# --- metadata, the same for every kind --------------------------------------------------


def check_type(st: KindState, obj: JSON) -> None:
    """`kind` and `apiVersion` default to the request's and must agree with it."""
    k = obj.setdefault("kind", st.kind.kind)
    api = obj.setdefault("apiVersion", st.kind.api_version)
    for what, value in (("kind", k), ("apiVersion", api)):
        if not isinstance(value, str):
            raise BadRequest(f"{what}: invalid value {value!r}: expected a string")
    if k != st.kind.kind or api.rpartition("/")[0] != st.kind.group:
        raise BadRequest(
            f"the object is a {api} {k}, but this request is for {st.kind.api_version} "
            f"{st.kind.kind}"
        )
    obj["apiVersion"] = st.kind.api_version


def validate_meta(st: KindState, obj: JSON) -> None:
    meta = obj["metadata"]
    name = _validate_name(st, meta.get("name", ""))
    for key in ("labels", "annotations"):
        if meta.get(key) is not None:
            _validate_string_map(st, name, key, meta[key])
    fins = meta.get("finalizers")
    if fins is not None and (
        not isinstance(fins, list) or not all(isinstance(f, str) for f in fins)
    ):
        raise st.invalid(
            name, "metadata.finalizers", f"Invalid value: {fins!r}: must be a list of strings"
        )


def _validate_name(st: KindState, name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise st.invalid("", "metadata.name", "Required value: name or generateName is required")
    label_kind = st.strategy.name_is_label
    pattern = _DNS1123_LABEL if label_kind else _DNS1123_SUBDOMAIN
    limit = 63 if label_kind else 253
    if len(name) > limit or not pattern.match(name):
        what = "RFC 1123 label" if label_kind else "RFC 1123 subdomain"
        raise st.invalid(
            name,
            "metadata.name",
            f'Invalid value: "{name}": a lowercase {what} must consist of lower case '
            "alphanumeric characters, '-'"
            + ("" if label_kind else " or '.'")
            + f", must start and end with an alphanumeric character and be at most {limit} "
            "characters",
        )
    return name


def _validate_string_map(st: KindState, name: str, key: str, value: Any) -> None:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise st.invalid(
            name,
            f"metadata.{key}",
            f"Invalid value: {value!r}: must be a map of string keys to string values",
        )
    for k, v in value.items():
        if not valid_label_key(k):
            raise st.invalid(
                name,
                f"metadata.{key}",
                f'Invalid value: "{k}": a key must be an optional DNS subdomain prefix '
                "and '/', then up to 63 characters of [A-Za-z0-9-_.] starting and "
                "ending alphanumeric",
            )
        if key == "labels" and not valid_label_value(v):
            raise st.invalid(
                name,
                f"metadata.labels.{k}",
                f'Invalid value: "{v}": a label value must be empty or up to 63 '
                "characters of [A-Za-z0-9-_.] starting and ending alphanumeric",
            )


def drop_empty_meta(meta: JSON) -> None:
    """ObjectMeta's lists and maps are omitted when empty, as the API server writes them."""
    for key in ("labels", "annotations", "finalizers", "ownerReferences"):
        if key in meta and not meta[key]:
            del meta[key]


def bump_generation(meta: JSON, old_meta: Mapping[str, Any]) -> None:
    if "generation" in old_meta:
        meta["generation"] = int(old_meta["generation"]) + 1


def keep_system_meta(st: KindState, meta: JSON, old_meta: Mapping[str, Any], ns: str) -> None:
    """An update cannot set the fields the server owns: they keep their stored values."""
    meta["namespace"] = ns
    if not st.kind.namespaced:
        meta.pop("namespace", None)
    for key in _SYSTEM_META:
        if key in old_meta:
            meta[key] = old_meta[key]
        else:
            meta.pop(key, None)


def spec_changed(st: KindState, old: JSON, new: JSON) -> bool:
    skip = ("metadata", "status") if st.status_subresource else ("metadata",)
    keys = (set(old) | set(new)) - set(skip)
    return any(old.get(k) != new.get(k) for k in keys)


# --- the strategies ---------------------------------------------------------------------


class Strategy:
    """The default: a kind with no rules of its own beyond metadata."""

    node_indexed = False  # kept in a per-node index (pods)
    graceful = False  # deleted gracefully, the deletion always written first (pods)
    name_is_label = False  # names are DNS-1123 labels, not subdomains (namespaces)
    patch_subresources: tuple[str, ...] = ("status",)

    def __init__(self, kind: Kind) -> None:
        self.core = kind.group == ""
        self.tracks_generation = tracks_generation(kind)
        self.custom_resource = is_custom_resource(kind)
        # Custom resources with a status subresource drop status on create.
        self._drops_status = kind.group not in ("", CRD.group)
        self._plural = kind.plural

    def decode(self, obj: JSON) -> JSON:
        """The typed decode of a built-in kind's body (`apiserver/decode.py`)."""
        return decode(self._plural, obj) if self.core else obj

    def prepare_for_create(self, st: KindState, obj: JSON, now: float) -> None:
        if st.status_subresource and self._drops_status:
            obj.pop("status", None)

    def validate_create(self, st: KindState, obj: JSON) -> None:
        pass

    def prepare_for_update(self, obj: JSON) -> None:
        pass

    def validate_update(self, st: KindState, name: str, old: JSON, new: JSON) -> None:
        pass

    def write_subresource(self, st: KindState, sub: str, old: JSON, new: JSON, ns: str) -> JSON:
        """What a write to subresource `sub` keeps of `new` over `old`."""
        return self.status_write(st, old, new, ns)

    def status_write(self, st: KindState, old: JSON, new: JSON, ns: str) -> JSON:
        """For custom resources and CRDs only status; for the built-in kinds (pods, nodes,
        namespaces) everything but spec, so label and annotation changes are written too,
        as kube-apiserver's status strategies do."""
        if not self.core:
            out = {**old, "status": new.get("status"), "metadata": dict(old["metadata"])}
        else:
            meta = dict(new.get("metadata") or {})
            keep_system_meta(st, meta, old["metadata"], ns)
            out = {**new, "metadata": meta}
            if "spec" in old:
                out["spec"] = old["spec"]
            else:
                out.pop("spec", None)
        if out.get("status") is None:
            out.pop("status", None)
        return out

    def deletion_grace(self, old: JSON, requested: int | None) -> int:
        return 0


class NamespaceStrategy(Strategy):
    name_is_label = True

    def prepare_for_create(self, st: KindState, obj: JSON, now: float) -> None:
        obj["status"] = {"phase": "Active"}


class EventStrategy(Strategy):
    def validate_create(self, st: KindState, obj: JSON) -> None:
        """kube-apiserver's checks of a core/v1 Event: its namespace must be its object's
        (an event about a cluster-scoped object goes to "default"; with an eventTime,
        "kube-system" too), and an event with an eventTime names who reported it."""
        meta = obj["metadata"]
        name, ns = meta["name"], meta.get("namespace", "")
        involved = obj.get("involvedObject") or {}
        involved_ns = str(involved.get("namespace") or "") if isinstance(involved, dict) else ""
        timed = bool(obj.get("eventTime"))
        allowed = {involved_ns} if involved_ns else {"", DEFAULT_NAMESPACE}
        if timed and not involved_ns:
            allowed = {DEFAULT_NAMESPACE, KUBE_SYSTEM_NAMESPACE}
        if ns not in allowed:
            raise st.invalid(
                name,
                "involvedObject.namespace",
                f'Invalid value: "{involved_ns}": does not match event.namespace',
            )
        if timed:
            for key in ("reportingComponent", "reportingInstance", "action", "reason"):
                if not obj.get(key):
                    raise st.invalid(name, key, "Required value")


def _storage_version(crd: JSON) -> Mapping[str, Any]:
    versions = (crd.get("spec") or {}).get("versions") or []
    return next((v for v in versions if v.get("storage")), versions[0] if versions else {})


def crd_scale(crd: JSON) -> ScalePaths | None:
    """The scale subresource the CRD's storage version declares, None without one."""
    return crd_paths(_storage_version(crd))


def crd_kind(crd: JSON) -> tuple[Kind, bool]:
    """The kind a CRD serves (at its storage version) and whether it has a status
    subresource; a 422 when the CRD does not name one."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    storage = _storage_version(crd)
    plural, group = names.get("plural"), spec.get("group")
    if not plural or not group or not names.get("kind"):
        raise Invalid(
            f'CustomResourceDefinition "{crd["metadata"].get("name", "")}" is invalid: '
            "spec.group, spec.names.plural and spec.names.kind are required",
        )
    kind = Kind(
        group,
        str(storage.get("name", "v1")),
        str(names["kind"]),
        str(plural),
        spec.get("scope", "Namespaced") == "Namespaced",
        tuple(names.get("shortNames") or ()),
    )
    return kind, "status" in (storage.get("subresources") or {})


_PERCENT = re.compile(r"[0-9]+%")


class PodDisruptionBudgetStrategy(Strategy):
    """policy/v1 PodDisruptionBudget: decoded as the real server types it (a budget of
    another JSON type is a 400), and its budget checked as kube-apiserver validates it."""

    def decode(self, obj: JSON) -> JSON:
        return decode("poddisruptionbudgets", obj)

    def validate_create(self, st: KindState, obj: JSON) -> None:
        self._validate(st, obj)

    def validate_update(self, st: KindState, name: str, old: JSON, new: JSON) -> None:
        self._validate(st, new)

    @staticmethod
    def _validate(st: KindState, obj: JSON) -> None:
        name = str(obj["metadata"].get("name", ""))
        spec = field_of(obj, "spec")
        for key in ("minAvailable", "maxUnavailable"):
            value = spec.get(key)
            if value is None:
                continue
            path = f"spec.{key}"
            if isinstance(value, int):
                if value < 0:
                    message = f"Invalid value: {value}: must be greater than or equal to 0"
                    raise st.invalid(name, path, message)
            elif not _PERCENT.fullmatch(value):
                raise st.invalid(
                    name,
                    path,
                    f'Invalid value: "{value}": a valid percent string must be a numeric '
                    "string followed by an ending '%' (e.g. '1%',  or '93%', regex used for "
                    "validation is '[0-9]+%')",
                )
            elif int(value[:-1]) > 100:
                raise st.invalid(
                    name, path, f'Invalid value: "{value}": must not be greater than 100%'
                )
        if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
            raise st.invalid(
                name, "spec", "Invalid value: minAvailable and maxUnavailable cannot be both set"
            )
