"""The Kubernetes objects a simulated cluster is made of: nodes and the pods of each policy.

Services look the same under every policy. Batch tasks are what differ: plain pods that
request native cpu and memory under `vanilla` and `static-overcommit`, `reclaimed_cores`
pods that request Katalyst's reclaimed resources under `katalyst`.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pykatalyst.api import names
from pykatalyst.sim.scenario import NodeGroup, Policy, Service

JSON = dict[str, Any]

SERVICE_NAMESPACE = "services"
BATCH_NAMESPACE = "batch"
GROUP_LABEL = "sim.pykatalyst.io/node-group"
APP_LABEL = "app"
DEFAULT_SCHEDULER = "default-scheduler"


def milli(cores: float) -> int:
    return round(cores * 1000)


def node_manifest(name: str, group: NodeGroup, policy: Policy) -> JSON:
    """A Ready node; allocatable is capacity minus system reserve, times the policy's
    overcommit ratio (what an overcommit webhook would write)."""
    cpu_alloc = (group.cpus - group.system_reserved_cpu) * policy.cpu_overcommit_ratio
    mem_alloc = int((group.memory - group.system_reserved_memory) * policy.memory_overcommit_ratio)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                GROUP_LABEL: group.name,
            },
        },
        "spec": {},
        "status": {
            "capacity": {
                names.RESOURCE_CPU: str(group.cpus),
                names.RESOURCE_MEMORY: str(group.memory),
                names.RESOURCE_PODS: "250",
            },
            "allocatable": {
                names.RESOURCE_CPU: f"{milli(cpu_alloc)}m",
                names.RESOURCE_MEMORY: str(mem_alloc),
                names.RESOURCE_PODS: "250",
            },
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def scheduler_name(policy: Policy) -> str:
    return names.DEFAULT_SCHEDULER_NAME if policy.name == "katalyst" else DEFAULT_SCHEDULER


def service_pod(service: Service, replica: int, policy: Policy) -> JSON:
    requests = {
        names.RESOURCE_CPU: f"{milli(service.cpu_request)}m",
        names.RESOURCE_MEMORY: str(service.memory_request),
    }
    limits: dict[str, str] = {names.RESOURCE_MEMORY: str(service.memory_request)}
    annotations = {names.QOS_LEVEL_ANNOTATION: service.qos}
    if service.qos == names.QOS_DEDICATED_CORES:
        # Katalyst's dedicated cores come NUMA-bound: the pod gets exclusive cpus on the
        # fewest NUMA nodes that fit it.
        annotations[names.MEMORY_ENHANCEMENT_ANNOTATION] = json.dumps(
            {names.ENH_NUMA_BINDING: "true"}
        )
        cores = str(max(1, math.ceil(service.cpu_request)))
        requests[names.RESOURCE_CPU] = cores
        limits[names.RESOURCE_CPU] = cores
    elif service.cpu_limit is not None:
        limits[names.RESOURCE_CPU] = f"{milli(service.cpu_limit)}m"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{service.name}-{replica}",
            "namespace": SERVICE_NAMESPACE,
            "labels": {APP_LABEL: service.name},
            "annotations": annotations,
        },
        "spec": {
            "schedulerName": scheduler_name(policy),
            "priority": 1000,
            "terminationGracePeriodSeconds": 30,
            "containers": [
                {
                    "name": "app",
                    "image": "service",
                    "resources": {"requests": requests, "limits": limits},
                }
            ],
        },
    }


def batch_pod(task: int, attempt: int, cores: float, memory: int, policy: Policy) -> JSON:
    meta: JSON = {
        "name": f"task-{task}-{attempt}",
        "namespace": BATCH_NAMESPACE,
        "labels": {APP_LABEL: "batch"},
    }
    if policy.name == "katalyst":
        meta["annotations"] = {names.QOS_LEVEL_ANNOTATION: names.QOS_RECLAIMED_CORES}
        res = {
            names.RECLAIMED_MILLICPU: str(milli(cores)),
            names.RECLAIMED_MEMORY: str(memory),
        }
        resources: JSON = {"requests": dict(res), "limits": dict(res)}
    else:
        resources = {
            "requests": {
                names.RESOURCE_CPU: f"{milli(cores)}m",
                names.RESOURCE_MEMORY: str(memory),
            },
            "limits": {names.RESOURCE_MEMORY: str(memory)},
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": scheduler_name(policy),
            "priority": 0,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "task", "image": "batch", "resources": resources}],
        },
    }
