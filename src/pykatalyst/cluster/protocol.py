"""The only door to cluster state: the `Cluster` protocol, its watch events and its errors.

Objects travel as Kubernetes JSON (plain dicts), exactly what an API server stores and
serves. Implementations hand out copies: mutating a returned dict never changes the store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from pykatalyst.api.names import Kind

JSON = dict[str, Any]

PatchType = Literal["merge", "json", "strategic"]
EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event of a watch stream; `object` is the object after the change (for DELETED,
    its last state; for BOOKMARK, an object carrying only metadata.resourceVersion)."""

    type: EventType
    object: JSON


@dataclass(frozen=True, slots=True)
class ObjectList:
    items: list[JSON]
    resource_version: str


# --- errors, after Kubernetes Status reasons ----------------------------------------------


@dataclass
class ApiError(Exception):
    """An error shaped like a Kubernetes `Status`: reason, HTTP code, message."""

    message: str
    reason: str = "InternalError"
    code: int = 500
    details: Mapping[str, Any] = field(default_factory=dict)
    retry_after_seconds: float | None = None

    def __str__(self) -> str:
        return f"{self.reason} ({self.code}): {self.message}"

    def status(self) -> JSON:
        """The Kubernetes `Status` object an API server would send for this error."""
        body: JSON = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = dict(self.details)
        return body


class NotFound(ApiError):
    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, "NotFound", 404, **kw)


class AlreadyExists(ApiError):
    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, "AlreadyExists", 409, **kw)


class Conflict(ApiError):
    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, "Conflict", 409, **kw)


class Gone(ApiError):
    """The requested resourceVersion is older than the server's watch window (410)."""

    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, "Expired", 410, **kw)


class Invalid(ApiError):
    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, "Invalid", 422, **kw)


class BadRequest(ApiError):
    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, "BadRequest", 400, **kw)


class Forbidden(ApiError):
    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, "Forbidden", 403, **kw)


class TooManyRequests(ApiError):
    """429: e.g. an eviction refused by a disruption budget; honour retry_after_seconds."""

    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, "TooManyRequests", 429, **kw)


class MethodNotAllowed(ApiError):
    def __init__(self, message: str, **kw: Any) -> None:
        super().__init__(message, "MethodNotAllowed", 405, **kw)


# --- the protocol -------------------------------------------------------------------------


class Watch(Protocol):
    """An open watch. `next_events` returns the events that arrived, waiting at most
    `timeout` seconds for the first one (0: do not wait). Raises `Gone` when the stream's
    resourceVersion fell out of the server's window; after `close` it returns nothing."""

    def next_events(self, timeout: float = 0.0) -> list[WatchEvent]: ...

    def close(self) -> None: ...


@runtime_checkable
class Cluster(Protocol):
    """Kubernetes API semantics over plain JSON objects. `namespace` is ignored for
    cluster-scoped kinds and required for namespaced ones (except `list`/`watch`, where
    None means all namespaces)."""

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> JSON: ...

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ObjectList: ...

    def watch(
        self,
        kind: Kind,
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        allow_bookmarks: bool = False,
    ) -> Watch: ...

    def create(self, kind: Kind, obj: JSON, namespace: str | None = None) -> JSON: ...

    def update(self, kind: Kind, obj: JSON) -> JSON:
        """Replace the object; 409 Conflict when metadata.resourceVersion is stale.
        Changes to `status` are ignored for kinds with a status subresource."""
        ...

    def update_status(self, kind: Kind, obj: JSON) -> JSON:
        """Replace only `status` (the status subresource)."""
        ...

    def patch(
        self,
        kind: Kind,
        name: str,
        patch: Any,
        namespace: str | None = None,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
    ) -> JSON: ...

    def delete(
        self,
        kind: Kind,
        name: str,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> JSON | None:
        """Delete; returns the object still present (finalizers pending, or a pod given
        a grace period) with deletionTimestamp set, or None once it is gone."""
        ...

    def bind(
        self,
        namespace: str,
        name: str,
        node_name: str,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        """`pods/binding`: set spec.nodeName of an unbound pod (409 if already bound); the
        Binding's annotations are set on the pod in the same write, as kube-apiserver does."""
        ...

    def evict(self, namespace: str, name: str, grace_period_seconds: int | None = None) -> None:
        """`pods/eviction` (policy/v1 Eviction)."""
        ...


def binding_body(
    name: str, namespace: str, node_name: str, annotations: Mapping[str, str] | None = None
) -> JSON:
    """The `pods/binding` request that binds a pod to a node (with annotations for the pod,
    which kube-apiserver copies onto it)."""
    meta: JSON = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": meta,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
    }


def eviction_body(name: str, namespace: str, grace_period_seconds: int | None) -> JSON:
    """The `pods/eviction` request, with its grace period when one is given."""
    eviction: JSON = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }
    if grace_period_seconds is not None:
        eviction["deleteOptions"] = {"gracePeriodSeconds": grace_period_seconds}
    return eviction
