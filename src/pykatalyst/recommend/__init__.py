"""Resource recommendations from usage history: pure functions, injected time, no I/O.

Public API (everything here is importable from ``pykatalyst.recommend``):

- ``UsageSeries.of(timestamps, cpu, memory)`` — one container's samples: Unix seconds, cpu in
  cores (mean over the interval), memory in bytes (peak over the interval). Checked: equal
  lengths, finite, non-negative; sorted by time.
- ``OOMEvent(timestamp, memory_request, memory_limit=None, peak=None, pod=, namespace=,
  container=)`` — a container killed for memory.
- ``get_recommender(name)`` — ``"katalyst"`` (also ``""`` and ``"default"``, ResourceRecommend's
  spelling): Katalyst's percentile rule, exactly. Each recommender has ``name``,
  ``settings_type`` (a frozen pydantic model; ``None`` means its defaults) and
  ``recommend(series, now, settings=None, oom_events=(), current=None) -> Recommendation``
  (``current``: a ``CurrentResources`` — what the container runs with now), which raises
  ``RecommendationNotReady`` (``.reason``, ``.message``, ``.resource``) when history is short.
- ``Recommendation`` — ``cpu_request`` (cores), ``memory_request`` (bytes), ``cpu_limit``,
  ``memory_limit`` (``None`` where not set), ``terms``: per resource a ``ResourceTerms``
  (percentile, half-life, margin, sample count and span, the raw estimate, the OOM bump that
  set it, the chosen model, its replay cost and the runners-up, notes). ``to_json()`` gives
  the wire form.
- ``KatalystSettings`` — bufferPercent per resource, ``decayHalfLife`` hours, the controlled
  resources and when the processor's tasks started; ``match_oom_records`` applies Katalyst's
  OOM-record matching (namespace, container, pod-name prefix).
- ``build_histogram`` / ``Histogram`` / ``CPU_LAYOUT`` / ``MEMORY_LAYOUT`` — VPA's decaying
  exponential histograms in numpy.
"""

from pykatalyst.recommend.histogram import (
    CPU_LAYOUT,
    MEMORY_LAYOUT,
    BucketLayout,
    Histogram,
    build_histogram,
)
from pykatalyst.recommend.katalyst import (
    KatalystRecommender,
    KatalystSettings,
    match_oom_records,
)
from pykatalyst.recommend.model import (
    CPU,
    MEMORY,
    CurrentResources,
    OOMEvent,
    Recommendation,
    RecommendationNotReady,
    ResourceTerms,
    RunnerUp,
    UsageSeries,
)
from pykatalyst.recommend.registry import Recommender, get_recommender, recommender_names

__all__ = [
    "CPU",
    "CPU_LAYOUT",
    "MEMORY",
    "MEMORY_LAYOUT",
    "BucketLayout",
    "CurrentResources",
    "Histogram",
    "KatalystRecommender",
    "KatalystSettings",
    "OOMEvent",
    "Recommendation",
    "RecommendationNotReady",
    "Recommender",
    "ResourceTerms",
    "RunnerUp",
    "UsageSeries",
    "build_histogram",
    "get_recommender",
    "match_oom_records",
    "recommender_names",
]
