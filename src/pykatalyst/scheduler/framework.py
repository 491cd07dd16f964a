"""One profile's plugins run as a scheduling cycle: PreFilter, Filter, PostFilter (none
here), PreScore, Score (+ normalisation inside each plugin), host selection, Reserve.

Every step evaluates all nodes at once. Filters run in the profile's order and a node is
charged to the first filter that rejects it, as kube-scheduler does, so the
"0/N nodes are available" summary counts the same reasons.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from pykatalyst.api import names
from pykatalyst.scheduler import registry as reg
from pykatalyst.scheduler.config import ResolvedProfile
from pykatalyst.scheduler.intree import in_tree_registry
from pykatalyst.scheduler.plugins.base import (
    BIND_ANNOTATIONS,
    BOOL,
    I64,
    IDX,
    REQUEUE_NODE,
    REQUEUE_RESOURCES,
    STATIC_SCORES,
    CycleState,
    Needs,
    NoOpPlugin,
    Plugin,
    PluginContext,
)
from pykatalyst.scheduler.plugins.gpu import GPU_RESERVATION
from pykatalyst.scheduler.plugins.nic import NIC_RESERVATION
from pykatalyst.scheduler.plugins.sriov import VF_RESERVATION
from pykatalyst.scheduler.plugins.topology import NUMA_RESERVATION
from pykatalyst.scheduler.podinfo import PodInfo
from pykatalyst.scheduler.queue import RequeueHint
from pykatalyst.scheduler.snapshot import (
    GPUReservation,
    NICReservation,
    NodeSnapshot,
    NUMAReservation,
)

NO_NODES_MESSAGE: Final = "no nodes available to schedule pods"
MIN_FEASIBLE_NODES_TO_FIND: Final = 100
MIN_FEASIBLE_NODES_PERCENTAGE: Final = 5


def num_feasible_nodes_to_find(percentage: int | None, num_nodes: int) -> int:
    """kube-scheduler's adaptive cut: how many feasible nodes to score."""
    if num_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_nodes
    pct = percentage or 0
    if pct == 0:
        pct = max(50 - num_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE)
    if pct >= 100:
        return num_nodes
    return max(num_nodes * pct // 100, MIN_FEASIBLE_NODES_TO_FIND)


@dataclass(slots=True)
class Diagnosis:
    """Why nodes were rejected: the first rejecting filter for each node."""

    num_nodes: int
    pre_filter_message: str = ""
    rejected: list[tuple[Plugin, IDX]] = field(default_factory=list)

    def node_reasons(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot
    ) -> dict[int, tuple[str, ...]]:
        out: dict[int, tuple[str, ...]] = {}
        for plugin, idx in self.rejected:
            for slot, reasons in zip(
                idx.tolist(), plugin.filter_reasons(pod, state, snap, idx), strict=True
            ):
                out[slot] = reasons
        return out

    def message(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> str:
        """kube-scheduler's FitError text: reasons counted over nodes, sorted as strings."""
        if self.num_nodes == 0:
            return NO_NODES_MESSAGE
        msg = f"0/{self.num_nodes} nodes are available:"
        if self.pre_filter_message:
            return f"{msg} {self.pre_filter_message}."
        counts: Counter[str] = Counter()
        # each node is charged to one filter only, so the per-plugin counts add up
        for plugin, idx in self.rejected:
            counts.update(plugin.reason_counts(pod, state, snap, idx))
        parts = sorted(f"{v} {k}" for k, v in counts.items())
        if parts:
            msg += f" {', '.join(parts)}."
        return msg

    def requeue_hint(self, pod: PodInfo, snap: NodeSnapshot) -> RequeueHint:
        """Which later changes can make one of the rejected nodes fit the pod."""
        if self.pre_filter_message or self.num_nodes == 0:
            return RequeueHint()
        fit = np.zeros(snap.n, np.bool_)
        static = np.zeros(snap.n, np.bool_)
        needs = Needs()
        for plugin, idx in self.rejected:
            if plugin.requeue == REQUEUE_RESOURCES:
                fit[idx] = True
                needs = needs | plugin.needs(pod, snap)
            elif plugin.requeue == REQUEUE_NODE:
                static[idx] = True
            else:
                return RequeueHint()
        return RequeueHint(False, snap.static_gen, fit, static, needs)


@dataclass(slots=True)
class CycleResult:
    node: str | None
    feasible: int
    diagnosis: Diagnosis
    state: CycleState
    numa: NUMAReservation | None = None
    # the chosen node's score per plugin (weighted), for explaining the choice
    scores: dict[str, int] = field(default_factory=dict)
    gpu: GPUReservation | None = None
    nic: NICReservation | None = None
    vf: str | None = None  # the SR-IOV VF reserved (its representor name)
    # what Reserve wants written on the pod before its Binding
    annotations: dict[str, str] = field(default_factory=dict)


class Framework:
    """The plugins of one profile, instantiated, in extension-point order."""

    def __init__(
        self,
        profile: ResolvedProfile,
        percentage_of_nodes_to_score: int | None = None,
        seed: int = 0,
        registry: reg.Registry | None = None,
    ) -> None:
        """`registry` maps plugin names to their classes (the in-tree registry if None)."""
        self.profile = profile
        filters = profile.plugins_at(reg.FILTER)
        ctx = PluginContext(dict(profile.args), filters)
        self.plugins: dict[str, Plugin] = {}
        known = in_tree_registry() if registry is None else registry
        for name in sorted({n for p in profile.points.values() for n in p}):
            spec = known.get(name)
            cls = spec.cls if spec is not None else None
            args = profile.args.get(name)
            if cls is not None and issubclass(cls, Plugin):
                self.plugins[name] = cls(args, ctx)
            else:
                self.plugins[name] = NoOpPlugin(name, args, ctx)

        def at(point: str) -> list[Plugin]:
            return [
                self.plugins[n]
                for n in profile.plugins_at(point)
                if not isinstance(self.plugins[n], NoOpPlugin)
            ]

        self.pre_filters = at(reg.PRE_FILTER)
        self.filters = at(reg.FILTER)
        self.scorers = [
            (self.plugins[n], profile.score_weights[n])
            for n in profile.plugins_at(reg.SCORE)
            if not isinstance(self.plugins[n], NoOpPlugin)
        ]
        # The NUMA zones are chosen before the devices: GPUShare and NICBandwidth place a
        # NUMA-bound pod's cards and NIC by the zones NodeResourceTopology reserved,
        # whatever order a profile lists them in.
        self.reservers = sorted(
            at(reg.RESERVE), key=lambda p: p.name != names.PLUGIN_NODE_RESOURCE_TOPOLOGY
        )
        # scorers whose PreScore does something (the base's always lets the score run)
        self._pre_scorers = {
            p.name for p, _ in self.scorers if reg.PRE_SCORE in reg.hook_points(type(p))
        }
        self.max_total = sum(profile.score_weights.values()) * reg.MAX_NODE_SCORE
        pct = profile.percentage_of_nodes_to_score
        self.percentage = pct if pct is not None else percentage_of_nodes_to_score
        self.rng = np.random.default_rng(seed)
        self.next_start = 0
        self._static_filter: dict[tuple[str, Hashable], tuple[int, BOOL | None]] = {}
        self._static_score: dict[tuple[str, Hashable], tuple[int, I64 | None]] = {}

    # --- filter ---------------------------------------------------------------------------

    def _filter_mask(
        self, plugin: Plugin, pod: PodInfo, state: CycleState, snap: NodeSnapshot
    ) -> BOOL | None:
        if not plugin.static_filter:
            return plugin.filter(pod, state, snap)
        key = (plugin.name, plugin.static_key(pod))
        hit = self._static_filter.get(key)
        if hit is not None and hit[0] == snap.static_gen:
            return hit[1]
        mask = plugin.filter(pod, state, snap)
        if len(self._static_filter) > 4096:
            self._static_filter.clear()
        self._static_filter[key] = (snap.static_gen, mask)
        return mask

    def run_filters(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot
    ) -> tuple[BOOL, Diagnosis]:
        n = snap.n
        diag = Diagnosis(num_nodes=n)
        for plugin in self.pre_filters:
            msg = plugin.pre_filter(pod, state, snap)
            if msg:
                diag.pre_filter_message = msg
                return np.zeros(n, np.bool_), diag
        alive = np.ones(n, np.bool_)
        for plugin in self.filters:
            mask = self._filter_mask(plugin, pod, state, snap)
            if mask is None:
                continue
            dropped = alive & ~mask
            if dropped.any():
                diag.rejected.append((plugin, np.flatnonzero(dropped)))
                alive &= mask
        return alive, diag

    # --- score ----------------------------------------------------------------------------

    def _static_scores(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> None:
        table: dict[str, I64 | None] = {}
        for plugin, _ in self.scorers:
            if not plugin.static_score:
                continue
            key = (plugin.name, plugin.static_key(pod))
            hit = self._static_score.get(key)
            if hit is None or hit[0] != snap.static_gen:
                raw_fn = getattr(plugin, "raw_score", None)
                raw = raw_fn(pod, snap) if raw_fn is not None else None
                if len(self._static_score) > 4096:
                    self._static_score.clear()
                hit = (snap.static_gen, raw)
                self._static_score[key] = hit
            table[plugin.name] = hit[1]
        state[STATIC_SCORES] = table

    def score(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX
    ) -> tuple[I64, dict[str, I64 | int]]:
        self._static_scores(pod, state, snap)
        total = np.zeros(len(idx), np.int64)
        parts: dict[str, I64 | int] = {}
        for plugin, weight in self.scorers:
            if plugin.name in self._pre_scorers and not plugin.pre_score(pod, state, snap):
                continue
            s = plugin.score(pod, state, snap, idx)
            parts[plugin.name] = s
            total += s * weight
        return total, parts

    # --- the cycle ------------------------------------------------------------------------

    def feasible_to_score(self, feasible: IDX, n: int) -> IDX:
        """The feasible nodes kube-scheduler would have scored: the first K found when
        searching from a start index that rotates between cycles."""
        k = num_feasible_nodes_to_find(self.percentage, n)
        start = self.next_start % n if n else 0
        if len(feasible) <= k:
            self.next_start = start  # every node was visited
            return feasible
        split = int(np.searchsorted(feasible, start))
        ordered = np.concatenate((feasible[split:], feasible[:split]))[:k]
        processed = (int(ordered[-1]) - start) % n + 1
        self.next_start = (start + processed) % n
        return ordered

    def schedule(self, pod: PodInfo, snap: NodeSnapshot) -> CycleResult:
        state = CycleState()
        alive, diag = self.run_filters(pod, state, snap)
        feasible = np.flatnonzero(alive)
        if len(feasible) == 0:
            return CycleResult(None, 0, diag, state)
        scores: dict[str, int] = {}
        if len(feasible) == 1:
            chosen = int(feasible[0])
        else:
            idx = self.feasible_to_score(feasible, snap.n)
            total, parts = self.score(pod, state, snap, idx)
            best = total.max()
            ties = np.flatnonzero(total == best)
            pick = int(ties[0] if len(ties) == 1 else ties[int(self.rng.integers(len(ties)))])
            chosen = int(idx[pick])
            weights = self.profile.score_weights
            for name, value in parts.items():
                raw = value if isinstance(value, int) else int(value[pick])
                scores[name] = raw * weights[name]
        return CycleResult(snap.names[chosen], len(feasible), diag, state, scores=scores)

    def reserve(self, pod: PodInfo, result: CycleResult, snap: NodeSnapshot) -> str | None:
        """Run the Reserve hooks on the chosen node; on a refusal, the ones that already
        reserved are undone and the reason is returned."""
        assert result.node is not None
        for i, plugin in enumerate(self.reservers):
            refused = plugin.reserve(pod, result.state, snap, result.node)
            if refused:
                for done in reversed(self.reservers[: i + 1]):
                    done.unreserve(pod, result.state, snap, result.node)
                return refused
        result.numa = result.state.get(NUMA_RESERVATION)
        result.gpu = result.state.get(GPU_RESERVATION)
        result.nic = result.state.get(NIC_RESERVATION)
        result.vf = result.state.get(VF_RESERVATION)
        notes = result.state.get(BIND_ANNOTATIONS)
        result.annotations = dict(notes) if notes is not None else {}
        return None

    def unreserve(self, pod: PodInfo, result: CycleResult, snap: NodeSnapshot) -> None:
        if result.node is None:
            return
        for plugin in reversed(self.reservers):
            plugin.unreserve(pod, result.state, snap, result.node)
