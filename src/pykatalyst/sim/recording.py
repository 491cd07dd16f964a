"""What a simulated run records: the per-step time series (`Series`), the run's totals and
events (`Tally`), each service's p99 latency per step, and the `PolicyRun` the report is
written from. `Recorder` is the one place the runner's parts write these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from pykatalyst.sim.arrays import CpuStep
from pykatalyst.sim.scenario import Policy
from pykatalyst.sim.workload import Workload

if TYPE_CHECKING:
    from pykatalyst.sim.machines import Machines

Progress = Callable[[int, int], None]
"""Told (steps done, steps in all) after every step of a run."""


@dataclass(slots=True)
class Series:
    """Per-step time series of one policy's run."""

    time: list[float] = field(default_factory=list)
    cpu_util: list[float] = field(default_factory=list)
    cpu_util_services: list[float] = field(default_factory=list)
    cpu_util_batch: list[float] = field(default_factory=list)
    mem_util: list[float] = field(default_factory=list)
    slo_violations: list[int] = field(default_factory=list)  # replica-steps over SLO
    replicas: list[int] = field(default_factory=list)
    p99_ratio_max: list[float] = field(default_factory=list)  # worst p99 / SLO
    batch_running: list[int] = field(default_factory=list)
    batch_pending: list[int] = field(default_factory=list)
    batch_queued: list[int] = field(default_factory=list)
    evictions: list[int] = field(default_factory=list)  # in this step
    oom_kills: list[int] = field(default_factory=list)
    reclaimed_capacity: list[float] = field(default_factory=list)  # cores, cluster
    sample_share_pool: list[float] = field(default_factory=list)
    sample_reclaim_pool: list[float] = field(default_factory=list)
    sample_reclaimed_capacity: list[float] = field(default_factory=list)
    sample_reclaimed_usage: list[float] = field(default_factory=list)
    sample_service_usage: list[float] = field(default_factory=list)


@dataclass(slots=True)
class Tally:
    completed: int = 0
    completed_work: float = 0.0  # core-seconds of finished tasks
    completion_times: list[float] = field(default_factory=list)
    wait_times: list[float] = field(default_factory=list)
    lost_work: float = 0.0  # core-seconds thrown away by evictions and OOM kills
    batch_cpu_used: float = 0.0  # core-seconds batch ran, finished or not
    evictions: int = 0
    evictions_batch: int = 0
    oom_kills: int = 0
    service_restarts: int = 0
    pods_pending_max: int = 0
    agent_reconciles: int = 0
    events: list[tuple[float, str, str, str]] = field(default_factory=list)


@dataclass(slots=True)
class PolicyRun:
    policy: Policy
    series: Series
    tally: Tally
    latency: dict[str, list[float]]  # per service: p99 per step (mean over replicas)
    sample_node: str
    wall_s: float = 0.0
    cpu_s: float = 0.0  # the CPU time of the process running it, while it ran
    peak_rss_gib: float = 0.0  # the peak resident memory of that process, when it ended


class Recorder:
    """One policy's series, tally and latencies, written step by step; `evictions` and
    `oom_kills` count the step in progress."""

    def __init__(self, workload: Workload) -> None:
        self.series = Series()
        self.tally = Tally()
        self.latency: dict[str, list[float]] = {s.service.name: [] for s in workload.services}
        self._services = [s.service.name for s in workload.services]
        self.evictions = 0
        self.oom_kills = 0

    def begin_step(self) -> None:
        self.evictions = 0
        self.oom_kills = 0

    def event(self, t: float, kind: str, pod: str, node: str) -> None:
        self.tally.events.append((t, kind, pod, node))

    def evicted(self, t: float, pod: str, node: str) -> None:
        self.tally.evictions += 1
        self.evictions += 1
        self.event(t, "Evicted", pod, node)

    def oom_killed(self, t: float, pod: str, node: str) -> None:
        self.oom_kills += 1
        self.tally.oom_kills += 1
        self.event(t, "OOMKilled", pod, node)

    def service_restarted(self) -> None:
        """A service container restarted in place: its replica is down for this step."""
        self.tally.service_restarts += 1
        self.series.slo_violations[-1] += 1

    def latencies(self, p99: list[float]) -> None:
        """Each service's p99 this step (mean over its running replicas), in workload order."""
        for name, value in zip(self._services, p99, strict=True):
            self.latency[name].append(value)

    def record(
        self,
        now: float,
        cpu: CpuStep,
        node_mem: np.ndarray,
        slo: tuple[int, int, float],
        machines: Machines,
        reclaimed: tuple[float, float],
        pools: tuple[float, float],
    ) -> None:
        """The step's figures into the series: (replicas violating, replicas, worst p99
        / SLO) in `slo`; the reclaimed capacity of the cluster and of the sample node in
        `reclaimed`; the sample node's share and reclaim pools (cpus) in `pools`."""
        rows, static = machines.rows, machines.static
        s = self.series
        nn = len(static.cpus)
        is_svc, granted = rows.is_svc, cpu.granted
        node_used = np.asarray(np.bincount(rows.node, granted, nn), dtype=np.float64)
        node_svc_used = np.bincount(rows.node[is_svc], granted[is_svc], nn)
        mem_used_total = float(node_mem.sum() + static.sys_memory.sum())
        total_cpus = float(static.cpus.sum())
        s.time.append(now)
        s.cpu_util.append(float(node_used.sum()) / total_cpus)
        s.cpu_util_services.append(float(node_svc_used.sum()) / total_cpus)
        s.cpu_util_batch.append(float(node_used.sum() - node_svc_used.sum()) / total_cpus)
        s.mem_util.append(mem_used_total / float(static.memory.sum()))
        s.slo_violations.append(slo[0])
        s.replicas.append(slo[1])
        s.p99_ratio_max.append(slo[2])
        s.batch_running.append(int(cpu.batch.sum()))
        s.reclaimed_capacity.append(reclaimed[0])
        on_node = rows.node == machines.sample_node
        s.sample_service_usage.append(float(granted[on_node & is_svc].sum()))
        s.sample_reclaimed_usage.append(float(granted[on_node & cpu.batch].sum()))
        s.sample_share_pool.append(pools[0])
        s.sample_reclaim_pool.append(pools[1])
        s.sample_reclaimed_capacity.append(reclaimed[1])

    def end_step(self, pending: int, batch_pending: int, batch_queued: int) -> None:
        """The step's pods pending in the cluster, batch pods pending and tasks queued in
        the framework, and the step's evictions and OOM kills."""
        self.tally.pods_pending_max = max(self.tally.pods_pending_max, pending)
        self.series.batch_pending.append(batch_pending)
        self.series.batch_queued.append(batch_queued)
        self.series.evictions.append(self.evictions)
        self.series.oom_kills.append(self.oom_kills)

    def run(self, policy: Policy, sample_node: str) -> PolicyRun:
        return PolicyRun(policy, self.series, self.tally, self.latency, sample_node)
