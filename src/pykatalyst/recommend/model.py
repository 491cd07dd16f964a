"""The values every recommender takes and returns: usage series, OOM events, recommendations."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

CPU = "cpu"
MEMORY = "memory"
RESOURCES = (CPU, MEMORY)


class RecommendationNotReady(Exception):
    """No recommendation can be given yet; ``reason`` is Katalyst's condition reason."""

    reason = "RecommendationNotReady"

    def __init__(self, message: str, resource: str | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.resource = resource
        # what the samples were, in our words, for logs (the message stays Katalyst's)
        self.detail = detail


def _array(values: Any, name: str) -> FloatArray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name}: expected a one-dimensional array, got shape {array.shape}")
    return array


@dataclass(frozen=True, slots=True)
class UsageSeries:
    """One container's usage: one row per sample.

    ``timestamps`` are seconds (Unix time), ascending; ``cpu`` is cores, the mean over the
    sample's interval; ``memory`` is bytes, the peak over the interval (working set). Values
    are finite and non-negative. Build one with ``UsageSeries.of(...)``, which checks this.
    """

    timestamps: FloatArray = field(repr=False)
    cpu: FloatArray = field(repr=False)
    memory: FloatArray = field(repr=False)

    @classmethod
    def of(cls, timestamps: Any, cpu: Any, memory: Any) -> UsageSeries:
        t, c, m = _array(timestamps, "timestamps"), _array(cpu, "cpu"), _array(memory, "memory")
        if not (t.shape == c.shape == m.shape):
            raise ValueError(
                f"timestamps, cpu and memory differ in length: {t.size}, {c.size}, {m.size}"
            )
        for name, array in (("timestamps", t), ("cpu", c), ("memory", m)):
            bad = np.flatnonzero(~np.isfinite(array) | (array < 0))
            if bad.size:
                raise ValueError(
                    f"{name}[{int(bad[0])}] = {array[bad[0]]!r}: accepted: a finite number >= 0"
                )
        if t.size > 1 and np.any(np.diff(t) < 0):
            order = np.argsort(t, kind="stable")
            t, c, m = t[order], c[order], m[order]
        return cls(timestamps=t, cpu=c, memory=m)

    def __len__(self) -> int:
        return int(self.timestamps.size)

    def before(self, t: float) -> UsageSeries:
        """The samples taken strictly before ``t``."""
        n = int(np.searchsorted(self.timestamps, t, side="left"))
        return UsageSeries(self.timestamps[:n], self.cpu[:n], self.memory[:n])

    def until(self, t: float) -> UsageSeries:
        """The samples taken at or before ``t``."""
        n = int(np.searchsorted(self.timestamps, t, side="right"))
        return UsageSeries(self.timestamps[:n], self.cpu[:n], self.memory[:n])

    def between(self, start: float, end: float) -> UsageSeries:
        """The samples with ``start <= t < end``."""
        lo = int(np.searchsorted(self.timestamps, start, side="left"))
        hi = int(np.searchsorted(self.timestamps, end, side="left"))
        return UsageSeries(self.timestamps[lo:hi], self.cpu[lo:hi], self.memory[lo:hi])

    @property
    def span_s(self) -> float:
        return float(self.timestamps[-1] - self.timestamps[0]) if len(self) else 0.0


@dataclass(frozen=True, slots=True)
class OOMEvent:
    """A container killed for memory: when, and its memory request (and limit) then.

    ``peak`` is the highest working set seen before the kill, when known. ``pod``,
    ``namespace`` and ``container`` identify it as Katalyst's ``oom-record`` does.
    """

    timestamp: float
    memory_request: float
    memory_limit: float | None = None
    peak: float | None = None
    pod: str = ""
    namespace: str = ""
    container: str = ""


@dataclass(frozen=True, slots=True)
class CurrentResources:
    """What the container runs with now, for recommenders that keep limits in the declared
    ratio or change requests only past a threshold (hysteresis). ``None``: not set.
    ``changed_at`` is when the requests last changed (Unix s); ``throttled`` says the cpu was
    throttled lately (the cgroup's throttled periods grew)."""

    cpu_request: float | None = None
    memory_request: float | None = None
    cpu_limit: float | None = None
    memory_limit: float | None = None
    changed_at: float | None = None
    throttled: bool = False


@dataclass(frozen=True, slots=True)
class RunnerUp:
    """A candidate model that lost: what it would have asked for, and its replay cost."""

    model: str
    value: float
    cost: float

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "value": self.value, "cost": self.cost}


@dataclass(frozen=True, slots=True)
class ResourceTerms:
    """Why one resource got its figure: the statistic, its inputs and what adjusted it."""

    percentile: float
    half_life_s: float
    margin: float
    samples: int
    span_s: float
    estimate: float
    """The percentile of the histogram, before the margin."""
    oom_bump: float | None = None
    """The OOM-driven figure when it set the request, else None."""
    model: str = ""
    """The chosen candidate model, for recommenders that choose one."""
    notes: tuple[str, ...] = ()
    cost: float | None = None
    """The chosen model's replay cost (the resource's units: mean slack plus weighted
    shortfall, under-provisioning and changes), for recommenders that choose one."""
    runners_up: tuple[RunnerUp, ...] = ()
    """The next cheapest models, cheapest first."""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "percentile": self.percentile,
            "half_life_hours": self.half_life_s / 3600.0,
            "margin": self.margin,
            "samples": self.samples,
            "span_hours": round(self.span_s / 3600.0, 3),
            "estimate": self.estimate,
            "oom_bump": self.oom_bump,
        }
        if self.model:
            data["model"] = self.model
        if self.cost is not None:
            data["cost"] = self.cost
        if self.runners_up:
            data["runners_up"] = [r.to_json() for r in self.runners_up]
        if self.notes:
            data["notes"] = list(self.notes)
        return data


@dataclass(frozen=True, slots=True)
class Recommendation:
    """Requests (and limits, when the recommender sets them) for one container.

    Cpu in cores, memory in bytes; ``None`` for what the recommender does not set.
    ``terms`` maps each resource to the terms that produced its figures.
    """

    recommender: str
    cpu_request: float | None
    memory_request: float | None
    cpu_limit: float | None = None
    memory_limit: float | None = None
    terms: Mapping[str, ResourceTerms] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "recommender": self.recommender,
            "cpu_request": self.cpu_request,
            "memory_request": self.memory_request,
            "cpu_limit": self.cpu_limit,
            "memory_limit": self.memory_limit,
            "terms": {name: terms.to_json() for name, terms in self.terms.items()},
        }
