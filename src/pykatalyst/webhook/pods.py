"""Pod admission: the validating webhook and Katalyst's mutator chain.

Validation shares `api.qos.inspect_pod_qos` with `katalyst validate`: an error (what no node
can run: an unknown QoS level, a malformed enhancement, dedicated_cores without whole
cpus, a GPU request no node can honour (`api.gpu`), an `sriov_nic` count other than 1, a
GPU-RDMA pairing annotation that cannot be read (`topology/joint.py`), ...) refuses the
pod with the field, the value and what is accepted; a warning (what Katalyst would ignore,
e.g. an enhancement its level does not read) admits it and comes back as an
AdmissionReview warning, which kubectl prints as `Warning: ...`.

Mutation runs Katalyst's chain in its order: the resource mutator (the slot for
recommendations: `Recommender`, no-op by default), then the SPD-reference mutator.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from pykatalyst.api import names
from pykatalyst.api.gpu import pod_gpu_request
from pykatalyst.api.qos import inspect_pod_qos
from pykatalyst.cluster.admission import AdmissionRequest, AdmissionResponse
from pykatalyst.cluster.protocol import JSON
from pykatalyst.topology.joint import joint_problem
from pykatalyst.topology.vf import sriov_problem
from pykatalyst.webhook.review import pointer

log = logging.getLogger("pykatalyst.webhook")

# kubectl prints at most this many warnings usefully; the API server caps their length.
MAX_WARNINGS = 10
MAX_WARNING_CHARS = 256


def _pod_name(request: AdmissionRequest, pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    name = request.name or str(meta.get("name") or meta.get("generateName") or "")
    return f"{request.namespace}/{name}" if request.namespace else name


def validate_pod(request: AdmissionRequest) -> AdmissionResponse:
    """Refuse a pod whose QoS declaration no node can run; warn of what Katalyst ignores.
    Only at CREATE: refusing an update would also block the removal of a finalizer from a
    pod admitted before the webhook ran, and the QoS annotations are read at creation."""
    if request.operation != "CREATE" or request.sub_resource:
        return AdmissionResponse()
    pod = request.object
    if pod is None:
        return AdmissionResponse.deny("the pod admission request carries no object", code=400)
    _, problems = inspect_pod_qos(pod)
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        what = "; ".join(str(p) for p in errors)
        return AdmissionResponse.deny(
            f"pod {_pod_name(request, pod)}: invalid Katalyst QoS declaration: {what}"
        )
    gpu = pod_gpu_request(pod)
    if gpu.problem:
        return AdmissionResponse.deny(
            f"pod {_pod_name(request, pod)}: invalid GPU request: {gpu.problem}"
        )
    sriov = sriov_problem(pod)
    if sriov:
        return AdmissionResponse.deny(
            f"pod {_pod_name(request, pod)}: invalid SR-IOV request: {sriov}"
        )
    joint = joint_problem(pod)
    if joint:
        return AdmissionResponse.deny(
            f"pod {_pod_name(request, pod)}: invalid GPU-RDMA pairing: {joint}"
        )
    warnings = tuple(
        _clip(f"Katalyst will ignore this: {p}") for p in problems if p.severity == "warning"
    )
    return AdmissionResponse(warnings=warnings[:MAX_WARNINGS])


def _clip(text: str) -> str:
    return text if len(text) <= MAX_WARNING_CHARS else text[: MAX_WARNING_CHARS - 3] + "..."


# --- mutation -------------------------------------------------------------------------------


class Recommender(Protocol):
    """The resource mutator's source of recommendations (Katalyst: the workload's
    KatalystVerticalPodAutoscaler status). Returns, per container name, the cpu/memory
    requests and limits to write (and a `resizePolicy` list to set), or None to leave the
    pod alone."""

    def recommend(self, pod: Mapping[str, Any], namespace: str) -> Mapping[str, JSON] | None: ...


class NoRecommendations:
    """The default: no VPA recommendations are applied at admission."""

    def recommend(self, pod: Mapping[str, Any], namespace: str) -> Mapping[str, JSON] | None:
        return None


SUPPORTED_RESOURCES = ("cpu", "memory")


def resource_patch(pod: Mapping[str, Any], recommendations: Mapping[str, JSON]) -> list[JSON]:
    """Overwrite the containers' cpu/memory requests and limits with the recommendation,
    and their `resizePolicy` where the recommendation carries one."""
    ops: list[JSON] = []
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    containers = spec.get("containers") if isinstance(spec.get("containers"), list) else []
    assert isinstance(containers, list)
    for i, c in enumerate(containers):
        rec = recommendations.get(str(c.get("name"))) if isinstance(c, dict) else None
        if not rec:
            continue
        resources = c.get("resources") if isinstance(c.get("resources"), dict) else None
        if resources is None:
            ops.append({"op": "add", "path": f"/spec/containers/{i}/resources", "value": {}})
            resources = {}
        for part in ("requests", "limits"):
            wanted = {r: v for r, v in (rec.get(part) or {}).items() if r in SUPPORTED_RESOURCES}
            if not wanted:
                continue
            base = f"/spec/containers/{i}/resources/{part}"
            if not isinstance(resources.get(part), dict):
                ops.append({"op": "add", "path": base, "value": {}})
            ops.extend({"op": "add", "path": f"{base}/{r}", "value": v} for r, v in wanted.items())
        if rec.get("resizePolicy"):
            path = f"/spec/containers/{i}/resizePolicy"
            ops.append({"op": "add", "path": path, "value": rec["resizePolicy"]})
    return ops


# (namespace, name) -> the SPD, read from an informer's cache.
SPDLookup = Callable[[str, str], JSON | None]
# (namespace, kind, name) -> the SPD whose spec.targetRef names that workload.
SPDByTarget = Callable[[str, str, str], JSON | None]


def workload_candidates(pod: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
    """(kind, name) of the workloads that may own the pod, nearest first. A ReplicaSet
    named `<deployment>-<pod-template-hash>` also yields its Deployment, read from the
    name as the Deployment controller writes it (no API call on the admission path)."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    assert isinstance(labels, dict)
    owners = meta.get("ownerReferences")
    for owner in owners if isinstance(owners, list) else []:
        if not isinstance(owner, dict):
            continue
        kind, name = str(owner.get("kind") or ""), str(owner.get("name") or "")
        if not kind or not name:
            continue
        yield kind, name
        suffix = f"-{labels.get('pod-template-hash', '')}"
        if kind == "ReplicaSet" and len(suffix) > 1 and name.endswith(suffix):
            yield "Deployment", name[: -len(suffix)]


class SPDReferenceMutator:
    """Katalyst's SPD-reference mutator: a pod whose workload has a
    ServiceProfileDescriptor gets `spd.katalyst.kubewharf.io/name=<spd>`; a pod already
    naming an SPD that exists keeps it."""

    def __init__(self, by_name: SPDLookup, by_target: SPDByTarget) -> None:
        self.by_name = by_name
        self.by_target = by_target

    def spd_for(self, pod: Mapping[str, Any], namespace: str) -> str | None:
        meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
        assert isinstance(meta, dict)
        ann = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
        assert isinstance(ann, dict)
        current = ann.get(names.SPD_NAME_ANNOTATION)
        if isinstance(current, str) and self.by_name(namespace, current) is not None:
            return current
        for kind, name in workload_candidates(pod):
            spd = self.by_target(namespace, kind, name)
            if spd is not None:
                return str(spd["metadata"]["name"])
        return None

    def patch(self, pod: Mapping[str, Any], namespace: str) -> list[JSON]:
        spd = self.spd_for(pod, namespace)
        if spd is None:
            return []
        meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
        assert isinstance(meta, dict)
        ann = meta.get("annotations")
        if not isinstance(ann, dict):
            return [
                {
                    "op": "add",
                    "path": "/metadata/annotations",
                    "value": {names.SPD_NAME_ANNOTATION: spd},
                }
            ]
        if ann.get(names.SPD_NAME_ANNOTATION) == spd:
            return []
        path = pointer("metadata", "annotations", names.SPD_NAME_ANNOTATION)
        return [{"op": "add", "path": path, "value": spd}]


class PodMutator:
    """The chain, in Katalyst's order: resources from recommendations, then the SPD
    reference."""

    def __init__(self, spd: SPDReferenceMutator, recommender: Recommender | None = None) -> None:
        self.spd = spd
        self.recommender: Recommender = recommender or NoRecommendations()

    def __call__(self, request: AdmissionRequest) -> AdmissionResponse:
        if request.operation != "CREATE" or request.sub_resource or request.object is None:
            return AdmissionResponse()
        pod, ns = request.object, request.namespace
        ops: list[JSON] = []
        recs = self.recommender.recommend(pod, ns)
        if recs:
            ops.extend(resource_patch(pod, recs))
        ops.extend(self.spd.patch(pod, ns))
        return AdmissionResponse(patch=ops or None)
