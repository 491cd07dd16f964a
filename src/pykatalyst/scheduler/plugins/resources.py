"""Resource fit and resource scores, native and Katalyst's QoS-aware variants.

The score formulas are kube-scheduler's, in its integer arithmetic (Go truncating
division), evaluated on all candidate nodes at once:

* LeastAllocated: ``(alloc − requested) × 100 / alloc`` per resource (0 when over-full);
* MostAllocated: ``min(requested, alloc) × 100 / alloc``;
* RequestedToCapacityRatio: the user's shape (scores 0..10, scaled ×10) interpolated at
  the utilisation ``requested × 100 / alloc`` (100 when over-full); resources scoring 0 do
  not count, and the weighted mean is rounded;
* a node's score is the weighted mean over the resources it has (alloc > 0), truncated.

BalancedAllocation: ``(1 − std(min(requested/alloc, 1))) × 100`` over the same resources.

QoS-aware variants judge reclaimed_cores pods on the reclaimed resources against the
CNR's reclaimed allocatable; every other pod is judged on native resources.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Final

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel

from pykatalyst.api import names
from pykatalyst.scheduler import registry as reg
from pykatalyst.scheduler.args import (
    NodeResourcesBalancedAllocationArgs,
    NodeResourcesFitArgs,
    QoSAwareNodeResourcesBalancedAllocationArgs,
    QoSAwareNodeResourcesFitArgs,
    RequestedToCapacityRatioParam,
    ResourceSpec,
)
from pykatalyst.scheduler.plugins.base import (
    BOOL,
    I64,
    IDX,
    REQUEUE_RESOURCES,
    CycleState,
    Key,
    Needs,
    Plugin,
    PluginContext,
)
from pykatalyst.scheduler.podinfo import PodInfo
from pykatalyst.scheduler.snapshot import (
    CPU as CPU_ROW,
)
from pykatalyst.scheduler.snapshot import (
    MEMORY as MEMORY_ROW,
)
from pykatalyst.scheduler.snapshot import (
    NONZERO_CPU,
    NONZERO_MEMORY,
    PODS,
    RECLAIMED_CPU,
    RECLAIMED_MEMORY,
    NodeSnapshot,
)

MAX = reg.MAX_NODE_SCORE
_NATIVE_SCORED = (names.RESOURCE_CPU, names.RESOURCE_MEMORY)
_RECLAIMED = frozenset(names.RECLAIMED_RESOURCES)


def go_div(num: I64, den: I64 | int) -> I64:
    """Integer division truncating toward zero, as Go does (numpy floors)."""
    q = np.abs(num) // np.abs(den)
    return np.where((num < 0) != (np.asarray(den) < 0), -q, q)


# --- per-resource scores (vectorised) -----------------------------------------------------


def least_allocated(requested: I64, alloc: I64) -> I64:
    safe = np.where(alloc == 0, 1, alloc)
    score = (alloc - requested) * MAX // safe
    return np.where((alloc == 0) | (requested > alloc), 0, score)


def most_allocated(requested: I64, alloc: I64) -> I64:
    safe = np.where(alloc == 0, 1, alloc)
    return np.where(alloc == 0, 0, np.minimum(requested, alloc) * MAX // safe)


@dataclass(frozen=True, slots=True)
class Shape:
    """A RequestedToCapacityRatio shape with scores already scaled to 0..100."""

    utilization: tuple[int, ...]
    score: tuple[int, ...]

    @classmethod
    def of(cls, param: RequestedToCapacityRatioParam) -> Shape:
        scale = MAX // reg.MAX_CUSTOM_PRIORITY_SCORE
        return cls(
            tuple(p.utilization for p in param.shape), tuple(p.score * scale for p in param.shape)
        )

    def __call__(self, p: I64) -> I64:
        """kube's broken linear function: the first point with utilisation >= p decides."""
        u, s = self.utilization, self.score
        out = np.full(p.shape, s[-1], np.int64)
        for i in range(len(u) - 1, -1, -1):
            if i == 0:
                value: I64 | int = s[0]
            else:
                value = s[i - 1] + go_div((s[i] - s[i - 1]) * (p - u[i - 1]), u[i] - u[i - 1])
            out = np.where(p <= u[i], value, out)
        return out


def rtcr_resource(requested: I64, alloc: I64, shape: Shape) -> I64:
    safe = np.where(alloc == 0, 1, alloc)
    util = np.where((alloc == 0) | (requested > alloc), MAX, requested * MAX // safe)
    return shape(util)


def node_scores(req: I64, alloc: I64, weights: I64, strategy: str, shape: Shape | None) -> I64:
    """The fit plugins' node score from (resources × nodes) requested/allocatable matrices
    and a (resources × 1) weight column; resources a node lacks (alloc 0) do not count."""
    has = alloc != 0
    safe = np.where(has, alloc, 1)
    if strategy == "LeastAllocated":
        per = np.where(req > alloc, 0, (alloc - req) * MAX // safe)
    elif strategy == "MostAllocated":
        per = np.minimum(req, alloc) * MAX // safe
    else:
        assert shape is not None
        util = np.where(~has | (req > alloc), MAX, req * MAX // safe)
        per = shape(util)
        has = has & (per > 0)
    w = weights * has
    total = (per * w).sum(axis=0)
    wsum = w.sum(axis=0)
    if strategy == "RequestedToCapacityRatio":
        safe_w = np.maximum(wsum, 1)
        return np.asarray((2 * total + safe_w) // (2 * safe_w) * (wsum > 0), np.int64)
    return np.asarray(total // np.maximum(wsum, 1), np.int64)


def weighted_node_score(
    requested: Sequence[I64],
    alloc: Sequence[I64],
    weights: Sequence[int],
    strategy: str,
    shape: Shape | None,
) -> I64:
    """`node_scores` over per-resource rows."""
    w = np.asarray(weights, np.int64)[:, None]
    return node_scores(np.vstack(requested), np.vstack(alloc), w, strategy, shape)


def balanced_matrix(req: I64, alloc: I64) -> I64:
    """BalancedAllocation from (resources × nodes) matrices."""
    has = alloc != 0
    frac = np.minimum(req / np.where(has, alloc, 1), 1.0)
    if req.shape[0] == 2:
        # the common cpu+memory case: the std of two fractions is half their distance
        std = np.where(has[0] & has[1], np.abs(frac[0] - frac[1]) / 2, 0.0)
    else:
        count = has.sum(axis=0)
        safe = np.maximum(count, 1)
        mean = (frac * has).sum(axis=0) / safe
        var = (((frac - mean) ** 2) * has).sum(axis=0) / safe
        std = np.where(count >= 2, np.sqrt(var), 0.0)
    return ((1 - std) * MAX).astype(np.int64)


def balanced_score(requested: Sequence[I64], alloc: Sequence[I64]) -> I64:
    return balanced_matrix(np.vstack(requested), np.vstack(alloc))


# --- helpers over the snapshot ------------------------------------------------------------


def _short(resource: str) -> str:
    return resource.rsplit("/", 1)[-1]


def _group(resource: str) -> str:
    return resource.split("/", 1)[0] if "/" in resource else ""


@dataclass(frozen=True, slots=True)
class _Scorer:
    resources: tuple[str, ...]
    weights: tuple[int, ...]
    strategy: str
    shape: Shape | None

    @classmethod
    def of(
        cls,
        specs: Sequence[ResourceSpec],
        strategy: str,
        param: RequestedToCapacityRatioParam | None,
    ) -> _Scorer:
        shape = Shape.of(param) if strategy == "RequestedToCapacityRatio" and param else None
        return cls(tuple(s.name for s in specs), tuple(s.weight for s in specs), strategy, shape)


_Rows = tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], I64, I64]


def _native_rows(
    pod: PodInfo,
    snap: NodeSnapshot,
    resources: Sequence[str],
    weights: Sequence[int],
    use_requested: bool,
) -> _Rows | None:
    """Which rows of `req` and `alloc` a native score reads, the pod's amounts and the
    weights. Extended resources the pod does not ask for are skipped, as kube does."""
    req_rows: list[int] = []
    alloc_rows: list[int] = []
    amounts: list[int] = []
    ws: list[int] = []
    for res, w in zip(resources, weights, strict=True):
        if res == names.RESOURCE_CPU and not use_requested:
            req_row, alloc_row, amount = NONZERO_CPU, CPU_ROW, pod.nonzero_cpu
        elif res == names.RESOURCE_MEMORY and not use_requested:
            req_row, alloc_row, amount = NONZERO_MEMORY, MEMORY_ROW, pod.nonzero_mem
        else:
            amount = pod.request(res)
            if res not in _NATIVE_SCORED and amount == 0:
                continue
            row = snap.resource_row(res)
            req_row = alloc_row = row
        req_rows.append(req_row)
        alloc_rows.append(alloc_row)
        amounts.append(amount)
        ws.append(w)
    if not req_rows:
        return None
    return (
        np.asarray(req_rows, np.intp)[:, None],
        np.asarray(alloc_rows, np.intp)[:, None],
        np.asarray(amounts, np.int64)[:, None],
        np.asarray(ws, np.int64)[:, None],
    )


def _gather(snap: NodeSnapshot, rows: _Rows, idx: IDX) -> tuple[I64, I64]:
    req_rows, alloc_rows, amounts, _ = rows
    return snap.req[req_rows, idx] + amounts, snap.alloc[alloc_rows, idx]


def _reclaimed_rows(
    pod: PodInfo, snap: NodeSnapshot, idx: IDX, resources: Sequence[str], weights: Sequence[int]
) -> tuple[I64, I64, I64] | None:
    req_rows: list[int] = []
    cnr_rows: list[int] = []
    amounts: list[int] = []
    ws: list[int] = []
    for res, w in zip(resources, weights, strict=True):
        if res == names.RECLAIMED_MILLICPU:
            req_rows.append(RECLAIMED_CPU)
            cnr_rows.append(0)
        elif res == names.RECLAIMED_MEMORY:
            req_rows.append(RECLAIMED_MEMORY)
            cnr_rows.append(1)
        else:
            continue
        amounts.append(pod.request(res))
        ws.append(w)
    if not req_rows:
        return None
    rr = np.asarray(req_rows, np.intp)[:, None]
    cr = np.asarray(cnr_rows, np.intp)[:, None]
    req = snap.req[rr, idx] + np.asarray(amounts, np.int64)[:, None]
    return req, snap.rc_alloc[cr, idx], np.asarray(ws, np.int64)[:, None]


# --- native fit ---------------------------------------------------------------------------


class NativeFit:
    """The resource checks of NodeResourcesFit, shared by the QoS-aware plugin."""

    def __init__(
        self, args: NodeResourcesFitArgs, skip_reclaimed: bool, ctx: PluginContext | None = None
    ) -> None:
        self.ignored = frozenset(args.ignoredResources)
        if ctx is not None and names.PLUGIN_GPU_SHARE in ctx.enabled_filters:
            # GPUShare fits GPUs card by card: a node-wide sum of cards means nothing when
            # pods share them
            self.ignored |= {names.RESOURCE_NVIDIA_GPU, names.RESOURCE_GPU_MEMORY}
        if ctx is not None and names.PLUGIN_NIC_BANDWIDTH in ctx.enabled_filters:
            # NICBandwidth fits bandwidth NIC by NIC, from the CNR: a node advertises none
            self.ignored |= {names.RESOURCE_NET_BANDWIDTH}
        if ctx is not None and names.PLUGIN_SRIOV_VF in ctx.enabled_filters:
            # SriovVF fits VFs one by one, from the CNR
            self.ignored |= {names.RESOURCE_SRIOV_NIC}
        self.ignored_groups = args.ignored_groups()
        self.skip_reclaimed = skip_reclaimed

    def checked(self, pod: PodInfo, snap: NodeSnapshot) -> list[tuple[str, int, int]]:
        """(resource, row, request) for each resource the fit checks for this pod."""
        out = []
        for res, value in pod.requests.items():
            if value <= 0 or res == names.RESOURCE_PODS:
                continue
            if res in _RECLAIMED and self.skip_reclaimed:
                continue
            scalar = res not in (
                names.RESOURCE_CPU,
                names.RESOURCE_MEMORY,
                names.RESOURCE_EPHEMERAL_STORAGE,
            )
            if scalar and (res in self.ignored or _group(res) in self.ignored_groups):
                continue
            out.append((res, snap.resource_row(res), value))
        return out

    def mask(
        self, pod: PodInfo, snap: NodeSnapshot, checked: list[tuple[str, int, int]] | None = None
    ) -> BOOL:
        n = snap.n
        if checked is None:
            checked = self.checked(pod, snap)  # may add rows: read snap.free afterwards
        free = snap.free
        ok: BOOL = free[PODS, :n] >= 1
        for _res, row, value in checked:
            ok &= free[row, :n] >= value
        return ok

    def needs(self, pod: PodInfo, snap: NodeSnapshot) -> Needs:
        return Needs(((PODS, 1), *((row, value) for _res, row, value in self.checked(pod, snap))))

    def reason_counts(self, pod: PodInfo, snap: NodeSnapshot, idx: IDX) -> Counter[str]:
        """`reasons` summed over the slots: one numpy count per resource."""
        counts: Counter[str] = Counter()
        too_many = int(np.count_nonzero(snap.req[PODS, idx] >= snap.alloc[PODS, idx]))
        if too_many:
            counts["Too many pods"] = too_many
        for res, row, value in self.checked(pod, snap):
            bad = int(np.count_nonzero(snap.req[row, idx] + value > snap.alloc[row, idx]))
            if bad:
                counts[f"Insufficient {res}"] += bad
        return counts

    def reasons(self, pod: PodInfo, snap: NodeSnapshot, idx: IDX) -> list[list[str]]:
        out: list[list[str]] = [[] for _ in idx]
        too_many = snap.req[PODS, idx] >= snap.alloc[PODS, idx]
        for i in np.flatnonzero(too_many):
            out[i].append("Too many pods")
        order = {names.RESOURCE_CPU: 0, names.RESOURCE_MEMORY: 1}
        order[names.RESOURCE_EPHEMERAL_STORAGE] = 2
        checked = sorted(self.checked(pod, snap), key=lambda t: (order.get(t[0], 3), t[0]))
        for res, row, value in checked:
            short = f"Insufficient {res}"
            bad = snap.req[row, idx] + value > snap.alloc[row, idx]
            for i in np.flatnonzero(bad):
                out[i].append(short)
        return out


# what NodeResourcesFit's and the QoS-aware fit's PreFilter work out for the pod
FIT_CHECKED: Final = Key[list[tuple[str, int, int]]]("NodeResourcesFit/checked")
FIT_SCORE_ROWS: Final = Key["_Rows | None"]("NodeResourcesFit/scoreRows")


class NodeResourcesFit(Plugin):
    name: ClassVar[str] = reg.NODE_RESOURCES_FIT
    requeue = REQUEUE_RESOURCES

    def __init__(self, args: BaseModel | None, ctx: PluginContext) -> None:
        super().__init__(args, ctx)
        assert isinstance(args, NodeResourcesFitArgs)
        # The QoS-aware fit is the authority on reclaimed resources when it filters; and a
        # Node never advertises them, so the native fit would reject every reclaimed pod.
        skip = reg.QOS_FIT in ctx.enabled_filters
        self.fit = NativeFit(args, skip_reclaimed=skip, ctx=ctx)
        self.filtering = reg.NODE_RESOURCES_FIT in ctx.enabled_filters
        strat = args.scoringStrategy
        self.scorer = _Scorer.of(strat.resources, strat.type, strat.requestedToCapacityRatio)

    def pre_filter(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> str | None:
        """The requests the filter checks (kube's preFilterState); none to work out when
        the profile disables this plugin's filter (Katalyst's policies do)."""
        if self.filtering:
            state[FIT_CHECKED] = self.fit.checked(pod, snap)
        return None

    def filter(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> BOOL:
        return self.fit.mask(pod, snap, state.get(FIT_CHECKED))

    def filter_reasons(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX
    ) -> list[tuple[str, ...]]:
        return [tuple(r) for r in self.fit.reasons(pod, snap, idx)]

    def reason_counts(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX
    ) -> Counter[str]:
        return self.fit.reason_counts(pod, snap, idx)

    def needs(self, pod: PodInfo, snap: NodeSnapshot) -> Needs:
        return self.fit.needs(pod, snap)

    def pre_score(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> bool:
        """The rows and amounts the score reads (kube's preScoreState)."""
        sc = self.scorer
        state[FIT_SCORE_ROWS] = _native_rows(pod, snap, sc.resources, sc.weights, False)
        return True

    def score(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX) -> I64 | int:
        if FIT_SCORE_ROWS not in state:
            self.pre_score(pod, state, snap)
        return scores_from_rows(state[FIT_SCORE_ROWS], snap, idx, self.scorer)


def scores_from_rows(
    rows: _Rows | None, snap: NodeSnapshot, idx: IDX, scorer: _Scorer
) -> I64 | int:
    if rows is None:
        return 0
    req, alloc = _gather(snap, rows, idx)
    return node_scores(req, alloc, rows[3], scorer.strategy, scorer.shape)


def native_score(pod: PodInfo, snap: NodeSnapshot, idx: IDX, scorer: _Scorer) -> I64 | int:
    rows = _native_rows(pod, snap, scorer.resources, scorer.weights, False)
    return scores_from_rows(rows, snap, idx, scorer)


class NodeResourcesBalancedAllocation(Plugin):
    name: ClassVar[str] = reg.NODE_RESOURCES_BALANCED_ALLOCATION

    def __init__(self, args: BaseModel | None, ctx: PluginContext) -> None:
        super().__init__(args, ctx)
        assert isinstance(args, NodeResourcesBalancedAllocationArgs)
        self.resources = tuple(r.name for r in args.resources)

    def pre_score(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> bool:
        # A pod asking for none of the resources would always look "balanced" and pile up.
        return any(pod.request(r) > 0 for r in self.resources)

    def score(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX) -> I64 | int:
        rows = _native_rows(pod, snap, self.resources, [1] * len(self.resources), True)
        if rows is None:
            return 0
        return balanced_matrix(*_gather(snap, rows, idx))


# --- Katalyst's QoS-aware plugins ----------------------------------------------------------


QOS_FIT_CHECKED: Final = Key[list[tuple[str, int, int]]]("QoSAwareNodeResourcesFit/checked")


class QoSAwareNodeResourcesFit(Plugin):
    name: ClassVar[str] = reg.QOS_FIT
    requeue = REQUEUE_RESOURCES

    def __init__(self, args: BaseModel | None, ctx: PluginContext) -> None:
        super().__init__(args, ctx)
        assert isinstance(args, QoSAwareNodeResourcesFitArgs)
        native_args = ctx.args.get(reg.NODE_RESOURCES_FIT)
        if not isinstance(native_args, NodeResourcesFitArgs):
            native_args = NodeResourcesFitArgs()
        self.fit = NativeFit(native_args, skip_reclaimed=True, ctx=ctx)
        strat = args.scoringStrategy
        self.native = _Scorer.of(strat.resources, strat.type, strat.requestedToCapacityRatio)
        self.reclaimed = _Scorer.of(
            strat.reclaimedResources, strat.type, strat.reclaimedRequestedToCapacityRatio
        )

    @staticmethod
    def _reclaimed_requests(pod: PodInfo) -> list[tuple[int, int, str]]:
        out = []
        for res, row, col in (
            (names.RECLAIMED_MILLICPU, RECLAIMED_CPU, 0),
            (names.RECLAIMED_MEMORY, RECLAIMED_MEMORY, 1),
        ):
            value = pod.request(res)
            if value > 0:
                out.append((row, col, res))
        return out

    def pre_filter(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> str | None:
        """The native requests the filter checks."""
        state[QOS_FIT_CHECKED] = self.fit.checked(pod, snap)
        return None

    def filter(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> BOOL:
        ok = self.fit.mask(pod, snap, state.get(QOS_FIT_CHECKED))
        if pod.is_reclaimed:
            n = snap.n
            for row, col, res in self._reclaimed_requests(pod):
                ok &= snap.req[row, :n] + pod.request(res) <= snap.rc_alloc[col, :n]
        return ok

    def reserve(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, node: str) -> str | None:
        """A reclaimed pod takes reclaimed capacity the CNR does not show as taken until
        the agent sees the pod. Between the filter and the binding other pods may have
        been charged to the node (the extender's bind comes after kube-scheduler's own
        cycle), so the node is refused here when its reclaimed room is gone."""
        slot = snap.index.get(node)
        if not pod.is_reclaimed or slot is None:
            return None
        for row, col, res in self._reclaimed_requests(pod):
            if snap.req[row, slot] + pod.request(res) > snap.rc_alloc[col, slot]:
                return f"Insufficient {_short(res)}"
        return None

    def filter_reasons(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX
    ) -> list[tuple[str, ...]]:
        out = self.fit.reasons(pod, snap, idx)
        if pod.is_reclaimed:
            for row, col, res in self._reclaimed_requests(pod):
                bad = snap.req[row, idx] + pod.request(res) > snap.rc_alloc[col, idx]
                reason = f"Insufficient {_short(res)}"
                for i in np.flatnonzero(bad):
                    out[i].append(reason)
        return [tuple(r) for r in out]

    def reason_counts(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX
    ) -> Counter[str]:
        counts = self.fit.reason_counts(pod, snap, idx)
        if pod.is_reclaimed:
            for row, col, res in self._reclaimed_requests(pod):
                over = snap.req[row, idx] + pod.request(res) > snap.rc_alloc[col, idx]
                bad = int(np.count_nonzero(over))
                if bad:
                    counts[f"Insufficient {_short(res)}"] += bad
        return counts

    def needs(self, pod: PodInfo, snap: NodeSnapshot) -> Needs:
        native = self.fit.needs(pod, snap)
        if not pod.is_reclaimed:
            return native
        reclaimed = tuple(
            (row, col, pod.request(res)) for row, col, res in self._reclaimed_requests(pod)
        )
        return Needs(native.free, reclaimed)

    def score(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX) -> I64 | int:
        if not pod.is_reclaimed:
            return native_score(pod, snap, idx, self.native)
        sc = self.reclaimed
        got = _reclaimed_rows(pod, snap, idx, sc.resources, sc.weights)
        if got is None:
            return 0
        return node_scores(got[0], got[1], got[2], sc.strategy, sc.shape)


class QoSAwareNodeResourcesBalancedAllocation(Plugin):
    name: ClassVar[str] = reg.QOS_BALANCED

    def __init__(self, args: BaseModel | None, ctx: PluginContext) -> None:
        super().__init__(args, ctx)
        assert isinstance(args, QoSAwareNodeResourcesBalancedAllocationArgs)
        self.resources = tuple(r.name for r in args.resources)
        self.reclaimed = tuple(r.name for r in args.reclaimedResources)

    def score(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX) -> I64 | int:
        if pod.is_reclaimed:
            got = _reclaimed_rows(pod, snap, idx, self.reclaimed, [1] * len(self.reclaimed))
            return balanced_matrix(got[0], got[1]) if got is not None else 0
        rows = _native_rows(pod, snap, self.resources, [1] * len(self.resources), True)
        if rows is None:
            return 0
        return balanced_matrix(*_gather(snap, rows, idx))
