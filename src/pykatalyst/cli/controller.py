"""`katalyst controller`: the cluster-wide backstop for nodes whose agent went silent.

Several replicas may run; a coordination.k8s.io Lease picks the one that acts. A replica
that loses the lease exits (like kube-controller-manager) so that it comes back as a clean
follower instead of acting on caches built while it led.
"""

from __future__ import annotations

import signal
import socket
import sys
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from prometheus_client import CollectorRegistry, Gauge

from pykatalyst.api import duration, names
from pykatalyst.cli.kubeopts import ContextArg, InClusterArg, KubeconfigArg, cluster_from_options
from pykatalyst.cli.output import OutputFormat, print_json, print_message
from pykatalyst.cluster.clock import Clock, RealClock
from pykatalyst.cluster.protocol import ApiError, Cluster
from pykatalyst.controllers.backstop import (
    BackstopConfig,
    BackstopController,
    BackstopPlan,
    BackstopResult,
)
from pykatalyst.runtime.leader import LeaderConfig, LeaderElector, LeaderState

_LEASE_FLAGS = {
    "lease_duration_s": "--lease-duration",
    "renew_deadline_s": "--renew-deadline",
    "retry_period_s": "--retry-period",
}


def parse_duration(text: str, option: str) -> float:
    """Seconds of a Go-style duration ("30s", "10m", "1h30m", "1.5h") or a bare number of
    seconds; a bad one ends the command naming the option."""
    try:
        return duration.parse_duration(text)
    except duration.DurationError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


@dataclass(frozen=True, slots=True)
class StepReport:
    """One wake-up of the controller: the election round (None without leader election),
    the backstop's plan and what applying it did (None when it did not run), the cluster
    error that stopped the backstop this time (retried next period), and when the next
    wake-up is due."""

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
    """Wakes on `step(now)`: renews (or waits for) the lease every retry period and runs
    the backstop every `period_s` while it leads. Time comes from the caller."""

    def __init__(
        self,
        cluster: Cluster,
        config: BackstopConfig,
        *,
        period_s: float,
        elector: LeaderElector | None = None,
        registry: CollectorRegistry | None = None,
        records_path: Path | None = None,
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
        self._next_reconcile: float | None = None
        self._next_lease: float | None = None
        self._leader_state: LeaderState | None = None
        self._leader_gauge = Gauge(
            "katalyst_controller_leader",
            "1 while this replica holds the controller lease and acts, else 0.",
            registry=self.registry,
        )
        self._last_reconcile = Gauge(
            "katalyst_controller_last_reconcile_timestamp_seconds",
            "When the backstop last reconciled (seconds since the epoch).",
            registry=self.registry,
        )

    def step(self, now: float) -> StepReport:
        leader: LeaderState | None = None
        if self.elector is not None:
            if self._next_lease is None or now >= self._next_lease:
                leader = self.elector.tick(now)
                self._leader_state = leader
                self._next_lease = now + self.elector.config.retry_period_s
            leading = self.elector.leading(now)
            last = self._leader_state
            if not leading and leader is None and last is not None and last.leading:
                # The renew deadline passed between rounds: say so now, not at the next.
                leader = LeaderState(
                    now,
                    False,
                    self.elector.holder,
                    "error",
                    "renew deadline passed without a successful renewal",
                    lost_leadership=True,
                )
                self._leader_state = leader
        else:
            leading = True
        self._leader_gauge.set(1 if leading else 0)
        plan: BackstopPlan | None = None
        result: BackstopResult | None = None
        error: str | None = None
        if leading:
            if self.backstop is None:
                self.backstop = BackstopController(
                    self.cluster,
                    self.config,
                    registry=self.registry,
                    records_path=self.records_path,
                )
            if self._next_reconcile is None or now >= self._next_reconcile:
                # A failed reconcile waits for the next period like a good one: the lease
                # keeps being renewed in between, so a flaky API costs no leadership.
                self._next_reconcile = now + self.period_s
                try:
                    plan, result = self.backstop.run(now)
                except ApiError as exc:
                    error = f"backstop: {exc}"
                else:
                    self._last_reconcile.set(now)
        wakes = [
            t
            for t in (self._next_reconcile if leading else None, self._next_lease)
            if t is not None
        ]
        next_wake = min(wakes) if wakes else now + self.period_s
        return StepReport(now, leader, plan, result, max(next_wake, now), error)

    def release(self, now: float) -> bool:
        return self.elector.release(now) if self.elector is not None else False


class _Printer:
    """Prints what changed: leadership, actions, notes, and the summary line only when it
    differs from the last one (a quiet cluster does not fill the log)."""

    def __init__(self, output: OutputFormat, cfg: BackstopConfig) -> None:
        self.output = output
        self.cfg = cfg
        self._summary = ""
        self._holder: str | None = None

    def __call__(self, report: StepReport) -> None:
        try:
            if self.output is OutputFormat.JSON:
                self._json(report)
            else:
                self._table(report)
        finally:
            sys.stdout.flush()

    def _json(self, report: StepReport) -> None:
        st = report.leader
        changed = st is not None and st.holder != self._holder
        if report.plan is not None or report.error is not None or changed:
            print_json(report.to_json())
        if st is not None:
            self._holder = st.holder

    def _table(self, report: StepReport) -> None:
        st = report.leader
        if st is not None:
            if st.became_leader:
                print_message(f"leader election: leading ({st.message})")
            elif st.lost_leadership:
                print_message(f"leader election: lost the lease ({st.message})")
            elif st.action == "error":
                print_message(f"leader election: {st.message}", stderr=True)
            elif not st.leading and st.holder != self._holder:
                print_message(f"leader election: following; {st.message}")
            self._holder = st.holder
        plan, result = report.plan, report.result
        if plan is None:
            return
        cfg = self.cfg
        silent = sum(
            1 for n in plan.nodes if n.silent_s is not None and n.silent_s >= cfg.taint_after_s
        )
        counts = ", ".join(
            f"{len(plan.of(k))} {k}" for k in ("taint", "untaint", "evict") if plan.of(k)
        )
        summary = (
            f"backstop: {len(plan.nodes)} nodes, {silent} with a silent agent; "
            f"{counts or 'nothing to do'}{' (dry run)' if cfg.dry_run and counts else ''}"
        )
        if summary != self._summary or plan.actions or plan.notes:
            print_message(summary)
            self._summary = summary
        for action in plan.actions:
            target = action.pod.key if action.pod else action.node
            print_message(f"  {action.kind} {target}: {action.record.message}")
        for note in plan.notes:
            print_message(f"  note: {note}")
        for failure in result.failed if result is not None else ():
            print_message(f"  failed: {failure}", stderr=True)


def _identity() -> str:
    # Two replicas on one host (or a restarted pod) must not share an identity.
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def controller(
    kubeconfig: KubeconfigArg = None,
    in_cluster: InClusterArg = False,
    context: ContextArg = None,
    taint_after: Annotated[
        str,
        typer.Option(
            "--taint-after",
            metavar="DURATION",
            help="Agent silence after which the node's CNR is tainted against new reclaimed pods.",
        ),
    ] = "10m",
    evict_after: Annotated[
        str,
        typer.Option(
            "--evict-after",
            metavar="DURATION",
            help="Agent silence after which the node's reclaimed pods are evicted.",
        ),
    ] = "20m",
    period: Annotated[
        str, typer.Option("--period", metavar="DURATION", help="Time between reconciles.")
    ] = "30s",
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Decide and print, change nothing (no taints, evictions, Events or lease).",
        ),
    ] = False,
    once: Annotated[bool, typer.Option("--once", help="Reconcile once and exit.")] = False,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port", metavar="PORT", help="Serve Prometheus metrics on this port."
        ),
    ] = None,
    records: Annotated[
        Path | None,
        typer.Option(
            "--records",
            metavar="PATH",
            help="Append a JSON line per action here (read by `katalyst explain --records`).",
        ),
    ] = None,
    leader_elect: Annotated[
        bool,
        typer.Option(
            "--leader-elect/--no-leader-elect",
            help="Act only while holding the controller Lease (needed with several replicas).",
        ),
    ] = True,
    lease_namespace: Annotated[
        str, typer.Option("--lease-namespace", help="Namespace of the controller Lease.")
    ] = names.SYSTEM_NAMESPACE,
    lease_name: Annotated[
        str, typer.Option("--lease-name", help="Name of the controller Lease.")
    ] = names.CONTROLLER_LEASE_NAME,
    lease_duration: Annotated[
        str,
        typer.Option(
            "--lease-duration",
            metavar="DURATION",
            help="How long followers wait after the last renewal before taking over.",
        ),
    ] = "15s",
    renew_deadline: Annotated[
        str,
        typer.Option(
            "--renew-deadline",
            metavar="DURATION",
            help="The leader stops acting when it could not renew for this long.",
        ),
    ] = "10s",
    retry_period: Annotated[
        str,
        typer.Option(
            "--retry-period", metavar="DURATION", help="Time between lease renewals and tries."
        ),
    ] = "2s",
    identity: Annotated[
        str | None,
        typer.Option(
            "--identity", help="This replica's name in the Lease (default: hostname_random)."
        ),
    ] = None,
    output: Annotated[
        OutputFormat,
        typer.Option("--output", "-o", help="table (a line per reconcile) or json (the plans)."),
    ] = OutputFormat.TABLE,
) -> None:
    """Run the centralized backstop for nodes whose agent went silent.

    Taints the CNRs of such nodes and evicts their reclaimed pods, on one elected replica."""
    taint_s = parse_duration(taint_after, "--taint-after")
    evict_s = parse_duration(evict_after, "--evict-after")
    period_s = parse_duration(period, "--period")
    if period_s <= 0:
        raise typer.BadParameter(f"{period!r}: must be longer than 0", param_hint="--period")
    if evict_s < taint_s:
        raise typer.BadParameter(
            f"{evict_after!r} is shorter than --taint-after {taint_after!r}: a node must stop "
            "taking new reclaimed pods before its reclaimed pods are evicted",
            param_hint="--evict-after",
        )
    leader_cfg: LeaderConfig | None = None
    if leader_elect:
        try:
            leader_cfg = LeaderConfig(
                lease_duration_s=parse_duration(lease_duration, "--lease-duration"),
                renew_deadline_s=parse_duration(renew_deadline, "--renew-deadline"),
                retry_period_s=parse_duration(retry_period, "--retry-period"),
            )
        except ValueError as exc:
            message = str(exc)
            for field, flag in _LEASE_FLAGS.items():
                message = message.replace(field, flag)
            raise typer.BadParameter(message) from None
    cfg = BackstopConfig(taint_after_s=taint_s, evict_after_s=evict_s, dry_run=dry_run)
    clock: Clock = RealClock()
    cluster = cluster_from_options(kubeconfig, in_cluster, context, clock)
    embedded = kubeconfig is None and not in_cluster
    if embedded:
        print_message(
            "note: no --kubeconfig/--in-cluster: running against the embedded in-memory "
            "cluster, which starts empty",
            stderr=True,
        )
    elector: LeaderElector | None = None
    if leader_cfg is not None and not dry_run and not embedded:
        who = identity or _identity()
        elector = LeaderElector(
            cluster, who, name=lease_name, namespace=lease_namespace, config=leader_cfg
        )
        print_message(
            f"leader election: lease {lease_namespace}/{lease_name} as {who}",
            stderr=output is OutputFormat.JSON,
        )
    elif leader_cfg is not None and dry_run:
        print_message("note: --dry-run changes nothing, so it acts without the lease", stderr=True)
    registry = CollectorRegistry()
    runner = ControllerRunner(
        cluster, cfg, period_s=period_s, elector=elector, registry=registry, records_path=records
    )
    if metrics_port is not None:
        from prometheus_client import start_http_server

        try:
            start_http_server(metrics_port, registry=registry)
        except OSError as exc:
            print_message(f"error: --metrics-port {metrics_port}: {exc}", stderr=True)
            raise typer.Exit(2) from None
    print_message(
        f"katalyst controller: taint after {taint_s:g}s, evict after {evict_s:g}s of agent "
        f"silence, every {period_s:g}s{' (dry run)' if dry_run else ''}",
        stderr=output is OutputFormat.JSON,
    )
    raise typer.Exit(_loop(runner, clock, once=once, output=output))


def _loop(runner: ControllerRunner, clock: Clock, *, once: bool, output: OutputFormat) -> int:
    show = _Printer(output, runner.config)
    stop = threading.Event()
    previous: Any = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    code = 0
    try:
        while not stop.is_set():
            report = runner.step(clock.now())
            show(report)
            if report.error is not None:
                print_message(f"error: {report.error}", stderr=True)
                if once:
                    return 1
            if report.lost_leadership:
                print_message(
                    "lost the controller lease: exiting so that a fresh start follows",
                    stderr=True,
                )
                return 1
            if once and report.plan is not None:
                break
            st = report.leader
            if once and runner.elector is not None and st is not None and not st.leading:
                if st.action == "error":
                    print_message(f"error: leader election: {st.message}", stderr=True)
                    return 1
                print_message(f"not the leader ({st.message}): nothing done", stderr=True)
                return 3
            stop.wait(max(0.0, report.next_wake - clock.now()))
    except KeyboardInterrupt:
        code = 0
    finally:
        if runner.release(clock.now()):
            print_message("leader election: lease released", stderr=output is OutputFormat.JSON)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return code


def register(app: typer.Typer) -> None:
    app.command("controller")(controller)
