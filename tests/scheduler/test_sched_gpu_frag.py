"""FGD's fragmentation measure on the worked examples its authors publish with their
simulator (hkust-adsl/kubernetes-scheduler-simulator, pkg/utils/frag_test.go: nodes of
8 P100 and 4 GPUs against a popularity table of task classes), and the score order of
every GPUShare policy on small nodes whose right answer is known."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.api.gpu import WHOLE
from pykatalyst.scheduler.framework import Framework
from pykatalyst.scheduler.gpufrag import TaskMix, card_deltas, node_deltas, node_fragmentation
from pykatalyst.scheduler.podinfo import pod_info
from pykatalyst.scheduler.snapshot import NodeSnapshot
from tests.scheduler.gpu_helpers import gpu_config, gpu_requests, gpu_zones
from tests.scheduler.sched_helpers import GI, cnr, node, pod

# (cpu milli, cards, milli-GPU per card, percent): the authors' table with CPU-only tasks
WITH_CPU_TASKS = [
    (15700, 1, 1000, 28.69), (11900, 1, 1000, 18.93), (11400, 1, 1000, 12.27),
    (1000, 0, 0, 7.36), (18710, 1, 1000, 4.85), (8200, 1, 1000, 3.79),
    (16400, 1, 1000, 3.31), (9810, 1, 1000, 1.97), (15200, 1, 1000, 1.87),
    (11200, 1, 1000, 1.81), (14200, 1, 1000, 1.76), (12000, 0, 0, 1.65),
    (14900, 1, 1000, 1.39), (60200, 4, 1000, 1.23), (64200, 8, 1000, 1.07),
    (32200, 4, 1000, 1.01), (17400, 2, 1000, 0.91), (30200, 2, 1000, 0.69),
    (16000, 1, 1000, 0.64), (15000, 1, 1000, 0.59), (64000, 8, 1000, 0.53),
    (15000, 0, 0, 0.53), (11910, 1, 1000, 0.53), (120200, 8, 1000, 0.48),
    (11300, 1, 1000, 0.37), (30000, 2, 1000, 0.32), (9800, 1, 1000, 0.32),
    (8000, 1, 1000, 0.32), (2000, 1, 1000, 0.27), (2000, 1, 80, 0.27),
    (1000, 1, 1000, 0.27),
]  # fmt: skip


def mix_of(table: list[tuple[int, int, int, float]]) -> TaskMix:
    """The table as given (the authors do not renormalise the percentages)."""
    return TaskMix(
        np.array([[t[0]] for t in table], np.int64),
        np.array([t[1] for t in table], np.int64),
        np.array([t[2] if t[2] < 1000 or t[1] == 0 else WHOLE for t in table], np.int64),
        np.array([t[3] / 100 for t in table], np.float64),
    )


def frag(cards_left: list[int], cpu_left: int, mix: TaskMix) -> float:
    free = np.array(cards_left, np.int64)[:, None]
    cap = np.full_like(free, 1000)
    return float(node_fragmentation(free, cap, np.array([[cpu_left]], np.int64), mix)[0])


@pytest.mark.parametrize(
    ("cards_left", "cpu_left", "expected"),
    [
        ([1000] * 8, 64000, 887.20),  # 8xP100_empty
        ([1000] * 4 + [0] * 4, 32000, 554.4),  # 8xP100_halved
    ],
)
def test_fragmentation_of_the_authors_worked_examples(
    cards_left: list[int], cpu_left: int, expected: float
) -> None:
    assert frag(cards_left, cpu_left, mix_of(WITH_CPU_TASKS)) == pytest.approx(expected, abs=0.01)


def test_a_node_short_of_cpu_is_all_fragment() -> None:
    # 4x1080_used_lack_CPU: one class of 6 cores and 0.465 GPU, 9.33 %; 1 core left
    mix = mix_of([(6000, 1, 465, 9.33)])
    assert frag([200, 1000, 1000, 500], 1000, mix) == pytest.approx(251.91, abs=0.01)


def test_cards_too_small_for_the_share_are_the_fragment() -> None:
    # a class of 0.6 GPU: the 0.5 and 0.2 cards are fragments, the idle ones are not
    mix = mix_of([(1000, 1, 600, 100.0)])
    assert frag([200, 1000, 1000, 500], 64000, mix) == pytest.approx(700.0)
    # a whole-card class: every partly used card is a fragment
    mix = mix_of([(1000, 1, 1000, 100.0)])
    assert frag([200, 1000, 1000, 500], 64000, mix) == pytest.approx(700.0)
    # two whole cards when only one card is idle: the class does not fit, all is fragment
    mix = mix_of([(1000, 2, 1000, 100.0)])
    assert frag([200, 1000, 0, 500], 64000, mix) == pytest.approx(1700.0)


@settings(max_examples=60, deadline=None)
@given(
    cards=st.lists(st.integers(0, 1000), min_size=1, max_size=8),
    cpu=st.integers(0, 64000),
    share=st.integers(1, 1000),
    pod_cpu=st.integers(0, 8000),
)
def test_card_deltas_equal_the_fragmentation_recomputed_after_placement(
    cards: list[int], cpu: int, share: int, pod_cpu: int
) -> None:
    mix = mix_of(WITH_CPU_TASKS)
    free = np.array(cards, np.int64)[:, None]
    cap = np.full_like(free, 1000)
    cpu_free = np.array([[cpu]], np.int64)
    deltas = card_deltas(free, cap, cpu_free, mix, np.array([pod_cpu]), share)[:, 0]
    before = node_fragmentation(free, cap, cpu_free, mix)[0]
    for k, left in enumerate(cards):
        if left < share:
            assert deltas[k] == np.inf
            continue
        after_free = free.copy()
        after_free[k, 0] -= share
        after = node_fragmentation(after_free, cap, cpu_free - pod_cpu, mix)[0]
        assert deltas[k] == pytest.approx(after - before, abs=1e-6)


# --- score order per policy ---------------------------------------------------------------


def _two_nodes() -> NodeSnapshot:
    """`full`: two cards, one 70 units used; `empty`: two idle cards."""
    snap = NodeSnapshot()
    for name, allocs in (("full", {"full-0": [("d/x/ux", 70)]}), ("empty", {})):
        snap.upsert_node(node(name, cpu="64", memory="256Gi"))
        snap.upsert_cnr(cnr(name, zones=gpu_zones([2], prefix=name, allocations=allocs)))
    return snap


@pytest.mark.parametrize(
    ("policy", "winner"),
    [
        ("binpack", "full"),
        ("spread", "empty"),
        ("packing", "full"),
        ("bestfit", "full"),
        ("fgd", "full"),
    ],
)
def test_each_policy_prefers_the_node_it_should(policy: str, winner: str) -> None:
    snap = _two_nodes()
    fw = Framework(gpu_config([policy]).profiles[0], 100, 0)
    plugin = fw.plugins["GPUShare"]
    # the task mix fgd learns: pods of this size and whole-card pods
    for _ in range(10):
        plugin.mix.add(((1000, GI), 1, 30_000))
        plugin.mix.add(((1000, GI), 1, WHOLE))
    info = pod_info(pod("p", gpu_requests(1, 30), uid="u"))
    result = fw.schedule(info, snap)
    assert result.node == winner
    assert fw.reserve(info, result, snap) is None
    assert result.gpu is not None
    if winner == "full":
        # the used card (30 free) is the one the share fills exactly
        assert result.gpu.ids == ("full-0",)


def test_fgd_keeps_a_card_whole_for_the_whole_card_pods_that_come_often() -> None:
    """One node, cards 100 and 60 free; pods of 40 units arrive among many whole-card
    pods. FGD puts the 40 on the 60 card (the idle card stays whole); spread takes the
    idle card and leaves nothing a whole-card pod can use."""
    snap = NodeSnapshot()
    snap.upsert_node(node("n", cpu="64", memory="256Gi"))
    snap.upsert_cnr(
        cnr("n", zones=gpu_zones([2], prefix="n", allocations={"n-1": [("d/x/u", 40)]}))
    )
    for policy, card in (("fgd", "n-1"), ("spread", "n-0")):
        fw = Framework(gpu_config([policy]).profiles[0], 100, 0)
        for _ in range(10):
            fw.plugins["GPUShare"].mix.add(((1000, GI), 1, WHOLE))
        fw.plugins["GPUShare"].mix.add(((1000, GI), 1, 40_000))
        info = pod_info(pod("p", gpu_requests(1, 40), uid="u"))
        result = fw.schedule(info, snap)
        assert fw.reserve(info, result, snap) is None
        assert result.gpu is not None and result.gpu.ids == (card,), policy


@settings(max_examples=40, deadline=None)
@given(
    nodes=st.lists(
        st.tuples(
            st.lists(st.sampled_from([0, 300, 500, 1000]), min_size=4, max_size=4),
            st.sampled_from([0, 4000, 64000]),
        ),
        min_size=1,
        max_size=12,
    ),
    ask=st.sampled_from([(1, 300), (1, 700), (1, WHOLE), (2, WHOLE), (0, 0)]),
)
def test_nodes_in_the_same_state_are_judged_once_and_alike(
    nodes: list[tuple[list[int], int]], ask: tuple[int, int]
) -> None:
    """node_deltas evaluates each distinct node state once: every node still gets what
    judging it alone gives."""
    mix = mix_of(WITH_CPU_TASKS)
    free = np.array([n[0] for n in nodes], np.int64).T
    cap = np.full_like(free, 1000)
    host = np.array([[n[1] for n in nodes]], np.int64)
    cards, share = ask
    got = node_deltas(free, cap, host, mix, np.array([2000]), cards, share)
    for j in range(len(nodes)):
        col = slice(j, j + 1)
        alone = node_deltas(
            free[:, col], cap[:, col], host[:, col], mix, np.array([2000]), cards, share
        )
        assert got[j] == pytest.approx(alone[0]) or (np.isinf(got[j]) and np.isinf(alone[0]))


def test_a_pod_retried_while_pending_counts_once_in_the_task_mix() -> None:
    snap = _two_nodes()
    fw = Framework(gpu_config(["fgd"]).profiles[0], 100, 0)
    plugin = fw.plugins["GPUShare"]
    big = pod_info(pod("big", gpu_requests(1, 100), uid="u-big"))
    for _ in range(5):
        fw.schedule(big, snap)
    fw.schedule(pod_info(pod("small", gpu_requests(1, 10), uid="u-small")), snap)
    assert plugin.mix.pods == 2
