"""GPUs and an RDMA VF placed together (pure): a pod asking `nvidia.com/gpu` (whole cards
or `gpu_memory` shares) and `sriov_nic: 1` gets its cards and its VF under one PCIe
switch when the node has such a pair, else within one NUMA node, else anywhere on the
node, unless the pod requires more (GPUDirect RDMA moves data between a card and a NIC
without the CPU; it is fastest through a shared switch and slowest across sockets).

What the pod asks, from its annotations:

* `katalyst.kubewharf.io/gpu_rdma_affinity`: `pcie_switch` (required), `numa` (a switch
  preferred, one NUMA node required), `preferred` (the default) or `none` (no pairing:
  cards and VF are chosen apart, as before).
* Koordinator's `scheduling.koordinator.sh/device-joint-allocate`, an alias: JSON
  `{"deviceTypes": ["gpu", "rdma"], "requiredScope": "SamePCIe"}` reads as `pcie_switch`,
  without `requiredScope` as `preferred`. Ours wins when a pod carries both.

How close a pair is (its level): `pcie_switch` when the VF's switch holds as many of the
pod's cards as it can (all of them when they fit under one switch, else every card of
that switch); `numa` when the VF's NUMA node holds as many of them as it can; `node`
otherwise. Among the pairs of the best level: the most cards under the VF's switch, then
on its NUMA node, then the cards the card policy ranks first, then Katalyst's VF order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from pykatalyst.api import names
from pykatalyst.topology.vf import VfSlot, katalyst_order

BOOL = npt.NDArray[np.bool_]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

LEVEL_NONE: Final = -1  # no free VF: no pair at all
LEVEL_NODE: Final = 0
LEVEL_NUMA: Final = 1
LEVEL_SWITCH: Final = 2
LEVEL_NAMES: Final = {LEVEL_NODE: "node", LEVEL_NUMA: "numa", LEVEL_SWITCH: "pcie_switch"}

AFFINITY: Final = names.GPU_RDMA_AFFINITY_ANNOTATION
KOORD: Final = names.KOORDINATOR_JOINT_ALLOCATE_ANNOTATION
# the lowest level each mode accepts
REQUIRED_LEVEL: Final = {
    names.GPU_RDMA_AFFINITY_PCIE_SWITCH: LEVEL_SWITCH,
    names.GPU_RDMA_AFFINITY_NUMA: LEVEL_NUMA,
    names.GPU_RDMA_AFFINITY_PREFERRED: LEVEL_NODE,
}
KOORD_TYPES: Final = frozenset({"gpu", "rdma"})


@dataclass(frozen=True, slots=True)
class JointAsk:
    """How close a pod wants its VF to its cards: `mode` one of
    names.GPU_RDMA_AFFINITIES, `source` the annotation it came from ("" = the default)."""

    mode: str = names.GPU_RDMA_AFFINITY_PREFERRED
    source: str = ""

    @property
    def required_level(self) -> int:
        return REQUIRED_LEVEL.get(self.mode, LEVEL_NODE)


def _koordinator(value: str) -> JointAsk:
    """Koordinator's joint-allocation JSON; ValueError naming what is accepted."""
    accepted = '{"deviceTypes": ["gpu", "rdma"], "requiredScope": "SamePCIe"} (scope optional)'
    try:
        doc = json.loads(value)
    except ValueError:
        raise ValueError(
            f"annotation {KOORD}: {value!r} is not JSON; accepted: {accepted}"
        ) from None
    if not isinstance(doc, dict):
        raise ValueError(f"annotation {KOORD}: {value!r} is not an object; accepted: {accepted}")
    types = doc.get("deviceTypes")
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise ValueError(f"annotation {KOORD}: deviceTypes must be a list; accepted: {accepted}")
    if set(types) != KOORD_TYPES:
        raise ValueError(
            f'annotation {KOORD}: deviceTypes {types!r}; accepted: ["gpu", "rdma"] '
            "(the only pair placed jointly)"
        )
    scope = doc.get("requiredScope", "")
    if scope not in ("", names.KOORDINATOR_SCOPE_SAME_PCIE):
        raise ValueError(
            f"annotation {KOORD}: requiredScope {scope!r}; accepted: "
            f"{names.KOORDINATOR_SCOPE_SAME_PCIE!r} or none (preferred)"
        )
    mode = names.GPU_RDMA_AFFINITY_PCIE_SWITCH if scope else names.GPU_RDMA_AFFINITY_PREFERRED
    return JointAsk(mode, KOORD)


def joint_ask(annotations: Mapping[str, Any]) -> JointAsk:
    """The pod's ask; ValueError naming the annotation and what is accepted."""
    ours = annotations.get(AFFINITY)
    if ours is not None:
        mode = str(ours).strip()
        if mode not in names.GPU_RDMA_AFFINITIES:
            raise ValueError(
                f"annotation {AFFINITY}: {ours!r}; accepted: {', '.join(names.GPU_RDMA_AFFINITIES)}"
            )
        return JointAsk(mode, AFFINITY)
    koord = annotations.get(KOORD)
    if koord is not None:
        return _koordinator(str(koord))
    return JointAsk()


def joint_problem(pod: Mapping[str, Any]) -> str:
    """Why a pod's pairing annotations cannot be read ("" when they can)."""
    meta = pod.get("metadata")
    ann = meta.get("annotations") if isinstance(meta, Mapping) else None
    try:
        joint_ask(ann if isinstance(ann, Mapping) else {})
    except ValueError as exc:
        return str(exc)
    return ""


@dataclass(frozen=True, slots=True)
class Cards:
    """A node's cards as pairing sees them (rows in the CNR's order)."""

    ok: BOOL  # the card can take the pod's share
    healthy: BOOL  # the card is given out at all (cap > 0)
    switch: Sequence[str]  # its PCIe switch ("" unknown)
    numa: I64  # its NUMA node (-1 unknown)
    keys: F64  # the card policy's order, lower first


@dataclass(frozen=True, slots=True)
class Pair:
    """Cards (positions, in allocation order) and the VF given with them."""

    cards: tuple[int, ...]
    vf: VfSlot
    level: int
    on_switch: int  # cards under the VF's switch
    on_numa: int  # cards on the VF's NUMA node

    @property
    def level_name(self) -> str:
        return LEVEL_NAMES[self.level]

    def describe(self, ids: Sequence[str]) -> str:
        where = {
            LEVEL_SWITCH: f"under PCIe switch {self.vf.pcie_switch}",
            LEVEL_NUMA: f"in NUMA node {self.vf.numa}",
            LEVEL_NODE: "on the node (no closer pair free)",
        }[self.level]
        cards = ", ".join(ids[i] for i in self.cards)
        return (
            f"VF {self.vf.id} with card(s) {cards} {where}: {self.on_switch} card(s) under "
            f"the VF's switch, {self.on_numa} on its NUMA node"
        )


def _pair_for(cards: Cards, vf: VfSlot, need: int) -> Pair | None:
    on_switch = np.array(
        [bool(vf.pcie_switch) and s == vf.pcie_switch for s in cards.switch], np.bool_
    )
    on_numa = (cards.numa == vf.numa) & (vf.numa >= 0)
    idx = np.arange(len(cards.keys))
    order = np.lexsort((idx, cards.keys, ~on_numa, ~on_switch))
    picked = [int(i) for i in order if cards.ok[i]][:need]
    if len(picked) < need:
        return None
    a = int(on_switch[picked].sum())
    b = int(on_numa[picked].sum())
    level = LEVEL_NODE
    if a and a == min(need, int((on_switch & cards.healthy).sum())):
        level = LEVEL_SWITCH
    elif b and b == min(need, int((on_numa & cards.healthy).sum())):
        level = LEVEL_NUMA
    return Pair(tuple(picked), vf, level, a, b)


def best_pair(cards: Cards, vfs: Sequence[VfSlot], need: int) -> Pair | None:
    """The closest pair of `need` cards and one of the free `vfs`; None when the node
    has too few usable cards or no VF. VFs under one switch and NUMA node pair alike, so
    each such group is tried once, with its first VF in Katalyst's order."""
    groups: dict[tuple[str, int], VfSlot] = {}
    for v in sorted(vfs, key=katalyst_order):
        groups.setdefault((v.pcie_switch, v.numa), v)
    best: tuple[tuple[float, ...], Pair] | None = None
    for vf in groups.values():
        pair = _pair_for(cards, vf, need)
        if pair is None:
            return None  # too few usable cards whatever the VF
        cost = float(cards.keys[list(pair.cards)].sum())
        rank = (-pair.level, -pair.on_switch, -pair.on_numa, cost, *katalyst_order(vf)[:2])
        if best is None or rank < best[0]:
            best = (rank, pair)
    return None if best is None else best[1]


def best_level(cards: Cards, vfs: Sequence[VfSlot], need: int) -> int:
    """The level of the closest pair the node offers (LEVEL_NONE: none)."""
    pair = best_pair(cards, vfs, need)
    return LEVEL_NONE if pair is None else pair.level
