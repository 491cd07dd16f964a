"""The controller's runner: the backstop as a leader-only ticker of a ComponentHost.

Several replicas may run; the host's Lease election picks the one that acts. A replica that
loses the lease exits (like kube-controller-manager) so that it comes back as a clean
follower instead of acting on caches built while it led.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from pykatalyst.cluster.clock import Clock
from pykatalyst.cluster.protocol import Cluster
from pykatalyst.controllers.backstop import (
    BackstopConfig,
    BackstopController,
    BackstopPlan,
    BackstopResult,
)
from pykatalyst.runtime.host import ComponentHost, Endpoint, HostStep
from pykatalyst.runtime.leader import LeaderElector, LeaderState

BACKSTOP = "backstop"

Notify = Callable[[str, bool], None]
"""A message for the operator, and whether it reports a failure."""


@dataclass(frozen=True, slots=True)
class StepReport:
    """One wake-up of the controller: the election round (None without leader election),
    the backstop's plan and what applying it did (None when it did not run), the error
    that stopped the backstop this time (retried next period), and when the next wake-up
    is due."""

    time: float
    leader: LeaderState | None
    plan: BackstopPlan | None
    result: BackstopResult | None
    next_wake: float
    error: str | None = None

    @property
    def lost_leadership(self) -> bool:
        return self.leader is not None and self.leader.lost_leadership

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"time": self.time}
        if self.leader is not None:
            out["leader"] = self.leader.to_json()
        if self.plan is not None:
            out["plan"] = self.plan.to_json()
        if self.result is not None:
            out["result"] = self.result.to_json()
        if self.error is not None:
            out["error"] = self.error
        return out


class ControllerRunner:
    """The backstop every `period_s` while this replica leads; the lease is renewed every
    retry period in between, so a failing reconcile costs no leadership. `step(now)` drives
    it on the caller's time; `run()` on the clock's."""

    def __init__(
        self,
        cluster: Cluster,
        config: BackstopConfig,
        *,
        period_s: float,
        elector: LeaderElector | None = None,
        registry: CollectorRegistry | None = None,
        records_path: Path | None = None,
        clock: Clock | None = None,
    ) -> None:
        if period_s <= 0:
            raise ValueError(f"period_s: must be positive, got {period_s}")
        self.cluster = cluster
        self.config = config
        self.period_s = period_s
        self.elector = elector
        self.registry = registry if registry is not None else CollectorRegistry()
        self.records_path = records_path
        self.backstop: BackstopController | None = None
        # Lease rounds and the backstop block on API calls: they run in a worker thread, one
        # step at a time, so /healthz and /metrics answer meanwhile. Nothing the servers
        # touch is shared with them but the registry, which is thread-safe.
        self.host = ComponentHost(
            "controller",
            clock=clock,
            registry=self.registry,
            elector=elector,
            reconcile_in_thread=True,
        )
        self.host.every(BACKSTOP, period_s, self._reconcile, leader_only=True)
        self._last_reconcile = Gauge(
            "katalyst_controller_last_reconcile_timestamp_seconds",
            "When the backstop last reconciled (seconds since the epoch).",
            registry=self.registry,
        )

    def _reconcile(self, now: float) -> tuple[BackstopPlan, BackstopResult]:
        if self.backstop is None:
            # Built on first leadership only: a follower keeps no caches.
            self.backstop = BackstopController(
                self.cluster, self.config, registry=self.registry, records_path=self.records_path
            )
        plan, result = self.backstop.run(now)
        self._last_reconcile.set(now)
        return plan, result

    def report(self, step: HostStep) -> StepReport:
        done = step.results.get(BACKSTOP)
        plan, result = done if isinstance(done, tuple) else (None, None)
        exc = step.errors.get(BACKSTOP)
        error = f"backstop: {exc}" if exc is not None else None
        return StepReport(step.now, step.leader, plan, result, step.next_wake, error)

    def step(self, now: float) -> StepReport:
        return self.report(self.host.step(now))

    def release(self, now: float) -> bool:
        return self.elector.release(now) if self.elector is not None else False

    def run(
        self,
        *,
        once: bool,
        show: Callable[[StepReport], None],
        notify: Notify,
        metrics: Endpoint | None = None,
    ) -> int:
        """Run until SIGTERM/SIGINT (exit 0), a lost lease (1) or, with `once`, the first
        reconcile (0; 1 when it failed; 3 when another replica leads)."""
        if metrics is not None:
            self.host.serve(metrics)

        def on_step(step: HostStep) -> int | None:
            report = self.report(step)
            show(report)
            return _verdict(report, once=once, elected=self.elector is not None, notify=notify)

        code = self.host.run_sync(on_step=on_step)
        if self.host.lease_released:
            notify("leader election: lease released", False)
        return code


def _verdict(report: StepReport, *, once: bool, elected: bool, notify: Notify) -> int | None:
    if report.error is not None:
        notify(f"error: {report.error}", True)
        if once:
            return 1
    if report.lost_leadership:
        notify("lost the controller lease: exiting so that a fresh start follows", True)
        return 1
    if once and report.plan is not None:
        return 0
    st = report.leader
    if once and elected and st is not None and not st.leading:
        if st.action == "error":
            notify(f"error: leader election: {st.message}", True)
            return 1
        notify(f"not the leader ({st.message}): nothing done", True)
        return 3
    return None
