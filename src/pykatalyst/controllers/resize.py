"""In-place resize on an unpatched kubelet: what to do with one pod, and why.

Katalyst's KVPA only writes `pod.kubernetes.io/resizeResources` for its patched kubelet. On
vanilla Kubernetes (v1.33+, `InPlacePodVerticalScaling` on by default) the pod's
`pods/resize` subresource changes a running container's requests and limits; the kubelet
answers through the pod's conditions (`PodResizePending` with reason `Deferred` or
`Infeasible`, `PodResizeInProgress`, with reason `Error` when it failed) and reports what
the container really has in `status.containerStatuses[].resources`.

`decide_pod` is pure: from the pod as the API server serves it, the targets the KVPA wants,
the KVPA's `podUpdatingStrategy`, what this controller remembered about the pod (when it
first saw the resize deferred) and the configuration, it returns one `PodDecision`:

- `applied`: the kubelet reports the targets (its status, not the spec);
- `resize`: the spec differs from the targets: patch `pods/resize` (and the annotation);
- `waiting`: asked; the kubelet is at it, or `Deferred` (it retries by itself) within the
  timeout;
- `evict`: `BestEffortInplace` and the resize cannot complete in place: `Infeasible`,
  `Deferred` past `deferred_timeout_s`, in progress past `in_progress_timeout_s` (1 h, as
  VPA), a kubelet `Error` (a memory-limit decrease v1.34 refuses), a memory-limit
  decrease the container's resizePolicy does not allow, or cpus pinned by the static cpu
  manager;
- `refused`: the same under `Inplace` (which never evicts), or targets Katalyst refuses
  (a QoS class change, a negative value, a request above its limit);
- `off`: `podUpdatingStrategy: Off`: the recommendation stays in the KVPA status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from pykatalyst.api import vpa
from pykatalyst.api.quantity import Quantity
from pykatalyst.api.units import Seconds
from pykatalyst.api.vpa import Target

APPLIED: Final = "applied"
RESIZE: Final = "resize"
WAITING: Final = "waiting"
EVICT: Final = "evict"
REFUSED: Final = "refused"
OFF: Final = "off"
OUTCOMES: Final = (APPLIED, RESIZE, WAITING, EVICT, REFUSED, OFF)

# Why a resize cannot complete in place (the reasons of Events and explain).
WHY_INFEASIBLE: Final = "Infeasible"
WHY_DEFERRED: Final = "DeferredTooLong"
WHY_IN_PROGRESS: Final = "InProgressTooLong"
WHY_KUBELET_ERROR: Final = "ResizeError"
WHY_MEMORY_DECREASE: Final = "MemoryLimitDecrease"
WHY_PINNED: Final = "StaticCPUPinned"
WHY_ILLEGAL: Final = "Illegal"

COND_RESIZE_PENDING: Final = "PodResizePending"
COND_RESIZE_IN_PROGRESS: Final = "PodResizeInProgress"


class ResizeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    deferred_timeout_s: Seconds = Field(
        300.0, description="a Deferred resize older than this falls back to eviction"
    )
    in_progress_timeout_s: Seconds = Field(
        3600.0, description="a resize in progress for longer than this falls back to eviction"
    )
    evict_qps: float = Field(0.1, gt=0, description="fallback evictions per second")
    burst: int = Field(1, ge=1, description="evictions that may go at once")


Shape = tuple[dict[str, Quantity], dict[str, Quantity]]


@dataclass(frozen=True, slots=True)
class ResizeMemory:
    """What the controller remembers of one pod: since when its resize (for this
    `wanted` text) has been deferred."""

    wanted: str
    deferred_since: float | None = None
    in_progress_since: float | None = None


@dataclass(frozen=True, slots=True)
class PodDecision:
    outcome: str
    reason: str
    message: str
    # The pods/resize body (outcome resize), the annotation text to write (any outcome
    # but off), and the memory to keep.
    resize_body: Mapping[str, Any] | None = None
    memory: ResizeMemory | None = None
    terms: Mapping[str, Any] = field(default_factory=dict)


def _condition(pod: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == ctype and c.get("status") == "True":
            return c
    return None


def actual_shapes(pod: Mapping[str, Any]) -> dict[str, Shape]:
    """What the kubelet reports each container has (`status.containerStatuses[].resources`)."""
    out: dict[str, Shape] = {}
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if not isinstance(cs, Mapping) or not isinstance(cs.get("resources"), Mapping):
            continue
        out[str(cs.get("name"))] = vpa.spec_resources(cs)
    return out


def reached(shapes: Mapping[str, Shape], targets: Mapping[str, Target]) -> bool:
    """Whether every target figure is what `shapes` have."""
    for cname, t in targets.items():
        if cname not in shapes:
            return False
        req, lim = shapes[cname]
        for have, want in ((req, t.requests or {}), (lim, t.limits or {})):
            if any(have.get(r) != q for r, q in want.items()):
                return False
    return True


def pinned(pod: Mapping[str, Any], static_node: bool) -> bool:
    """Whether the static cpu manager pinned the pod's cpus: a Guaranteed pod with a whole
    number of cpus in a container, on a node whose kubelet runs the static policy."""
    if not static_node:
        return False
    shapes = vpa.applied(pod, {})
    if vpa.qos_class(shapes) != "Guaranteed":
        return False
    return any(
        (q := req.get("cpu")) is not None and q.nanos > 0 and q.nanos % 10**9 == 0
        for req, _ in shapes.values()
    )


def memory_decrease(pod: Mapping[str, Any], targets: Mapping[str, Target]) -> list[str]:
    """Containers whose memory limit the targets lower while their memory resizePolicy is
    not RestartContainer: v1.34 cannot do that in place."""
    out = []
    for c in vpa.containers_of(pod):
        name = str(c.get("name") or "")
        t = targets.get(name)
        new = (t.limits or {}).get("memory") if t is not None else None
        old = vpa.spec_resources(c)[1].get("memory")
        if new is None or old is None or not new < old:
            continue
        restart = any(
            isinstance(p, Mapping)
            and p.get("resourceName") == "memory"
            and p.get("restartPolicy") == "RestartContainer"
            for p in c.get("resizePolicy") or []
        )
        if not restart:
            out.append(name)
    return out


def resize_body(pod: Mapping[str, Any], targets: Mapping[str, Target]) -> dict[str, Any]:
    """The `pods/resize` patch: every container's whole `resources` with the targets written
    in (the API server refuses a patch that drops a request or limit)."""
    shapes = vpa.applied(pod, targets)
    containers = []
    for c in vpa.containers_of(pod):
        name = str(c.get("name") or "")
        if name not in targets:
            continue
        req, lim = shapes[name]
        res: dict[str, Any] = {}
        if req:
            res["requests"] = {r: str(q) for r, q in sorted(req.items())}
        if lim:
            res["limits"] = {r: str(q) for r, q in sorted(lim.items())}
        containers.append({"name": name, "resources": res})
    return {"spec": {"containers": containers}}


def decide_pod(
    pod: Mapping[str, Any],
    targets: Mapping[str, Target],
    strategy: str,
    memory: ResizeMemory | None,
    now: float,
    cfg: ResizeConfig,
    *,
    static_node: bool = False,
) -> PodDecision:
    """One pod's resize decision (see the module's table)."""
    wanted = vpa.annotation_text(targets)
    if memory is None or memory.wanted != wanted:
        memory = ResizeMemory(wanted)
    terms: dict[str, Any] = {"strategy": strategy, "targets": wanted}
    if reached(actual_shapes(pod), targets):
        return PodDecision(
            APPLIED, "Applied", "the kubelet reports the targets", None, memory, terms
        )
    if strategy == vpa.STRATEGY_OFF:
        return PodDecision(
            OFF, "StrategyOff", "podUpdatingStrategy Off: status only", None, memory, terms
        )
    illegal = vpa.check_legal(pod, targets)
    if illegal:
        return PodDecision(REFUSED, WHY_ILLEGAL, illegal, None, memory, terms)
    if not vpa.differs(pod, targets):
        return _asked(pod, strategy, memory, now, cfg, terms)
    if pinned(pod, static_node):
        why = (
            "its cpus are pinned by the kubelet's static cpu manager, which v1.34 cannot "
            "resize in place"
        )
        return _cannot(strategy, WHY_PINNED, why, memory, terms)
    lowered = memory_decrease(pod, targets)
    if lowered:
        why = (
            f"lowers the memory limit of {', '.join(lowered)}, which v1.34 does not do in "
            "place unless the container's memory resizePolicy is RestartContainer"
        )
        return _cannot(strategy, WHY_MEMORY_DECREASE, why, memory, terms)
    return PodDecision(
        RESIZE,
        "Resize",
        f"resizing in place to {wanted}",
        resize_body(pod, targets),
        ResizeMemory(wanted),
        terms,
    )


def _cannot(
    strategy: str, why: str, message: str, memory: ResizeMemory, terms: Mapping[str, Any]
) -> PodDecision:
    if strategy == vpa.STRATEGY_BEST_EFFORT_INPLACE:
        return PodDecision(
            EVICT, why, f"{message}: evicting (BestEffortInplace)", None, memory, terms
        )
    return PodDecision(
        REFUSED, why, f"{message}: not resized (Inplace never evicts)", None, memory, terms
    )


def _asked(
    pod: Mapping[str, Any],
    strategy: str,
    memory: ResizeMemory,
    now: float,
    cfg: ResizeConfig,
    terms: dict[str, Any],
) -> PodDecision:
    """The spec has the targets; the kubelet has not reported them yet."""
    pending = _condition(pod, COND_RESIZE_PENDING)
    progress = _condition(pod, COND_RESIZE_IN_PROGRESS)
    if pending is not None:
        reason = str(pending.get("reason") or "")
        text = str(pending.get("message") or "")
        terms["kubelet"] = f"{COND_RESIZE_PENDING}/{reason}: {text}"
        if reason == "Infeasible":
            return _cannot(strategy, WHY_INFEASIBLE, f"resize Infeasible: {text}", memory, terms)
        since = memory.deferred_since if memory.deferred_since is not None else now
        memory = ResizeMemory(memory.wanted, since)
        waited = now - since
        terms["deferred_s"] = waited
        if waited >= cfg.deferred_timeout_s:
            return _cannot(
                strategy,
                WHY_DEFERRED,
                f"resize Deferred for {waited:g}s (>= {cfg.deferred_timeout_s:g}s): {text}",
                memory,
                terms,
            )
        return PodDecision(
            WAITING, "Deferred", f"resize Deferred for {waited:g}s: {text}", None, memory, terms
        )
    if progress is not None and progress.get("reason") == "Error":
        text = str(progress.get("message") or "")
        terms["kubelet"] = f"{COND_RESIZE_IN_PROGRESS}/Error: {text}"
        why = f"the kubelet failed the resize: {text}"
        return _cannot(strategy, WHY_KUBELET_ERROR, why, memory, terms)
    if progress is None:
        return PodDecision(
            WAITING,
            "Asked",
            "resize asked; waiting for the kubelet to report it",
            None,
            ResizeMemory(memory.wanted),
            terms,
        )
    since = memory.in_progress_since if memory.in_progress_since is not None else now
    memory = ResizeMemory(memory.wanted, None, since)
    waited = now - since
    terms["kubelet"] = f"{COND_RESIZE_IN_PROGRESS}: {progress.get('message') or ''}".strip()
    if waited >= cfg.in_progress_timeout_s:
        why = f"resize in progress for {waited:g}s (>= {cfg.in_progress_timeout_s:g}s)"
        return _cannot(strategy, WHY_IN_PROGRESS, why, memory, terms)
    return PodDecision(
        WAITING, "InProgress", f"resize in progress for {waited:g}s", None, memory, terms
    )
