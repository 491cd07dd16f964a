"""Score arithmetic against hand-computed values (kube-scheduler's integer rules)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.scheduler.args import RequestedToCapacityRatioParam, UtilizationShapePoint
from pykatalyst.scheduler.plugins.resources import (
    Shape,
    balanced_score,
    least_allocated,
    most_allocated,
    rtcr_resource,
    weighted_node_score,
)

GI = 1024**3


def a(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def shape(*points: tuple[int, int]) -> Shape:
    return Shape.of(
        RequestedToCapacityRatioParam(
            shape=[UtilizationShapePoint(utilization=u, score=s) for u, s in points]
        )
    )


def test_least_allocated() -> None:
    # (4000 - 1500) * 100 / 4000 = 62.5 -> 62; over-full and empty nodes score 0
    assert least_allocated(a(1500, 4001, 0), a(4000, 4000, 0)).tolist() == [62, 0, 0]


def test_most_allocated() -> None:
    # 1500 * 100 / 4000 = 37.5 -> 37; requested beyond allocatable counts as full
    assert most_allocated(a(1500, 5000, 7), a(4000, 4000, 0)).tolist() == [37, 100, 0]


def test_weighted_mean_skips_resources_the_node_lacks() -> None:
    # cpu 62 (weight 3), memory (8Gi - 6Gi) / 8Gi = 25 (weight 1): (186 + 25) / 4 = 52.75 -> 52
    score = weighted_node_score(
        [a(1500, 1500), a(6 * GI, 6 * GI)],
        [a(4000, 0), a(8 * GI, 8 * GI)],
        [3, 1],
        "LeastAllocated",
        None,
    )
    # second node has no cpu: only memory counts
    assert score.tolist() == [52, 25]


def test_shape_scales_scores_by_ten_and_interpolates() -> None:
    rising = shape((0, 0), (100, 10))
    assert rtcr_resource(a(1500), a(4000), rising).tolist() == [37]
    falling = shape((0, 10), (100, 0))
    assert rtcr_resource(a(1500), a(4000), falling).tolist() == [63]
    # over-full counts as 100% utilisation
    assert rtcr_resource(a(9000), a(4000), falling).tolist() == [0]


def test_shape_truncates_toward_zero_like_go() -> None:
    # points (0,100) (30,50) (100,0); at 33%: 50 + (-50 * 3) / 70 = 50 - 2.14 -> 48 (not 47)
    s = shape((0, 10), (30, 5), (100, 0))
    assert rtcr_resource(a(1320), a(4000), s).tolist() == [48]
    # below the first point the first score holds, above the last the last one
    s2 = shape((20, 2), (80, 8))
    assert s2(a(5, 50, 95)).tolist() == [20, 50, 80]


def test_rtcr_node_score_is_a_rounded_mean_of_positive_scores() -> None:
    rising = shape((0, 0), (100, 10))
    # cpu 37 (weight 1), memory 0% -> 0 is left out: 37
    only_cpu = weighted_node_score(
        [a(1500), a(0)], [a(4000), a(8 * GI)], [1, 1], "RequestedToCapacityRatio", rising
    )
    assert only_cpu.tolist() == [37]
    # cpu 37 (w 1) and memory 62 (w 2): 161 / 3 = 53.67 -> 54
    both = weighted_node_score(
        [a(1500), a(5 * GI)], [a(4000), a(8 * GI)], [1, 2], "RequestedToCapacityRatio", rising
    )
    assert both.tolist() == [54]


def test_balanced_allocation() -> None:
    # fractions 0.375 and 0.75: std = 0.1875 -> 81.25 -> 81
    assert balanced_score([a(1500), a(6 * GI)], [a(4000), a(8 * GI)]).tolist() == [81]
    # three resources 0.2, 0.5, 0.8: std = sqrt(0.06) = 0.2449 -> 75
    three = balanced_score([a(2), a(5), a(8)], [a(10), a(10), a(10)])
    assert three.tolist() == [75]
    # fractions cap at 1; a resource the node lacks is left out (one fraction: std 0)
    assert balanced_score([a(9000, 1), a(4, 4)], [a(4000, 0), a(8, 8)]).tolist() == [75, 100]


@settings(max_examples=200)
@given(st.integers(1, 10**12), st.data())
def test_least_and_most_allocated_are_complementary(alloc: int, data: st.DataObject) -> None:
    req = data.draw(st.integers(0, alloc))
    least = int(least_allocated(a(req), a(alloc))[0])
    most = int(most_allocated(a(req), a(alloc))[0])
    assert 0 <= least <= 100 and 0 <= most <= 100
    assert least + most in (99, 100)


@settings(max_examples=100)
@given(st.lists(st.integers(0, 100), min_size=1, max_size=6, unique=True).map(sorted), st.data())
def test_shape_values_stay_within_the_points(utils: list[int], data: st.DataObject) -> None:
    scores = data.draw(st.lists(st.integers(0, 10), min_size=len(utils), max_size=len(utils)))
    s = shape(*zip(utils, scores, strict=True))
    values = s(np.arange(0, 101, dtype=np.int64))
    assert values.min() >= min(scores) * 10 and values.max() <= max(scores) * 10
    for u, sc in zip(utils, scores, strict=True):
        assert values[u] == sc * 10
