"""Who goes first: victim protection and ranking.

Order: reclaimed before shared before dedicated (the QoS ladder), then lower priority,
then lower `pod_evict_score`, then the biggest user of the resource under pressure (so the
fewest pods release the most), then the pod key (deterministic).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from pykatalyst.agent.eviction.types import (
    CRITICAL_PRIORITY,
    CRITICAL_PRIORITY_CLASSES,
    PodInfo,
    RankEntry,
)
from pykatalyst.api import names

QOS_RANK = {
    names.QOS_RECLAIMED_CORES: 0,
    names.QOS_SHARED_CORES: 1,
    names.QOS_DEDICATED_CORES: 2,
    names.QOS_SYSTEM_CORES: 3,
}

UsageFn = Callable[[PodInfo], float]


def protection(pod: PodInfo) -> str | None:
    """Why `pod` may never be a victim, or None when it may."""
    if pod.qos_level == names.QOS_SYSTEM_CORES:
        return "system_cores pods are never evicted"
    if pod.priority >= CRITICAL_PRIORITY:
        return f"critical priority {pod.priority}"
    if pod.priority_class_name in CRITICAL_PRIORITY_CLASSES:
        return f"critical priority class {pod.priority_class_name}"
    if pod.static:
        return "static (mirror) pods cannot be evicted through the API"
    return None


def skipped(pod: PodInfo, annotations: Iterable[str], labels: Iterable[str]) -> bool:
    return any(a in pod.annotations for a in annotations) or any(
        label in pod.labels for label in labels
    )


def usage_fn(resource: str, numa: int | None = None) -> UsageFn:
    """How much of `resource` a pod holds, for ranking and for covering an overage."""
    if resource == names.RECLAIMED_MILLICPU:
        return lambda p: float(p.reclaimed_milli_cpu)
    if resource == names.RECLAIMED_MEMORY:
        return lambda p: float(p.reclaimed_memory)
    if resource == names.RESOURCE_CPU:
        return _cpu_use
    if resource == names.RESOURCE_NET_BANDWIDTH:
        return lambda p: float(p.digest.request(names.RESOURCE_NET_BANDWIDTH))
    if numa is not None:
        return lambda p: float(numa_memory_of(p, numa))
    return lambda p: float(p.memory if p.memory is not None else p.request_memory)


def _cpu_use(p: PodInfo) -> float:
    if p.load1 is not None:
        return p.load1
    if p.cpu_usage is not None:
        return p.cpu_usage
    return p.request_milli_cpu / 1000.0


def numa_memory_of(pod: PodInfo, numa: int, num_numas: int = 0) -> int:
    """A pod's memory on one NUMA node: measured when known, else its memory spread over
    the NUMA nodes it is bound to (unbound pods: over all of them, when known)."""
    if pod.numa_memory:
        return pod.numa_memory.get(numa, 0)
    total = pod.memory if pod.memory is not None else pod.request_memory
    if pod.numa_nodes:
        return total // len(pod.numa_nodes) if numa in pod.numa_nodes else 0
    return total // num_numas if num_numas > 0 else total


def rank(pods: Sequence[PodInfo], usage: UsageFn) -> list[tuple[PodInfo, RankEntry]]:
    """Candidates in eviction order, each with the key that placed it."""
    entries = [
        (p, RankEntry(p.key, p.qos_level, p.priority, p.evict_score, usage(p))) for p in pods
    ]
    entries.sort(
        key=lambda e: (
            QOS_RANK.get(e[0].qos_level, 1),
            e[1].priority,
            e[1].evict_score,
            -e[1].usage,
            e[0].key,
        )
    )
    return entries


def minimal_prefix(
    ranked: Sequence[tuple[PodInfo, RankEntry]], overage: float | None, limit: int
) -> list[tuple[PodInfo, RankEntry]]:
    """The fewest leading candidates whose usage covers `overage` (one when no overage is
    known; always at least one, since the threshold is met), at most `limit`. Pods that
    hold none of the resource release nothing and are passed over while others remain."""
    if limit <= 0 or not ranked:
        return []
    if overage is None:
        return list(ranked[:1])
    out: list[tuple[PodInfo, RankEntry]] = []
    released = 0.0
    useful = [e for e in ranked if e[1].usage > 0] or list(ranked)
    for entry in useful:
        if (out and released >= overage) or len(out) >= limit:
            break
        out.append(entry)
        released += entry[1].usage
    return out
