"""What the controllers that recommend from usage share: the ResourceRecommend controller
and the vpa controller (a KVPA whose `algorithmPolicy.recommender` is `pykatalyst`).

- Where usage comes from (`UsageSource`): Prometheus with Katalyst's queries, or nothing.
- What a workload declares now (`template_resources`): each container's requests and
  limits in its pod template, for hysteresis and for limits kept in the declared ratio.
- OOM events made whole (`complete_oom`): Katalyst's `oom-record` carries only the memory
  request; the recommender also reads the limit and the peak before the kill, taken here
  from the template and from the usage series.
- One container's recommendation (`recommend_container`), the call both controllers make.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from pykatalyst.api import names
from pykatalyst.api.quantity import Quantity, QuantityError
from pykatalyst.api.timefmt import rfc3339
from pykatalyst.recommend import (
    CurrentResources,
    OOMEvent,
    Recommendation,
    Recommender,
    UsageSeries,
)
from pykatalyst.recommend.prometheus import PrometheusClient, read_workload_usage

# The peak before a kill is the highest working set this long before it.
OOM_PEAK_WINDOW_S = 3600.0


class UsageSource(Protocol):
    """Where usage comes from: each container's series for a workload's pods."""

    def read(
        self, namespace: str, workload: str, kind: str, start: float, end: float
    ) -> Mapping[str, UsageSeries]: ...


@dataclass(frozen=True, slots=True)
class PrometheusSource:
    client: PrometheusClient
    base_filter: str = ""

    def read(
        self, namespace: str, workload: str, kind: str, start: float, end: float
    ) -> Mapping[str, UsageSeries]:
        return read_workload_usage(
            self.client, namespace, workload, start, end, kind=kind, base_filter=self.base_filter
        )


class SourceUnavailable(RuntimeError):
    """The usage source could not be read."""


@dataclass(frozen=True, slots=True)
class NoSource:
    """No Prometheus configured: every read says so."""

    def read(
        self, namespace: str, workload: str, kind: str, start: float, end: float
    ) -> Mapping[str, UsageSeries]:
        raise SourceUnavailable(
            "no Prometheus address configured (katalyst controller "
            "--resourcerecommend-prometheus-address, Helm value recommendation.prometheus.url)"
        )


def source_for(url: str | None, timeout_s: float, base_filter: str = "") -> UsageSource:
    """Prometheus at `url`, or NoSource when none is configured."""
    return PrometheusSource(PrometheusClient(url, timeout_s), base_filter) if url else NoSource()


def _quantity(part: Any, resource: str) -> float | None:
    raw = part.get(resource) if isinstance(part, Mapping) else None
    if raw is None:
        return None
    try:
        return Quantity.parse(str(raw)).as_float()
    except QuantityError:
        return None


def container_resources(container: Mapping[str, Any]) -> CurrentResources:
    """A container's declared requests and limits (cores, bytes; None where not set or not
    readable)."""
    res = container.get("resources")
    res = res if isinstance(res, Mapping) else {}
    req, lim = res.get("requests"), res.get("limits")
    return CurrentResources(
        cpu_request=_quantity(req, names.RESOURCE_CPU),
        memory_request=_quantity(req, names.RESOURCE_MEMORY),
        cpu_limit=_quantity(lim, names.RESOURCE_CPU),
        memory_limit=_quantity(lim, names.RESOURCE_MEMORY),
    )


def template_resources(workload: Mapping[str, Any] | None) -> dict[str, CurrentResources]:
    """Container name -> what the workload's pod template declares."""
    spec = (workload or {}).get("spec")
    template = spec.get("template") if isinstance(spec, Mapping) else None
    pod_spec = template.get("spec") if isinstance(template, Mapping) else None
    items = pod_spec.get("containers") if isinstance(pod_spec, Mapping) else None
    return {
        str(c.get("name")): container_resources(c)
        for c in items or []
        if isinstance(c, Mapping) and c.get("name")
    }


def complete_oom(
    events: Sequence[OOMEvent],
    current: CurrentResources | None,
    series: UsageSeries,
    window_s: float = OOM_PEAK_WINDOW_S,
) -> list[OOMEvent]:
    """The events with what the record lacks: the limit the container declares now and the
    highest working set in the `window_s` before each kill (when the series has one)."""
    out: list[OOMEvent] = []
    for e in events:
        limit = e.memory_limit
        if limit is None and current is not None:
            limit = current.memory_limit
        peak = e.peak
        if peak is None and len(series):
            lo = int(np.searchsorted(series.timestamps, e.timestamp - window_s, side="left"))
            hi = int(np.searchsorted(series.timestamps, e.timestamp, side="right"))
            if hi > lo:
                peak = float(series.memory[lo:hi].max())
        out.append(replace(e, memory_limit=limit, peak=peak))
    return out


def recommend_container(
    engine: Recommender,
    series: UsageSeries,
    now: float,
    settings: Any,
    events: Sequence[OOMEvent],
    current: CurrentResources | None,
) -> Recommendation:
    """One container's recommendation: OOM events completed, and `current` given to the
    recommenders that read it (pykatalyst's: hysteresis and limits). Raises
    RecommendationNotReady as the recommender does."""
    if engine.name == "katalyst":
        # Katalyst's rule reads the request of the record alone, as Katalyst does.
        return engine.recommend(series, now, settings, events)
    whole = complete_oom(events, current, series)
    return engine.recommend(series, now, settings, whole, current)


def terms_text(terms: Mapping[str, Any], now: float) -> str:
    """The recommendation-terms annotation: when, and per container the recommender and
    the terms behind its figures."""
    return json.dumps({"time": rfc3339(now), "containers": terms}, sort_keys=True)
