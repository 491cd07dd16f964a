"""AdmissionReview v1 on the wire: reading a request, writing a response.

`parse_review` turns a request body into an `AdmissionRequest` (the type the in-memory
cluster's admission chain also uses) or raises `ReviewError` naming the field at fault;
`review_response` writes the verdict back, a JSON patch base64-encoded as the API requires.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any, get_args

from pykatalyst.api.names import Kind
from pykatalyst.cluster.admission import AdmissionRequest, AdmissionResponse, Operation
from pykatalyst.cluster.protocol import JSON

API_VERSION = "admission.k8s.io/v1"
REVIEW_KIND = "AdmissionReview"
_OPERATIONS = frozenset(get_args(Operation))


class ReviewError(ValueError):
    """The body is not an AdmissionReview v1 request; answered with HTTP 400."""

    def __init__(self, field: str, accepted: str, message: str) -> None:
        self.field = field
        self.accepted = accepted
        super().__init__(f"{message} (field {field}; accepted: {accepted})")


def _require_map(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ReviewError(field, "an object", f"{field} is {type(value).__name__}, not an object")
    return value


def _string(req: Mapping[str, Any], key: str, required: bool = False) -> str:
    value = req.get(key, "")
    if value is None:
        value = ""
    if not isinstance(value, str) or (required and not value):
        raise ReviewError(f"request.{key}", "a non-empty string", f"request.{key} is missing")
    return value


def _kind(req: Mapping[str, Any]) -> Kind:
    gvk = _require_map(req.get("kind"), "request.kind")
    gvr = _require_map(req.get("resource"), "request.resource")
    kind, resource = gvk.get("kind"), gvr.get("resource")
    if not isinstance(kind, str) or not kind:
        raise ReviewError("request.kind.kind", "a kind such as Pod", "request.kind has no kind")
    if not isinstance(resource, str) or not resource:
        raise ReviewError(
            "request.resource.resource", "a resource such as pods", "request.resource is empty"
        )
    return Kind(
        str(gvk.get("group") or ""),
        str(gvk.get("version") or "v1"),
        kind,
        resource,
        bool(req.get("namespace")),
    )


def _object(req: Mapping[str, Any], key: str) -> JSON | None:
    value = req.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ReviewError(f"request.{key}", "an object or null", f"request.{key} is not an object")
    return value


def parse_review(body: bytes) -> AdmissionRequest:
    """The request of an AdmissionReview v1 body; raises `ReviewError` when it is not one."""
    try:
        review = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ReviewError("body", "a JSON AdmissionReview", f"body is not JSON: {exc}") from None
    review = _require_map(review, "body")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != REVIEW_KIND:
        raise ReviewError(
            "apiVersion/kind",
            f"{API_VERSION} {REVIEW_KIND}",
            f"not an {API_VERSION} {REVIEW_KIND}: "
            f"{review.get('apiVersion')!r} {review.get('kind')!r}",
        )
    req = _require_map(review.get("request"), "request")
    operation = _string(req, "operation", required=True)
    if operation not in _OPERATIONS:
        raise ReviewError(
            "request.operation", ", ".join(sorted(_OPERATIONS)), f"unknown operation {operation!r}"
        )
    user = req.get("userInfo")
    return AdmissionRequest(
        uid=_string(req, "uid", required=True),
        kind=_kind(req),
        operation=operation,  # type: ignore[arg-type]
        name=_string(req, "name"),
        namespace=_string(req, "namespace"),
        object=_object(req, "object"),
        old_object=_object(req, "oldObject"),
        sub_resource=_string(req, "subResource"),
        dry_run=bool(req.get("dryRun")),
        user_info=dict(user) if isinstance(user, dict) else {},
    )


def review_response(uid: str, verdict: AdmissionResponse) -> JSON:
    """The AdmissionReview v1 answer to request `uid`."""
    response: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        response["status"] = {
            "code": verdict.code,
            "message": verdict.message,
            "reason": "Forbidden" if verdict.code == 403 else "Invalid",
        }
    if verdict.patch:
        raw = json.dumps(verdict.patch, separators=(",", ":")).encode()
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(raw).decode()
    if verdict.warnings:
        response["warnings"] = list(verdict.warnings)
    return {"apiVersion": API_VERSION, "kind": REVIEW_KIND, "response": response}


def status_body(code: int, message: str) -> JSON:
    """A `Status` object, the body of an HTTP error."""
    reason = {
        400: "BadRequest",
        401: "Unauthorized",
        404: "NotFound",
        413: "RequestEntityTooLarge",
    }.get(code, "InternalError")
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


def pointer(*tokens: str) -> str:
    """A JSON Pointer (RFC 6901) to `tokens`: `~` and `/` escaped, as annotation keys need."""
    return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)
