"""The plugin shape: every hook sees all nodes at once.

`filter` returns a boolean mask over the snapshot's slots; `filter_reasons` explains the
failures of some slots (called only when a message is needed); `score` returns one int per
given slot, already normalised to 0..100 (a plain int stands for the same score on every
node).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel

from pykatalyst.scheduler.podinfo import PodInfo
from pykatalyst.scheduler.snapshot import NodeSnapshot

BOOL = npt.NDArray[np.bool_]
I64 = npt.NDArray[np.int64]
IDX = npt.NDArray[np.intp]

CycleState = dict[str, Any]


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

    def __init__(self, args: BaseModel | None, ctx: PluginContext) -> None:
        self.args = args
        self.ctx = ctx

    def pre_filter(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> str | None:
        """A reason string makes the pod unschedulable on every node."""
        return None

    def filter(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> BOOL | None:
        """None means every node passes."""
        return None

    def filter_reasons(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX
    ) -> list[tuple[str, ...]]:
        return [(f"node(s) rejected by {self.name}",)] * len(idx)

    def pre_score(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> bool:
        """False skips this plugin's score for the pod (as a Skip status does)."""
        return True

    def score(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX) -> I64 | int:
        return 0

    def reserve(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, node: str) -> None:
        return None

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
