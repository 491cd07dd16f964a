"""AdmissionReview bodies and objects for the webhook tests."""

from __future__ import annotations

import json
from typing import Any

from pykatalyst.api import names
from pykatalyst.cluster.admission import AdmissionRequest
from pykatalyst.cluster.protocol import JSON


def pod(
    name: str = "web",
    annotations: dict[str, str] | None = None,
    cpu: str | None = "1",
    memory: str | None = "1Gi",
    owners: list[JSON] | None = None,
    labels: dict[str, str] | None = None,
) -> JSON:
    resources: dict[str, Any] = {}
    if cpu or memory:
        req = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
        resources = {"requests": req, "limits": dict(req)}
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if annotations is not None:
        meta["annotations"] = annotations
    if owners is not None:
        meta["ownerReferences"] = owners
    if labels is not None:
        meta["labels"] = labels
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "c", "image": "nginx", "resources": resources}]},
    }


def node(annotations: dict[str, str] | None, cpu: str = "8", memory: str = "32Gi") -> JSON:
    meta: dict[str, Any] = {"name": "node-1"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "status": {
            "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
        },
    }


def pod_request(obj: JSON, operation: str = "CREATE") -> AdmissionRequest:
    return AdmissionRequest(
        uid="uid-1",
        kind=names.POD,
        operation=operation,  # type: ignore[arg-type]
        name=str(obj["metadata"]["name"]),
        namespace="default",
        object=obj,
        old_object=None,
    )


def node_request(obj: JSON, sub_resource: str = "status") -> AdmissionRequest:
    return AdmissionRequest(
        uid="uid-2",
        kind=names.NODE,
        operation="UPDATE",
        name="node-1",
        namespace="",
        object=obj,
        old_object=obj,
        sub_resource=sub_resource,
    )


def review_body(request: AdmissionRequest) -> bytes:
    return json.dumps(request.to_review()).encode()
