"""The HorizontalPodAutoscaler's rule as kube-controller-manager v1.34 applies it, for the
simulator (the HPA controller itself cannot run outside a cluster).

Re-implemented from the upstream algorithm (`pkg/controller/podautoscaler`:
`replica_calculator.go` and `horizontal.go`) and checked against the cases of its
documentation and tests (tests/sim/test_sim_hpa.py):

- Resource utilization: ratio = mean utilization of ready pods / target. Within the
  tolerance (0.1) nothing changes. Scaling up with pods not yet ready counts them at 0 %,
  scaling down counts missing pods at 100 %; if that flips the direction or lands within
  the tolerance, nothing changes; else ⌈ratio × pods counted⌉.
- External AverageValue: ratio = total / (target × current replicas); within the
  tolerance nothing changes, else ⌈total / target⌉.
- Several metrics: the largest proposal.
- `behavior`: the stabilization window (scale up: the smallest recommendation of the
  window; scale down: the largest), then the rate policies over their periods
  (selectPolicy Max: the most permissive), then min/max replicas. Defaults: scale up 0 s,
  max(100 %, 4 pods) per 15 s; scale down 300 s, 100 % per 15 s.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

TOLERANCE = 0.1
SYNC_PERIOD_S = 15.0


@dataclass(frozen=True, slots=True)
class Policy:
    kind: str  # Pods | Percent
    value: int
    period_s: float


@dataclass(frozen=True, slots=True)
class Rules:
    stabilization_s: float
    policies: tuple[Policy, ...]
    select: str = "Max"  # Max | Min | Disabled


DEFAULT_UP = Rules(0.0, (Policy("Percent", 100, 15.0), Policy("Pods", 4, 15.0)))
DEFAULT_DOWN = Rules(300.0, (Policy("Percent", 100, 15.0),))


def resource_replicas(
    current: int,
    ready: int,
    unready: int,
    utilization: float,
    target: float,
    tolerance: float = TOLERANCE,
) -> int:
    """Replicas for a Resource Utilization metric. `utilization` is the mean of the ready
    pods; `current - ready - unready` pods are missing (no metrics)."""
    if ready <= 0:
        return current
    ratio = utilization / target
    missing = max(0, current - ready - unready)
    scale_up_unready = unready > 0 and ratio > 1.0
    if not scale_up_unready and missing == 0:
        if abs(1.0 - ratio) <= tolerance:
            return current
        return math.ceil(ratio * ready)
    total = utilization * ready
    counted = ready
    if missing:
        if ratio < 1.0:
            total += target * missing  # missing pods at 100 % when scaling down
        counted += missing
    if scale_up_unready:
        counted += unready  # at 0 %
    new_ratio = total / (target * counted)
    if abs(1.0 - new_ratio) <= tolerance or (ratio < 1.0 < new_ratio) or (new_ratio < 1.0 < ratio):
        return current
    return math.ceil(new_ratio * counted)


def external_average_value_replicas(
    current: int, total: float, target_per_pod: float, tolerance: float = TOLERANCE
) -> int:
    ratio = total / (target_per_pod * max(current, 1))
    if abs(1.0 - ratio) <= tolerance:
        return current
    return math.ceil(total / target_per_pod)


@dataclass
class HPA:
    """One HPA's memory (recommendations and scale events) and its normalization."""

    min_replicas: int
    max_replicas: int
    up: Rules = DEFAULT_UP
    down: Rules = DEFAULT_DOWN
    recommendations: deque[tuple[float, int]] = field(default_factory=deque)
    events: deque[tuple[float, int]] = field(default_factory=deque)

    def _stabilize(self, desired: int, current: int, now: float) -> int:
        up_rec = down_rec = desired
        for t, rec in self.recommendations:
            if t > now - self.up.stabilization_s:
                up_rec = min(up_rec, rec)
            if t > now - self.down.stabilization_s:
                down_rec = max(down_rec, rec)
        self.recommendations.append((now, desired))
        horizon = max(self.up.stabilization_s, self.down.stabilization_s)
        while self.recommendations and self.recommendations[0][0] <= now - horizon:
            self.recommendations.popleft()
        out = current
        out = max(out, up_rec)
        return min(out, down_rec)

    def _changed_in(self, period_s: float, now: float, sign: int) -> int:
        return sum(abs(d) for t, d in self.events if t > now - period_s and d * sign > 0)

    def _up_limit(self, current: int, now: float) -> int:
        limits = []
        for p in self.up.policies:
            start = current - self._changed_in(p.period_s, now, +1)
            if p.kind == "Pods":
                limits.append(start + p.value)
            else:
                limits.append(math.ceil(start * (1 + p.value / 100)))
        if self.up.select == "Disabled" or not limits:
            return current
        return max(limits) if self.up.select == "Max" else min(limits)

    def _down_limit(self, current: int, now: float) -> int:
        limits = []
        for p in self.down.policies:
            start = current + self._changed_in(p.period_s, now, -1)
            if p.kind == "Pods":
                limits.append(start - p.value)
            else:
                limits.append(math.floor(start * (1 - p.value / 100)))
        if self.down.select == "Disabled" or not limits:
            return current
        return min(limits) if self.down.select == "Max" else max(limits)

    def decide(self, desired: int, current: int, now: float) -> int:
        """The replicas the HPA sets, from the metrics' proposal `desired`."""
        stable = self._stabilize(desired, current, now)
        if stable > current:
            out = min(stable, self.max_replicas, max(self._up_limit(current, now), current))
        elif stable < current:
            out = max(stable, self.min_replicas, min(self._down_limit(current, now), current))
        else:
            out = stable
        out = max(self.min_replicas, min(self.max_replicas, out))
        if out != current:
            self.events.append((now, out - current))
        while self.events and self.events[0][0] <= now - 600:
            self.events.popleft()
        return out
