"""A pod's GPU request under Katalyst's model, read once per pod template.

A container asks `nvidia.com/gpu: N` cards and `resource.katalyst.kubewharf.io/gpu_memory:
M` memory units; each of its N cards gives it M/N units. A container that asks for cards
and no memory units takes its cards whole. A pod's containers are placed together: the
pod gets the sum of their cards, each with the largest per-card share any of them asks
(never less than a container needs). Shares are counted in milli-units so that M/N stays
exact enough (rounded up) for any M and N.

What no node can honour is a `problem` that names the field and what is accepted: a
fractional card count, memory units without cards, more cards than a node ever has,
memory units asked by an init container. The kubelet hands an init container's devices on
to the pod's next containers, id by id, in an order a card's split into memory units
cannot follow; Katalyst's GPU plugin leaves init containers out too. Whole cards in an
init container are Kubernetes' own (the vendor's device plugin serves them, and the
resource fit counts them as it counts any extended resource); they are not placed card by
card here, and pykatalyst's device plugin refuses them at admission.
Whether a share fits a card depends on the cards' sizes (node configuration) and is the
scheduler's to say.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pykatalyst.api import names
from pykatalyst.api.quantity import QuantityError, parse_quantity

MILLI: Final = 1000
# -1 as a share: the card taken whole, whatever its size
WHOLE: Final = -1
MAX_CARDS: Final = 64


@dataclass(frozen=True, slots=True)
class GPURequest:
    """What a pod asks of GPUs: `cards` cards with `share` milli-units free on each
    (`WHOLE`: the cards taken whole); `problem` says why no node can take it."""

    cards: int = 0
    share: int = 0
    memory: int = 0  # the gpu_memory units asked in all
    problem: str = ""

    @property
    def whole(self) -> bool:
        return self.share == WHOLE

    @property
    def asks(self) -> bool:
        return self.cards > 0 or bool(self.problem)


NONE: Final = GPURequest()


def _count(container: Mapping[str, Any], resource: str, where: str) -> tuple[int, str]:
    res = container.get("resources") or {}
    if not isinstance(res, Mapping):
        return 0, ""
    value = None
    for part in ("requests", "limits"):
        block = res.get(part) or {}
        if isinstance(block, Mapping) and resource in block:
            value = block[resource]
            break
    if value is None:
        return 0, ""
    try:
        q = parse_quantity(value)
    except (QuantityError, ValueError, TypeError):
        return 0, f"{where}.{resource}: {value!r} is not a quantity"
    milli = q.milli_value()
    if milli < 0 or milli % MILLI:
        return 0, f"{where}.{resource}: {value!r} must be a whole number (of cards or units)"
    return milli // MILLI, ""


def _init_problem(spec: Mapping[str, Any]) -> str:
    """Why the pod's init containers cannot have their GPU memory units, or ""."""
    for i, c in enumerate(spec.get("initContainers") or []):
        if not isinstance(c, Mapping):
            continue
        where = f"spec.initContainers[{i}].resources"
        n, problem = _count(c, names.RESOURCE_GPU_MEMORY, where)
        if problem or n:
            return problem or (
                f"{where}.{names.RESOURCE_GPU_MEMORY}: {n} in an init container; shares of "
                "a card are served to the containers of spec.containers only (ask there)"
            )
    return ""


def gpu_request(spec: Mapping[str, Any]) -> GPURequest:
    """The pod's GPU request from its containers; a problem when an init container asks
    for memory units (see the module's docstring)."""
    problem = _init_problem(spec)
    if problem:
        return GPURequest(problem=problem)
    cards = memory = share = 0
    whole = False
    for i, c in enumerate(spec.get("containers") or []):
        if not isinstance(c, Mapping):
            continue
        where = f"spec.containers[{i}].resources"
        n, problem = _count(c, names.RESOURCE_NVIDIA_GPU, where)
        m, problem_m = _count(c, names.RESOURCE_GPU_MEMORY, where)
        if problem or problem_m:
            return GPURequest(problem=problem or problem_m)
        if m and not n:
            return GPURequest(
                problem=(
                    f"{where}: {names.RESOURCE_GPU_MEMORY} {m} asks for memory on no card; "
                    f"add {names.RESOURCE_NVIDIA_GPU}: N (the memory is split over N cards)"
                )
            )
        if not n:
            continue
        cards += n
        memory += m
        if m:
            share = max(share, -(-m * MILLI // n))
        else:
            whole = True
    if cards > MAX_CARDS:
        return GPURequest(
            problem=(
                f"{names.RESOURCE_NVIDIA_GPU}: {cards} cards in one pod; accepted: 1..{MAX_CARDS}"
            )
        )
    if not cards:
        return NONE
    return GPURequest(cards, WHOLE if whole else share, memory)


def pod_gpu_request(pod: Mapping[str, Any]) -> GPURequest:
    spec = pod.get("spec") or {}
    return gpu_request(spec if isinstance(spec, Mapping) else {})


def parse_selection(value: str) -> tuple[str, ...]:
    """The card ids of a `gpu_selection_result` annotation, in allocation order."""
    return tuple(part.strip() for part in value.split(",") if part.strip())


def format_selection(ids: tuple[str, ...] | list[str]) -> str:
    return ",".join(ids)
