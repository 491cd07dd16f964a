"""NICBandwidth: pods that ask `resource.katalyst.kubewharf.io/net_bandwidth` (Mbps) placed
on one NIC, from the per-NIC cache the snapshot builds out of the CNRs' NIC zones and the
pods it has assumed. Katalyst's network plugin rules, moved from the node to the
scheduler (its scheduler has no NIC plugin):

* PreFilter: a request larger than every NIC gives out keeps the pod Pending with that
  reason.
* Filter: a NIC with the bandwidth free, in the network namespace `namespace_type`
  requires (`host_ns`: the host's; `anti_host_ns`: another; the `_preferred` forms do
  not filter).
* Score: 100 where a NIC of the preferred namespace fits, 0 where only others do (for the
  `_preferred` forms; every node alike otherwise).
* Reserve: the NIC, into `nic_selection_result` (Katalyst's `<netns>-<ifname>` or
  `<ifname>`, written on the pod by the Binding) and into the snapshot. Among the NICs
  that fit: the preferred namespace first; for a NUMA-bound pod a NIC on the socket of its
  NUMA binding (required with `topology_affinity_restricted`); then the most free.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import ClassVar, Final

import numpy as np

from pykatalyst.api import names
from pykatalyst.scheduler import registry as reg
from pykatalyst.scheduler.plugins.base import (
    BIND_ANNOTATIONS,
    BOOL,
    I64,
    IDX,
    REQUEUE_RESOURCES,
    CycleState,
    Key,
    Plugin,
)
from pykatalyst.scheduler.plugins.topology import NUMA_RESERVATION
from pykatalyst.scheduler.podinfo import PodInfo
from pykatalyst.scheduler.snapshot import NICReservation, NodeSnapshot

BW: Final = names.RESOURCE_NET_BANDWIDTH
NIC_RESERVATION: Final = Key[NICReservation]("NICBandwidth/reservation")
_NICS: Final = Key["_Nics"]("NICBandwidth/nics")

REASON_NO_NICS: Final = "node(s) report no NICs in their CNR"
REASON_NAMESPACE: Final = "node(s) had no NIC in the network namespace the pod requires"
REASON_BANDWIDTH: Final = "node(s) had no NIC with enough net_bandwidth free"
REASON_AFFINITY: Final = (
    "the node has no NIC with enough net_bandwidth free on the socket of the pod's NUMA "
    "binding (topology_affinity_restricted)"
)

# namespace_type -> (the NICs allowed, the NICs preferred): "host", "other" or "any"
_RULES: Final = {
    names.NETNS_HOST: ("host", "host"),
    names.NETNS_HOST_PREFERRED: ("any", "host"),
    names.NETNS_ANTI_HOST: ("other", "other"),
    names.NETNS_ANTI_HOST_PREFERRED: ("any", "other"),
}


def _which(kind: str, host: BOOL) -> BOOL:
    if kind == "host":
        return host
    if kind == "other":
        return ~host
    return np.ones_like(host)


@dataclass(slots=True)
class _Nics:
    """One bandwidth pod against every node's NICs."""

    fits: BOOL  # (nics, nodes): enough free and the namespace allowed
    preferred: BOOL  # (nics, nodes): fits, in the preferred namespace
    zones: BOOL  # per node: the CNR reports NICs
    ns_any: BOOL  # per node: some NIC in an allowed namespace
    passes: BOOL  # per node


class NICBandwidth(Plugin):
    name: ClassVar[str] = names.PLUGIN_NIC_BANDWIDTH
    requeue = REQUEUE_RESOURCES

    @staticmethod
    def _rule(pod: PodInfo) -> tuple[str, str]:
        qos = pod.qos
        kind = qos.enhancements.namespace_type if qos is not None else None
        return _RULES.get(kind or "", ("any", "any"))

    def pre_filter(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> str | None:
        mbps = pod.request(BW)
        if mbps <= 0 or not snap.nic_z or not snap.n:
            return None
        largest = int(snap.nic_cap[:, : snap.n].max())
        if mbps > largest:
            return (
                f"the pod asks {mbps} Mbps of {BW}; the largest NIC gives out {largest} "
                "(line rate x capacity rate, less the reserve)"
            )
        return None

    def nics(self, pod: PodInfo, snap: NodeSnapshot, cols: slice | IDX | None = None) -> _Nics:
        """Which NICs of the nodes `cols` (all by default) can take the pod."""
        cols = slice(0, snap.n) if cols is None else cols
        allowed, preferred = self._rule(pod)
        host = snap.nic_host[:, cols]
        k = np.arange(snap.nic_z)[:, None]
        present = k < snap.nic_count[cols][None, :]
        in_ns = present & _which(allowed, host)
        fits = in_ns & (snap.nic_free[:, cols] >= pod.request(BW)) & (snap.nic_cap[:, cols] > 0)
        zones = snap.nic_count[cols] > 0
        passes = np.asarray(fits.any(axis=0), np.bool_)
        ns_any = np.asarray(in_ns.any(axis=0), np.bool_)
        return _Nics(fits, fits & _which(preferred, host), zones, ns_any, passes)

    def _nics_of(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> _Nics:
        cached = state.get(_NICS)
        if cached is None:
            cached = self.nics(pod, snap)
            state[_NICS] = cached
        return cached

    def filter(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot) -> BOOL | None:
        if pod.request(BW) <= 0:
            return None
        return self._nics_of(pod, state, snap).passes

    def _reason_masks(self, c: _Nics, idx: IDX) -> list[tuple[str, BOOL]]:
        zones, ns_any = c.zones[idx], c.ns_any[idx]
        return [
            (REASON_NO_NICS, ~zones),
            (REASON_NAMESPACE, zones & ~ns_any),
            (REASON_BANDWIDTH, zones & ns_any),
        ]

    def filter_reasons(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX
    ) -> list[tuple[str, ...]]:
        masks = self._reason_masks(self._nics_of(pod, state, snap), idx)
        out: list[tuple[str, ...]] = []
        for i in range(len(idx)):
            out.append(next((r,) for r, m in masks if m[i]))
        return out

    def reason_counts(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX
    ) -> Counter[str]:
        counts: Counter[str] = Counter()
        for reason, mask in self._reason_masks(self._nics_of(pod, state, snap), idx):
            k = int(mask.sum())
            if k:
                counts[reason] = k
        return counts

    def score(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, idx: IDX) -> I64 | int:
        allowed, preferred = self._rule(pod)
        if pod.request(BW) <= 0 or allowed == preferred:
            return reg.MAX_NODE_SCORE
        c = self._nics_of(pod, state, snap)
        return np.where(c.preferred[:, idx].any(axis=0), reg.MAX_NODE_SCORE, 0).astype(np.int64)

    # --- reserve --------------------------------------------------------------------------

    def reserve(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, node: str) -> str | None:
        mbps = pod.request(BW)
        slot = snap.index.get(node)
        if mbps <= 0 or slot is None or not snap.nic_count[slot]:
            return None
        picked, why = self.choose(pod, state, snap, slot)
        if picked is None:
            return why
        nic = snap.nic_ids(node)[picked]
        state[NIC_RESERVATION] = NICReservation(nic, mbps)
        notes = state.setdefault(BIND_ANNOTATIONS, {})
        notes[names.NIC_SELECTION_RESULT_ANNOTATION] = nic
        notes[names.NIC_SELECTION_REASON_ANNOTATION] = why
        return None

    def unreserve(self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, node: str) -> None:
        state.pop(NIC_RESERVATION, None)
        notes = state.get(BIND_ANNOTATIONS)
        if notes is not None:
            notes.pop(names.NIC_SELECTION_RESULT_ANNOTATION, None)
            notes.pop(names.NIC_SELECTION_REASON_ANNOTATION, None)

    def choose(
        self, pod: PodInfo, state: CycleState, snap: NodeSnapshot, slot: int
    ) -> tuple[int | None, str]:
        """The NIC to take on node `slot` (its position) and why; None and the reason when
        the node cannot take the pod any more."""
        k = int(snap.nic_count[slot])
        c = self.nics(pod, snap, np.array([slot], np.intp))
        fits, preferred = c.fits[:k, 0], c.preferred[:k, 0]
        if not fits.any():
            return None, REASON_BANDWIDTH.replace("node(s) had", "the node has")
        socket = np.asarray(snap.nic_socket[:k, slot], np.int64)
        near = np.ones(k, np.bool_)
        where = ""
        res = state.get(NUMA_RESERVATION)
        if pod.is_dedicated_numa and res is not None:
            zones = snap.numa_count[slot]
            ids, socks = snap.numa_id[:zones, slot], snap.numa_socket[:zones, slot]
            sockets = {int(s) for i, s in zip(ids, socks, strict=True) if int(i) in res.numa_ids}
            near = np.isin(socket, sorted(sockets))
            restricted = pod.qos is not None and pod.qos.enhancements.topology_affinity_restricted
            if restricted:
                if not (fits & near).any():
                    return None, REASON_AFFINITY
                fits = fits & near
            where = f" on socket {','.join(map(str, sorted(sockets)))} (the pod's NUMA binding)"
        free = snap.nic_free[:k, slot]
        # lexsort: the last key sorts first
        order = np.lexsort((-free, ~(fits & near), ~(fits & preferred), ~fits))
        best = int(order[0])
        return best, self._why(pod, snap, slot, best, where if near[best] else "")

    def _why(self, pod: PodInfo, snap: NodeSnapshot, slot: int, best: int, where: str) -> str:
        nic = snap.nic_ids(snap.names[slot])[best]
        ns = pod.qos.enhancements.namespace_type if pod.qos is not None else None
        rule = f"namespace_type {ns}; " if ns else ""
        free, cap = int(snap.nic_free[best, slot]), int(snap.nic_cap[best, slot])
        return (
            f"{pod.request(BW)} Mbps on {nic}{where}: {rule}the NIC with the most "
            f"{BW} free ({free} of {cap} Mbps)"
        )
