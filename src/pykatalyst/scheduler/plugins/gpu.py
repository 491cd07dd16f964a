"""GPUShare: pods that ask for GPUs (Katalyst's `nvidia.com/gpu: N` + `gpu_memory: M`)
placed card by card, from the per-card cache the snapshot builds out of the CNRs' GPU
zones and the pods it has assumed.

* PreFilter: a request no node can honour (fractional cards, memory on no card, a share
  larger than every card, more cards than any node has, a model no card is) keeps the
  pod Pending with that reason.
* Filter: N healthy cards of an allowed model with M/N units free each; for a NUMA-bound
  pod (dedicated_cores with numa_binding) within one NUMA node, or one socket when N is
  more than a NUMA node has.
* Score: the profile's `policy` (see `GPUShareArgs`, docs/scheduler.md "GPUs").
* Reserve: the cards, in allocation order, into `gpu_selection_result` (written on the pod
  before its Binding) and into the snapshot, so the next pod sees them taken.

A pod that also asks an SR-IOV VF (`sriov_nic: 1`, with SriovVF in the profile) gets cards
and VF as one pair (topology/joint.py): one PCIe switch, else one NUMA node, else the
node, as its `gpu_rdma_affinity` (or Koordinator's `device-joint-allocate`) allows. The
filter drops nodes whose closest pair is too far for a required affinity; the score ranks
nodes by their closest pair first (`rdmaPairScoring`); Reserve writes the VF beside the
cards (`sriov_vf_result`, and both reasons name the switch).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Final

import numpy as np
from pydantic import BaseModel

from pykatalyst.api import names
from pykatalyst.api.gpu import MILLI, GPURequest, format_selection
from pykatalyst.scheduler import registry as reg
from pykatalyst.scheduler.args import GPUShareArgs
from pykatalyst.scheduler.gpufrag import (
    F64,
    RecentMix,
    TaskClass,
    card_deltas,
    node_deltas,
)
from pykatalyst.scheduler.plugins.base import (
    BIND_ANNOTATIONS,
    BOOL,
    I64,
    IDX,
    REQUEUE_RESOURCES,
    CycleState,
    Key,
    Plugin,
    PluginContext,
)
from pykatalyst.scheduler.plugins.resources import least_allocated, most_allocated
from pykatalyst.scheduler.plugins.sriov import (
    VF_RESERVATION,
    joint_of,
    pod_annotations,
    reserved_sockets,
    vf_policy_of,
)
from pykatalyst.scheduler.plugins.topology import NUMA_RESERVATION
from pykatalyst.scheduler.podinfo import PodInfo
from pykatalyst.scheduler.snapshot import CPU, I32, MEMORY, GPUReservation, NodeSnapshot
from pykatalyst.topology.joint import (
    LEVEL_NODE,
    LEVEL_NONE,
    LEVEL_NUMA,
    Cards,
    JointAsk,
    Pair,
    best_pair,
)
from pykatalyst.topology.vf import vf_candidates

MAX: Final = reg.MAX_NODE_SCORE
GPU_RESERVATION: Final = Key[GPUReservation]("GPUShare/reservation")
_CARDS: Final = Key["_Cards"]("GPUShare/cards")
_JOINT: Final = Key["JointAsk | None"]("GPUShare/joint")
_PAIRED: Final = Key[str]("GPUShare/pairedVF")

REASON_NO_ZONES: Final = "node(s) report no GPU cards in their CNR"
REASON_MODEL: Final = "node(s) had no GPU card of the requested model"
REASON_CARDS: Final = "node(s) had too few GPU cards with enough memory free"
REASON_NUMA: Final = "node(s) had too few GPU cards with enough memory free in one NUMA node"
REASON_PAIR_SWITCH: Final = "node(s) had no free GPU cards and RDMA VF under one PCIe switch"
REASON_PAIR_NUMA: Final = "node(s) had no free GPU cards and RDMA VF in one NUMA node"


@dataclass(slots=True)
class _Cards:
    """One GPU pod against every node's cards."""

    ok: BOOL  # (cards, nodes): the card can take the pod's share, of an allowed model
    model_ok: BOOL  # (cards, nodes)
    fits: BOOL  # per node
    numa_fits: BOOL  # per node: within the NUMA rule (all True for pods not NUMA-bound)
    zones: BOOL  # per node: the CNR reports cards
    passes: BOOL  # per node: what the filter answers
    # per node, for a pod pairing cards with a VF: the closest pair's level (LEVEL_NONE
    # where not judged: no free VF or too few cards), and whether it is close enough
    pair: I64 | None = None
    pair_ok: BOOL | None = None


def _units(milli: int) -> str:
    return f"{milli / MILLI:g}"


def _wanted_models(pod: PodInfo, label: str) -> frozenset[str] | None:
    """The models a pod allows (its nodeSelector or required node-affinity `In` terms on
    `label`); None: any."""
    wanted = pod.node_selector.get(label)
    if wanted is not None:
        return frozenset([wanted])
    if not pod.required_terms:
        return None
    values: set[str] = set()
    for term in pod.required_terms:
        exprs = [e for e in term.get("matchExpressions") or [] if e.get("key") == label]
        ins = [e for e in exprs if e.get("operator") == "In"]
        if not ins:
            return None  # this term allows any model
        values.update(str(v) for e in ins for v in e.get("values") or [])
    return frozenset(values)


def group_ids(snap: NodeSnapshot, slot: int, numa: bool) -> I64:
    """Per card of the node: the NUMA node (or socket) it sits on."""
    k = int(snap.gpu_count[slot])
    src = snap.gpu_numa if numa else snap.gpu_socket
    return np.asarray(src[:k, slot], np.int64)


def _best_in_groups(ok: BOOL, groups: I64, need: int) -> BOOL:
    """Per node: some group (rows: card -> group id) has `need` usable cards."""
    out = np.zeros(ok.shape[1], np.bool_)
    for g in np.unique(groups[groups >= 0]).tolist():
        out |= (ok & (groups == g)).sum(axis=0) >= need
    return out


class GPUShare(Plugin):
    name: ClassVar[str] = names.PLUGIN_GPU_SHARE
    requeue = REQUEUE_RESOURCES

    def __init__(self, args: BaseModel | None, ctx: PluginContext) -> None:
        super().__init__(args, ctx)
        assert isinstance(args, GPUShareArgs)
        self.policy = args.policy
        self.card_policy = args.cardPolicy or _CARD_POLICY[args.policy]
        self.model_label = args.modelLabel
        self.tie_break = args.fgdTieBreak
        self.host_rows = [CPU] if args.fgdHostResources == "cpu" else [CPU, MEMORY]
        self.pair_scoring = args.rdmaPairScoring
        self.rng = np.random.default_rng(args.seed)
        self.mix = RecentMix(args.taskMixWindow, args.taskMixCoverage / 100)
        self._seen: OrderedDict[str, None] = OrderedDict()

    # --- pre-filter -----------------------------------------------------------------------

    def pre_filter(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> str | None:
        req = pod.gpu
        if req.problem:
            return req.problem
        try:
            state[_JOINT] = joint_of(pod, self.ctx)
        except ValueError as exc:
            return str(exc)
        if pod.uid not in self._seen:  # a pod retried while pending counts once
            self._seen[pod.uid] = None
            if len(self._seen) > self.mix.window:
                self._seen.popitem(last=False)
            self.mix.add(task_class(pod))
        if not req.cards or not snap.gpu_z or not snap.n:
            return None
        cap = snap.gpu_cap[:, : snap.n]
        if not req.whole and req.share > int(cap.max()):
            return (
                f"the pod asks {_units(req.share)} {names.RESOURCE_GPU_MEMORY} units per "
                f"card ({req.memory} over {req.cards} card(s)); the largest healthy card has "
                f"{_units(int(cap.max()))}"
            )
        most = int(snap.gpu_count[: snap.n].max())
        if req.cards > most:
            return f"the pod asks {req.cards} GPU cards; no node has more than {most}"
        wanted = _wanted_models(pod, self.model_label)
        if wanted is not None:
            known = set(snap.gpu_model_list) | set(snap.label_values.get(self.model_label, {}))
            if not wanted & known:
                return (
                    f"no GPU card is of model {', '.join(sorted(wanted))} "
                    f"({self.model_label}); models present: {', '.join(sorted(known)) or 'none'}"
                )
        return None

    # --- filter ---------------------------------------------------------------------------

    def _card_models(self, snap: NodeSnapshot, cols: slice | IDX) -> I64:
        """(cards, nodes): each card's model code; the node's label where the card has none."""
        model = np.asarray(snap.gpu_model[:, cols], np.int64)
        codes = snap.label_codes.get(self.model_label)
        if codes is None:
            return model
        table = np.array(
            [snap.gpu_model_code(v) for v in snap.label_value_list[self.model_label]] + [-1],
            np.int64,
        )
        node_model = table[codes[cols]]  # a missing label (-1) reads the trailing -1
        return np.where(model >= 0, model, node_model[None, :])

    def cards(self, pod: PodInfo, snap: NodeSnapshot, cols: slice | IDX | None = None) -> _Cards:
        """Which cards of the nodes `cols` (all by default) can take the pod."""
        cols = slice(0, snap.n) if cols is None else cols
        req = pod.gpu
        cap = snap.gpu_cap[:, cols]
        free = snap.gpu_free[:, cols]
        zones = snap.gpu_count[cols] > 0
        wanted = _wanted_models(pod, self.model_label)
        if wanted is None:
            model_ok = np.ones(cap.shape, np.bool_)
        else:
            codes = [snap.gpu_models[m] for m in wanted if m in snap.gpu_models]
            model_ok = np.isin(self._card_models(snap, cols), codes)
        usable = (cap > 0) & model_ok
        ok = usable & (free >= (cap if req.whole else req.share))
        fits = ok.sum(axis=0) >= req.cards
        numa_fits = np.ones_like(fits)
        if pod.is_dedicated_numa and snap.gpu_z:
            numa_fits = self._numa_fits(ok, snap.gpu_numa[:, cols], snap.gpu_socket[:, cols], req)
        passes = fits & numa_fits
        if req.whole:
            passes |= ~zones  # whole cards on a node we have no cards of: its device plugin's
        return _Cards(ok, model_ok, fits, numa_fits, zones, passes & (zones | req.whole))

    @staticmethod
    def _numa_fits(ok: BOOL, numa: I32, socket: I32, req: GPURequest) -> BOOL:
        """Katalyst's hint rule: N cards within one NUMA node; within one socket when N is
        more than a NUMA node holds; anywhere when more than a socket holds."""
        numa64 = np.asarray(numa, np.int64)
        sock64 = np.asarray(socket, np.int64)
        present = numa64 >= 0
        per_numa = np.zeros(ok.shape[1], np.int64)
        per_socket = np.zeros(ok.shape[1], np.int64)
        for g in np.unique(numa64[present]).tolist():
            per_numa = np.maximum(per_numa, (present & (numa64 == g)).sum(axis=0))
        for g in np.unique(sock64).tolist():
            per_socket = np.maximum(per_socket, (present & (sock64 == g)).sum(axis=0))
        need = req.cards
        in_numa = _best_in_groups(ok, numa64, need)
        in_socket = _best_in_groups(ok, sock64, need) & (per_numa < need)
        anywhere = (ok.sum(axis=0) >= need) & (per_socket < need)
        out: BOOL = in_numa | in_socket | anywhere
        return out

    def _cards_of(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> _Cards:
        cached = state.get(_CARDS)
        if cached is None:
            cached = self.cards(pod, snap)
            ask = self._joint(pod, state)
            if ask is not None:
                self._pair_levels(pod, snap, cached, ask)
            state[_CARDS] = cached
        return cached

    # --- pairing with an SR-IOV VF ----------------------------------------------------------

    def _joint(self, pod: PodInfo, state: CycleState) -> JointAsk | None:
        if _JOINT in state:
            return state[_JOINT]
        try:
            ask = joint_of(pod, self.ctx)
        except ValueError:
            ask = None  # PreFilter refuses such a pod
        state[_JOINT] = ask
        return ask

    def _pair_levels(self, pod: PodInfo, snap: NodeSnapshot, c: _Cards, ask: JointAsk) -> None:
        """Per node the cards fit on, with a VF free: the closest pair's level; the nodes
        whose closest pair is farther than the pod allows stop passing."""
        n = snap.n
        levels = np.full(n, LEVEL_NONE, np.int64)
        judge = c.passes & c.zones & (snap.vf_free[:n] > 0)
        for slot in np.flatnonzero(judge).tolist():
            pair = self.pair_on(pod, snap, slot, c.ok[:, slot])
            if pair is not None:
                levels[slot] = pair.level
        need = ask.required_level
        ok = (levels >= need) | ~judge  # a node without a free VF: SriovVF says so
        if need > LEVEL_NODE:
            ok &= c.zones  # a required pairing needs the cards in the CNR
        c.pair, c.pair_ok = levels, ok
        c.passes = c.passes & ok

    def pair_on(
        self,
        pod: PodInfo,
        snap: NodeSnapshot,
        slot: int,
        ok: BOOL,
        sockets: set[int] | None = None,
        keys: F64 | None = None,
    ) -> Pair | None:
        """The closest pair of the pod's cards (among `ok`) and a VF it may get on node
        `slot`; None when no VF is free for it or too few cards are."""
        node = snap.names[slot]
        k = int(snap.gpu_count[slot])
        info = snap.gpu_card_info(node)
        qos = pod.qos
        cands = vf_candidates(
            snap.vf_slots(node),
            snap.vf_taken(node),
            vf_policy_of(self.ctx),
            sockets=sockets,
            cpus=pod.request(names.RESOURCE_CPU) // 1000,
            dedicated=qos is not None and qos.is_dedicated,
            annotations=pod_annotations(pod),
        )
        if not cands.vfs:
            return None
        cards = Cards(
            np.asarray(ok[:k], np.bool_),
            np.asarray(snap.gpu_cap[:k, slot] > 0, np.bool_),
            list(info.pcie[:k]) if info is not None else [""] * k,
            group_ids(snap, slot, numa=True),
            keys if keys is not None else np.zeros(k, np.float64),
        )
        return best_pair(cards, cands.vfs, pod.gpu.cards)

    def _pair_reason(self, pod: PodInfo, state: CycleState) -> str:
        ask = self._joint(pod, state)
        numa = ask is not None and ask.required_level == LEVEL_NUMA
        return REASON_PAIR_NUMA if numa else REASON_PAIR_SWITCH

    def filter(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> BOOL | None:
        if not pod.gpu.cards:
            return None
        return self._cards_of(pod, state, snap).passes

    def filter_reasons(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX
    ) -> list[tuple[str, ...]]:
        c = self._cards_of(pod, state, snap)
        out: list[tuple[str, ...]] = []
        model_any = c.model_ok & (snap.gpu_cap[:, : snap.n] > 0)
        for slot in idx.tolist():
            if not c.zones[slot]:
                out.append((REASON_NO_ZONES,))
            elif not model_any[:, slot].any():
                out.append((REASON_MODEL,))
            elif not c.fits[slot]:
                out.append((REASON_CARDS,))
            elif c.pair_ok is not None and c.numa_fits[slot] and not c.pair_ok[slot]:
                out.append((self._pair_reason(pod, state),))
            else:
                out.append((REASON_NUMA,))
        return out

    def reason_counts(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX
    ) -> Counter[str]:
        c = self._cards_of(pod, state, snap)
        usable: BOOL = c.model_ok & (snap.gpu_cap[:, : snap.n] > 0)
        model_any = np.asarray(usable.any(axis=0), np.bool_)[idx]
        zones, fits = c.zones[idx], c.fits[idx]
        pair_bad = np.zeros(len(idx), np.bool_)
        if c.pair_ok is not None:
            pair_bad = c.numa_fits[idx] & ~c.pair_ok[idx]
        counts: Counter[str] = Counter()
        for reason, mask in (
            (REASON_NO_ZONES, ~zones),
            (REASON_MODEL, zones & ~model_any),
            (REASON_CARDS, zones & model_any & ~fits),
            (REASON_NUMA, zones & model_any & fits & ~pair_bad),
            (self._pair_reason(pod, state), zones & model_any & fits & pair_bad),
        ):
            k = int(mask.sum())
            if k:
                counts[reason] = k
        return counts

    # --- score ----------------------------------------------------------------------------

    def score(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX) -> I64 | int:
        base = self._policy_score(pod, state, snap, idx)
        c = state.get(_CARDS)
        if not self.pair_scoring or c is None or c.pair is None:
            return base
        # the closest pair first (one switch 66.., one NUMA node 33.., else 0..), then
        # the policy's score within a third of the range
        tier = np.clip(c.pair[idx], 0, 2)
        return np.asarray(tier * 33 + np.asarray(base, np.int64) * 34 // 100, np.int64)

    def _policy_score(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX
    ) -> I64 | int:
        policy = self.policy
        if policy in ("katalyst", "random"):
            return MAX
        if policy == "fgd":
            deltas = self.fgd_deltas(pod, snap, idx)
            if self.tie_break == "random":
                return _lowest_best(deltas)
            return _ranked(deltas, self._leftover(pod, snap, idx))
        req = pod.gpu
        cap = snap.gpu_cap[:, idx].sum(axis=0)
        used = snap.gpu_used[:, idx].sum(axis=0)
        asked = req.cards * (MILLI * names.DEFAULT_GPU_MEMORY_PER_GPU if req.whole else req.share)
        if policy == "binpack":
            return most_allocated(used + asked, cap) if req.cards else MAX
        if policy == "spread":
            return least_allocated(used + asked, cap) if req.cards else MAX
        return self._baseline(pod, snap, idx)

    def _baseline(self, pod: PodInfo, snap: NodeSnapshot, idx: IDX) -> I64:
        """The published baselines (re-implemented from the FGD paper's simulator)."""
        policy = self.policy
        if policy == "packing":
            return self._packing(pod, snap, idx)
        if policy == "clustering":
            return self._clustering(pod, snap, idx)
        req = pod.gpu
        n = snap.n
        max_cpu = max(int(snap.alloc[CPU, :n].max()), 1)
        max_gpu = max(int(snap.gpu_cap[:, :n].sum(axis=0).max()), 1) if snap.gpu_z else 1
        cpu_req = pod.request("cpu")
        cpu_free = snap.free[CPU, idx]
        gpu_free = np.maximum(snap.gpu_free[:, idx], 0).sum(axis=0)
        asked = req.cards * (MILLI * names.DEFAULT_GPU_MEMORY_PER_GPU if req.whole else req.share)
        if policy == "bestfit":
            # the least free resources left, cpu and GPU weighed alike, over the largest node
            left = (cpu_free - cpu_req) / max_cpu * 0.5 + (gpu_free - asked) / max_gpu * 0.5
            return np.asarray(np.clip((1 - left) * MAX, 0, MAX), np.int64)
        # dotproduct (Tetris): the smallest dot product of the free and asked vectors
        cap = np.maximum(snap.gpu_cap[:, idx].sum(axis=0), 1)
        dot = cpu_req / max_cpu * (cpu_free / max_cpu) + asked / cap * (gpu_free / cap)
        return _lowest_best(np.asarray(dot, np.float64))

    def _host(self, pod: PodInfo) -> I64:
        """The pod's request of the host resources FGD's fit check counts."""
        amounts = [pod.request("cpu"), pod.request("memory")]
        return np.array(amounts[: len(self.host_rows)], np.int64)

    @staticmethod
    def _leftover(pod: PodInfo, snap: NodeSnapshot, idx: IDX) -> F64:
        """Per node: the cpu and GPU it would have left, each over the largest node's,
        averaged (0..1): best fit's measure, FGD's tie-break."""
        n = snap.n
        req = pod.gpu
        max_cpu = max(int(snap.alloc[CPU, :n].max()), 1)
        max_gpu = max(int(snap.gpu_cap[:, :n].sum(axis=0).max()), 1) if snap.gpu_z else 1
        gpu_free = np.maximum(snap.gpu_free[:, idx], 0).sum(axis=0)
        asked = req.cards * (MILLI * names.DEFAULT_GPU_MEMORY_PER_GPU if req.whole else req.share)
        cpu_left = snap.free[CPU, idx] - pod.request("cpu")
        return np.asarray(cpu_left / max_cpu * 0.5 + (gpu_free - asked) / max_gpu * 0.5)

    def _packing(self, pod: PodInfo, snap: NodeSnapshot, idx: IDX) -> I64:
        """GPU packing: cards already in use first (50..100, the fuller the better), then
        idle cards of a node in use (33..50), then idle nodes (0..33)."""
        req = pod.gpu
        if not req.cards:
            return np.zeros(len(idx), np.int64)
        cap, free = snap.gpu_cap[:, idx], snap.gpu_free[:, idx]
        usable = cap > 0
        idle = usable & (free >= cap)
        idle_n = idle.sum(axis=0)
        all_idle = idle_n == usable.sum(axis=0)
        if req.whole:
            shared_left = np.full(len(idx), np.inf)
        else:
            used_fit = usable & ~idle & (free >= req.share)
            enough = used_fit.sum(axis=0) >= req.cards
            left = np.where(used_fit, free * 100 // np.maximum(cap, 1), 10**6)
            best = np.sort(left, axis=0)[: req.cards].sum(axis=0)
            shared_left = np.where(enough, best, np.inf)
        case1 = np.maximum(MAX - shared_left / 10, MAX // 2)
        case2 = np.maximum(MAX // 2 - np.minimum(req.cards, idle_n), MAX // 3)
        case3 = np.maximum(MAX // 3 - idle_n, idle_n)
        out = np.where(np.isfinite(shared_left), case1, np.where(all_idle, case3, case2))
        return np.asarray(out, np.int64)

    def _clustering(self, pod: PodInfo, snap: NodeSnapshot, idx: IDX) -> I64:
        """GPU clustering: nodes running only pods of the pod's GPU request first
        (75..100), then nodes running some (50..75), idle nodes (25..50), the rest
        (0..25); within a tier the fuller node first."""
        req = pod.gpu
        if not req.cards:
            return np.zeros(len(idx), np.int64)
        kind = (req.cards, req.share)
        n = snap.n
        max_gpu = max(int(snap.gpu_cap[:, :n].sum(axis=0).max()), 1)
        left = np.maximum(snap.gpu_free[:, idx], 0).sum(axis=0)
        fill = (MAX // 4) * (max_gpu - left) // max_gpu
        tier = np.zeros(len(idx), np.int64)
        for i, slot in enumerate(idx.tolist()):
            kinds = {
                (len(r.gpu.ids), r.gpu.share)
                for r in snap.pods_on(snap.names[slot])
                if r.gpu is not None
            }
            if kind in kinds:
                tier[i] = 3 if len(kinds) == 1 else 2
            elif not kinds:
                tier[i] = 1
        return np.asarray(tier * (MAX // 4) + fill, np.int64)

    def fgd_deltas(self, pod: PodInfo, snap: NodeSnapshot, idx: IDX) -> F64:
        """Per node of `idx`: how much the pod grows the expected fragmentation there,
        on its best cards (a share asked of several cards: the sum of each card's own
        growth, an approximation)."""
        req = pod.gpu
        return node_deltas(
            snap.gpu_free[:, idx],
            snap.gpu_cap[:, idx],
            snap.free[self.host_rows][:, idx],
            self.mix.mix(),
            self._host(pod),
            req.cards,
            req.share,
        )

    # --- reserve --------------------------------------------------------------------------

    def reserve(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, node: str) -> str | None:
        req = pod.gpu
        slot = snap.index.get(node)
        if not req.cards or slot is None or not snap.gpu_count[slot]:
            return None
        col = np.array([slot], np.intp)
        c = self.cards(pod, snap, col)
        ok = c.ok[: int(snap.gpu_count[slot]), 0]
        picked, why = self.choose(pod, state, snap, slot, ok)
        if picked is None:
            return why  # taken since the filter (the extender reserves at bind time)
        ids = snap.gpu_card_ids(node)
        chosen = tuple(ids[i] for i in picked)
        state[GPU_RESERVATION] = GPUReservation(chosen, req.share)
        notes = state.setdefault(BIND_ANNOTATIONS, {})
        notes[names.GPU_SELECTION_RESULT_ANNOTATION] = format_selection(chosen)
        notes[names.GPU_SELECTION_REASON_ANNOTATION] = why
        return None

    def unreserve(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, node: str) -> None:
        state.pop(GPU_RESERVATION, None)
        notes = state.get(BIND_ANNOTATIONS)
        if notes is not None:
            notes.pop(names.GPU_SELECTION_RESULT_ANNOTATION, None)
            notes.pop(names.GPU_SELECTION_REASON_ANNOTATION, None)
        if state.pop(_PAIRED, None) is not None:
            state.pop(VF_RESERVATION, None)
            if notes is not None:
                notes.pop(names.SRIOV_VF_RESULT_ANNOTATION, None)
                notes.pop(names.SRIOV_VF_REASON_ANNOTATION, None)

    def card_keys(self, pod: PodInfo, snap: NodeSnapshot, slot: int) -> F64:
        """Per card of the node, lower first: the order the card policy takes them in."""
        k = int(snap.gpu_count[slot])
        free = snap.gpu_free[:k, slot].astype(np.float64)
        policy = self.card_policy
        if policy == "spread":
            return -free
        if policy == "random":
            return np.asarray(self.rng.random(k), np.float64)
        if policy == "fgd" and not pod.gpu.whole:
            col = np.array([slot], np.intp)
            mix = self.mix.mix()
            cap, host_free = snap.gpu_cap[:k][:, col], snap.free[self.host_rows][:, col]
            d = card_deltas(
                snap.gpu_free[:k][:, col], cap, host_free, mix, self._host(pod), pod.gpu.share
            )
            return np.asarray(d[:, 0], np.float64)
        return free  # best fit: the least free card that holds the share

    def choose(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, slot: int, ok: BOOL
    ) -> tuple[list[int] | None, str]:
        """The cards to take on node `slot` (positions, in allocation order) and why; None
        and the reason when the node cannot take the pod any more."""
        need = pod.gpu.cards
        keys = self.card_keys(pod, snap, slot)
        numa = group_ids(snap, slot, numa=True)
        socket = group_ids(snap, slot, numa=False)
        allowed = ok.copy()
        where = "the node"
        ask = self._joint(pod, state)
        res = state.get(NUMA_RESERVATION)
        if pod.is_dedicated_numa and res is not None:
            in_set = np.isin(numa, res.numa_ids)
            sockets = np.unique(socket[in_set])
            allowed &= in_set if (ok & in_set).sum() >= need else np.isin(socket, sockets)
            where = f"NUMA {','.join(map(str, res.numa_ids))} (the pod's NUMA binding)"
        elif pod.is_dedicated_numa or (self.card_policy == "katalyst" and ask is None):
            group = _affine_group(allowed, numa, socket, need, keys, snap, slot)
            if group is None and pod.is_dedicated_numa:
                return None, REASON_NUMA.replace("node(s) had", "the node has")
            if group is not None:
                allowed &= group[0]
                where = group[1]
        if allowed.sum() < need:
            return None, REASON_CARDS.replace("node(s) had", "the node has")
        if ask is not None and snap.vf_slots(snap.names[slot]):
            return self._choose_pair(pod, state, snap, slot, allowed, keys, where, ask)
        order = np.lexsort((np.arange(len(keys)), keys))
        picked = [int(i) for i in order if allowed[i]][:need]
        return picked, self._why(pod, snap, slot, picked, where)

    def _choose_pair(
        self,
        pod: PodInfo,
        state: CycleState,
        snap: NodeSnapshot,
        slot: int,
        allowed: BOOL,
        keys: F64,
        where: str,
        ask: JointAsk,
    ) -> tuple[list[int] | None, str]:
        """The cards and the VF as one pair (the VF into the cycle state and the pod's
        sriov_vf_result); None and why when no pair the pod accepts is free."""
        sockets = reserved_sockets(pod, state, snap, slot)
        pair = self.pair_on(pod, snap, slot, allowed, sockets, keys)
        if pair is None:
            return None, f"the node has no free RDMA-capable VF for the pod's cards ({where})"
        if pair.level < ask.required_level:
            reason = self._pair_reason(pod, state).replace("node(s) had", "the node has")
            return None, f"{reason} ({ask.source} {ask.mode})"
        ids = snap.gpu_card_ids(snap.names[slot])
        told = f"{ask.source} {ask.mode}" if ask.source else f"{ask.mode} (the default)"
        paired = f"paired ({told}): {pair.describe(ids)}"
        state[VF_RESERVATION] = pair.vf.id
        state[_PAIRED] = pair.vf.id
        notes = state.setdefault(BIND_ANNOTATIONS, {})
        notes[names.SRIOV_VF_RESULT_ANNOTATION] = pair.vf.id
        notes[names.SRIOV_VF_REASON_ANNOTATION] = paired
        picked = list(pair.cards)
        return picked, f"{self._why(pod, snap, slot, picked, where)}; {paired}"

    def _why(
        self, pod: PodInfo, snap: NodeSnapshot, slot: int, picked: Sequence[int], where: str
    ) -> str:
        ids = snap.gpu_card_ids(snap.names[slot])
        cards = ", ".join(
            f"{ids[i]} ({_units(int(snap.gpu_free[i, slot]))} of "
            f"{_units(int(snap.gpu_cap[i, slot]))} units free)"
            for i in picked
        )
        rule = _CARD_RULE[self.card_policy]
        share = "whole cards" if pod.gpu.whole else f"{_units(pod.gpu.share)} units per card"
        return f"policy {self.policy}: {share} in {where}; {rule}: {cards}"


_CARD_POLICY: Final = {
    "katalyst": "katalyst",
    "binpack": "binpack",
    "spread": "spread",
    "fgd": "fgd",
    "random": "random",
    "bestfit": "binpack",
    "dotproduct": "binpack",
    "packing": "binpack",
    "clustering": "binpack",
}
_CARD_RULE: Final = {
    "katalyst": "the least free card that holds the share first (Katalyst's best fit)",
    "binpack": "the least free card that holds the share first",
    "spread": "the most free card first",
    "fgd": "the card that least grows the expected fragmentation first",
    "random": "cards at random",
}


def _affine_group(
    ok: BOOL,
    numa: I64,
    socket: I64,
    need: int,
    keys: F64,
    snap: NodeSnapshot,
    slot: int,
) -> tuple[BOOL, str] | None:
    """Katalyst's NUMA affinity: the NUMA node that holds `need` usable cards and has the
    most card memory in use (packing); else such a socket; None when neither does."""
    k = len(ok)
    used = snap.gpu_used[:k, slot]
    for ids, label in ((numa, "NUMA"), (socket, "socket")):
        best: tuple[int, int] | None = None
        for g in np.unique(ids[ids >= 0]).tolist():
            member = ids == g
            if (ok & member).sum() >= need:
                load = int(used[member].sum())
                if best is None or load > best[1]:
                    best = (int(g), load)
        if best is not None:
            return ids == best[0], f"{label} {best[0]} (the most used one that holds the pod)"
    return None


def _lowest_best(values: F64) -> I64:
    """0..100, 100 for the lowest value."""
    finite = np.isfinite(values)
    if not finite.any():
        return np.zeros(len(values), np.int64)
    lo, hi = values[finite].min(), values[finite].max()
    span = hi - lo
    if span <= 0:
        return np.where(finite, MAX, 0).astype(np.int64)
    scaled = MAX - np.rint((values - lo) * MAX / span)
    return np.where(finite, scaled, 0).astype(np.int64)


def _ranked(primary: F64, secondary: F64) -> I64:
    """100 for the lowest `primary` (ties: the lowest `secondary`, 0..1), one less for each
    next distinct value, 0 from the 101st: the order FGD's gradient gives, kept whole
    where a scale to 0..100 would merge near-equal nodes into one random draw."""
    key = np.rint(primary) * 2.0**20 + np.clip(secondary, 0, 1) * (2.0**20 - 1)
    _, rank = np.unique(key, return_inverse=True)
    return np.asarray(np.maximum(MAX - np.asarray(rank).reshape(-1), 0), np.int64)


def _highest_best(values: F64) -> I64:
    return _lowest_best(-values)


def task_class(pod: PodInfo) -> TaskClass:
    req = pod.gpu
    return ((pod.request("cpu"), pod.request("memory")), req.cards, req.share)
