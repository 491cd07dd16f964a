"""The realtime overcommit ratio: how far the node's live usage lets the overcommit
controller scale its allocatable (Katalyst's sys-advisor overcommitment-aware plugin).

Per resource, over the node's pods with native requests:

    pod_load = max(min(usage / request, 1), estimated_pod_load)
    ratio    = max(((allocatable × target_load − usage) / pod_load + request) / allocatable, 1)

i.e. the requests that would fit if every new pod loaded the node as the running ones do,
until usage reaches the target share of allocatable. Katalyst's defaults: target load 0.6
for cpu and 0.8 for memory, estimated pod load 0.4 and 0.8. The agent publishes a ratio on
its CNR (`katalyst.kubewharf.io/{cpu,memory}_overcommit_ratio`) only while it is below the
ratio set on the Node; the overcommit controller copies it to the Node as
`realtime_*_overcommit_ratio` and the node webhook scales by min(set, realtime).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pykatalyst.api import names

Terms = dict[str, Any]

CNR_KEYS = {
    names.RESOURCE_CPU: names.CPU_OVERCOMMIT_RATIO_ANNOTATION,
    names.RESOURCE_MEMORY: names.MEMORY_OVERCOMMIT_RATIO_ANNOTATION,
}


@dataclass(frozen=True, slots=True)
class Demand:
    """One resource on the node: allocatable (the kubelet's, before any overcommit), what
    the pods with native requests ask for and use. Cores for cpu, bytes for memory."""

    allocatable: float
    request: float
    usage: float


def realtime_ratio(
    demand: Demand, target_load: float, estimated_pod_load: float
) -> tuple[float, Terms]:
    """The ratio and the terms behind it; 1 when there is nothing to scale."""
    alloc, request, usage = demand.allocatable, max(demand.request, 0.0), max(demand.usage, 0.0)
    terms: Terms = {
        "formula": "max(((allocatable × target_load − usage) / pod_load + request)"
        " / allocatable, 1)",
        "allocatable": alloc,
        "request": request,
        "usage": usage,
        "target_load": target_load,
    }
    if not math.isfinite(alloc) or alloc <= 0:
        terms["ratio"] = 1.0
        terms["note"] = "no allocatable: nothing to scale"
        return 1.0, terms
    observed = min(usage / request, 1.0) if request > 0 else 0.0
    pod_load = max(observed, estimated_pod_load)
    raw = ((alloc * target_load - usage) / pod_load + request) / alloc if pod_load > 0 else 1.0
    ratio = max(raw, 1.0) if math.isfinite(raw) else 1.0
    terms.update({"pod_load": round(pod_load, 4), "raw": round(raw, 4), "ratio": round(ratio, 4)})
    return ratio, terms


def format_ratio(ratio: float) -> str:
    """Two decimals, as Katalyst writes its ratios ("1.25")."""
    return f"{math.floor(ratio * 100 + 1e-9) / 100:.2f}"


def set_ratio(node_annotations: Mapping[str, Any], resource: str) -> float:
    """The ratio the overcommit controller set on the Node (1 when none or unreadable)."""
    raw = node_annotations.get(CNR_KEYS[resource])
    try:
        value = float(str(raw)) if raw is not None else 1.0
    except ValueError:
        return 1.0
    return value if math.isfinite(value) and value >= 1.0 else 1.0


def cnr_annotations(
    ratios: Mapping[str, float], node_annotations: Mapping[str, Any]
) -> dict[str, str | None]:
    """What the CNR carries: a resource's ratio while below the Node's set ratio, else
    nothing (None removes the annotation in a merge patch)."""
    out: dict[str, str | None] = {}
    for resource, key in CNR_KEYS.items():
        ratio = ratios.get(resource)
        limit = set_ratio(node_annotations, resource)
        out[key] = format_ratio(ratio) if ratio is not None and ratio < limit else None
    return out
