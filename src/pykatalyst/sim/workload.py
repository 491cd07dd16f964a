"""Workloads: service demand curves and batch task arrivals, drawn once per seed.

Every policy of a run replays the same `Workload`, so differences between policies come
from the policies alone. Shapes come from the bundled Alibaba 2018 cluster usage series
(see `pykatalyst/data/traces/ATTRIBUTION.md`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import numpy.typing as npt

from pykatalyst.sim.csvfile import read_csv_column
from pykatalyst.sim.scenario import (
    Batch,
    ConstantDemand,
    CsvDemand,
    DiurnalDemand,
    Scenario,
    Service,
    TraceDemand,
)

F64 = npt.NDArray[np.float64]

TRACE_FILE = "alibaba2018_cluster_usage_300s.csv"
TRACE_INTERVAL_S = 300.0


def trace_path() -> Path:
    """Where the bundled trace lives inside the installed package."""
    return Path(str(resources.files("pykatalyst").joinpath("data", "traces", TRACE_FILE)))


def trace_series(column: str = "cpu_util_percent") -> F64:
    return np.asarray(read_csv_column(str(trace_path()), column), dtype=np.float64)


def curve(values: F64, interval: float, times: F64, offset: float = 0.0) -> F64:
    """The curve at `times`, cycled, linearly interpolated, normalised to mean 1."""
    mean = float(values.mean())
    if mean <= 0:
        raise ValueError("a demand curve must have a positive mean")
    n = len(values)
    pos = ((times + offset) / interval) % n
    i0 = np.floor(pos).astype(np.int64)
    frac = pos - i0
    i1 = (i0 + 1) % n
    return np.asarray((values[i0] * (1 - frac) + values[i1] * frac) / mean, dtype=np.float64)


def diurnal(times: F64, start_hour: float, amplitude: float, peak_hour: float) -> F64:
    hours = (times / 3600.0 + start_hour) % 24.0
    return np.asarray(1.0 + amplitude * np.cos(2 * math.pi * (hours - peak_hour) / 24.0))


def demand_level(service: Service, times: F64, start_hour: float) -> F64:
    """Mean usage as a fraction of the cpu request at `times` (before per-replica noise)."""
    d = service.demand
    if isinstance(d, ConstantDemand):
        return np.full(len(times), d.level)
    if isinstance(d, DiurnalDemand):
        return d.mean * diurnal(times, start_hour, d.amplitude, d.peak_hour)
    if isinstance(d, TraceDemand):
        series = trace_series(d.column)
        return d.mean * curve(series, TRACE_INTERVAL_S, times, d.offset + start_hour * 3600)
    if isinstance(d, CsvDemand):
        series = np.asarray(read_csv_column(str(d.path), d.column), dtype=np.float64)
        return d.mean * curve(series, d.interval, times, d.offset)
    raise TypeError(f"unknown demand {d!r}")  # pragma: no cover - the union is closed


@dataclass(frozen=True, slots=True)
class ServiceLoad:
    """Per-replica cpu demand in cores: `demand[step, replica]`."""

    service: Service
    demand: F64


@dataclass(frozen=True, slots=True)
class BatchTasks:
    """Batch tasks in arrival order."""

    arrival: F64  # seconds
    cores: F64  # cpus a task keeps busy when it gets them
    work: F64  # core-seconds to finish
    memory: npt.NDArray[np.int64]  # bytes requested
    memory_used: npt.NDArray[np.int64]  # bytes resident while running

    def __len__(self) -> int:
        return len(self.arrival)


@dataclass(frozen=True, slots=True)
class Workload:
    times: F64  # start of each step
    services: tuple[ServiceLoad, ...]
    batch: BatchTasks


def _rate_shape(batch: Batch, times: F64, start_hour: float) -> F64:
    a = batch.arrival
    if a.diurnal == "none":
        return np.ones(len(times))
    if a.diurnal == "sine":
        return diurnal(times, start_hour, a.amplitude, a.peak_hour)
    return curve(trace_series(), TRACE_INTERVAL_S, times, start_hour * 3600)


def batch_tasks(batch: Batch | None, duration: float, start_hour: float, seed: int) -> BatchTasks:
    """Poisson arrivals with a time-varying rate (by thinning), sizes and work drawn iid."""
    rng = np.random.default_rng([seed, 2])
    if batch is None:
        empty = np.zeros(0)
        return BatchTasks(empty, empty, empty, np.zeros(0, np.int64), np.zeros(0, np.int64))
    fine = np.arange(0.0, duration, 60.0)
    shape = _rate_shape(batch, fine, start_hour)
    peak = float(shape.max())
    lam = batch.arrival.rate_per_hour / 3600.0 * peak
    n_cand = int(rng.poisson(lam * duration))
    cand = np.sort(rng.uniform(0.0, duration, n_cand))
    keep_p = shape[np.minimum((cand // 60.0).astype(np.int64), len(shape) - 1)] / peak
    arrival = cand[rng.uniform(size=n_cand) < keep_p]
    n = len(arrival)
    values = np.asarray(batch.cores.values, dtype=np.float64)
    weights = np.asarray(batch.cores.weights or [1.0] * len(values), dtype=np.float64)
    cores = rng.choice(values, size=n, p=weights / weights.sum())
    m = batch.minutes
    minutes = m.median * np.exp(m.sigma * rng.standard_normal(n))
    if m.max is not None:
        minutes = np.minimum(minutes, m.max)
    minutes = np.maximum(minutes, 0.5)
    memory = np.ceil(cores * batch.memory_per_core).astype(np.int64)
    used = np.floor(memory * batch.memory_usage).astype(np.int64)
    return BatchTasks(arrival, cores, cores * minutes * 60.0, memory, used)


def build_workload(scenario: Scenario) -> Workload:
    """Draw the scenario's workload; a pure function of the scenario (and its seed)."""
    times = np.arange(scenario.steps, dtype=np.float64) * scenario.step
    loads = []
    for idx, svc in enumerate(scenario.services):
        rng = np.random.default_rng([scenario.seed, 1, idx])
        level = demand_level(svc, times, scenario.start_hour)
        # Lognormal noise with mean 1, correlated over a few minutes (AR(1) in log space),
        # so a replica's load wanders the way a real one does rather than flickering.
        steps = len(times)
        rho = math.exp(-scenario.step / 300.0)
        eps = rng.standard_normal((steps, svc.replicas))
        z = np.empty_like(eps)
        z[0] = eps[0]
        scale = math.sqrt(1 - rho * rho)
        for i in range(1, steps):
            z[i] = rho * z[i - 1] + scale * eps[i]
        sigma = svc.noise
        noise = np.exp(sigma * z - sigma * sigma / 2)
        demand = np.clip(level[:, None] * noise, 0.0, 1.5) * svc.cpu_request
        if svc.cpu_limit is not None:
            demand = np.minimum(demand, svc.cpu_limit)
        loads.append(ServiceLoad(svc, demand))
    batch = batch_tasks(scenario.batch, scenario.duration, scenario.start_hour, scenario.seed)
    return Workload(times, tuple(loads), batch)
