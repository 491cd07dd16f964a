"""A small metric store: Host samples in, Katalyst's metrics out; and the agent's
Prometheus exporter.

Katalyst's advisor reads metrics by name (`cpu.usage.container`, `cpu.load.1min.container`,
`mem.rss.container`, `cpu.usage.ratio.cpu`, ...). This store keeps the latest value of each
per cgroup, derives the load averages the kernel way — an exponentially weighted moving
average of runnable tasks, decaying with e^(−Δt/60 s) and e^(−Δt/300 s) on the injected
clock — and forgets values older than the insurance period, so that a stale figure reads as
missing (and the advisor falls back to requests) rather than as a wrong one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge

from pykatalyst.agent.host.base import CgroupStats, HostSample
from pykatalyst.agent.reporter import milli_cpu
from pykatalyst.api import names

if TYPE_CHECKING:
    from pykatalyst.agent.plan import AgentPlan, ReclaimedFigure

# Katalyst's metric names, for terms and exports.
CPU_USAGE_CONTAINER = "cpu.usage.container"
CPU_LOAD_1MIN_CONTAINER = "cpu.load.1min.container"
CPU_LOAD_5MIN_CONTAINER = "cpu.load.5min.container"
MEM_RSS_CONTAINER = "mem.rss.container"
MEM_CACHE_CONTAINER = "mem.cache.container"
MEM_SHMEM_CONTAINER = "mem.shmem.container"
CPU_USAGE_RATIO_CPU = "cpu.usage.ratio.cpu"


@dataclass(frozen=True, slots=True)
class CpuMetrics:
    usage: float | None
    load1: float | None
    load5: float | None


@dataclass(frozen=True, slots=True)
class MemoryMetrics:
    rss: int | None
    cache: int | None
    shmem: int | None


class _Entry:
    __slots__ = (
        "cache",
        "load1",
        "load5",
        "load_time",
        "mem_time",
        "rss",
        "runnable",
        "seen",
        "shmem",
        "usage",
        "usage_time",
    )

    def __init__(self) -> None:
        self.usage: float | None = None
        self.usage_time = -math.inf
        self.load1 = 0.0
        self.load5 = 0.0
        self.load_time: float | None = None
        self.runnable = 0.0
        self.rss: int | None = None
        self.cache: int | None = None
        self.shmem: int | None = None
        self.mem_time = -math.inf
        self.seen = -math.inf


class MetricStore:
    def __init__(self, insurance_period_s: float) -> None:
        self.insurance_period_s = insurance_period_s
        self._entries: dict[str, _Entry] = {}
        self._cpu_ratio: Sequence[float] = ()
        self._cpu_ratio_time = -math.inf
        self._last_sample: HostSample | None = None
        self._sched_wait: Sequence[float] = ()
        self._sched_wait_time = -math.inf
        self._staged: dict[str, float] = {}

    @property
    def last_sample(self) -> HostSample | None:
        return self._last_sample

    def ingest(self, sample: HostSample) -> None:
        t = sample.time
        self._last_sample = sample
        if sample.cpu_usage_ratio:
            self._cpu_ratio = sample.cpu_usage_ratio
            self._cpu_ratio_time = t
        if sample.cpu_sched_wait_us:
            self._sched_wait = sample.cpu_sched_wait_us
            self._sched_wait_time = t
        entries = self._entries
        for path, stats in sample.cgroups.items():
            e = entries.get(path)
            if e is None:
                e = entries[path] = _Entry()
            self._update(e, t, stats)
        for path, usage in self._staged.items():
            # A fresher figure than the sample's rate, which averages since the last one.
            e = entries.get(path)
            if e is None:
                e = entries[path] = _Entry()
            e.usage, e.usage_time, e.seen = usage, t, max(e.seen, t)
        self._staged = {}
        if len(entries) > 2 * max(len(sample.cgroups), 16):
            self._forget(t)

    def stage_usage(self, usage: Mapping[str, float]) -> None:
        """Cpu usage (cores per cgroup) over a window shorter than the sampling interval:
        the next `ingest` takes it in place of the sample's rate, for that sample only."""
        self._staged.update(usage)

    @staticmethod
    def _update(e: _Entry, t: float, s: CgroupStats) -> None:
        e.seen = t
        if s.cpu_usage_cores is not None:
            e.usage = s.cpu_usage_cores
            e.usage_time = t
        if s.nr_running is not None:
            n = float(s.nr_running)
            e.runnable = n
            if e.load_time is None:
                # Start from what runs now: an agent started late in a container's life
                # should not read its load as zero for the first minutes.
                e.load1 = e.load5 = n
            elif t > e.load_time:
                dt = t - e.load_time
                k1 = math.exp(-dt / 60.0)
                k5 = math.exp(-dt / 300.0)
                e.load1 = e.load1 * k1 + n * (1.0 - k1)
                e.load5 = e.load5 * k5 + n * (1.0 - k5)
            e.load_time = t
        if s.memory_rss is not None:
            e.rss = s.memory_rss
            e.cache = s.memory_cache
            e.shmem = s.memory_shmem
            e.mem_time = t

    def _forget(self, now: float) -> None:
        horizon = 2 * self.insurance_period_s
        for path in [p for p, e in self._entries.items() if now - e.seen > horizon]:
            del self._entries[path]

    def _fresh(self, t: float | None, now: float) -> bool:
        return t is not None and now - t <= self.insurance_period_s

    def cpu(self, cgroup: str, now: float) -> CpuMetrics | None:
        e = self._entries.get(cgroup)
        if e is None:
            return None
        usage = e.usage if self._fresh(e.usage_time, now) else None
        fresh_load = self._fresh(e.load_time, now)
        load1 = e.load1 if fresh_load else None
        load5 = e.load5 if fresh_load else None
        if usage is None and load1 is None:
            return None
        return CpuMetrics(usage, load1, load5)

    def runnable(self, cgroup: str, now: float) -> float | None:
        """Runnable threads of the cgroup at the last sample (Katalyst's
        cpu.nr.runnable.container), None when not measured or stale."""
        e = self._entries.get(cgroup)
        if e is None or not self._fresh(e.load_time, now):
            return None
        return e.runnable

    def memory(self, cgroup: str, now: float) -> MemoryMetrics | None:
        e = self._entries.get(cgroup)
        if e is None or not self._fresh(e.mem_time, now):
            return None
        return MemoryMetrics(e.rss, e.cache, e.shmem)

    def cpu_usage(self, cgroup: str, now: float) -> float | None:
        e = self._entries.get(cgroup)
        if e is None or not self._fresh(e.usage_time, now):
            return None
        return e.usage

    def cpu_usage_ratio(self, now: float) -> Sequence[float] | None:
        """Per-cpu busy share (`cpu.usage.ratio.cpu`), or None when missing or stale."""
        if not self._cpu_ratio or not self._fresh(self._cpu_ratio_time, now):
            return None
        return self._cpu_ratio

    def cpu_sched_wait_us(self, now: float) -> Sequence[float] | None:
        """Per-cpu run-queue wait (`cpu.schedwait.cpu`, µs), or None when missing or stale."""
        if not self._sched_wait or not self._fresh(self._sched_wait_time, now):
            return None
        return self._sched_wait


# What the agent exports on /metrics, from each tick's AgentPlan. Katalyst's sysadvisor
# names where it has them (`cpu_advisor_pool_size`, `headroom_report_result`), ours
# (`katalyst_agent_*`) for what it has no metric of.
POOL_SIZE = "cpu_advisor_pool_size"
HEADROOM_REPORT_RESULT = "headroom_report_result"
RECLAIMED_HEADROOM = "katalyst_agent_reclaimed_headroom"
RECLAIMED_TERM = "katalyst_agent_reclaimed_term"
CGROUP_WRITES = "katalyst_agent_cgroup_writes"
RECLAIM_ENABLED = "katalyst_agent_reclaim_enabled"
NO_NUMA = "-1"  # Katalyst's numa_id for a pool that spans every NUMA node


def _scaled(figure: ReclaimedFigure, value: float) -> float:
    """In the CNR's unit and rounding: millicores for reclaimed_millicpu, whole bytes."""
    if figure.resource == names.RECLAIMED_MILLICPU:
        return float(milli_cpu(value))
    return float(max(int(value), 0))


def numeric_terms(terms: Mapping[str, object], prefix: str = "") -> dict[str, float]:
    """The numeric terms of a figure, nested mappings flattened with dots (`smoothing.window`);
    flags and text are left out."""
    out: dict[str, float] = {}
    for key, value in terms.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(numeric_terms(value, f"{name}."))
        elif (
            isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        ):
            out[name] = float(value)
    return out


class AgentExporter:
    """Prometheus metrics of the agent's plans, in the registry the agent's host serves."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.pool_size = Gauge(
            POOL_SIZE,
            "Cpus in each pool the agent manages (Katalyst's sysadvisor pool size).",
            ["name", "numa_id", "pool_type"],
            registry=registry,
        )
        self.reported = Gauge(
            HEADROOM_REPORT_RESULT,
            "Reclaimed capacity published on the CNR (millicpu for reclaimed_millicpu, bytes "
            "for reclaimed_memory).",
            ["resourceName"],
            registry=registry,
        )
        self.headroom = Gauge(
            RECLAIMED_HEADROOM,
            "This tick's reclaimed headroom before smoothing, in the published unit.",
            ["resource"],
            registry=registry,
        )
        self.terms = Gauge(
            RECLAIMED_TERM,
            "The terms of the reclaimed-capacity formula this tick (docs/agent.md).",
            ["resource", "term"],
            registry=registry,
        )
        self.enabled = Gauge(
            RECLAIM_ENABLED,
            "1 while the effective config has reclaim on (advisor.enable_reclaim), else 0.",
            registry=registry,
        )
        self.writes = Counter(
            CGROUP_WRITES,
            "Cgroup knob writes by the enforcer, by knob and result (applied, failed, dry-run).",
            ["knob", "result"],
            registry=registry,
        )

    def observe(self, plan: AgentPlan, reclaim_enabled: bool | None = None) -> None:
        """One tick's plan; `reclaim_enabled` is the effective config's switch that tick."""
        if reclaim_enabled is not None:
            self.enabled.set(1 if reclaim_enabled else 0)
        self.pool_size.clear()
        for pool in plan.pools:
            numa = NO_NUMA if pool.numa is None else str(pool.numa)
            self.pool_size.labels(pool.name, numa, pool.name.split("-", 1)[0]).set(pool.size)
        self.terms.clear()
        for figure in (plan.reclaimed_cpu, plan.reclaimed_memory):
            self.headroom.labels(figure.resource).set(_scaled(figure, figure.value))
            if figure.reported is not None:
                self.reported.labels(figure.resource).set(_scaled(figure, figure.reported))
            for term, value in numeric_terms(figure.terms).items():
                self.terms.labels(figure.resource, term).set(value)
        for result in ("applied", "failed", "dry-run"):
            counts = plan.enforce.get(f"{result}_by_knob", {})
            if isinstance(counts, Mapping):
                for knob, n in counts.items():
                    self.writes.labels(str(knob), result).inc(float(n))
