"""The controller's runner: each enabled controller as a leader-only ticker of a ComponentHost.

The backstop, node overcommit, dynamic config (KCC -> CNC), lifecycle, service profile
(SPD), ResourceRecommend and vpa controllers are switched by name (`parse_controllers`,
Katalyst's `--controllers` syntax).

Several replicas may run; the host's Lease election picks the one that acts. A replica that
loses the lease exits (like kube-controller-manager) so that it comes back as a clean
follower instead of acting on caches built while it led.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from pykatalyst.api import names
from pykatalyst.cluster.clock import Clock
from pykatalyst.cluster.events import EventRecorder
from pykatalyst.cluster.protocol import Cluster
from pykatalyst.cluster.skips import SkippedObjects
from pykatalyst.controllers.backstop import (
    BackstopConfig,
    BackstopController,
    BackstopPlan,
    BackstopResult,
)
from pykatalyst.controllers.history import HistorySource
from pykatalyst.controllers.ihpa import HorizontalScaling, IHPAConfig
from pykatalyst.controllers.kcc import KCCController
from pykatalyst.controllers.lifecycle import DEFAULT_ORPHAN_GRACE_S, LifecycleController
from pykatalyst.controllers.overcommit import OvercommitController
from pykatalyst.controllers.resize import ResizeConfig
from pykatalyst.controllers.resource_recommend import (
    ResourceRecommendConfig,
    ResourceRecommendController,
)
from pykatalyst.controllers.spd import SPDConfig, SPDController
from pykatalyst.controllers.vertical import VPAController
from pykatalyst.predict.client import Predictor
from pykatalyst.recommend.settings import PykatalystSettings
from pykatalyst.runtime.host import ComponentHost, Endpoint, HostStep
from pykatalyst.runtime.leader import LeaderElector, LeaderState

BACKSTOP = names.CONTROLLER_BACKSTOP
# Every controller `--controllers` may name, in the order they run; `*` stands for all of
# them (Katalyst's syntax: `*,-name` drops one, `name` adds one).
CONTROLLERS = (
    names.CONTROLLER_LIFECYCLE,
    names.CONTROLLER_OVERCOMMIT,
    names.CONTROLLER_KCC,
    names.CONTROLLER_SPD,
    names.CONTROLLER_RESOURCE_RECOMMEND,
    names.CONTROLLER_VPA,
    names.CONTROLLER_IHPA,
    BACKSTOP,
)
DEFAULT_CONTROLLERS = CONTROLLERS


class ControllersError(ValueError):
    """A `--controllers` value that names what is not a controller."""


def parse_controllers(text: str) -> tuple[str, ...]:
    """The controllers a `--controllers` value switches on, in run order. Items are
    `*` (all the defaults), `name` (add) and `-name` (remove), comma-separated; a later
    item overrides an earlier one. Unknown names are refused, naming the accepted ones."""
    items = [i.strip() for i in text.split(",") if i.strip()]
    if not items:
        raise ControllersError(
            f"{text!r}: empty (accepted: *, {', '.join(CONTROLLERS)}, each optionally as -name)"
        )
    bad = [i for i in items if i != "*" and i.removeprefix("-") not in CONTROLLERS]
    if bad:
        raise ControllersError(
            f"unknown controller{'s' if len(bad) > 1 else ''} {', '.join(map(repr, bad))} "
            f"(accepted: *, {', '.join(CONTROLLERS)}, each optionally as -name)"
        )
    on: set[str] = set()
    for item in items:
        if item == "*":
            on |= set(DEFAULT_CONTROLLERS)
        elif item.startswith("-"):
            on.discard(item[1:])
        else:
            on.add(item)
    return tuple(c for c in CONTROLLERS if c in on)


class Reconciler(Protocol):
    """A controller other than the backstop: `reconcile(now)` decides a plan (with
    `to_json()` and `summary()`), `apply(plan)` carries it out (a result with `done`,
    `failed` and `to_json()`)."""

    name: str

    def reconcile(self, now: float) -> Any: ...

    def apply(self, plan: Any) -> Any: ...


@dataclass(frozen=True, slots=True)
class DryRun:
    """What applying a plan did under --dry-run: nothing."""

    done: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"done": [], "failed": [], "dryRun": True}


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
    # The other controllers that ran this time: name -> (plan, result).
    outcomes: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)

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
        for name, (plan, result) in self.outcomes.items():
            out[name] = {"plan": plan.to_json(), "result": result.to_json()}
        if self.error is not None:
            out["error"] = self.error
        return out


class ControllerRunner:
    """The enabled controllers, each every `period_s` while this replica leads; the lease
    is renewed every retry period in between, so a failing reconcile costs no leadership.
    `step(now)` drives it on the caller's time; `run()` on the clock's."""

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
        controllers: Sequence[str] = (BACKSTOP,),
        node_selector: str | None = None,
        orphan_grace_s: float = DEFAULT_ORPHAN_GRACE_S,
        spd_config: SPDConfig | None = None,
        rr_config: ResourceRecommendConfig | None = None,
        recommender_settings: PykatalystSettings | None = None,
        resize: ResizeConfig | None = None,
        ihpa_config: IHPAConfig | None = None,
        history: HistorySource | None = None,
        predictor: Predictor | None = None,
    ) -> None:
        if period_s <= 0:
            raise ValueError(f"period_s: must be positive, got {period_s}")
        unknown = [c for c in controllers if c not in CONTROLLERS]
        if unknown:
            raise ValueError(f"controllers: unknown {unknown} (accepted: {', '.join(CONTROLLERS)})")
        self.cluster = cluster
        self.config = config
        self.period_s = period_s
        self.elector = elector
        self.controllers = tuple(c for c in CONTROLLERS if c in controllers)
        self.node_selector = node_selector
        self.orphan_grace_s = orphan_grace_s
        self.spd_config = spd_config
        self.rr_config = rr_config
        self.recommender_settings = recommender_settings
        self.resize = resize
        self.ihpa_config = ihpa_config
        self.history = history
        self.predictor = predictor
        self.registry = registry if registry is not None else CollectorRegistry()
        self.records_path = records_path
        self.backstop: BackstopController | None = None
        self.reconcilers: dict[str, Reconciler] = {}
        # Lease rounds and the controllers block on API calls: they run in a worker thread,
        # one step at a time, so /healthz and /metrics answer meanwhile. Nothing the servers
        # touch is shared with them but the registry, which is thread-safe.
        self.host = ComponentHost(
            "controller",
            clock=clock,
            registry=self.registry,
            elector=elector,
            reconcile_in_thread=True,
            cluster=cluster,
        )
        # one informer per kind for all the controllers of this process
        self.informers = self.host.informers
        for name in self.controllers:
            fn = self._reconcile if name == BACKSTOP else self._ticker(name)
            self.host.every(name, period_s, fn, leader_only=True)
        self._init_metrics()
        # one objects-skipped counter for the process, one Event writer for its skips
        self.skips = SkippedObjects(
            "controller", EventRecorder(cluster, names.CONTROLLER_COMPONENT), self.registry
        )

    def _init_metrics(self) -> None:
        self._last_reconcile = Gauge(
            "katalyst_controller_last_reconcile_timestamp_seconds",
            "When the backstop last reconciled (seconds since the epoch).",
            registry=self.registry,
        )
        self._reconciled = Gauge(
            "katalyst_controller_reconcile_timestamp_seconds",
            "When each controller last reconciled (seconds since the epoch).",
            ["controller"],
            registry=self.registry,
        )
        self._reconciles = Counter(
            "katalyst_controller_reconciles",
            "Reconciles per controller, by result (ok: applied cleanly; failed: some writes "
            "failed; error: the reconcile stopped).",
            ["controller", "result"],
            registry=self.registry,
        )
        for name in self.controllers:
            for result in ("ok", "failed", "error"):
                self._reconciles.labels(name, result)

    def _build(self, name: str) -> Reconciler:
        if name == names.CONTROLLER_OVERCOMMIT:
            return OvercommitController(
                self.cluster,
                node_selector=self.node_selector,
                skips=self.skips,
                informers=self.informers,
            )
        if name == names.CONTROLLER_VPA:
            return VPAController(
                self.cluster,
                self.resize,
                registry=self.registry,
                rr_config=self.rr_config,
                settings=self.recommender_settings,
                informers=self.informers,
            )
        if name == names.CONTROLLER_KCC:
            return KCCController(
                self.cluster,
                node_selector=self.node_selector,
                skips=self.skips,
                informers=self.informers,
            )
        if name == names.CONTROLLER_SPD:
            return SPDController(
                self.cluster, self.spd_config, skips=self.skips, informers=self.informers
            )
        if name == names.CONTROLLER_RESOURCE_RECOMMEND:
            return ResourceRecommendController(
                self.cluster,
                self.rr_config,
                registry=self.registry,
                settings=self.recommender_settings,
                informers=self.informers,
            )
        if name == names.CONTROLLER_IHPA:
            return HorizontalScaling(
                self.cluster,
                self.ihpa_config,
                history=self.history,
                predictor=self.predictor,
                informers=self.informers,
            )
        return LifecycleController(
            self.cluster,
            node_selector=self.node_selector,
            orphan_grace_s=self.orphan_grace_s,
            informers=self.informers,
        )

    def _ticker(self, name: str) -> Callable[[float], tuple[Any, Any]]:
        def tick(now: float) -> tuple[Any, Any]:
            if name not in self.reconcilers:
                # Built on first leadership only: a follower keeps no caches.
                self.reconcilers[name] = self._build(name)
            reconciler = self.reconcilers[name]
            try:
                plan = reconciler.reconcile(now)
                result = DryRun() if self.config.dry_run else reconciler.apply(plan)
            except Exception:
                self._reconciles.labels(name, "error").inc()
                raise
            self._done(name, now, bool(result.failed))
            return plan, result

        return tick

    def _done(self, name: str, now: float, failed: bool) -> None:
        self._reconciled.labels(name).set(now)
        self._reconciles.labels(name, "failed" if failed else "ok").inc()

    def _reconcile(self, now: float) -> tuple[BackstopPlan, BackstopResult]:
        if self.backstop is None:
            # Built on first leadership only: a follower keeps no caches.
            self.backstop = BackstopController(
                self.cluster,
                self.config,
                registry=self.registry,
                records_path=self.records_path,
                informers=self.informers,
                node_selector=self.node_selector,
            )
        try:
            plan, result = self.backstop.run(now)
        except Exception:
            self._reconciles.labels(BACKSTOP, "error").inc()
            raise
        self._last_reconcile.set(now)
        self._done(BACKSTOP, now, bool(result.failed))
        return plan, result

    def report(self, step: HostStep) -> StepReport:
        done = step.results.get(BACKSTOP)
        plan, result = done if isinstance(done, tuple) else (None, None)
        errors = [f"{name}: {exc}" for name, exc in step.errors.items()]
        outcomes = {
            name: out
            for name, out in step.results.items()
            if name != BACKSTOP and isinstance(out, tuple)
        }
        error = "; ".join(errors) if errors else None
        return StepReport(step.now, step.leader, plan, result, step.next_wake, error, outcomes)

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
    if once and (report.plan is not None or report.outcomes):
        return 0
    st = report.leader
    if once and elected and st is not None and not st.leading:
        if st.action == "error":
            notify(f"error: leader election: {st.message}", True)
            return 1
        notify(f"not the leader ({st.message}): nothing done", True)
        return 3
    return None
