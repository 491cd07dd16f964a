"""The admission chain: what a plugin (in-process or a webhook behind AdmissionReview v1)
is asked, what it answers, and the chain that runs the plugins on every write."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pykatalyst.api.names import Kind
from pykatalyst.cluster.ingest import ingest
from pykatalyst.cluster.patch import PatchError, copy_json, json_patch
from pykatalyst.cluster.protocol import (
    JSON,
    ApiError,
    BadRequest,
    Forbidden,
    Invalid,
    TooManyRequests,
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


class AdmissionChain:
    """Mutating plugins, in the order added, each seeing the previous one's result; then
    validating plugins. Plugins get copies, so a plugin can never reach into the store."""

    def __init__(self, uid: Callable[[], str]) -> None:
        self._uid = uid
        self.mutating: list[tuple[str, AdmissionPlugin]] = []
        self.validating: list[tuple[str, AdmissionPlugin]] = []

    def add_mutating(self, fn: AdmissionPlugin, name: str | None = None) -> None:
        self.mutating.append((name or str(getattr(fn, "__name__", "mutating")), fn))

    def add_validating(self, fn: AdmissionPlugin, name: str | None = None) -> None:
        self.validating.append((name or str(getattr(fn, "__name__", "validating")), fn))

    def clear(self) -> None:
        self.mutating.clear()
        self.validating.clear()

    def admit(
        self,
        kind: Kind,
        operation: Operation,
        obj: JSON | None,
        old: JSON | None,
        name: str,
        namespace: str,
        sub_resource: str = "",
    ) -> JSON | None:
        """The (possibly mutated) object, or the denial raised as its ApiError."""
        if not self.mutating and not self.validating:
            return obj

        def request(current: JSON | None) -> AdmissionRequest:
            return AdmissionRequest(
                uid=self._uid(),
                kind=kind,
                operation=operation,
                name=name,
                namespace=namespace,
                object=copy_json(current),
                old_object=copy_json(old),
                sub_resource=sub_resource,
            )

        for plugin_name, plugin in self.mutating:
            obj = _mutated(plugin_name, plugin(request(obj)), obj)
        for plugin_name, plugin in self.validating:
            _check_verdict(plugin_name, plugin(request(obj)))
        return obj


def _check_verdict(plugin_name: str, result: AdmissionResult) -> None:
    if not isinstance(result, AdmissionResponse) or result.allowed:
        return
    msg = f'admission webhook "{plugin_name}" denied the request: {result.message}'
    errors: dict[int, type[ApiError]] = {
        422: Invalid,
        429: TooManyRequests,
        400: BadRequest,
        403: Forbidden,
    }
    error = errors.get(result.code)
    if error is not None:
        raise error(msg)
    raise ApiError(msg, "InternalError" if result.code >= 500 else "Forbidden", result.code)


def _mutated(plugin_name: str, result: AdmissionResult, obj: JSON | None) -> JSON | None:
    """What a mutating plugin's answer makes of `obj`."""
    _check_verdict(plugin_name, result)
    if result is None:
        return obj
    patch = result.patch if isinstance(result, AdmissionResponse) else None
    if isinstance(result, list):
        patch = result
    elif isinstance(result, dict):
        mutated = ingest(result)
        if not isinstance(mutated.get("metadata"), dict):
            raise ApiError(
                f'admission webhook "{plugin_name}" returned an object without metadata',
                "InternalError",
                500,
            )
        return dict(mutated)
    if patch and obj is not None:
        try:
            return dict(json_patch(obj, patch))
        except PatchError as e:
            raise ApiError(
                f'admission webhook "{plugin_name}" returned a patch that does not apply: {e}',
                "InternalError",
                500,
            ) from None
    return obj
