"""Builders for scheduler tests: nodes, CNRs and pods as Kubernetes JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.scheduler.config import ResolvedProfile, default_config, load_config_text
from pykatalyst.scheduler.framework import Framework
from pykatalyst.scheduler.podinfo import PodInfo, pod_info
from pykatalyst.scheduler.snapshot import NodeSnapshot


def _examples_dir() -> Path:
    """Katalyst's example manifests: a `shared/katalyst-examples` next to the checkout or
    next to any folder above it (worktrees sit deeper than the main checkout)."""
    for parent in Path(__file__).resolve().parents[2:]:
        candidate = parent / "shared" / "katalyst-examples"
        if candidate.is_dir():
            return candidate
    return Path(__file__).resolve().parents[3] / "shared" / "katalyst-examples"


EXAMPLES = _examples_dir()

GI = 1024**3


def node(
    name: str,
    cpu: str = "8",
    memory: str = "16Gi",
    pods: str = "110",
    labels: dict[str, str] | None = None,
    taints: Sequence[dict[str, str]] = (),
    unschedulable: bool = False,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}
    spec: dict[str, Any] = {"taints": list(taints)}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {"allocatable": alloc, "capacity": alloc},
    }


def numa_zones(
    sockets: Sequence[Sequence[tuple[int, str, str]]],
    allocations: dict[int, list[tuple[str, str, str]]] | None = None,
) -> list[dict[str, Any]]:
    """sockets[s] = [(numa id, cpu, memory), ...]; allocations[numa] = [(consumer, cpu, mem)]"""
    out = []
    for s, zones in enumerate(sockets):
        children = []
        for nid, cpu, mem in zones:
            zone: dict[str, Any] = {
                "type": names.ZONE_NUMA,
                "name": str(nid),
                "resources": {"allocatable": {"cpu": cpu, "memory": mem}},
            }
            allocs = (allocations or {}).get(nid)
            if allocs:
                zone["allocations"] = [
                    {"consumer": c, "requests": {"cpu": cc, "memory": m}} for c, cc, m in allocs
                ]
            children.append(zone)
        out.append({"type": names.ZONE_SOCKET, "name": str(s), "children": children})
    return out


def cnr(
    name: str,
    reclaimed_cpu: str | None = "8k",
    reclaimed_memory: str | None = "16Gi",
    zones: list[dict[str, Any]] | None = None,
    policy: str | None = None,
    legacy_names: bool = False,
) -> dict[str, Any]:
    alloc: dict[str, str] = {}
    cpu_name = names.LEGACY_RECLAIMED_MILLICPU if legacy_names else names.RECLAIMED_MILLICPU
    mem_name = names.LEGACY_RECLAIMED_MEMORY if legacy_names else names.RECLAIMED_MEMORY
    if reclaimed_cpu is not None:
        alloc[cpu_name] = reclaimed_cpu
    if reclaimed_memory is not None:
        alloc[mem_name] = reclaimed_memory
    status: dict[str, Any] = {"resources": {"allocatable": alloc, "capacity": alloc}}
    if zones is not None:
        status["topologyZone"] = zones
    if policy is not None:
        status["topologyPolicy"] = policy
    return {
        "apiVersion": names.CUSTOM_NODE_RESOURCE.api_version,
        "kind": names.CUSTOM_NODE_RESOURCE.kind,
        "metadata": {"name": name},
        "status": status,
    }


def pod(
    name: str,
    requests: dict[str, str] | None = None,
    *,
    qos: str | None = None,
    memory_enhancement: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    scheduler: str = "default-scheduler",
    tolerations: list[dict[str, Any]] | None = None,
    node_selector: dict[str, str] | None = None,
    affinity: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    priority: int | None = None,
    node_name: str = "",
    uid: str | None = None,
    spread: list[dict[str, Any]] | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    ann = dict(annotations or {})
    if qos is not None:
        ann[names.QOS_LEVEL_ANNOTATION] = qos
    if memory_enhancement is not None:
        ann[names.MEMORY_ENHANCEMENT_ANNOTATION] = json.dumps(memory_enhancement)
    res = dict(requests or {})
    container: dict[str, Any] = {"name": "main", "image": "pause"}
    if res:
        container["resources"] = {"requests": res, "limits": res}
    spec: dict[str, Any] = {"schedulerName": scheduler, "containers": [container]}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    if affinity is not None:
        spec["affinity"] = affinity
    if priority is not None:
        spec["priority"] = priority
    if node_name:
        spec["nodeName"] = node_name
    if spread is not None:
        spec["topologySpreadConstraints"] = spread
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "annotations": ann}
    if labels:
        meta["labels"] = labels
    if uid is not None:
        meta["uid"] = uid
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def info(raw: dict[str, Any]) -> PodInfo:
    return pod_info(raw)


def snapshot(
    nodes: Sequence[dict[str, Any]],
    cnrs: Sequence[dict[str, Any]] = (),
    bound: Sequence[dict[str, Any]] = (),
) -> NodeSnapshot:
    snap = NodeSnapshot(capacity=2)
    for n in nodes:
        snap.upsert_node(n)
    for c in cnrs:
        snap.upsert_cnr(c)
    for i, p in enumerate(bound):
        p.setdefault("metadata", {}).setdefault("uid", f"uid-bound-{i}")
        snap.observe_pod(pod_info(p))
    return snap


def profile(yaml_text: str | None = None) -> ResolvedProfile:
    cfg = default_config() if yaml_text is None else load_config_text(yaml_text)
    return cfg.profiles[0]


def framework(yaml_text: str | None = None, seed: int = 0) -> Framework:
    return Framework(profile(yaml_text), 100, seed)


def add_node(cluster: MemoryCluster, raw: dict[str, Any]) -> None:
    cluster.create(names.NODE, raw)


def add_cnr(cluster: MemoryCluster, raw: dict[str, Any]) -> None:
    status = raw.pop("status", None)
    created = cluster.create(names.CUSTOM_NODE_RESOURCE, raw)
    if status is not None:
        created["status"] = status
        cluster.update_status(names.CUSTOM_NODE_RESOURCE, created)


def add_pod(cluster: MemoryCluster, raw: dict[str, Any]) -> dict[str, Any]:
    return cluster.create(names.POD, raw, raw["metadata"].get("namespace", "default"))


def events_for(cluster: MemoryCluster, pod_name: str) -> list[dict[str, Any]]:
    items = cluster.list(names.EVENT, "default").items
    return [e for e in items if e["involvedObject"]["name"] == pod_name]


def policy_text(kind: str) -> str:
    return (EXAMPLES / f"scheduler-policy-{kind}.yaml").read_text()
