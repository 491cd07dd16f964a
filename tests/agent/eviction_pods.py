"""Pods as the eviction manager sees them, made up for tests: a `PodDigest` with the given
identity, priority, protection, annotations and requests, and the agent's figures."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykatalyst.agent.eviction.types import PodInfo
from pykatalyst.api import names
from pykatalyst.api.digest import PodDigest

REQUESTS = {
    "request_milli_cpu": names.RESOURCE_CPU,
    "request_memory": names.RESOURCE_MEMORY,
    "reclaimed_milli_cpu": names.RECLAIMED_MILLICPU,
    "reclaimed_memory": names.RECLAIMED_MEMORY,
    "net_bandwidth": names.RESOURCE_NET_BANDWIDTH,
}


def eviction_pod(
    uid: str,
    namespace: str,
    name: str,
    qos_level: str,
    *,
    priority: int = 0,
    priority_class_name: str = "",
    static: bool = False,
    terminating: bool = False,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    **rest: Any,
) -> PodInfo:
    requests = {REQUESTS[k]: int(rest.pop(k)) for k in list(rest) if k in REQUESTS}
    digest = PodDigest(
        uid,
        namespace,
        name,
        "1",
        priority=priority,
        priority_class_name=priority_class_name,
        labels=dict(labels or {}),
        annotations=dict(annotations or {}),
        requests=requests,
        static=static,
        deleting=terminating,
    )
    return PodInfo(digest, qos_level, **rest)
