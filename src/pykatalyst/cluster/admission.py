"""The admission vocabulary: what a plugin (in-process or a webhook behind AdmissionReview
v1) is asked and what it answers, and where an API server that runs plugins in process
takes them. The chain that runs them on every write is the API server's
(`apiserver/admission.py`)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pykatalyst.api.names import Kind
from pykatalyst.cluster.protocol import (
    JSON,
)

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """What an admission plugin sees; the fields mirror AdmissionReview v1's `request`
    (`to_review()` gives the wire form a webhook handler accepts)."""

    uid: str
    kind: Kind
    operation: Operation
    name: str
    namespace: str
    object: JSON | None
    old_object: JSON | None
    sub_resource: str = ""
    dry_run: bool = False
    user_info: JSON = field(default_factory=dict)

    def to_review(self) -> JSON:
        gvk = {"group": self.kind.group, "version": self.kind.version, "kind": self.kind.kind}
        gvr = {
            "group": self.kind.group,
            "version": self.kind.version,
            "resource": self.kind.plural,
        }
        return {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": self.uid,
                "kind": gvk,
                "resource": gvr,
                "subResource": self.sub_resource,
                "requestKind": gvk,
                "requestResource": gvr,
                "requestSubResource": self.sub_resource,
                "name": self.name,
                "namespace": self.namespace,
                "operation": self.operation,
                "userInfo": dict(self.user_info),
                "object": self.object,
                "oldObject": self.old_object,
                "dryRun": self.dry_run,
            },
        }


@dataclass(frozen=True, slots=True)
class AdmissionResponse:
    """A plugin's verdict. `patch` (RFC 6902 operations) is honoured for mutating plugins.
    A denial's `code` picks the error: 403 Forbidden (default), 422 Invalid, 429, ..."""

    allowed: bool = True
    message: str = ""
    code: int = 403
    patch: list[JSON] | None = None
    warnings: tuple[str, ...] = ()

    @classmethod
    def deny(cls, message: str, code: int = 403) -> AdmissionResponse:
        return cls(allowed=False, message=message, code=code)

    @classmethod
    def from_review(cls, review: Mapping[str, Any]) -> AdmissionResponse:
        """Read an AdmissionReview v1 response (base64 JSONPatch included)."""
        resp = review.get("response") or {}
        patch = None
        if resp.get("patch"):
            patch = json.loads(base64.b64decode(resp["patch"]))
        status = resp.get("status") or {}
        return cls(
            allowed=bool(resp.get("allowed", False)),
            message=str(status.get("message", "")),
            code=int(status.get("code", 403)),
            patch=patch,
            warnings=tuple(resp.get("warnings") or ()),
        )


# None: allow unchanged. A dict: the mutated object. A list: RFC 6902 operations.
AdmissionResult = AdmissionResponse | JSON | list[JSON] | None
AdmissionPlugin = Callable[[AdmissionRequest], AdmissionResult]


class AdmissionPlugins(Protocol):
    """An API server that runs admission plugins in process (the embedded one): mutating
    plugins in the order added, then validating ones, on every write."""

    def add_mutating_admission(self, fn: AdmissionPlugin, name: str | None = None) -> None: ...

    def add_validating_admission(self, fn: AdmissionPlugin, name: str | None = None) -> None: ...
