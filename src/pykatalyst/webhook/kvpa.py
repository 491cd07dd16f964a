"""KatalystVerticalPodAutoscaler admission: the validating rules and the pod recommender.

Validation (`/validate/kvpa`, CREATE and UPDATE of the v1alpha1 shape), Katalyst's four
rules, each refusal naming the field:

1. every `containerPolicies[]` has a `containerName`;
2. no other KVPA has the same `targetRef` — in the same namespace (Katalyst compares across
   all namespaces, so two same-named workloads in two namespaces collide there; here they
   do not);
3. `controlledResources` ⊆ {cpu, memory};
4. `minAllowed` ≤ `maxAllowed` for cpu and memory.

`KVPARecommender` is the pod mutator's `Recommender`: at CREATE a pod whose workload is
annotated `vpa.katalyst.kubewharf.io/enable: "true"` and targeted by a KVPA whose
`podMatchingStrategy` is not ForHistoricalPod gets the KVPA status's targets (pod-level over
container-level) as its cpu/memory requests and limits — unless Katalyst's
`CheckVPAStatusLegal` refuses them (QoS class change, negative value, request > limit) — and,
for containers whose policy says `resourceResizePolicy: Restart`, a `resizePolicy` of
`RestartContainer` for the controlled resources (immutable after creation). The workload and
the KVPA are found in the caches; the KVPA itself is then read from the API server, because
the cache may not yet hold the status written just before the eviction that made the
workload replace a pod.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Final

from pykatalyst.api import names, vpa
from pykatalyst.api.vpa import KVPAError
from pykatalyst.cluster.admission import AdmissionRequest, AdmissionResponse
from pykatalyst.cluster.informer import Informer
from pykatalyst.cluster.protocol import JSON, ApiError, Cluster, NotFound
from pykatalyst.webhook.pods import workload_candidates

log = logging.getLogger("pykatalyst.webhook")

BY_TARGET: Final = "targetRef"
WORKLOADS: Final = (names.DEPLOYMENT, names.STATEFUL_SET, names.REPLICA_SET)


def target_key(kvpa: Mapping[str, Any]) -> Iterable[str]:
    meta = kvpa.get("metadata") or {}
    spec = kvpa.get("spec")
    ref = spec.get("targetRef") if isinstance(spec, Mapping) else None
    if isinstance(ref, Mapping) and ref.get("kind") and ref.get("name"):
        return (f"{meta.get('namespace', '')}/{ref['kind']}/{ref['name']}",)
    return ()


class KVPAIndex:
    """The KVPAs (indexed by target) and workloads the admission path reads, from informer
    caches refreshed by the webhook's ticker."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.kvpas = Informer(
            cluster, names.KATALYST_VERTICAL_POD_AUTOSCALER, indexers={BY_TARGET: target_key}
        )
        self.workloads = {k.kind: Informer(cluster, k) for k in WORKLOADS}

    def sync(self) -> int:
        changed = self.kvpas.sync()
        for inf in self.workloads.values():
            changed += inf.sync()
        return changed

    def by_target(self, namespace: str, kind: str, name: str) -> list[JSON]:
        return self.kvpas.by_index(BY_TARGET, f"{namespace}/{kind}/{name}")

    def workload(self, namespace: str, kind: str, name: str) -> JSON | None:
        inf = self.workloads.get(kind)
        return inf.get(name, namespace) if inf is not None else None

    def current(self, cached: JSON) -> JSON | None:
        """`cached` as the API server holds it now (None once deleted). The cache can lag
        the status the controller wrote just before it evicted the pod now being replaced;
        a failed read falls back to the cached copy."""
        meta = cached.get("metadata") or {}
        name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
        try:
            return self.cluster.get(names.KATALYST_VERTICAL_POD_AUTOSCALER, name, namespace)
        except NotFound:
            return None
        except ApiError as exc:
            log.warning("KVPA %s/%s read from the cache: %s", namespace, name, exc)
            return cached


def validate_kvpa(request: AdmissionRequest, index: KVPAIndex | None) -> AdmissionResponse:
    """Katalyst's KVPA validation (see the module's docstring)."""
    if request.operation not in ("CREATE", "UPDATE") or request.sub_resource:
        return AdmissionResponse()
    obj = request.object
    if obj is None:
        return AdmissionResponse.deny("the KVPA admission request carries no object", code=400)
    what = f"KatalystVerticalPodAutoscaler {request.namespace}/{request.name}"
    try:
        kvpa = vpa.read_kvpa(obj)
    except KVPAError as exc:
        return AdmissionResponse.deny(f"{what}: {exc}")
    if index is not None:
        others = [
            o
            for o in index.by_target(request.namespace, kvpa.target_kind, kvpa.target_name)
            if (o.get("metadata") or {}).get("name") != request.name
        ]
        if others:
            other = others[0]["metadata"]["name"]
            return AdmissionResponse.deny(
                f"{what}: spec.targetRef: {kvpa.target_kind} {kvpa.target_name} is already "
                f"the target of KatalystVerticalPodAutoscaler {other}: one KVPA per workload"
            )
    return AdmissionResponse()


class KVPARecommender:
    """The pod mutator's recommendations from the KVPA of the pod's workload."""

    def __init__(self, index: KVPAIndex) -> None:
        self.index = index

    def _kvpa_for(self, pod: Mapping[str, Any], namespace: str) -> JSON | None:
        for kind, name in workload_candidates(pod):
            workload = self.index.workload(namespace, kind, name)
            if workload is None:
                continue
            ann = (workload.get("metadata") or {}).get("annotations") or {}
            if ann.get(names.VPA_ENABLE_ANNOTATION) != names.VPA_ENABLE_ANNOTATION_VALUE:
                continue
            found = self.index.by_target(namespace, kind, name)
            if found:
                return self.index.current(found[0])
        return None

    def recommend(self, pod: Mapping[str, Any], namespace: str) -> Mapping[str, JSON] | None:
        obj = self._kvpa_for(pod, namespace)
        if obj is None:
            return None
        try:
            kvpa = vpa.read_kvpa(obj)
            pod_level, container_level = vpa.status_targets(obj.get("status") or {})
        except KVPAError as exc:
            log.warning("KVPA %s/%s not applied at creation: %s", namespace, _name(obj), exc)
            return None
        if kvpa.matching == vpa.MATCH_HISTORICAL:
            return None
        targets = vpa.pod_targets(pod, pod_level, container_level)
        illegal = vpa.check_legal(pod, targets) if targets else ""
        if illegal:
            log.warning("KVPA %s not applied to a new pod: %s", kvpa.key, illegal)
            targets = {}
        out: dict[str, JSON] = {c: t.to_json() for c, t in targets.items()}
        for c in vpa.containers_of(pod):
            cname = str(c.get("name") or "")
            policy = kvpa.policies.get(cname)
            if policy is not None and policy.resize_policy == vpa.RESIZE_POLICY_RESTART:
                out.setdefault(cname, {})["resizePolicy"] = [
                    {"resourceName": r, "restartPolicy": "RestartContainer"}
                    for r in policy.controlled_resources
                ]
        return out or None


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")
