"""The scheduler's Prometheus metrics, under kube-scheduler's names and labels, so that the
dashboards and alerts written for kube-scheduler read pykatalyst's scheduler unchanged:

- `scheduler_schedule_attempts_total{result, profile}`: `scheduled`, `unschedulable` or
  `error` (a binding refused, a cycle that failed), per profile (schedulerName);
- `scheduler_scheduling_attempt_duration_seconds{result, profile}`: the time of one
  attempt, from taking the pod off the queue to its binding (or verdict);
- `scheduler_pending_pods{queue}`: pods waiting, by queue (`active`, `backoff`,
  `unschedulable`, `gated`; kube-scheduler's queue names).
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from pykatalyst.scheduler.scheduler import ScheduleOutcome

SCHEDULE_ATTEMPTS = "scheduler_schedule_attempts"
ATTEMPT_DURATION = "scheduler_scheduling_attempt_duration_seconds"
PENDING_PODS = "scheduler_pending_pods"

# kube-scheduler's buckets for the attempt duration: 1ms doubling 15 times (up to ~16s).
ATTEMPT_BUCKETS = tuple(0.001 * 2**i for i in range(15))
QUEUES = ("active", "backoff", "unschedulable", "gated")
SCHEDULED, UNSCHEDULABLE, ERROR = "scheduled", "unschedulable", "error"
# Outcomes that say nothing about the pod but about the scheduler or the API server.
_ERRORS = frozenset({"Error", "BindingFailed", "NoProfile"})


def attempt_result(outcome: ScheduleOutcome) -> str:
    """kube-scheduler's `result` label of an attempt."""
    if outcome.node is not None:
        return SCHEDULED
    return ERROR if outcome.reason in _ERRORS else UNSCHEDULABLE


class SchedulerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.attempts = Counter(
            SCHEDULE_ATTEMPTS,
            "Scheduling attempts, by result (scheduled, unschedulable, error) and profile.",
            ["result", "profile"],
            registry=registry,
        )
        self.duration = Histogram(
            ATTEMPT_DURATION,
            "Time of one scheduling attempt, queue pop to binding or verdict, in seconds.",
            ["result", "profile"],
            buckets=ATTEMPT_BUCKETS,
            registry=registry,
        )
        self.pending = Gauge(
            PENDING_PODS,
            "Pods waiting to be scheduled, by queue (active, backoff, unschedulable, gated).",
            ["queue"],
            registry=registry,
        )
        for q in QUEUES:
            self.pending.labels(q)

    def attempted(self, outcome: ScheduleOutcome, seconds: float) -> None:
        result = attempt_result(outcome)
        self.attempts.labels(result, outcome.profile).inc()
        self.duration.labels(result, outcome.profile).observe(max(0.0, seconds))

    def queued(self, where: Mapping[str, int]) -> None:
        """The queue's counts (`SchedulingQueue.pending()`); a pod in flight is counted
        active, as kube-scheduler counts it until the attempt ends."""
        counts = {q: 0 for q in QUEUES}
        for place, n in where.items():
            q = "active" if place == "flight" else place
            counts[q] = counts.get(q, 0) + n
        for q, n in counts.items():
            self.pending.labels(q).set(n)
