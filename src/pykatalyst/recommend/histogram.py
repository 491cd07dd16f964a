"""Decaying exponential histograms with the Kubernetes VPA's exact layout and arithmetic.

VPA (and Katalyst's ResourceRecommend, which reuses VPA's histogram code) keeps usage in
exponential buckets: bucket *n* starts at ``first * (r**n - 1) / (r - 1)`` with ``r = 1.05``.
Cpu: first bucket 0.01 core, up to 1000 cores; memory: first bucket 1e7 bytes, up to 1e12
bytes; 176 buckets each; epsilon 1e-4 (0.001 × the minimum sample weight 0.1).

A sample of weight ``w`` at time ``t`` counts ``w * 2**((t - ref) / half_life)``: newer
samples weigh more, so older ones decay with the half-life. ``ref`` is the first sample's
time rounded to a whole half-life (as Go's ``time.Round`` does, counted from year 1) and
moves forward only when a sample lies more than 100 half-lives past it, scaling the
weights already held by the matching power of two.

``percentile(p)`` returns the *end* of the first bucket whose cumulative weight reaches
``p`` × the total, walking from the lowest to the highest bucket holding at least epsilon —
VPA's rule, kept bit for bit (sequential sums, the same bucket arithmetic).

Everything here is batch and vectorised: a histogram is built from arrays of values, weights
and times in one pass (``numpy.bincount``), which is what a recommender replaying 14 days
of 5-minute samples needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

# Seconds from Go's zero time (0001-01-01T00:00:00Z) to the Unix epoch: `time.Round`
# rounds relative to the zero time, which matters for half-lives that do not divide a day.
_GO_ZERO_TO_UNIX_S = 62_135_596_800
# VPA shifts the reference time when a sample is more than this many half-lives past it.
MAX_DECAY_EXPONENT = 100

DEFAULT_GROWTH = 0.05
MIN_SAMPLE_WEIGHT = 0.1
EPSILON = 0.001 * MIN_SAMPLE_WEIGHT


@dataclass(frozen=True, slots=True)
class BucketLayout:
    """An exponential bucket layout (VPA's ``NewExponentialHistogramOptions``)."""

    max_value: float
    first_bucket_size: float
    ratio: float = 1.0 + DEFAULT_GROWTH
    epsilon: float = EPSILON
    num_buckets: int = field(init=False)
    starts: FloatArray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_value <= 0 or self.first_bucket_size <= 0 or self.epsilon <= 0:
            raise ValueError("max_value, first_bucket_size and epsilon must be > 0")
        if self.ratio <= 1.0:
            raise ValueError(f"ratio must be > 1.0, got {self.ratio}")
        ratio, first = self.ratio, self.first_bucket_size
        n = math.ceil(_log(ratio, self.max_value * (ratio - 1) / first + 1)) + 1
        starts = [0.0] + [first * (go_pow_int(ratio, b) - 1) / (ratio - 1) for b in range(1, n)]
        object.__setattr__(self, "num_buckets", n)
        object.__setattr__(self, "starts", np.asarray(starts, dtype=np.float64))

    def find_buckets(self, values: FloatArray) -> npt.NDArray[np.intp]:
        """The bucket of each value (VPA's ``FindBucket``, vectorised)."""
        values = np.asarray(values, dtype=np.float64)
        ratio, first = self.ratio, self.first_bucket_size
        log_ratio = math.log(ratio)
        with np.errstate(invalid="ignore", divide="ignore"):
            arg = values * (ratio - 1) / first + 1
            raw = np.log(arg) / log_ratio
        # numpy's vectorised log may differ from the scalar libm log by an ulp; where that can
        # move a value across a bucket boundary, recompute with the scalar log (as Go does).
        near = np.flatnonzero(
            (values >= first) & np.isfinite(raw) & (np.abs(raw - np.round(raw)) < 1e-9)
        )
        for i in near:
            raw[i] = math.log(float(arg[i])) / log_ratio
        raw = np.where(values < first, 0.0, raw)
        buckets = np.floor(np.nan_to_num(raw, nan=0.0, posinf=self.num_buckets)).astype(np.intp)
        return np.clip(buckets, 0, self.num_buckets - 1)

    def bucket_start(self, bucket: int) -> float:
        if bucket < 0 or bucket >= self.num_buckets:
            raise IndexError(f"bucket {bucket} out of range [0..{self.num_buckets - 1}]")
        return float(self.starts[bucket])


def go_pow_int(x: float, n: int) -> float:
    """``x**n`` for a whole ``n >= 0`` computed as Go's ``math.Pow`` does (repeated squaring of
    the mantissa), so bucket boundaries match VPA's to the last bit."""
    a1, ae = 1.0, 0
    x1, xe = math.frexp(x)
    i = n
    while i != 0:
        if i & 1:
            a1 *= x1
            ae += xe
        x1 *= x1
        xe <<= 1
        if x1 < 0.5:
            x1 += x1
            xe -= 1
        i >>= 1
    return math.ldexp(a1, ae)


def _log(base: float, x: float) -> float:
    return math.log(x) / math.log(base)


CPU_LAYOUT = BucketLayout(max_value=1000.0, first_bucket_size=0.01)
"""Cpu in cores: first bucket 0.01, max 1000 (VPA and Katalyst)."""
MEMORY_LAYOUT = BucketLayout(max_value=1e12, first_bucket_size=1e7)
"""Memory in bytes: first bucket 1e7, max 1e12 (VPA and Katalyst)."""


def go_round(t: float, step: float) -> float:
    """Go's ``time.Time.Round(step)`` for a Unix time in seconds (halves round up)."""
    since_zero = t + _GO_ZERO_TO_UNIX_S
    return math.floor(since_zero / step + 0.5) * step - _GO_ZERO_TO_UNIX_S


@dataclass(frozen=True, slots=True)
class Histogram:
    """Bucket weights of a (decaying) histogram, as VPA would hold them after the samples."""

    layout: BucketLayout
    weights: FloatArray = field(repr=False, compare=False)
    total_weight: float
    reference_s: float | None = None
    half_life_s: float | None = None

    @property
    def is_empty(self) -> bool:
        return not bool(np.any(self.weights >= self.layout.epsilon))

    def _min_max(self) -> tuple[int, int]:
        # After additions only, VPA's incrementally tracked min/max buckets are the outermost
        # buckets holding at least epsilon (its initial min is the last bucket, max the first).
        held = np.flatnonzero(self.weights >= self.layout.epsilon)
        if held.size == 0:
            return self.layout.num_buckets - 1, 0
        return int(held[0]), int(held[-1])

    def percentile(self, p: float) -> float:
        """The end of the bucket where the cumulative weight reaches ``p`` of the total."""
        if self.is_empty:
            return 0.0
        low, high = self._min_max()
        threshold = p * self.total_weight
        cumulative = np.cumsum(self.weights[low:high])  # sequential, like Go's loop
        reached = np.flatnonzero(cumulative >= threshold)
        bucket = low + int(reached[0]) if reached.size else high
        if bucket < self.layout.num_buckets - 1:
            return self.layout.bucket_start(bucket + 1)
        return self.layout.bucket_start(bucket)

    def percentiles(self, ps: FloatArray) -> FloatArray:
        return np.asarray([self.percentile(float(p)) for p in ps], dtype=np.float64)


def decay_factors(times: FloatArray, half_life_s: float) -> tuple[FloatArray, float | None]:
    """Each sample's decay multiplier and the final reference time, as VPA computes them.

    The reference starts at the first sample's time rounded to the half-life and jumps forward
    (rescaling what came before) when a sample is more than 100 half-lives past it. Samples
    must be given in the order they are added.
    """
    times = np.asarray(times, dtype=np.float64)
    factors = np.empty_like(times)
    if times.size == 0:
        return factors, None
    if half_life_s <= 0:
        raise ValueError(f"half_life_s must be > 0, got {half_life_s}")
    horizon = half_life_s * MAX_DECAY_EXPONENT
    start, ref = 0, go_round(float(times[0]), half_life_s)
    while start < times.size:
        beyond = np.flatnonzero(times[start:] > ref + horizon)
        stop = start + int(beyond[0]) if beyond.size else times.size
        factors[start:stop] = np.exp2((times[start:stop] - ref) / half_life_s)
        if stop == times.size:
            break
        new_ref = go_round(float(times[stop]), half_life_s)
        exponent = math.floor((ref - new_ref) / half_life_s + 0.5)
        factors[:stop] *= math.ldexp(1.0, exponent)
        start, ref = stop, new_ref
    return factors, ref


def build_histogram(
    layout: BucketLayout,
    values: FloatArray,
    weights: FloatArray,
    times: FloatArray | None = None,
    half_life_s: float | None = None,
) -> Histogram:
    """A histogram holding the samples; decaying when ``times`` and ``half_life_s`` are given.

    Samples are taken in array order (the order VPA would add them). Weights must be
    non-negative, values finite.
    """
    values = np.asarray(values, dtype=np.float64)
    weights = np.broadcast_to(np.asarray(weights, dtype=np.float64), values.shape)
    if np.any(weights < 0):
        raise ValueError("sample weight must be non-negative")
    reference: float | None = None
    if times is not None and half_life_s is not None:
        factors, reference = decay_factors(times, half_life_s)
        weights = weights * factors
    buckets = layout.find_buckets(values)
    bucket_weights = np.bincount(buckets, weights=weights, minlength=layout.num_buckets)
    total = float(np.cumsum(weights)[-1]) if weights.size else 0.0
    return Histogram(
        layout=layout,
        weights=bucket_weights.astype(np.float64),
        total_weight=total,
        reference_s=reference,
        half_life_s=half_life_s,
    )
