"""VPA's decaying histogram in numpy: layout, percentile, decay, checked against a plain loop."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.recommend.histogram import (
    CPU_LAYOUT,
    MEMORY_LAYOUT,
    BucketLayout,
    build_histogram,
    go_round,
)

DAY = 86400.0


class LoopHistogram:
    """VPA's histogram the way its Go code runs it: one sample at a time, with the reference
    time shifted past 100 half-lives and the min/max buckets tracked incrementally."""

    def __init__(self, layout: BucketLayout, half_life: float | None = None) -> None:
        self.layout = layout
        self.half_life = half_life
        self.w = [0.0] * layout.num_buckets
        self.total = 0.0
        self.lo, self.hi = layout.num_buckets - 1, 0
        self.ref = -62_135_596_800.0  # Go's zero time

    def bucket(self, v: float) -> int:
        r, f = self.layout.ratio, self.layout.first_bucket_size
        if v < f:
            return 0
        b = int(math.log(v * (r - 1) / f + 1) / math.log(r))
        return min(b, self.layout.num_buckets - 1)

    def add(self, v: float, weight: float, t: float) -> None:
        if self.half_life is not None:
            if t > self.ref + 100 * self.half_life:
                new = go_round(t, self.half_life)
                exponent = math.floor((self.ref - new) / self.half_life + 0.5)
                self.w = [x * math.ldexp(1.0, exponent) for x in self.w]
                self.total *= math.ldexp(1.0, exponent)
                self.ref = new
                eps = self.layout.epsilon
                while self.w[self.lo] < eps and self.lo < self.layout.num_buckets - 1:
                    self.lo += 1
                while self.w[self.hi] < eps and self.hi > 0:
                    self.hi -= 1
            weight *= 2.0 ** ((t - self.ref) / self.half_life)
        b = self.bucket(v)
        self.w[b] += weight
        self.total += weight
        if b < self.lo and self.w[b] >= self.layout.epsilon:
            self.lo = b
        if b > self.hi and self.w[b] >= self.layout.epsilon:
            self.hi = b

    def percentile(self, p: float) -> float:
        if self.w[self.lo] < self.layout.epsilon:
            return 0.0
        partial, b = 0.0, self.lo
        while b < self.hi:
            partial += self.w[b]
            if partial >= p * self.total:
                break
            b += 1
        n = self.layout.num_buckets
        return self.layout.bucket_start(b + 1 if b < n - 1 else b)


def test_layouts_have_vpas_176_buckets() -> None:
    assert CPU_LAYOUT.num_buckets == 176
    assert MEMORY_LAYOUT.num_buckets == 176
    assert CPU_LAYOUT.bucket_start(1) == pytest.approx(0.01)
    assert CPU_LAYOUT.bucket_start(2) == pytest.approx(0.01 + 0.0105)
    assert MEMORY_LAYOUT.bucket_start(1) == pytest.approx(1e7)


@given(st.floats(min_value=0.0, max_value=2000.0, allow_nan=False))
def test_each_value_falls_in_the_bucket_that_spans_it(v: float) -> None:
    b = int(CPU_LAYOUT.find_buckets(np.array([v]))[0])
    assert CPU_LAYOUT.bucket_start(b) <= v * (1 + 1e-12)
    if b < CPU_LAYOUT.num_buckets - 1:
        assert v < CPU_LAYOUT.bucket_start(b + 1) * (1 + 1e-12)


samples = st.lists(
    st.tuples(
        st.floats(min_value=0.0, max_value=50.0, allow_nan=False),
        st.floats(min_value=0.0, max_value=5.0, allow_nan=False),
        st.floats(min_value=0.0, max_value=30 * DAY, allow_nan=False),
    ),
    min_size=0,
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(samples, st.sampled_from([0.5, 0.9, 0.95, 0.99, 1.0]), st.sampled_from([3600.0, DAY]))
def test_numpy_histogram_equals_vpas_loop(
    rows: list[tuple[float, float, float]], p: float, half_life: float
) -> None:
    rows = sorted(rows, key=lambda r: r[2])
    base = 1.7e9
    loop = LoopHistogram(CPU_LAYOUT, half_life)
    for v, w, t in rows:
        loop.add(v, w, base + t)
    values = np.array([r[0] for r in rows])
    weights = np.array([r[1] for r in rows])
    times = base + np.array([r[2] for r in rows])
    hist = build_histogram(CPU_LAYOUT, values, weights, times, half_life)
    assert hist.percentile(p) == loop.percentile(p)
    assert hist.total_weight == pytest.approx(loop.total, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=1e11), min_size=1, max_size=40))
def test_reference_shift_after_100_half_lives_keeps_the_answer(values: list[float]) -> None:
    # Samples 1 h apart with a 0.1 h half-life: the reference moves several times.
    half_life = 360.0
    times = 1.7e9 + 3600.0 * np.arange(len(values))
    loop = LoopHistogram(MEMORY_LAYOUT, half_life)
    for v, t in zip(values, times, strict=True):
        loop.add(v, 1.0, float(t))
    hist = build_histogram(MEMORY_LAYOUT, np.array(values), np.ones(len(values)), times, half_life)
    assert hist.percentile(0.9) == loop.percentile(0.9)


@given(
    st.lists(st.floats(min_value=0.0, max_value=100.0), min_size=1, max_size=50),
    st.floats(min_value=0.0, max_value=1.0),
    st.floats(min_value=0.0, max_value=1.0),
)
def test_percentile_is_monotone_and_covers_the_samples(
    values: list[float], p1: float, p2: float
) -> None:
    hist = build_histogram(CPU_LAYOUT, np.array(values), np.ones(len(values)))
    low, high = sorted((p1, p2))
    assert hist.percentile(low) <= hist.percentile(high)
    # The 100th percentile is the end of the highest bucket: never below the largest sample.
    assert hist.percentile(1.0) >= min(max(values), CPU_LAYOUT.bucket_start(175))


def test_a_sample_one_half_life_newer_counts_twice() -> None:
    t0 = go_round(1.7e9, DAY)
    hist = build_histogram(
        CPU_LAYOUT, np.array([1.0, 5.0]), np.array([1.0, 1.0]), np.array([t0, t0 + DAY]), DAY
    )
    b1, b5 = CPU_LAYOUT.find_buckets(np.array([1.0, 5.0]))
    assert hist.weights[b5] == pytest.approx(2 * hist.weights[b1])
    # Two thirds of the weight sits at 5 cores: p50 is there, p30 still at 1 core.
    assert hist.percentile(0.5) == CPU_LAYOUT.bucket_start(int(b5) + 1)
    assert hist.percentile(0.3) == CPU_LAYOUT.bucket_start(int(b1) + 1)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(min_value=0.01, max_value=10.0), min_size=2, max_size=30),
    st.integers(min_value=1, max_value=20),
)
def test_shifting_all_samples_by_whole_half_lives_changes_nothing(
    values: list[float], shift: int
) -> None:
    times = go_round(1.7e9, DAY) + 3600.0 * np.arange(len(values))
    a = build_histogram(CPU_LAYOUT, np.array(values), np.ones(len(values)), times, DAY)
    b = build_histogram(
        CPU_LAYOUT, np.array(values), np.ones(len(values)), times + shift * DAY, DAY
    )
    for p in (0.5, 0.9, 0.95):
        assert a.percentile(p) == b.percentile(p)


def test_empty_histogram_answers_zero_and_negative_weights_are_refused() -> None:
    assert build_histogram(CPU_LAYOUT, np.array([]), np.array([])).percentile(0.9) == 0.0
    with pytest.raises(ValueError, match="non-negative"):
        build_histogram(CPU_LAYOUT, np.array([1.0]), np.array([-1.0]))


def test_go_round_matches_go_time_round() -> None:
    # time.Unix(1700000000,0).Round(24h) is 2023-11-15T00:00:00Z (1700006400).
    assert go_round(1_700_000_000.0, DAY) == 1_700_006_400.0
    # A 7 h step is counted from year 1, not from the Unix epoch.
    assert (go_round(0.0, 7 * 3600.0) + 62_135_596_800) % (7 * 3600) == 0
