"""The node-status mutation for overcommit, as Katalyst's node allocatable mutator does it.

On every UPDATE of `nodes/status` (the kubelet's status reports):

1. the incoming `status.capacity` and `status.allocatable` cpu/memory are recorded in the
   `original_{capacity,allocatable}_{cpu,memory}` annotations, so the controller (and an
   operator) can always see, and restore, what the kubelet reported;
2. for each resource whose `{cpu,memory}_overcommit_ratio` annotation is present, the new
   values are the controller's `overcommit_{capacity,allocatable}_*` annotations when both
   parse, else the reported values times `ratio = min(set ratio, realtime ratio)`, where the
   realtime ratio is the agent's advice the controller copies onto the node
   (`realtime_{cpu,memory}_overcommit_ratio`); a ratio below 1 counts as 1 and only a ratio
   above 1 changes anything;
3. rounding is Katalyst's: cpu in millicores and memory in bytes, each truncated
   (`int(milli × ratio)`, `int(bytes × ratio)`), written in the reported value's format.

Everything comes from the request itself: no API call on the admission path.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pykatalyst.api import names
from pykatalyst.api.quantity import Quantity, QuantityError
from pykatalyst.cluster.admission import AdmissionRequest, AdmissionResponse
from pykatalyst.cluster.protocol import JSON
from pykatalyst.webhook.review import pointer

log = logging.getLogger("pykatalyst.webhook")


@dataclass(frozen=True, slots=True)
class _Resource:
    name: str
    ratio: str
    realtime: str
    original_capacity: str
    original_allocatable: str
    overcommit_capacity: str
    overcommit_allocatable: str


CPU = _Resource(
    "cpu",
    names.CPU_OVERCOMMIT_RATIO_ANNOTATION,
    names.REALTIME_CPU_OVERCOMMIT_RATIO_ANNOTATION,
    names.ORIGINAL_CAPACITY_CPU_ANNOTATION,
    names.ORIGINAL_ALLOCATABLE_CPU_ANNOTATION,
    names.OVERCOMMIT_CAPACITY_CPU_ANNOTATION,
    names.OVERCOMMIT_ALLOCATABLE_CPU_ANNOTATION,
)
MEMORY = _Resource(
    "memory",
    names.MEMORY_OVERCOMMIT_RATIO_ANNOTATION,
    names.REALTIME_MEMORY_OVERCOMMIT_RATIO_ANNOTATION,
    names.ORIGINAL_CAPACITY_MEMORY_ANNOTATION,
    names.ORIGINAL_ALLOCATABLE_MEMORY_ANNOTATION,
    names.OVERCOMMIT_CAPACITY_MEMORY_ANNOTATION,
    names.OVERCOMMIT_ALLOCATABLE_MEMORY_ANNOTATION,
)


def overcommit_ratio(annotations: Mapping[str, str], res: _Resource) -> float:
    """`min(set, realtime)`, 1 when unset, unreadable or below 1 (Katalyst's rule)."""
    text = annotations.get(res.ratio)
    if text is None:
        return 1.0
    try:
        ratio = float(text)
    except ValueError:
        log.warning("node annotation %s=%r is not a number: no overcommit", res.ratio, text)
        return 1.0
    realtime = annotations.get(res.realtime)
    if realtime is not None:
        try:
            ratio = min(ratio, float(realtime))
        except ValueError:
            log.warning("node annotation %s=%r is not a number: ignored", res.realtime, realtime)
    if ratio != ratio or ratio < 1.0:  # NaN or below 1
        return 1.0
    return ratio


def multiply(resource: str, quantity: Quantity, ratio: float) -> Quantity:
    """Katalyst's MultiplyResourceQuantity: cpu in truncated millicores, the rest in
    truncated whole units, in the quantity's own format."""
    if ratio == 1.0:
        return quantity
    if resource == "cpu":
        milli = quantity.milli_value()
        return quantity if milli == 0 else Quantity.from_milli(int(milli * ratio), quantity.format)
    value = quantity.value()
    return quantity if value == 0 else Quantity.from_int(int(value * ratio), quantity.format)


def _quantity(value: Any) -> Quantity | None:
    try:
        return Quantity.parse(str(value)) if value is not None else None
    except QuantityError:
        return None


def _new_values(
    annotations: Mapping[str, str], res: _Resource, capacity: Quantity, allocatable: Quantity
) -> tuple[Quantity, Quantity] | None:
    """(capacity, allocatable) after overcommit, or None to leave them."""
    if res.ratio not in annotations:
        return None
    cap = _quantity(annotations.get(res.overcommit_capacity))
    alloc = _quantity(annotations.get(res.overcommit_allocatable))
    if cap is not None and alloc is not None:
        return cap, alloc
    ratio = overcommit_ratio(annotations, res)
    if ratio <= 1.0:
        return None
    return multiply(res.name, capacity, ratio), multiply(res.name, allocatable, ratio)


def mutate_node_status(node: JSON) -> list[JSON]:
    """The JSON patch that records the reported values and applies the overcommit."""
    meta = node.get("metadata") if isinstance(node.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    raw = meta.get("annotations")
    annotations = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
    status = node.get("status") if isinstance(node.get("status"), dict) else {}
    assert isinstance(status, dict)
    capacity = status.get("capacity") if isinstance(status.get("capacity"), dict) else {}
    allocatable = status.get("allocatable") if isinstance(status.get("allocatable"), dict) else {}
    assert isinstance(capacity, dict) and isinstance(allocatable, dict)
    recorded: dict[str, str] = {}
    status_ops: list[JSON] = []
    present = {"capacity": bool(capacity), "allocatable": bool(allocatable)}
    for res in (CPU, MEMORY):
        cap = _quantity(capacity.get(res.name)) or Quantity.zero()
        alloc = _quantity(allocatable.get(res.name)) or Quantity.zero()
        recorded[res.original_capacity] = str(cap)
        recorded[res.original_allocatable] = str(alloc)
        new = _new_values(annotations, res, cap, alloc)
        if new is None or not isinstance(node.get("status"), dict):
            continue
        for field, value in (("capacity", new[0]), ("allocatable", new[1])):
            if not present[field]:
                status_ops.append({"op": "add", "path": pointer("status", field), "value": {}})
                present[field] = True
            status_ops.append(
                {"op": "add", "path": pointer("status", field, res.name), "value": str(value)}
            )
    return _annotation_ops(raw, recorded) + status_ops


def _annotation_ops(raw: Any, recorded: Mapping[str, str]) -> list[JSON]:
    if not isinstance(raw, dict):
        return [{"op": "add", "path": "/metadata/annotations", "value": dict(recorded)}]
    return [
        {"op": "add", "path": pointer("metadata", "annotations", k), "value": v}
        for k, v in recorded.items()
        if raw.get(k) != v
    ]


def admit_node(request: AdmissionRequest) -> AdmissionResponse:
    """Only UPDATEs of the status subresource are touched (as in Katalyst)."""
    if request.operation != "UPDATE" or request.sub_resource != "status":
        return AdmissionResponse()
    if request.object is None:
        return AdmissionResponse.deny("the node status update carries no object", code=400)
    patch = mutate_node_status(request.object)
    return AdmissionResponse(patch=patch or None)
