"""InterPodAffinity's required terms: pod affinity, pod anti-affinity, and the anti-affinity
of pods already placed, each judged per topology domain (the node label values of the
term's topologyKey) for all nodes at once.

Preferred terms are not scored. Namespace labels are not read: a term with a
namespaceSelector applies to every namespace.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final

import numpy as np
import numpy.typing as npt

from pykatalyst.cluster.protocol import ApiError
from pykatalyst.cluster.selectors import LabelSelector, label_selector_from_dict
from pykatalyst.scheduler import registry as reg
from pykatalyst.scheduler.plugins.base import BOOL, I64, IDX, CycleState, Key, Plugin
from pykatalyst.scheduler.podinfo import PodInfo
from pykatalyst.scheduler.snapshot import NodeSnapshot, PodRecord, required_pod_terms

AFFINITY = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"


@dataclass(frozen=True, slots=True)
class Term:
    selector: LabelSelector
    namespaces: frozenset[str] | None  # None: every namespace
    topology_key: str

    @classmethod
    def of(cls, raw: Mapping[str, Any], own_namespace: str) -> Term:
        selector = label_selector_from_dict(raw.get("labelSelector"))
        listed = frozenset(str(n) for n in raw.get("namespaces") or [])
        if raw.get("namespaceSelector") is not None:
            namespaces: frozenset[str] | None = None
        else:
            namespaces = listed or frozenset({own_namespace})
        return cls(selector, namespaces, str(raw.get("topologyKey", "")))

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        in_ns = self.namespaces is None or namespace in self.namespaces
        return in_ns and self.selector.matches(labels)


@dataclass(frozen=True, slots=True)
class _Terms:
    affinity: list[Term]
    anti: list[Term]


_NO_TERMS: Final = _Terms([], [])
# the pod's required terms, parsed, or why they cannot be; and each node's reason
_TERMS: Final = Key["_Terms | str"]("InterPodAffinity/terms")
_REASONS: Final = Key[npt.NDArray[np.object_]]("InterPodAffinity/reasons")


class InterPodAffinity(Plugin):
    name: ClassVar[str] = reg.INTER_POD_AFFINITY

    def _pods(self, snap: NodeSnapshot, term: Term) -> list[PodRecord]:
        if term.namespaces is None:
            return list(snap.pods.values())
        out: list[PodRecord] = []
        for ns in term.namespaces:
            out.extend(snap.pods_by_namespace.get(ns, {}).values())
        return out

    def _domains(self, snap: NodeSnapshot, key: str, recs: list[PodRecord]) -> BOOL:
        """Per node: whether a pod of `recs` runs in the node's domain of `key`."""
        codes = snap.label_codes.get(key)
        n = snap.n
        if codes is None:
            return np.zeros(n, np.bool_)
        hit = np.zeros(len(snap.label_value_list[key]) + 1, np.bool_)
        for rec in recs:
            slot = snap.index.get(rec.node)
            if slot is not None and codes[slot] >= 0:
                hit[codes[slot]] = True
        hit[-1] = False  # nodes without the key (code -1) are in no domain
        result: BOOL = hit[codes[:n]]
        return result

    @staticmethod
    def _parse(pod: PodInfo) -> _Terms | str:
        affinity = (pod.raw.get("spec") or {}).get("affinity") or {}
        if not affinity.get("podAffinity") and not affinity.get("podAntiAffinity"):
            return _NO_TERMS
        try:
            return _Terms(
                [Term.of(t, pod.namespace) for t in required_pod_terms(pod.raw, "podAffinity")],
                [Term.of(t, pod.namespace) for t in required_pod_terms(pod.raw, "podAntiAffinity")],
            )
        except ApiError as exc:
            return f"invalid pod affinity: {exc.message}"

    def pre_filter(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> str | None:
        """Parse the pod's required terms once per cycle."""
        state[_TERMS] = self._parse(pod)
        return None

    def filter(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> BOOL | None:
        terms = state.get(_TERMS)
        if terms is None:
            terms = state[_TERMS] = self._parse(pod)
        n = snap.n
        if isinstance(terms, str):
            state[_REASONS] = np.full(n, terms, object)
            return np.zeros(n, np.bool_)
        affinity, anti = terms.affinity, terms.anti
        if not affinity and not anti and not snap.anti_affinity_pods:
            return None
        reasons = np.full(n, "", object)

        ok_aff = np.ones(n, np.bool_)
        if affinity:
            matched = [
                [r for r in self._pods(snap, t) if t.matches(r.namespace, r.labels)]
                for t in affinity
            ]
            has_keys = np.ones(n, np.bool_)
            exist = np.ones(n, np.bool_)
            for term, recs in zip(affinity, matched, strict=True):
                codes = snap.label_codes.get(term.topology_key)
                has_keys &= codes[:n] >= 0 if codes is not None else False
                exist &= self._domains(snap, term.topology_key, recs)
            first_of_group = not any(matched) and all(
                t.matches(pod.namespace, pod.labels) for t in affinity
            )
            ok_aff = has_keys & (exist | first_of_group)
            reasons[~ok_aff] = AFFINITY

        ok_anti = np.ones(n, np.bool_)
        for term in anti:
            recs = [r for r in self._pods(snap, term) if term.matches(r.namespace, r.labels)]
            ok_anti &= ~self._domains(snap, term.topology_key, recs)
        reasons[ok_aff & ~ok_anti] = ANTI_AFFINITY

        ok_existing = np.ones(n, np.bool_)
        for rec in snap.anti_affinity_pods.values():
            slot = snap.index.get(rec.node)
            if slot is None:
                continue
            for raw in rec.anti_affinity:
                try:
                    term = Term.of(raw, rec.namespace)
                except ApiError:
                    continue
                if not term.matches(pod.namespace, pod.labels):
                    continue
                codes = snap.label_codes.get(term.topology_key)
                if codes is None or codes[slot] < 0:
                    continue
                ok_existing &= codes[:n] != codes[slot]
        reasons[ok_aff & ok_anti & ~ok_existing] = EXISTING_ANTI_AFFINITY
        state[_REASONS] = reasons
        result: BOOL = ok_aff & ok_anti & ok_existing
        return result

    def filter_reasons(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX
    ) -> list[tuple[str, ...]]:
        reasons = state.get(_REASONS)
        if reasons is None:
            return [(ANTI_AFFINITY,)] * len(idx)
        return [(str(reasons[i]),) for i in idx]

    def pre_score(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> bool:
        return False  # preferred terms are not scored here

    def score(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX) -> I64 | int:
        """kube scores preferred terms here; pre_score skips every pod, so this is never
        reached."""
        return 0
