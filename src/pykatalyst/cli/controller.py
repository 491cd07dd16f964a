"""`katalyst controller`: the cluster-wide controllers (lifecycle, node overcommit, dynamic
config, and the backstop for nodes whose agent went silent).

Option parsing and printing; the runner (leader election, the backstop ticker, metrics and
health endpoints, shutdown) is `runtime.controller`.
"""

from __future__ import annotations

import socket
import sys
import uuid
from pathlib import Path
from typing import Annotated

import typer

from pykatalyst.api import names
from pykatalyst.cli.conventions import (
    DURATION,
    LISTEN,
    listen_from_old,
    listen_option,
    old_option,
    parse_duration,
)
from pykatalyst.cli.kubeopts import (
    ContextArg,
    EmbeddedArg,
    InClusterArg,
    KubeconfigArg,
    daemon_cluster,
)
from pykatalyst.cli.output import OutputFormat, print_json, print_message
from pykatalyst.cluster.clock import Clock, RealClock
from pykatalyst.cluster.protocol import BadRequest, Cluster
from pykatalyst.cluster.selectors import parse_label_selector
from pykatalyst.controllers.backstop import BackstopConfig
from pykatalyst.controllers.cronbounds import CronMode
from pykatalyst.controllers.history import HistorySource, PrometheusHistory
from pykatalyst.controllers.ihpa import IHPAConfig
from pykatalyst.controllers.resize import ResizeConfig
from pykatalyst.controllers.resource_recommend import ResourceRecommendConfig
from pykatalyst.controllers.spd import SPDConfig, parse_baseline_percent
from pykatalyst.predict.client import Predictor, predictor_for
from pykatalyst.recommend.prometheus import check_base_filter
from pykatalyst.recommend.settings import PykatalystSettings, SettingsError, load_settings
from pykatalyst.runtime.controller import (
    CONTROLLERS,
    ControllerRunner,
    ControllersError,
    StepReport,
    parse_controllers,
)
from pykatalyst.runtime.host import Endpoint, ServeError
from pykatalyst.runtime.leader import LeaderConfig, LeaderElector

_LEASE_FLAGS = {
    "lease_duration_s": "--lease-duration",
    "renew_deadline_s": "--renew-deadline",
    "retry_period_s": "--retry-period",
}


class _Printer:
    """Prints what changed: leadership, actions, notes, and the summary line only when it
    differs from the last one (a quiet cluster does not fill the log)."""

    def __init__(self, output: OutputFormat, cfg: BackstopConfig) -> None:
        self.output = output
        self.cfg = cfg
        self._summary = ""
        self._summaries: dict[str, str] = {}
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
        if report.plan is not None or report.outcomes or report.error is not None or changed:
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
        self._others(report)
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

    def _others(self, report: StepReport) -> None:
        for name, (plan, result) in report.outcomes.items():
            summary = plan.summary()
            if summary != self._summaries.get(name) or result.done:
                print_message(summary)
                self._summaries[name] = summary
            for note in getattr(plan, "notes", ()):
                print_message(f"  note: {note}")
            for failure in result.failed:
                print_message(f"  failed: {failure}", stderr=True)


def default_identity() -> str:
    # Two replicas on one host (or a restarted pod) must not share an identity.
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def elect(
    cluster: Cluster,
    identity: str | None,
    lease: tuple[str, str],
    config: LeaderConfig,
    stderr: bool = False,
) -> LeaderElector:
    """The leader elector on the lease (namespace, name), saying so."""
    namespace, name = lease
    who = identity or default_identity()
    elector = LeaderElector(cluster, who, name=name, namespace=namespace, config=config)
    print_message(f"leader election: lease {namespace}/{name} as {who}", stderr=stderr)
    return elector


def leader_config(lease_duration: str, renew_deadline: str, retry_period: str) -> LeaderConfig:
    """The lease timings from their command-line durations; a bad one is a usage error
    naming its flag."""
    try:
        return LeaderConfig(
            lease_duration_s=parse_duration(lease_duration, "--lease-duration"),
            renew_deadline_s=parse_duration(renew_deadline, "--renew-deadline"),
            retry_period_s=parse_duration(retry_period, "--retry-period"),
        )
    except ValueError as exc:
        message = str(exc)
        for field, flag in _LEASE_FLAGS.items():
            message = message.replace(field, flag)
        raise typer.BadParameter(message) from None


def _timings(taint_after: str, evict_after: str, period: str) -> tuple[float, float, float]:
    """The backstop's taint and evict delays and the period, in seconds; usage errors name
    their flag."""
    taint_s = parse_duration(taint_after, "--taint-after")
    evict_s = parse_duration(evict_after, "--evict-after")
    period_s = parse_duration(period, "--interval")
    if period_s <= 0:
        raise typer.BadParameter(f"{period!r}: must be longer than 0", param_hint="--interval")
    if evict_s < taint_s:
        raise typer.BadParameter(
            f"{evict_after!r} is shorter than --taint-after {taint_after!r}: a node must stop "
            "taking new reclaimed pods before its reclaimed pods are evicted",
            param_hint="--evict-after",
        )
    return taint_s, evict_s, period_s


def _rr_config(
    url: str | None, timeout: str, resync: str, retry: str, min_span: str, base_filter: str = ""
) -> ResourceRecommendConfig:
    """The ResourceRecommend controller's settings; a bad value is a usage error naming
    its flag."""
    values = {}
    for key, text, flag in (
        ("prometheus_timeout_s", timeout, "--resourcerecommend-prometheus-timeout"),
        ("resync_s", resync, "--resource-recommend-resync-period"),
        ("retry_base_s", retry, "--resource-recommend-retry"),
        ("min_span_s", min_span, "--resource-recommend-min-span"),
    ):
        value = parse_duration(text, flag)
        if value <= 0:
            raise typer.BadParameter(f"{text!r}: must be longer than 0", param_hint=flag)
        values[key] = value
    if url is not None and not url.startswith(("http://", "https://")):
        raise typer.BadParameter(
            f"{url!r}: accepted: an http:// or https:// URL",
            param_hint="--resourcerecommend-prometheus-address",
        )
    try:
        matchers = check_base_filter(base_filter)
    except ValueError as exc:
        raise typer.BadParameter(
            str(exc), param_hint="--resourcerecommend-prometheus-promql-base-filter"
        ) from None
    return ResourceRecommendConfig(prometheus_url=url, prometheus_base_filter=matchers, **values)


def controller(
    kubeconfig: KubeconfigArg = None,
    in_cluster: InClusterArg = False,
    context: ContextArg = None,
    embedded: EmbeddedArg = False,
    controllers: Annotated[
        str,
        typer.Option(
            "--controllers",
            metavar="LIST",
            help=(
                "The controllers to run, comma-separated: '*' for all, 'name' adds one, "
                f"'-name' drops one (names: {', '.join(CONTROLLERS)}), e.g. '*,-backstop'."
            ),
        ),
    ] = "*",
    node_selector: Annotated[
        str | None,
        typer.Option(
            "--node-selector",
            metavar="SELECTOR",
            help="Only the Nodes this label selector matches (and their CNCs) are "
            "overcommitted, given CNRs/CNCs and dynamic config, and watched by the "
            "backstop (default: all Nodes); the configs' node lists and counts stay the "
            "whole fleet's.",
        ),
    ] = None,
    orphan_grace: Annotated[
        str,
        typer.Option(
            "--orphan-grace",
            metavar="DURATION",
            help="Age after which a CNR or CNC without its Node is deleted (lifecycle).",
        ),
    ] = "1m",
    spd_qos_baseline_percent: Annotated[
        str,
        typer.Option(
            "--spd-qos-baseline-percent",
            metavar="LEVEL=PCT,...",
            help="Default baselinePercent of a new SPD per QoS level of its pod template, "
            "e.g. 'shared_cores=50' (spd); levels not listed get 100 (nothing reclaimed).",
        ),
    ] = "",
    rr_prometheus: Annotated[
        str | None,
        typer.Option(
            "--resourcerecommend-prometheus-address",
            metavar="URL",
            help="Prometheus the ResourceRecommend controller reads usage from, e.g. "
            "http://prometheus.monitoring:9090 (Katalyst's flag).",
        ),
    ] = None,
    rr_base_filter: Annotated[
        str,
        typer.Option(
            "--resourcerecommend-prometheus-promql-base-filter",
            metavar="MATCHERS",
            help='Label matchers added to every Prometheus query, e.g. cluster="c1" '
            "(Katalyst's flag).",
        ),
    ] = "",
    rr_timeout: Annotated[
        str,
        typer.Option(
            "--resourcerecommend-prometheus-timeout",
            metavar="DURATION",
            help="Longest wait for one Prometheus query (resourcerecommender).",
        ),
    ] = "3m",
    rr_resync: Annotated[
        str,
        typer.Option(
            "--resource-recommend-resync-period",
            metavar="DURATION",
            help="A ResourceRecommend is recomputed this long after its last recommendation.",
        ),
    ] = "24h",
    rr_retry: Annotated[
        str,
        typer.Option(
            "--resource-recommend-retry",
            metavar="DURATION",
            help="First retry of a failed ResourceRecommend run (doubling up to 30m).",
        ),
    ] = "1m",
    rr_min_span: Annotated[
        str,
        typer.Option(
            "--resource-recommend-min-span",
            metavar="DURATION",
            help="How long the samples must span before the default recommender answers "
            "(Katalyst: 24h; shorter only for demos and tests).",
        ),
    ] = "24h",
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
    interval: Annotated[
        str, typer.Option("--interval", metavar=DURATION, help="Time between reconciles.")
    ] = "30s",
    resize_deferred_timeout: Annotated[
        str,
        typer.Option(
            "--resize-deferred-timeout",
            metavar="DURATION",
            help="vpa: a resize the kubelet has Deferred this long falls back to eviction "
            "under BestEffortInplace.",
        ),
    ] = "5m",
    recommender_settings: Annotated[
        Path | None,
        typer.Option(
            "--recommender-settings",
            metavar="FILE",
            help="pykatalyst's recommender settings (YAML or JSON: the fields to change), "
            "for ResourceRecommends and KVPAs whose recommender is pykatalyst "
            "(resourcerecommender, vpa).",
        ),
    ] = None,
    old_period: Annotated[str | None, old_option("controller", "--period")] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Decide and print, change nothing (no taints, evictions, Events or lease).",
        ),
    ] = False,
    once: Annotated[bool, typer.Option("--once", help="Reconcile once and exit.")] = False,
    listen: Annotated[
        str | None,
        typer.Option(
            "--listen",
            metavar=LISTEN,
            help="Serve /healthz, /readyz and /metrics here (the manifest passes the pod "
            "IP; default: not served).",
        ),
    ] = None,
    old_metrics_port: Annotated[int | None, old_option("controller", "--metrics-port")] = None,
    old_metrics_address: Annotated[
        str | None, old_option("controller", "--metrics-address")
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
    ihpa_cron_mode: Annotated[
        CronMode,
        typer.Option(
            "--ihpa-cron-mode",
            help="How IHPA timeBounds crons hold (ihpa): window (a cron naming one minute "
            "holds until the next bound fires) or minute (Katalyst's: only the minutes the "
            "cron names).",
        ),
    ] = CronMode.WINDOW,
    algorithm_serving_address: Annotated[
        str | None,
        typer.Option(
            "--spd-resource-portrait-indicator-plugin-algorithm-serving-address",
            metavar="URL",
            help="A prediction service answering Katalyst's /openapi/tsa/predict (ihpa); "
            "default: the built-in predictor, in process.",
        ),
    ] = None,
    prometheus_address: Annotated[
        str | None,
        typer.Option(
            "--spd-resource-portrait-indicator-plugin-prometheus-address",
            metavar="URL",
            help="The Prometheus the resource portrait reads history from (ihpa); "
            "default: samples recorded in process.",
        ),
    ] = None,
    output: Annotated[
        OutputFormat,
        typer.Option("--output", "-o", help="table (a line per reconcile) or json (the plans)."),
    ] = OutputFormat.TABLE,
) -> None:
    """Run the cluster-wide controllers on one elected replica.

    lifecycle: a CNR and a CNC per Node; overcommit: NodeOvercommitConfig ratios as Node
    annotations; kcc: dynamic config resolved per node into CNC status; backstop: taints the
    CNRs of nodes whose agent went silent and evicts their reclaimed pods; spd: an SPD per
    workload annotated spd.katalyst.kubewharf.io/enable, baseline sentinels, pod stamps;
    resourcerecommender: ResourceRecommend status from Prometheus usage; vpa: applies
    KatalystVerticalPodAutoscalers to their pods (in-place resize, fallback eviction); ihpa:
    each IntelligentHorizontalPodAutoscaler's HPA, VirtualWorkload and predicted SPD points."""
    enabled, spd_cfg, rec_settings = _checked(
        controllers, spd_qos_baseline_percent, recommender_settings, node_selector
    )
    orphan_grace_s = parse_duration(orphan_grace, "--orphan-grace")
    rr_cfg = _rr_config(rr_prometheus, rr_timeout, rr_resync, rr_retry, rr_min_span, rr_base_filter)
    taint_s, evict_s, period_s = _timings(taint_after, evict_after, old_period or interval)
    listen = listen_from_old(listen, old_metrics_address, old_metrics_port)
    address = listen_option(listen)
    leader_cfg: LeaderConfig | None = None
    if leader_elect:
        leader_cfg = leader_config(lease_duration, renew_deadline, retry_period)
    cfg = BackstopConfig(taint_after_s=taint_s, evict_after_s=evict_s, dry_run=dry_run)
    resize_cfg = ResizeConfig(
        deferred_timeout_s=parse_duration(resize_deferred_timeout, "--resize-deferred-timeout")
    )
    clock: Clock = RealClock()
    cluster, source = daemon_cluster("controller", kubeconfig, in_cluster, context, embedded, clock)
    elector: LeaderElector | None = None
    if leader_cfg is not None and not dry_run and not source.embedded:
        lease = (lease_namespace, lease_name)
        elector = elect(cluster, identity, lease, leader_cfg, output is OutputFormat.JSON)
    elif leader_cfg is not None and dry_run:
        print_message("note: --dry-run changes nothing, so it acts without the lease", stderr=True)
    history, predictor = _sources(prometheus_address, algorithm_serving_address)
    runner = ControllerRunner(
        cluster,
        cfg,
        period_s=period_s,
        elector=elector,
        records_path=records,
        clock=clock,
        controllers=enabled,
        node_selector=node_selector,
        orphan_grace_s=orphan_grace_s,
        spd_config=spd_cfg,
        rr_config=rr_cfg,
        recommender_settings=rec_settings,
        resize=resize_cfg,
        ihpa_config=IHPAConfig(cron_mode=ihpa_cron_mode),
        history=history,
        predictor=predictor,
    )
    metrics = None if address is None else Endpoint("metrics", address[0], address[1])
    print_message(_started(enabled, period_s, cfg), stderr=output is OutputFormat.JSON)

    def notify(text: str, failure: bool) -> None:
        print_message(text, stderr=failure or output is OutputFormat.JSON)

    try:
        code = runner.run(once=once, show=_Printer(output, cfg), notify=notify, metrics=metrics)
    except ServeError as exc:
        print_message(f"error: --listen {listen}: {exc}", stderr=True)
        raise typer.Exit(2) from None
    raise typer.Exit(code)


def _started(enabled: tuple[str, ...], period_s: float, cfg: BackstopConfig) -> str:
    backstop = (
        f"; backstop: taint after {cfg.taint_after_s:g}s, evict after "
        f"{cfg.evict_after_s:g}s of agent silence"
        if "backstop" in enabled
        else ""
    )
    return (
        f"katalyst controller: {', '.join(enabled) or 'no controllers'}, every "
        f"{period_s:g}s{backstop}{' (dry run)' if cfg.dry_run else ''}"
    )


def _checked(
    controllers: str,
    spd_qos_baseline_percent: str,
    recommender_settings: Path | None,
    node_selector: str | None,
) -> tuple[tuple[str, ...], SPDConfig, PykatalystSettings]:
    """The controllers to run, the SPD and recommender settings, and the node selector
    checked: a bad value ends the command naming its flag."""
    try:
        enabled = parse_controllers(controllers)
    except ControllersError as exc:
        raise typer.BadParameter(str(exc), param_hint="--controllers") from None
    try:
        spd_cfg = SPDConfig(baseline_percent=parse_baseline_percent(spd_qos_baseline_percent))
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--spd-qos-baseline-percent") from None
    try:
        rec_settings = load_settings(recommender_settings)
    except SettingsError as exc:
        raise typer.BadParameter(str(exc), param_hint="--recommender-settings") from None
    if node_selector is not None:
        try:
            parse_label_selector(node_selector)
        except BadRequest as exc:
            raise typer.BadParameter(str(exc), param_hint="--node-selector") from None
    return enabled, spd_cfg, rec_settings


def _sources(
    prometheus_address: str | None, algorithm_serving_address: str | None
) -> tuple[HistorySource | None, Predictor]:
    """Where usage history and predictions come from (none without their address)."""
    try:
        history = PrometheusHistory(prometheus_address) if prometheus_address else None
        return history, predictor_for(algorithm_serving_address)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def register(app: typer.Typer) -> None:
    app.command("controller")(controller)
