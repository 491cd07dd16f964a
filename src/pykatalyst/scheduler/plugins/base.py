"""The plugin shape: every hook sees all nodes at once.

`filter` returns a boolean mask over the snapshot's slots; `filter_reasons` explains the
failures of some slots (called only when a message is needed); `score` returns one int per
given slot, already normalised to 0..100 (a plain int stands for the same score on every
node).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Final, Generic, TypeVar, overload

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel

from pykatalyst.scheduler.podinfo import PodInfo
from pykatalyst.scheduler.snapshot import NodeSnapshot

BOOL = npt.NDArray[np.bool_]
I64 = npt.NDArray[np.int64]
IDX = npt.NDArray[np.intp]

T = TypeVar("T")
_F = TypeVar("_F", bound=Callable[..., Any])


class Key(Generic[T]):
    """A typed slot of the cycle state: what one hook leaves for the next ones."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Key({self.name!r})"


class CycleState(dict[Key[Any], Any]):
    """What the hooks of one scheduling cycle share, one typed `Key` per value (a dict
    underneath: the cycle's hot path reads it many times per pod)."""

    __slots__ = ()

    if TYPE_CHECKING:

        @overload  # type: ignore[override]
        def get(self, key: Key[T]) -> T | None: ...
        @overload
        def get(self, key: Key[T], default: T) -> T: ...
        def get(self, key: Key[T], default: T | None = None) -> T | None: ...
        def __getitem__(self, key: Key[T]) -> T: ...
        def __setitem__(self, key: Key[T], value: T) -> None: ...
        def pop(self, key: Key[T], default: T | None = None) -> T | None: ...


# annotations Reserve hooks want on the pod: written with one patch before its Binding
BIND_ANNOTATIONS: Final = Key[dict[str, str]]("framework/bindAnnotations")

# the framework's cache of static scores (see Plugin.static_score): plugin name -> raw score
STATIC_SCORES: Final = Key[dict[str, "I64 | None"]]("framework/staticScores")


def default_hook(fn: _F) -> _F:
    """Marks a base hook that does nothing: defining it does not extend its point."""
    fn.default_hook = True  # type: ignore[attr-defined]
    return fn


# What kind of cluster change can turn a node this plugin rejected into a fit (the
# QueueingHint of kube-scheduler, coarse): a node's labels, taints or schedulability
# ("node"); a node's free resources, i.e. a pod leaving it or its allocatable, reclaimed
# capacity or NUMA zones growing ("resources"); or anything at all ("any": pods elsewhere
# count, as for affinity and spreading).
REQUEUE_NODE: Final = "node"
REQUEUE_RESOURCES: Final = "resources"
REQUEUE_ANY: Final = "any"


@dataclass(frozen=True, slots=True)
class Needs:
    """What a pod asks of one node's free resources, to tell in a few comparisons whether
    a change on that node can make room for it (never a full filter run)."""

    # (row of snap.free, amount)
    free: tuple[tuple[int, int], ...] = ()
    # (row of snap.req, column of snap.rc_alloc, amount)
    reclaimed: tuple[tuple[int, int, int], ...] = ()

    def met(self, snap: NodeSnapshot, slot: int) -> bool:
        free, req, rc = snap.free, snap.req, snap.rc_alloc
        if any(int(free[row, slot]) < value for row, value in self.free):
            return False
        return all(int(rc[col, slot] - req[row, slot]) >= v for row, col, v in self.reclaimed)

    def __or__(self, other: Needs) -> Needs:
        return Needs(
            tuple(dict.fromkeys(self.free + other.free)),
            tuple(dict.fromkeys(self.reclaimed + other.reclaimed)),
        )


class PluginContext:
    """What plugins may read about their profile beyond their own args."""

    def __init__(self, args: dict[str, BaseModel], enabled_filters: tuple[str, ...]) -> None:
        self.args = args
        self.enabled_filters = enabled_filters


class Plugin:
    name: ClassVar[str] = ""
    # A static filter depends only on the pod's scheduling constraints (its
    # `static_signature`) and on node labels, taints and the unschedulable flag.
    static_filter: ClassVar[bool] = False
    static_score: ClassVar[bool] = False
    requeue: ClassVar[str] = REQUEUE_ANY

    def __init__(self, args: BaseModel | None, ctx: PluginContext) -> None:
        self.args = args
        self.ctx = ctx

    def static_key(self, pod: PodInfo) -> Hashable:
        """What a static filter's or score's verdict depends on, besides the nodes."""
        return pod.static_signature

    @default_hook
    def pre_filter(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> str | None:
        """A reason string makes the pod unschedulable on every node."""
        return None

    @default_hook
    def filter(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> BOOL | None:
        """None means every node passes."""
        return None

    def filter_reasons(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX
    ) -> list[tuple[str, ...]]:
        return [(f"node(s) rejected by {self.name}",)] * len(idx)

    def reason_counts(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX
    ) -> Counter[str]:
        """How many of the slots `idx` fail for each reason (what the FitError message
        sums); plugins with many nodes per reason count with numpy instead."""
        counts: Counter[str] = Counter()
        for reasons in self.filter_reasons(pod, state, snap, idx):
            counts.update(reasons)
        return counts

    def needs(self, pod: PodInfo, snap: NodeSnapshot) -> Needs:
        """For a "resources" plugin: what must be free on a node before it can pass."""
        return Needs()

    @default_hook
    def pre_score(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> bool:
        """False skips this plugin's score for the pod (as a Skip status does)."""
        return True

    @default_hook
    def score(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX) -> I64 | int:
        return 0

    @default_hook
    def reserve(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, node: str) -> str | None:
        """Hold what the pod takes on `node`; a reason string refuses the node instead
        (the pod is tried again after its backoff)."""
        return None

    @default_hook
    def unreserve(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, node: str) -> None:
        return None


class NoOpPlugin(Plugin):
    """A plugin a configuration may name that decides nothing here."""

    def __init__(self, name: str, args: BaseModel | None, ctx: PluginContext) -> None:
        super().__init__(args, ctx)
        self.plugin_name = name


def normalize_max(raw: I64, reverse: bool = False) -> I64:
    """kube's DefaultNormalizeScore: scale to 0..100 by the maximum (reverse: 100 − that)."""
    max_count = int(raw.max()) if raw.size else 0
    if max_count == 0:
        return np.full(raw.shape, 100 if reverse else 0, np.int64)
    scaled = raw * 100 // max_count
    return (100 - scaled) if reverse else scaled
