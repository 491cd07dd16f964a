"""Katalyst's NodeResourceTopology: place NUMA-bound pods where the CNR's NUMA zones can
hold them, the way the node agent will later pin them.

Which pods it judges: under the `dynamic` policy, dedicated_cores pods with numa_binding
(shared pods are elastic and never hold a zone), on SingleNUMANodeContainerLevel and
Numeric nodes; under `native`, Guaranteed pods with a whole number of cpus, on
SingleNUMANode* nodes (Katalyst's handlers). Other nodes, and nodes whose CNR reports no
zones, pass. What a pod asks of the zones is Katalyst's reading, container by container
(`zone_demand`): the main container under `dynamic`; each app container on a zone of its
own at container scope, the effective request at pod scope, under `native`. The node
score is Katalyst's: each container's request against each zone's free amount, the
lowest non-zero zone score, averaged over the containers.

* single NUMA (SingleNUMANode* policies, and Numeric for non-exclusive pods): some zone
  has the request free;
* numeric masks (NumericContainerLevel): a set of zones — `numa_ids` if given, exactly
  `numa_number` zones if given, else exactly the fewest zones whose allocatable holds the
  request (Katalyst's: a larger set is never taken, even when the fewest are busy); a set
  no larger than a socket's zones must stay on one socket;
* exclusive (numa_exclusive): every zone of the set is completely free and the pod takes
  them whole;
* reserve: until the CNR lists the pod, its effective request is charged to every zone of
  the node (Katalyst's), or with `reservedZones: Chosen` to the zones chosen for it;
* used: under `dynamic` what dedicated pods' CNR allocations hold (shared pods are
  elastic), under `native` every allocation (Katalyst reads the CNR unfiltered there).

Zone sets are bitmasks over a node's zone positions, so each candidate set is checked on
every node with a handful of integer array operations.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Final

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel

from pykatalyst.scheduler import registry as reg
from pykatalyst.scheduler.args import NodeResourceTopologyArgs
from pykatalyst.scheduler.plugins.base import (
    BOOL,
    I64,
    IDX,
    REQUEUE_RESOURCES,
    CycleState,
    Key,
    Plugin,
    PluginContext,
)
from pykatalyst.scheduler.plugins.resources import (
    balanced_matrix,
    least_allocated,
    most_allocated,
)
from pykatalyst.scheduler.plugins.zone_demand import Request, ZoneDemand, zone_demand
from pykatalyst.scheduler.podinfo import PodInfo
from pykatalyst.scheduler.snapshot import (
    POLICY_NUMERIC,
    POLICY_SINGLE_NUMA,
    POLICY_SINGLE_NUMA_POD,
    NodeSnapshot,
    NUMAReservation,
)

REASON = "node(s) had no NUMA zone(s) that fit the pod"


@dataclass(slots=True)
class _Eval:
    ok: BOOL  # per slot (all nodes)
    managed: BOOL
    score: I64
    choice: I64  # per slot: index into combos, -1 when none
    combos: list[tuple[int, ...]]
    exclusive: bool


@dataclass(frozen=True, slots=True)
class _Zones:
    """One pod against the NUMA zones of the nodes evaluated: what it asks for, and per
    zone and node the allocatable and used cpu and memory, whether the zone exists and
    whether it is wholly free."""

    managed: BOOL  # per node: judged by this plugin's policy, with zones
    req_cpu: int
    req_mem: int
    exclusive: bool
    numa_ids: tuple[int, ...] | None
    numa_number: int | None
    numeric: BOOL
    alloc_c: I64
    alloc_m: I64
    used_c: I64
    used_m: I64
    present: BOOL
    whole: BOOL
    # native policy: each app container placed on a zone in turn on the container-level
    # nodes (`container_level`, per node)
    containers: tuple[Request, ...] = ()
    container_level: BOOL | None = None


def _set_sizes(zs: _Zones, z: int) -> tuple[list[int], I64 | None]:
    """The sizes of the zone sets to try, smallest first, and for an exclusive pod the
    one size each node accepts (`fewest_zones`; Katalyst's numeric handler takes only
    sets of the fewest zones that can hold the pod, never a larger one)."""
    if zs.numa_ids is not None:
        return [len(zs.numa_ids)], None
    if zs.numa_number is not None and zs.numa_number > 1:
        return [zs.numa_number], None
    if zs.exclusive:
        need = fewest_zones(((zs.alloc_c, zs.req_cpu), (zs.alloc_m, zs.req_mem)), zs.present)
        return list(range(1, z + 1)), need
    return [1], None


def fewest_zones(asked: Sequence[tuple[I64, int]], present: BOOL) -> I64:
    """Per node (column): the fewest of its zones whose allocatable, largest first, holds
    each amount asked (`asked`: per resource the zones' allocatable and the amount, in
    the same unit; an amount of 0 is not counted); all its zones when they cannot."""
    count = present.sum(axis=0).astype(np.int64)
    need = np.ones(present.shape[1], np.int64)
    for alloc, amount in asked:
        if amount <= 0:
            continue
        largest_first = -np.sort(-np.where(present, alloc, 0), axis=0)
        enough = np.cumsum(largest_first, axis=0) >= amount
        need = np.maximum(need, np.where(enough.any(axis=0), enough.argmax(axis=0) + 1, count))
    return need


_EVAL: Final = Key[_Eval]("NodeResourceTopology/evaluation")
_NONE: Final = np.iinfo(np.int64).max
MAX: Final = reg.MAX_NODE_SCORE


def _lowest_nonzero(scores: I64) -> I64:
    """Per node (column): the lowest score above 0, or 0 when none is."""
    if scores.shape[0] == 0:
        return np.zeros(scores.shape[1], np.int64)
    low = np.where(scores > 0, scores, _NONE).min(axis=0)
    return np.asarray(np.where(low == _NONE, 0, low), np.int64)


def _katalyst_balanced(parts: list[tuple[int, I64]]) -> I64:
    """(1 − variance of request/free over the resources) × 100, 0 when the request is
    larger than what is free; the variance is the sample variance (n − 1)."""
    fracs = [np.where(cap == 0, 1.0, r / np.where(cap == 0, 1, cap)) for r, cap in parts]
    stacked = np.stack(fracs)
    over = (stacked > 1).any(axis=0)
    var = stacked.var(axis=0, ddof=1) if len(parts) > 1 else np.zeros(stacked.shape[1:])
    return np.where(over, 0, ((1 - var) * MAX).astype(np.int64))


# the zones Reserve chose: the scheduler charges them with the pod
NUMA_RESERVATION: Final = Key[NUMAReservation]("NodeResourceTopology/reservation")


def _combos(z: int, sizes: Sequence[int]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = []
    for size in sizes:
        if 1 <= size <= z:
            out.extend(itertools.combinations(range(z), size))
    return out


class NodeResourceTopology(Plugin):
    name: ClassVar[str] = reg.NODE_RESOURCE_TOPOLOGY
    requeue = REQUEUE_RESOURCES

    def __init__(self, args: BaseModel | None, ctx: PluginContext) -> None:
        super().__init__(args, ctx)
        assert isinstance(args, NodeResourceTopologyArgs)
        self.policy = args.resourcePluginPolicy
        self.strategy = args.scoringStrategy.type
        self.weights = {r.name: r.weight for r in args.scoringStrategy.resources}
        self.aligned = tuple(args.alignedResources)
        self.reserved_zones = args.reservedZones

    # --- which pods -----------------------------------------------------------------------

    def applies(self, pod: PodInfo) -> bool:
        if self.policy == "dynamic":
            return pod.is_dedicated_numa
        return pod.k8s_qos_class == "Guaranteed" and zone_demand(pod.raw).whole_cpus

    def judged(self, policy: npt.NDArray[np.int8]) -> BOOL:
        """The nodes whose topology policy (`policy`, per node) this plugin's policy
        judges, as Katalyst's handlers do: the native policy only SingleNUMANode* nodes
        (the kubelet's topology manager), the dynamic policy SingleNUMANodeContainerLevel
        and Numeric nodes."""
        if self.policy == "native":
            result: BOOL = (policy == POLICY_SINGLE_NUMA) | (policy == POLICY_SINGLE_NUMA_POD)
        else:
            result = (policy == POLICY_SINGLE_NUMA) | (policy == POLICY_NUMERIC)
        return result

    def _request(self, demand: ZoneDemand) -> Request:
        """What must fit in one zone set: under `dynamic` the main container's request
        (its cpus in whole cores, as the agent hands them out), under `native` the pod's
        effective request (pod scope; at container scope the app containers are placed
        one by one, `_place_containers`)."""
        if self.policy == "dynamic":
            cpu, mem = demand.main_request
            cpu = -(-cpu // 1000) * 1000
        else:
            cpu, mem = demand.effective
        return self._aligned(cpu, mem)

    def _used(self, snap: NodeSnapshot) -> tuple[I64, I64]:
        """The zones' used cpu and memory as this policy counts them: under `dynamic` only
        dedicated pods' allocations (shared pods are elastic), under `native` every
        allocation (Katalyst's native handlers read the CNR unfiltered)."""
        if self.policy == "native":
            return snap.numa_cpu_used_all, snap.numa_mem_used_all
        return snap.numa_cpu_used, snap.numa_mem_used

    def _aligned(self, cpu: int, mem: int) -> Request:
        """The request the zones must hold: under `native` all of it (Katalyst's native
        handlers check every resource asked for; `alignedResources` only makes a resource
        exclusive there), under `dynamic` the aligned resources."""
        if self.policy == "native":
            return cpu, mem
        return (cpu if "cpu" in self.aligned else 0, mem if "memory" in self.aligned else 0)

    # --- evaluation -----------------------------------------------------------------------

    def evaluate(
        self,
        pod: PodInfo,
        snap: NodeSnapshot,
        cols: slice | IDX | None = None,
        ranked: bool = False,
    ) -> _Eval:
        """Which zone sets can hold the pod, on the nodes `cols` (all by default). Only a
        `ranked` evaluation (Reserve's, on the chosen node) ranks the sets by the zone
        strategy to choose one; the filter needs only whether some set fits."""
        if cols is None:
            cols = slice(0, snap.n)
        zs = self._zones(pod, snap, cols)
        z, n = snap.numa_z, len(zs.managed)
        sizes, need = _set_sizes(zs, z)
        combos = _combos(z, [1])
        best = np.full(n, -1, np.int64)
        best_score = np.full(n, -1, np.int64)
        undecided = zs.managed.copy()
        if sizes[0] == 1 and zs.numa_ids is None:
            if z:
                best, best_score, fits = self._one_zone(zs, ranked)
                undecided &= ~fits
            sizes = sizes[1:]
        free_count = zs.whole.sum(axis=0)
        for size in sizes:
            if not undecided.any():
                break
            if zs.exclusive and not (undecided & (free_count >= size)).any():
                break
            # an exclusive pod: on each node only sets of its fewest zones
            cand = undecided if need is None else undecided & (need == size)
            found = self._zone_sets(zs, snap, cols, size, cand, (best, best_score), combos, ranked)
            # fewer zones win: nodes placed at this size are not offered larger sets
            undecided &= ~found
        fits = best >= 0
        if zs.container_level is not None:
            placed = self._place_containers(zs, snap, cols)[0]
            fits = np.where(zs.container_level, placed, fits)
        return _Eval(
            ok=~zs.managed | fits,
            managed=zs.managed,
            score=np.where(zs.managed, np.maximum(best_score, 0), 0),
            choice=best,
            combos=combos,
            exclusive=zs.exclusive,
        )

    def _zones(self, pod: PodInfo, snap: NodeSnapshot, cols: slice | IDX) -> _Zones:
        count = snap.numa_count[cols]
        qos = pod.qos
        used_c, used_m = (u[:, cols] for u in self._used(snap))
        present = np.arange(snap.numa_z)[:, None] < count[None, :]
        demand = zone_demand(pod.raw)
        req_cpu, req_mem = self._request(demand)
        containers: tuple[Request, ...] = ()
        level: BOOL | None = None
        if self.policy == "native" and demand.apps:
            # at container scope only the app containers are placed, one by one (init
            # containers are not: Katalyst's handler walks spec.containers alone)
            containers = tuple(self._aligned(c, m) for c, m in demand.apps)
            level = snap.policy[cols] == POLICY_SINGLE_NUMA
        return _Zones(
            managed=self.judged(snap.policy[cols]) & (count > 0),
            req_cpu=req_cpu,
            req_mem=req_mem,
            exclusive=self.policy == "dynamic" and pod.is_numa_exclusive,
            numa_ids=qos.enhancements.numa_ids if qos is not None else None,
            numa_number=qos.enhancements.numa_number if qos is not None else None,
            numeric=snap.policy[cols] == POLICY_NUMERIC,
            alloc_c=snap.numa_cpu_alloc[:, cols],
            alloc_m=snap.numa_mem_alloc[:, cols],
            used_c=used_c,
            used_m=used_m,
            present=present,
            whole=present & (used_c == 0) & (used_m == 0),
            containers=containers,
            container_level=level,
        )

    def _place_containers(
        self, zs: _Zones, snap: NodeSnapshot, cols: slice | IDX
    ) -> tuple[BOOL, I64, I64]:
        """Katalyst's container-scope placement: each container in turn on the
        lowest-numbered zone with its request free, which it then takes. Per node whether
        every container was placed, and per zone and node the cpu and memory they took."""
        free_c, free_m = zs.alloc_c - zs.used_c, zs.alloc_m - zs.used_m
        ids = np.where(zs.present, snap.numa_id[:, cols].astype(np.int64), _NONE)
        took_c, took_m = np.zeros_like(free_c), np.zeros_like(free_m)
        placed = zs.managed.copy()
        cols_n = np.arange(len(placed))
        for cpu, mem in zs.containers:
            # a resource the container does not ask for is not checked (Katalyst's rule)
            fits = zs.present & ((free_c >= cpu) | (cpu == 0)) & ((free_m >= mem) | (mem == 0))
            pick = np.where(fits, ids, _NONE).argmin(axis=0)
            found = fits.any(axis=0)
            placed &= found
            c, m = np.where(found, cpu, 0), np.where(found, mem, 0)
            free_c[pick, cols_n] -= c
            free_m[pick, cols_n] -= m
            took_c[pick, cols_n] += c
            took_m[pick, cols_n] += m
        return placed, took_c, took_m

    def _one_zone(self, zs: _Zones, ranked: bool) -> tuple[I64, I64, BOOL]:
        """One zone: every zone of every node in one set of (zones x nodes) operations;
        per node the zone chosen and its score (-1: none), and whether one fits."""
        alloc_c, alloc_m, used_c, used_m = zs.alloc_c, zs.alloc_m, zs.used_c, zs.used_m
        if zs.exclusive:
            ok = zs.whole & (alloc_c >= zs.req_cpu) & (alloc_m >= zs.req_mem)
            after_c = np.broadcast_to(np.int64(zs.req_cpu), alloc_c.shape)
            after_m = np.broadcast_to(np.int64(zs.req_mem), alloc_m.shape)
        else:
            ok = zs.present & (alloc_c - used_c >= zs.req_cpu) & (alloc_m - used_m >= zs.req_mem)
            after_c, after_m = used_c + zs.req_cpu, used_m + zs.req_mem
        if ranked:
            score = np.where(ok, self._zone_score(after_c, alloc_c, after_m, alloc_m), -1)
        else:
            score = np.where(ok, 0, -1)
        if self.policy == "native":
            # the kubelet's topology manager takes the lowest zone that fits
            pick = ok.argmax(axis=0)
            top = np.take_along_axis(score, pick[None, :], axis=0)[0]
        else:
            pick = score.argmax(axis=0)
            top = score.max(axis=0)
        fits = zs.managed & (top >= 0)
        n = len(fits)
        return (
            np.where(fits, pick, np.full(n, -1, np.int64)),
            np.where(fits, top, np.full(n, -1, np.int64)),
            fits,
        )

    def _zone_sets(
        self,
        zs: _Zones,
        snap: NodeSnapshot,
        cols: slice | IDX,
        size: int,
        undecided: BOOL,
        best: tuple[I64, I64],
        combos: list[tuple[int, ...]],
        ranked: bool,
    ) -> BOOL:
        """Every set of `size` zones on the `undecided` nodes: a better-scoring set that
        fits replaces a node's best (`best`: the choice and its score, updated in place;
        `combos` gets the sets); the nodes where some set fits."""
        choice, best_score = best
        n = len(undecided)
        found = np.zeros(n, np.bool_)
        for combo in itertools.combinations(range(snap.numa_z), size):
            ci = len(combos)
            combos.append(combo)
            bits = sum(1 << p for p in combo)
            ok = undecided & zs.present[combo[-1]]
            if size > 1:
                # a set that a socket could hold must not spread over sockets
                same = (snap.numa_socket_bits[combo[0]][cols] & bits) == bits
                ok &= same | (size > snap.numa_per_socket[cols])
                ok &= zs.numeric  # multi-zone sets exist only under the Numeric policy
            if zs.numa_ids is not None:
                ids = snap.numa_id[:, cols][list(combo)]
                want = np.array(sorted(zs.numa_ids), np.int64)[:, None]
                ok &= (np.sort(ids, axis=0) == want).all(axis=0)
            rows = list(combo)
            sum_alloc_c = zs.alloc_c[rows].sum(axis=0)
            sum_alloc_m = zs.alloc_m[rows].sum(axis=0)
            if zs.exclusive:
                ok &= zs.whole[rows].all(axis=0)
                ok &= (sum_alloc_c >= zs.req_cpu) & (sum_alloc_m >= zs.req_mem)
                after_c = np.full(n, zs.req_cpu, np.int64)
                after_m = np.full(n, zs.req_mem, np.int64)
            else:
                sum_used_c = zs.used_c[rows].sum(axis=0)
                sum_used_m = zs.used_m[rows].sum(axis=0)
                ok &= sum_alloc_c - sum_used_c >= zs.req_cpu
                ok &= sum_alloc_m - sum_used_m >= zs.req_mem
                after_c = sum_used_c + zs.req_cpu
                after_m = sum_used_m + zs.req_mem
            if not ok.any():
                continue
            if ranked:
                score = self._zone_score(after_c, sum_alloc_c, after_m, sum_alloc_m)
            else:
                score = np.zeros(n, np.int64)
            better = ok & (score > best_score)
            choice[better] = ci
            best_score[better] = score[better]
            found |= ok
        return found

    def _zone_score(self, req_c: I64, alloc_c: I64, req_m: I64, alloc_m: I64) -> I64:
        if self.strategy == "BalancedAllocation":
            return balanced_matrix(np.stack([req_c, req_m]), np.stack([alloc_c, alloc_m]))
        fn = least_allocated if self.strategy == "LeastAllocated" else most_allocated
        total = np.zeros(req_c.shape, np.int64)
        wsum = 0
        for res, req, alloc in (("cpu", req_c, alloc_c), ("memory", req_m, alloc_m)):
            w = self.weights.get(res, 0)
            if w:
                total += fn(req, alloc) * w
                wsum += w
        return total // wsum if wsum else total

    def _eval(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> _Eval:
        cached = state.get(_EVAL)
        if cached is not None:
            return cached
        ev = self.evaluate(pod, snap)
        state[_EVAL] = ev
        return ev

    # --- hooks ----------------------------------------------------------------------------

    def filter(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> BOOL | None:
        if not self.applies(pod):
            return None
        return self._eval(pod, state, snap).ok

    def filter_reasons(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX
    ) -> list[tuple[str, ...]]:
        return [(REASON,)] * len(idx)

    def score(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX) -> I64 | int:
        if not self.applies(pod):
            return reg.MAX_NODE_SCORE
        return self.node_scores(pod, snap, idx)

    def node_scores(self, pod: PodInfo, snap: NodeSnapshot, idx: IDX) -> I64:
        """Katalyst's node score, on the nodes `idx`: each container (init containers
        included) scored on its own and the scores averaged (truncated); at pod scope
        (`native` on SingleNUMANodePodLevel nodes) the pod's effective request. A request
        is scored against each zone's free amount (nothing free in a partly used zone for
        an exclusive pod), the lowest non-zero zone score; for an exclusive pod under
        NumericContainerLevel, each set of the fewest zones that could hold it, summed.
        Nodes this plugin does not judge (no zones, another policy) score 0."""
        count = snap.numa_count[idx]
        policy = snap.policy[idx]
        judged = self.judged(policy) & (count > 0)
        demand = zone_demand(pod.raw)
        wanted = [self._scored_request(r) for r in demand.inits + demand.apps]
        # a container asking for nothing is left out (Katalyst divides by zero there)
        reqs = [r for r in wanted if r != (None, None)]
        best = np.zeros(len(idx), np.int64)
        for req in reqs:
            best += self._request_scores(pod, snap, idx, req)
        if reqs:
            best //= len(reqs)
        if self.policy == "native":
            pod_level = policy == POLICY_SINGLE_NUMA_POD
            if pod_level.any():
                whole = self._request_scores(pod, snap, idx, self._scored_request(demand.effective))
                best = np.where(pod_level, whole, best)
        return np.where(judged, best, 0)

    def _request_scores(
        self, pod: PodInfo, snap: NodeSnapshot, idx: IDX, req: tuple[int | None, int | None]
    ) -> I64:
        """One request's score on the nodes `idx` (see `node_scores`)."""
        count = snap.numa_count[idx]
        exclusive = self.policy == "dynamic" and pod.is_numa_exclusive
        alloc = (snap.numa_cpu_alloc[:, idx], snap.numa_mem_alloc[:, idx])
        free = []
        for a, used in zip(alloc, (u[:, idx] for u in self._used(snap)), strict=True):
            free.append(np.where(used == 0, a, 0) if exclusive else a - used)
        present = np.arange(snap.numa_z)[:, None] < count[None, :]
        zone = self._katalyst_zone_score(req, free[0], free[1])
        if self.strategy == "BalancedAllocation":
            zone = np.where(present, zone, 0)  # the others score a missing zone 0 anyway
        best = _lowest_nonzero(zone)
        numeric = snap.policy[idx] == POLICY_NUMERIC
        if exclusive and numeric.any():
            sets = self._fewest_zone_sets(req, alloc, free, present, best)
            best = np.where(numeric, sets, best)
        return best

    def _scored_request(self, req: Request) -> tuple[int | None, int | None]:
        """cpu (in whole cores, rounded up, as Katalyst reads a quantity) and memory the
        score weighs; None for a resource not asked for or not aligned (the native policy
        weighs every resource asked for)."""
        aligned = ("cpu", "memory") if self.policy == "native" else self.aligned
        cpu = req[0] if "cpu" in aligned else 0
        mem = req[1] if "memory" in aligned else 0
        return (-(-cpu // 1000) if cpu else None), (mem if mem else None)

    def _katalyst_zone_score(
        self, req: tuple[int | None, int | None], free_cpu: I64, free_mem: I64
    ) -> I64:
        cores = -(-free_cpu // 1000)
        parts = [
            (r, cap, name)
            for r, cap, name in zip(req, (cores, free_mem), ("cpu", "memory"), strict=True)
            if r is not None
        ]
        if not parts:
            return np.zeros(free_cpu.shape, np.int64)
        if self.strategy == "BalancedAllocation":
            return _katalyst_balanced([(r, cap) for r, cap, _ in parts])
        least = self.strategy == "LeastAllocated"
        total: I64 | None = None
        wsum = 0
        for r, cap, name in parts:
            w = max(self.weights.get(name, 1), 1)
            # r >= 1, so a zone with nothing free (cap <= 0) is one the request exceeds
            safe = np.maximum(cap, r)
            per = ((safe - r) if least else r) * MAX // safe
            if w != 1:
                per *= w
            per[cap < r] = 0
            total = per if total is None else total + per
            wsum += w
        assert total is not None
        return total // wsum if wsum > 1 else total

    def _fewest_zone_sets(
        self,
        req: tuple[int | None, int | None],
        alloc: tuple[I64, I64],
        free: list[I64],
        present: BOOL,
        one_zone: I64,
    ) -> I64:
        """Per node: the lowest non-zero score over the sets of exactly as many zones as
        the request needs by the zones' allocatable (`fewest_zones`, as the filter)."""
        z, n = present.shape
        asked = [(a, (r or 0) * sc) for r, a, sc in zip(req, alloc, (1000, 1), strict=True)]
        need = fewest_zones(asked, present)
        out = np.zeros(n, np.int64)
        for k in np.unique(need).tolist():
            rows = need == k
            if k == 1:
                out = np.where(rows, one_zone, out)  # a set of one zone is that zone
                continue
            best = np.full(n, _NONE, np.int64)
            for combo in itertools.combinations(range(z), int(k)):
                cols = list(combo)
                ok = rows & present[cols].all(axis=0)
                if not ok.any():
                    continue
                score = self._katalyst_zone_score(
                    req, free[0][cols].sum(axis=0), free[1][cols].sum(axis=0)
                )
                best = np.where(ok & (score > 0), np.minimum(best, score), best)
            out = np.where(rows, np.where(best == _NONE, 0, best), out)
        return out

    def reserve(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, node: str) -> str | None:
        if not self.applies(pod):
            return None
        slot = snap.index[node]
        cols = np.array([slot], np.intp)
        ev = self.evaluate(pod, snap, cols, ranked=True)
        if not ev.managed[0]:
            return None
        if not ev.ok[0]:
            # the zones were taken since the filter (the extender binds after kube's cycle)
            return REASON
        if self.reserved_zones == "All":
            state[NUMA_RESERVATION] = self._every_zone(pod, snap, slot, ev.exclusive)
            return None
        zs = self._zones(pod, snap, cols)
        if zs.container_level is not None and bool(zs.container_level[0]):
            _, took_c, took_m = self._place_containers(zs, snap, cols)
            rows = [p for p in range(int(snap.numa_count[slot])) if took_c[p, 0] or took_m[p, 0]]
            ids = tuple(int(snap.numa_id[p, slot]) for p in rows)
            cpu = tuple(int(took_c[p, 0]) for p in rows)
            mem = tuple(int(took_m[p, 0]) for p in rows)
            state[NUMA_RESERVATION] = NUMAReservation(ids, cpu, mem, False)
            return None
        combo = ev.combos[int(ev.choice[0])]
        ids = tuple(int(snap.numa_id[p, slot]) for p in combo)
        if ev.exclusive:
            cpu = tuple(int(snap.numa_cpu_alloc[p, slot]) for p in combo)
            mem = tuple(int(snap.numa_mem_alloc[p, slot]) for p in combo)
        else:
            req_c, req_m = self._request(zone_demand(pod.raw))
            k = len(combo)
            cpu = tuple(req_c // k + (1 if i < req_c % k else 0) for i in range(k))
            mem = tuple(req_m // k + (1 if i < req_m % k else 0) for i in range(k))
        state[NUMA_RESERVATION] = NUMAReservation(ids, cpu, mem, ev.exclusive)
        return None

    def _every_zone(
        self, pod: PodInfo, snap: NodeSnapshot, slot: int, exclusive: bool
    ) -> NUMAReservation:
        """Katalyst's reservation: the pod's effective request charged to every zone of
        the node until the CNR lists the pod; an exclusive pod's aligned requests raised
        to a whole zone (the first zone's), so no zone looks free."""
        z = int(snap.numa_count[slot])
        cpu, mem = zone_demand(pod.raw).effective
        if exclusive:
            if "cpu" in self.aligned:
                cpu = max(cpu, int(snap.numa_cpu_alloc[0, slot]))
            if "memory" in self.aligned:
                mem = max(mem, int(snap.numa_mem_alloc[0, slot]))
        ids = tuple(int(snap.numa_id[p, slot]) for p in range(z))
        return NUMAReservation(ids, (cpu,) * z, (mem,) * z, exclusive)

    def unreserve(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, node: str) -> None:
        state.pop(NUMA_RESERVATION, None)
