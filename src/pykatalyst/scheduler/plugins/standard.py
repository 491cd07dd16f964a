"""kube-scheduler's standard placement plugins, vectorised over node label codes and taint
rows: NodeUnschedulable, NodeName, TaintToleration, NodeAffinity (with nodeSelector) and
PodTopologySpread's DoNotSchedule constraints."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel

from pykatalyst.api import names
from pykatalyst.cluster.protocol import ApiError
from pykatalyst.cluster.selectors import LabelSelector, label_selector_from_dict
from pykatalyst.scheduler import registry as reg
from pykatalyst.scheduler.args import NodeAffinityArgs
from pykatalyst.scheduler.plugins.base import (
    BOOL,
    I64,
    IDX,
    REQUEUE_NODE,
    STATIC_SCORES,
    CycleState,
    Key,
    Plugin,
    PluginContext,
    normalize_max,
)
from pykatalyst.scheduler.podinfo import PodInfo
from pykatalyst.scheduler.snapshot import NodeSnapshot, Taint

NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"
PREFER_NO_SCHEDULE = "PreferNoSchedule"


def tolerates(toleration: Mapping[str, Any], taint: Taint) -> bool:
    """core/v1 Toleration.ToleratesTaint."""
    key, value, effect = taint
    t_effect = str(toleration.get("effect") or "")
    if t_effect and t_effect != effect:
        return False
    t_key = str(toleration.get("key") or "")
    if t_key and t_key != key:
        return False
    op = str(toleration.get("operator") or "")
    if op in ("", "Equal"):
        return str(toleration.get("value") or "") == value
    return op == "Exists"


def tolerated_any(tolerations: Sequence[Mapping[str, Any]], taint: Taint) -> bool:
    return any(tolerates(t, taint) for t in tolerations)


class NodeUnschedulable(Plugin):
    name: ClassVar[str] = reg.NODE_UNSCHEDULABLE
    requeue = REQUEUE_NODE
    static_filter = True
    REASON = "node(s) were unschedulable"

    def filter(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> BOOL | None:
        taint = (names.UNSCHEDULABLE_TAINT_KEY, "", NO_SCHEDULE)
        if tolerated_any(pod.tolerations, taint):
            return None
        return ~snap.unschedulable[: snap.n]

    def filter_reasons(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX
    ) -> list[tuple[str, ...]]:
        return [(self.REASON,)] * len(idx)


class NodeName(Plugin):
    name: ClassVar[str] = reg.NODE_NAME
    requeue = REQUEUE_NODE
    REASON = "node(s) didn't match the requested node name"

    def filter(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> BOOL | None:
        if not pod.node_name:
            return None
        ok = np.zeros(snap.n, np.bool_)
        slot = snap.index.get(pod.node_name)
        if slot is not None:
            ok[slot] = True
        return ok

    def filter_reasons(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX
    ) -> list[tuple[str, ...]]:
        return [(self.REASON,)] * len(idx)


_TAINT_COUNTS: Final = Key["I64 | None"]("TaintToleration/preferNoScheduleCounts")


class TaintToleration(Plugin):
    name: ClassVar[str] = reg.TAINT_TOLERATION
    requeue = REQUEUE_NODE
    static_filter = True
    static_score = True

    def _bad_rows(self, pod: PodInfo, snap: NodeSnapshot, effects: tuple[str, ...]) -> list[int]:
        tolerations = pod.tolerations
        if effects == (PREFER_NO_SCHEDULE,):
            tolerations = [
                t for t in tolerations if str(t.get("effect") or "") in ("", PREFER_NO_SCHEDULE)
            ]
        return [
            row
            for row, taint in enumerate(snap.taints)
            if taint[2] in effects and not tolerated_any(tolerations, taint)
        ]

    def static_key(self, pod: PodInfo) -> Hashable:
        # CNR taints apply by QoS level
        return (pod.static_signature, pod.qos.level if pod.qos is not None else "")

    @staticmethod
    def _bad_cnr_rows(pod: PodInfo, snap: NodeSnapshot) -> list[int]:
        """The CNR taints (pykatalyst's addition; Katalyst's scheduler reads none) that
        apply to the pod's QoS level and that it does not tolerate."""
        if pod.qos is None or not snap.cnr_taints:
            return []
        level = pod.qos.level
        return [
            row
            for row, (key, value, effect, qos) in enumerate(snap.cnr_taints)
            if qos == level and not tolerated_any(pod.tolerations, (key, value, effect))
        ]

    def filter(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> BOOL | None:
        rows = self._bad_rows(pod, snap, (NO_SCHEDULE, NO_EXECUTE))
        cnr_rows = self._bad_cnr_rows(pod, snap)
        if not rows and not cnr_rows:
            return None
        hit = np.zeros(snap.n, np.bool_)
        if rows:
            hit |= snap.taint_mat[rows, : snap.n].any(axis=0)
        if cnr_rows:
            hit |= snap.cnr_taint_mat[cnr_rows, : snap.n].any(axis=0)
        return ~hit

    def filter_reasons(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX
    ) -> list[tuple[str, ...]]:
        bad = {snap.taints[r] for r in self._bad_rows(pod, snap, (NO_SCHEDULE, NO_EXECUTE))}
        bad_cnr = {snap.cnr_taints[r] for r in self._bad_cnr_rows(pod, snap)}
        out: list[tuple[str, ...]] = []
        for slot in idx:
            taint = next((t for t in snap.node_taints[slot] if t in bad), None)
            on_cnr = next((t for t in snap.cnr_taints_on(int(slot)) if t in bad_cnr), None)
            if taint is not None:
                out.append((f"node(s) had untolerated taint {{{taint[0]}: {taint[1]}}}",))
            elif on_cnr is not None:
                out.append((f"node(s) had untolerated CNR taint {{{on_cnr[0]}: {on_cnr[1]}}}",))
            else:
                out.append(("node(s) had untolerated taint",))
        return out

    def raw_score(self, pod: PodInfo, snap: NodeSnapshot) -> I64 | None:
        rows = self._bad_rows(pod, snap, (PREFER_NO_SCHEDULE,))
        if not rows:
            return None
        counts: I64 = snap.taint_mat[rows, : snap.n].sum(axis=0).astype(np.int64)
        return counts

    def pre_score(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> bool:
        """Per node, the PreferNoSchedule taints the pod does not tolerate."""
        state[_TAINT_COUNTS] = state.get(STATIC_SCORES, {}).get(self.name)
        return True

    def score(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX) -> I64 | int:
        raw = state.get(_TAINT_COUNTS)
        if raw is None:
            return reg.MAX_NODE_SCORE
        return normalize_max(raw[idx], reverse=True)


# --- node selectors -----------------------------------------------------------------------


def _codes(snap: NodeSnapshot, key: str) -> npt.NDArray[np.int32]:
    codes = snap.label_codes.get(key)
    if codes is None:
        return np.full(snap.n, -1, np.int32)
    return codes[: snap.n]


def _value_codes(snap: NodeSnapshot, key: str, values: Sequence[str]) -> list[int]:
    table = snap.label_values.get(key, {})
    return [table[v] for v in values if v in table]


def _int_lut(snap: NodeSnapshot, key: str) -> Any:
    values = snap.label_value_list.get(key, [])
    lut = np.full(len(values) + 1, np.nan)
    for i, v in enumerate(values):
        try:
            lut[i] = int(v)
        except ValueError:
            continue
    return lut


def requirement_mask(snap: NodeSnapshot, expr: Mapping[str, Any]) -> BOOL:
    key = str(expr.get("key", ""))
    op = str(expr.get("operator", ""))
    values = [str(v) for v in expr.get("values") or []]
    codes = _codes(snap, key)
    if op == "In":
        return np.isin(codes, _value_codes(snap, key, values))
    if op == "NotIn":
        return ~np.isin(codes, _value_codes(snap, key, values))
    if op == "Exists":
        return np.asarray(codes >= 0, np.bool_)
    if op == "DoesNotExist":
        return np.asarray(codes < 0, np.bool_)
    if op in ("Gt", "Lt") and len(values) == 1:
        try:
            bound = int(values[0])
        except ValueError:
            return np.zeros(snap.n, np.bool_)
        vals = _int_lut(snap, key)[codes]  # code -1 picks the trailing NaN
        with np.errstate(invalid="ignore"):
            result: BOOL = (vals > bound) if op == "Gt" else (vals < bound)
        return result
    return np.zeros(snap.n, np.bool_)


def field_mask(snap: NodeSnapshot, expr: Mapping[str, Any]) -> BOOL:
    key = str(expr.get("key", ""))
    op = str(expr.get("operator", ""))
    values = [str(v) for v in expr.get("values") or []]
    ok = np.zeros(snap.n, np.bool_)
    if key != "metadata.name" or op not in ("In", "NotIn"):
        return ok
    for v in values:
        slot = snap.index.get(v)
        if slot is not None:
            ok[slot] = True
    return ok if op == "In" else ~ok


def _well_formed(items: Any) -> bool:
    """A list of requirements, each a map whose `values` (if any) is a list: the API
    server refuses anything else, so a term that is not matches no node here."""
    return isinstance(items, list) and all(
        isinstance(e, Mapping) and isinstance(e.get("values") or [], list) for e in items
    )


def term_mask(snap: NodeSnapshot, term: Mapping[str, Any]) -> BOOL:
    if not isinstance(term, Mapping):
        return np.zeros(snap.n, np.bool_)
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if (not exprs and not fields) or not (_well_formed(exprs) and _well_formed(fields)):
        return np.zeros(snap.n, np.bool_)  # an empty (or ill-formed) term matches no node
    ok = np.ones(snap.n, np.bool_)
    for e in exprs:
        ok &= requirement_mask(snap, e)
    for f in fields:
        ok &= field_mask(snap, f)
    return ok


def terms_mask(snap: NodeSnapshot, terms: Sequence[Mapping[str, Any]]) -> BOOL:
    ok = np.zeros(snap.n, np.bool_)
    for t in terms:
        ok |= term_mask(snap, t)
    return ok


def selector_mask(snap: NodeSnapshot, selector: Mapping[str, str]) -> BOOL:
    ok = np.ones(snap.n, np.bool_)
    for key, value in selector.items():
        codes = _codes(snap, key)
        code = snap.label_values.get(key, {}).get(value)
        ok &= codes == (code if code is not None else -2)
    return ok


@dataclass(frozen=True, slots=True)
class _Required:
    """What a node must match: the pod's nodeSelector and required terms, and the
    profile's addedAffinity."""

    selector: Mapping[str, str]
    terms: list[dict[str, Any]] | None
    added: list[dict[str, Any]] | None


_REQUIRED: Final = Key["_Required | None"]("NodeAffinity/required")
_PREFERRED: Final = Key["I64 | None"]("NodeAffinity/preferredWeights")


class NodeAffinity(Plugin):
    name: ClassVar[str] = reg.NODE_AFFINITY
    requeue = REQUEUE_NODE
    static_filter = True
    static_score = True
    REASON = "node(s) didn't match Pod's node affinity/selector"

    def __init__(self, args: BaseModel | None, ctx: PluginContext) -> None:
        super().__init__(args, ctx)
        added = args.addedAffinity if isinstance(args, NodeAffinityArgs) else None
        added = added or {}
        req = added.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
        self.added_terms: list[dict[str, Any]] | None = (
            list(req.get("nodeSelectorTerms") or []) if req else None
        )
        self.added_preferred: list[dict[str, Any]] = list(
            added.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        )

    def _required(self, pod: PodInfo) -> _Required | None:
        if not pod.node_selector and pod.required_terms is None and self.added_terms is None:
            return None
        return _Required(pod.node_selector, pod.required_terms, self.added_terms)

    def pre_filter(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> str | None:
        """What the filter matches nodes against (nothing: every node passes)."""
        state[_REQUIRED] = self._required(pod)
        return None

    def filter(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> BOOL | None:
        req = state[_REQUIRED] if _REQUIRED in state else self._required(pod)
        if req is None:
            return None
        ok = selector_mask(snap, req.selector)
        if req.terms is not None:
            ok &= terms_mask(snap, req.terms)
        if req.added is not None:
            ok &= terms_mask(snap, req.added)
        return ok

    def filter_reasons(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX
    ) -> list[tuple[str, ...]]:
        return [(self.REASON,)] * len(idx)

    def raw_score(self, pod: PodInfo, snap: NodeSnapshot) -> I64 | None:
        terms = [*pod.preferred_terms, *self.added_preferred]
        if not terms:
            return None
        total = np.zeros(snap.n, np.int64)
        for t in terms:
            try:
                weight = int(t.get("weight", 0) or 0)
            except (TypeError, ValueError):
                continue  # the API server refuses such a pod; ignore the term
            pref = t.get("preference") or {}
            if weight:
                total += np.where(term_mask(snap, pref), weight, 0)
        return total

    def pre_score(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> bool:
        """Per node, the summed weights of the preferred terms it matches."""
        state[_PREFERRED] = state.get(STATIC_SCORES, {}).get(self.name)
        return True

    def score(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX) -> I64 | int:
        raw = state.get(_PREFERRED)
        if raw is None:
            return 0
        return normalize_max(raw[idx])


# --- pod topology spread --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Constraint:
    key: str
    max_skew: int
    min_domains: int
    selector: LabelSelector


# the pod's DoNotSchedule constraints, parsed, or why they cannot be
_CONSTRAINTS: Final = Key["list[_Constraint] | str"]("PodTopologySpread/constraints")
_MISSING: Final = Key[BOOL]("PodTopologySpread/missingKey")


class PodTopologySpread(Plugin):
    """The DoNotSchedule constraints (hard spreading). ScheduleAnyway constraints and the
    system default constraints only score upstream; they are not scored here."""

    name: ClassVar[str] = reg.POD_TOPOLOGY_SPREAD

    REASON = "node(s) didn't match pod topology spread constraints"
    MISSING = "node(s) didn't match pod topology spread constraints (missing required label)"

    @staticmethod
    def _parse(pod: PodInfo) -> list[_Constraint] | str:
        out: list[_Constraint] = []
        for c in pod.spread_constraints:
            try:
                selector = label_selector_from_dict(c.get("labelSelector"))
            except ApiError as exc:
                return f"invalid topologySpreadConstraints: {exc.message}"
            out.append(
                _Constraint(
                    str(c.get("topologyKey", "")),
                    int(c.get("maxSkew", 1) or 1),
                    int(c.get("minDomains", 1) or 1),
                    selector,
                )
            )
        return out

    def pre_filter(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> str | None:
        """Parse the pod's constraints once per cycle."""
        state[_CONSTRAINTS] = self._parse(pod)
        return None

    def filter(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> BOOL | None:
        if not pod.spread_constraints:
            return None
        constraints = state.get(_CONSTRAINTS)
        if constraints is None:
            constraints = state[_CONSTRAINTS] = self._parse(pod)
        n = snap.n
        if isinstance(constraints, str):
            return np.zeros(n, np.bool_)
        eligible = selector_mask(snap, pod.node_selector)
        if pod.required_terms is not None:
            eligible &= terms_mask(snap, pod.required_terms)
        ok = np.ones(n, np.bool_)
        missing = np.zeros(n, np.bool_)
        for c in constraints:
            codes = _codes(snap, c.key)
            has_key = codes >= 0
            missing |= ~has_key
            ok &= has_key & (self._skew(pod, snap, c, codes, eligible) <= c.max_skew)
        state[_MISSING] = missing
        return ok

    @staticmethod
    def _skew(
        pod: PodInfo,
        snap: NodeSnapshot,
        c: _Constraint,
        codes: npt.NDArray[np.int32],
        eligible: BOOL,
    ) -> I64:
        has_key = codes >= 0
        ncodes = len(snap.label_value_list.get(c.key, []))
        counts = np.zeros(ncodes + 1, np.int64)
        domain_seen = np.zeros(ncodes + 1, np.bool_)
        domain_seen[codes[eligible & has_key]] = True
        for rec in snap.pods_by_namespace.get(pod.namespace, {}).values():
            if not c.selector.matches(rec.labels):
                continue
            slot = snap.index.get(rec.node)
            if slot is None or not eligible[slot] or codes[slot] < 0:
                continue
            counts[codes[slot]] += 1
        domains = np.flatnonzero(domain_seen[:ncodes])
        if len(domains) < c.min_domains or len(domains) == 0:
            min_match = 0
        else:
            min_match = int(counts[domains].min())
        self_match = 1 if c.selector.matches(pod.labels) else 0
        skew: I64 = counts[np.where(has_key, codes, ncodes)] + self_match - min_match
        return skew

    def pre_score(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> bool:
        return False  # soft spreading is not scored here

    def score(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX) -> I64 | int:
        """kube scores ScheduleAnyway constraints here; pre_score skips every pod, so
        this is never reached."""
        return 0

    def filter_reasons(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX
    ) -> list[tuple[str, ...]]:
        error = state.get(_CONSTRAINTS)
        if isinstance(error, str):
            return [(error,)] * len(idx)
        missing = state.get(_MISSING)
        return [
            (self.MISSING,) if missing is not None and missing[i] else (self.REASON,) for i in idx
        ]
