"""GPU-VF pairing (topology/joint.py): what a pod asks (ours and Koordinator's annotation),
and the pair chosen on synthetic nodes, symmetric (2 sockets x 4 PCIe switches x 2 cards
+ one NIC of 8 VFs) and asymmetric, checked against every possible pair."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.api import names
from pykatalyst.topology.joint import (
    LEVEL_NODE,
    LEVEL_NUMA,
    LEVEL_SWITCH,
    Cards,
    JointAsk,
    best_pair,
    joint_ask,
    joint_problem,
)
from pykatalyst.topology.vf import VfSlot

AFF = names.GPU_RDMA_AFFINITY_ANNOTATION
KOORD = names.KOORDINATOR_JOINT_ALLOCATE_ANNOTATION


def test_our_annotation_and_koordinators_alias_read_as_modes() -> None:
    assert joint_ask({}) == JointAsk("preferred", "")
    for mode in names.GPU_RDMA_AFFINITIES:
        assert joint_ask({AFF: mode}) == JointAsk(mode, AFF)
    same = '{"deviceTypes": ["rdma", "gpu"], "requiredScope": "SamePCIe"}'
    assert joint_ask({KOORD: same}).mode == "pcie_switch"
    assert joint_ask({KOORD: '{"deviceTypes": ["gpu", "rdma"]}'}).mode == "preferred"
    # ours wins over the alias
    assert joint_ask({AFF: "none", KOORD: same}).mode == "none"


@pytest.mark.parametrize(
    ("ann", "says"),
    [
        ({AFF: "SamePCIe"}, "accepted: pcie_switch, numa, preferred, none"),
        ({KOORD: "not json"}, "is not JSON"),
        ({KOORD: "[]"}, "is not an object"),
        ({KOORD: '{"deviceTypes": "gpu"}'}, "deviceTypes must be a list"),
        ({KOORD: '{"deviceTypes": ["gpu", "fpga"]}'}, "the only pair placed jointly"),
        ({KOORD: '{"deviceTypes":["gpu","rdma"],"requiredScope":"NUMA"}'}, "'SamePCIe'"),
    ],
)
def test_unreadable_asks_name_the_annotation_and_what_is_accepted(
    ann: dict[str, str], says: str
) -> None:
    with pytest.raises(ValueError, match="annotation") as exc:
        joint_ask(ann)
    assert says in str(exc.value) and next(iter(ann)) in str(exc.value)
    assert joint_problem({"metadata": {"annotations": ann}}) == str(exc.value)


# --- synthetic nodes ------------------------------------------------------------------------


def node(layout: list[tuple[int, int, int]]) -> tuple[list[str], list[int], list[VfSlot]]:
    """layout: per switch (numa, cards, vfs) -> card switches, card NUMA nodes, VFs."""
    sw: list[str] = []
    numa: list[int] = []
    vfs: list[VfSlot] = []
    for i, (n, cards, nv) in enumerate(layout):
        sw += [f"sw{i}"] * cards
        numa += [n] * cards
        vfs += [VfSlot(f"eth{i}_{j}", f"eth{i}", j, n, n, pcie_switch=f"sw{i}") for j in range(nv)]
    return sw, numa, vfs


def level_of(cards: tuple[int, ...], vf: VfSlot, sw: list[str], numa: list[int], k: int) -> int:
    """The pairing level of one candidate, straight from the definition."""
    need = len(cards)
    on_sw = sum(1 for i in cards if sw[i] == vf.pcie_switch)
    on_numa = sum(1 for i in cards if numa[i] == vf.numa)
    if on_sw and on_sw == min(need, sum(1 for i in range(k) if sw[i] == vf.pcie_switch)):
        return LEVEL_SWITCH
    if on_numa and on_numa == min(need, sum(1 for i in range(k) if numa[i] == vf.numa)):
        return LEVEL_NUMA
    return LEVEL_NODE


def symmetric() -> list[tuple[int, int, int]]:
    return [(s, 2, 8) for s in range(2) for _ in range(4)]


def test_on_the_symmetric_box_two_cards_take_one_switch_and_its_nics_vf() -> None:
    sw, numa, vfs = node(symmetric())
    k = len(sw)
    cards = Cards(np.ones(k, bool), np.ones(k, bool), sw, np.array(numa), np.zeros(k))
    pair = best_pair(cards, vfs, 2)
    assert pair is not None and pair.level == LEVEL_SWITCH
    assert {sw[i] for i in pair.cards} == {pair.vf.pcie_switch} and pair.on_switch == 2
    four = best_pair(cards, vfs, 4)
    assert four is not None and four.level == LEVEL_SWITCH and four.on_switch == 2
    assert {numa[i] for i in four.cards} == {four.vf.numa}  # the rest on the VF's NUMA node


def test_no_vf_or_too_few_cards_is_no_pair() -> None:
    sw, numa, vfs = node(symmetric())
    k = len(sw)
    cards = Cards(np.zeros(k, bool), np.ones(k, bool), sw, np.array(numa), np.zeros(k))
    assert best_pair(cards, vfs, 1) is None
    cards = Cards(np.ones(k, bool), np.ones(k, bool), sw, np.array(numa), np.zeros(k))
    assert best_pair(cards, [], 1) is None


layouts = st.lists(
    st.tuples(st.integers(0, 1), st.integers(0, 3), st.integers(0, 2)), min_size=1, max_size=6
)


@settings(max_examples=150, deadline=None)
@given(layouts, st.data())
def test_the_chosen_pair_is_as_close_as_any_pair_on_the_node(
    layout: list[tuple[int, int, int]], data: st.DataObject
) -> None:
    """Against every set of usable cards and every free VF: the pair chosen is usable,
    and no other pair is on a closer level (switch, then NUMA, then the node)."""
    sw, numa, vfs = node(layout)
    k = len(sw)
    ok = np.array(data.draw(st.lists(st.booleans(), min_size=k, max_size=k)), bool)
    free = [v for v in vfs if data.draw(st.booleans())]
    need = data.draw(st.integers(1, 4))
    keys = np.array(data.draw(st.lists(st.integers(0, 9), min_size=k, max_size=k)), float)
    pair = best_pair(Cards(ok, np.ones(k, bool), sw, np.array(numa), keys), free, need)
    usable = [i for i in range(k) if ok[i]]
    if not free or len(usable) < need:
        assert pair is None
        return
    assert pair is not None
    assert len(set(pair.cards)) == need and all(ok[i] for i in pair.cards)
    assert pair.vf in free
    assert pair.level == level_of(pair.cards, pair.vf, sw, numa, k)
    best = max(
        level_of(c, v, sw, numa, k) for c in itertools.combinations(usable, need) for v in free
    )
    assert pair.level == best
