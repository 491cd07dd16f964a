"""Katalyst's ResourceRecommend percentile rule, reproduced exactly (recommender ``katalyst``).

What katalyst-core's percentile processor and recommender compute from the same samples:

- one task per (container, resource) started at ``task_start``; its first run back-fills
  25 h, then cpu runs every 10 min and memory every hour, each over the samples since the
  previous run (a run that finds no samples adds nothing);
- cpu: every sample goes into a decaying histogram with weight ``max(usage, 0.1)``;
- memory: each run adds one sample, the peak of its window, at the window's last sample time,
  weight 1 (so about one peak per hour);
- VPA's exponential buckets, half-life 24 h (the ``decayHalfLife`` extension, whole hours);
- not ready without samples, when the last sample is more than 24 h old, or when the samples
  span less than 24 h (Katalyst's own messages);
- target = p90 × (1 + bufferPercent/100), bufferPercent 30 by default; cpu truncated to whole
  millicores, memory rounded up to a whole KiB (under 1 MiB) or MiB;
- OOM: the *first* matching OOM record (Katalyst's recorder order, not the latest) within
  7 days gives ``max(request + 100 MiB, 1.2 × request)``, rounded the same way, which replaces
  the memory target when larger;
- ``minAllowed`` / ``maxAllowed`` are not applied (Katalyst does not apply them either), and
  only requests are recommended.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from pykatalyst.recommend.histogram import CPU_LAYOUT, MEMORY_LAYOUT, build_histogram
from pykatalyst.recommend.model import (
    CPU,
    MEMORY,
    CurrentResources,
    FloatArray,
    OOMEvent,
    Recommendation,
    RecommendationNotReady,
    ResourceTerms,
    UsageSeries,
)

NAME = "katalyst"
PERCENTILE = 0.9
MIN_SAMPLE_WEIGHT = 0.1
INIT_DATA_LENGTH_S = 25 * 3600.0
CPU_TASK_INTERVAL_S = 600.0
MEMORY_TASK_INTERVAL_S = 3600.0
MIN_SPAN_S = 24 * 3600.0
MAX_SAMPLE_AGE_S = 24 * 3600.0
OOM_WINDOW_S = 7 * 24 * 3600.0
OOM_BUMP_RATIO = 1.2
OOM_MIN_BUMP_BYTES = 100 * 1024 * 1024
_MAX_RESOURCE_AMOUNT = float(10**14)  # VPA's model.MaxResourceAmount

# Katalyst's error texts, which become the condition's message.
MSG_DATA_PREPARING = "data preparing"
MSG_SAMPLES_EXPIRED = "no samples in the last 24 hours"
MSG_INSUFFICIENT = "The data sample is insufficient to obtain the predicted value"


class KatalystSettings(BaseModel):
    """A ResourceRecommend container policy, as the percentile rule reads it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cpu_buffer_percent: int = Field(30, ge=0, le=100, description="bufferPercent for cpu.")
    memory_buffer_percent: int = Field(30, ge=0, le=100, description="bufferPercent for memory.")
    half_life_hours: int = Field(
        24, gt=0, description="The `decayHalfLife` extension: the histograms' half-life, hours."
    )
    resources: tuple[str, ...] = Field(
        (CPU, MEMORY), description="controlledResourcesPolicies' resource names (cpu, memory)."
    )
    task_start_s: float | None = Field(
        None,
        description="When the processor's tasks started (Unix s). None: 25 h after the first "
        "sample, so the first back-fill starts at the first sample.",
    )
    min_span_s: float = Field(
        MIN_SPAN_S,
        gt=0,
        description="Not ready until the samples span this long (Katalyst: 24 h, fixed; "
        "shorter only for demos and tests).",
    )


@dataclass(frozen=True, slots=True)
class _Fed:
    """What one histogram task holds: samples in the order added, and its span."""

    values: FloatArray
    weights: FloatArray
    times: FloatArray
    first_s: float | None
    last_s: float | None


def _run_times(start: float, interval: float, now: float) -> FloatArray:
    if now < start:
        return np.empty(0, dtype=np.float64)
    count = math.floor((now - start) / interval) + 1
    return start + interval * np.arange(count, dtype=np.float64)


def _window_ids(times: FloatArray, runs: FloatArray, start: float) -> np.ndarray:
    """Index of the run whose window holds each sample; -1 outside every window."""
    ids = np.searchsorted(runs, times, side="left")  # window (runs[i-1], runs[i]]
    outside = (times < start - INIT_DATA_LENGTH_S) | (ids >= runs.size)
    return np.where(outside, -1, ids)


def _feed_cpu(series: UsageSeries, start: float, now: float) -> _Fed:
    runs = _run_times(start, CPU_TASK_INTERVAL_S, now)
    ids = _window_ids(series.timestamps, runs, start) if runs.size else np.full(len(series), -1)
    keep = ids >= 0
    t, v = series.timestamps[keep], series.cpu[keep]
    first = float(t[0]) if t.size else None
    last = float(t[-1]) if t.size else None
    return _Fed(v, np.maximum(v, MIN_SAMPLE_WEIGHT), t, first, last)


def _feed_memory(series: UsageSeries, start: float, now: float) -> _Fed:
    runs = _run_times(start, MEMORY_TASK_INTERVAL_S, now)
    ids = _window_ids(series.timestamps, runs, start) if runs.size else np.full(len(series), -1)
    keep = ids >= 0
    t, v, ids = series.timestamps[keep], series.memory[keep], ids[keep]
    if t.size == 0:
        return _Fed(np.empty(0), np.empty(0), np.empty(0), None, None)
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    ends = np.r_[starts[1:], t.size] - 1
    peaks = np.maximum.reduceat(v, starts)
    return _Fed(peaks, np.ones_like(peaks), t[ends], float(t[0]), float(t[-1]))


def _percentile(
    fed: _Fed, resource: str, half_life_s: float, now: float, min_span_s: float = MIN_SPAN_S
) -> float:
    if fed.first_s is None or fed.last_s is None:
        raise RecommendationNotReady(MSG_DATA_PREPARING, resource)
    if now - fed.last_s > MAX_SAMPLE_AGE_S:
        raise RecommendationNotReady(MSG_SAMPLES_EXPIRED, resource)
    if fed.last_s - fed.first_s < min_span_s:
        detail = (
            f"{resource}: {fed.values.size} sample(s) spanning {fed.last_s - fed.first_s:.0f} s "
            f"of the {min_span_s:.0f} s needed"
        )
        raise RecommendationNotReady(MSG_INSUFFICIENT, resource, detail)
    layout = CPU_LAYOUT if resource == CPU else MEMORY_LAYOUT
    histogram = build_histogram(layout, fed.values, fed.weights, fed.times, half_life_s)
    return histogram.percentile(PERCENTILE)


def round_memory(value: float) -> float:
    """Katalyst's memory rounding: up to a whole KiB under 1 MiB, else up to a whole MiB."""
    whole = int(value)
    scale, quotient, remainder = 1, whole, 0
    while scale < 1024 * 1024:
        if quotient < 1024:
            break
        scale *= 1024
        quotient, remainder = whole // scale, whole % scale
    return float((quotient + (1 if remainder else 0)) * scale)


def _amount(value: float) -> int:
    return int(min(max(value, 0.0), _MAX_RESOURCE_AMOUNT))


def oom_bump(event: OOMEvent) -> float:
    """Katalyst's memory after an OOM: ``max(request + 100 MiB, 1.2 × request)``, rounded."""
    request = _amount(event.memory_request)
    needed = max(request + _amount(OOM_MIN_BUMP_BYTES), _amount(request * OOM_BUMP_RATIO))
    return round_memory(float(needed))


def match_oom_records(
    records: Iterable[OOMEvent], namespace: str, workload: str, container: str
) -> list[OOMEvent]:
    """The records Katalyst applies to a workload's container: same namespace and container,
    pod name starting with the workload's name, in the recorder's order."""
    return [
        r
        for r in records
        if r.pod.startswith(workload) and r.container == container and r.namespace == namespace
    ]


def _oom_figure(events: Sequence[OOMEvent], now: float) -> float | None:
    if not events:
        return None
    first = events[0]  # Katalyst takes the first match and then checks its age
    if now - first.timestamp > OOM_WINDOW_S:
        return None
    return oom_bump(first)


class KatalystRecommender:
    """ResourceRecommend's percentile rule, bit for bit (``algorithmPolicy.recommender``
    ``default``)."""

    name = NAME
    settings_type = KatalystSettings

    def recommend(
        self,
        series: UsageSeries,
        now: float,
        settings: KatalystSettings | None = None,
        oom_events: Sequence[OOMEvent] = (),
        current: CurrentResources | None = None,
    ) -> Recommendation:
        """Requests as the percentile rule sets them; raises RecommendationNotReady.

        ``current`` is accepted for a uniform interface and ignored, as Katalyst ignores it.
        """
        settings = settings or KatalystSettings()
        series = series.until(now)
        half_life = settings.half_life_hours * 3600.0
        start = settings.task_start_s
        if start is None:
            start = (
                min(float(series.timestamps[0]) + INIT_DATA_LENGTH_S, now) if len(series) else now
            )
        cpu = memory = None
        terms: dict[str, ResourceTerms] = {}
        if CPU in settings.resources:
            fed = _feed_cpu(series, start, now)
            estimate = _percentile(fed, CPU, half_life, now, settings.min_span_s)
            margin = settings.cpu_buffer_percent / 100
            cpu = int(estimate * (1 + margin) * 1000) / 1000
            terms[CPU] = _terms(fed, estimate, margin, half_life)
        if MEMORY in settings.resources:
            fed = _feed_memory(series, start, now)
            estimate = _percentile(fed, MEMORY, half_life, now, settings.min_span_s)
            margin = settings.memory_buffer_percent / 100
            memory = round_memory(estimate * (1 + margin))
            bumped = _oom_figure(oom_events, now)
            applied = bumped if bumped is not None and bumped > memory else None
            memory = applied if applied is not None else memory
            terms[MEMORY] = _terms(fed, estimate, margin, half_life, applied)
        return Recommendation(NAME, cpu_request=cpu, memory_request=memory, terms=terms)


def _terms(
    fed: _Fed, estimate: float, margin: float, half_life: float, bump: float | None = None
) -> ResourceTerms:
    span = (fed.last_s or 0.0) - (fed.first_s or 0.0)
    return ResourceTerms(
        percentile=PERCENTILE,
        half_life_s=half_life,
        margin=margin,
        samples=int(fed.values.size),
        span_s=span,
        estimate=estimate,
        oom_bump=bump,
    )
