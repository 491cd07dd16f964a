"""`katalyst scheduler`: schedule pending pods, or serve kube-scheduler's extender protocol."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from pykatalyst.api import names
from pykatalyst.api.duration import format_duration
from pykatalyst.cli.controller import elect, leader_config
from pykatalyst.cli.conventions import DURATION, old_option, optional_duration, parse_duration
from pykatalyst.cli.kubeopts import (
    CONTEXT_OPTION,
    EMBEDDED_OPTION,
    IN_CLUSTER_OPTION,
    KUBECONFIG_OPTION,
    daemon_cluster,
)
from pykatalyst.cli.listen import listen_address
from pykatalyst.cli.output import print_message
from pykatalyst.cluster.auth import load_token, server_ssl_context
from pykatalyst.cluster.clock import RealClock
from pykatalyst.cluster.connect import ClusterSource
from pykatalyst.cluster.protocol import Cluster
from pykatalyst.runtime.host import ServeError
from pykatalyst.runtime.leader import LeaderConfig, LeaderElector
from pykatalyst.runtime.scheduler import ONCE_NOT_LEADING, ServeSecurity, run_scheduler
from pykatalyst.scheduler.config import (
    NO_EFFECT,
    SchedulerConfig,
    SchedulerConfigError,
    default_config,
    load_config,
)
from pykatalyst.scheduler.extender import DEFAULT_MAX_BODY_BYTES, ExtenderService
from pykatalyst.scheduler.scheduler import ScheduleOutcome, Scheduler

# The extender listens beyond this machine only when told to (deploy/extender passes
# --listen=0.0.0.0:8888 behind its Service); --tls-*, --client-ca-file and --token-file
# decide who may call it.
DEFAULT_EXTENDER_LISTEN = "127.0.0.1:8888"
# binds in flight at once against a real API server (the client's rate limit still applies)
DEFAULT_BIND_WORKERS = 16

log = logging.getLogger("pykatalyst.scheduler")


def _load(config: Path | None) -> SchedulerConfig:
    try:
        return load_config(config) if config is not None else default_config()
    except SchedulerConfigError as exc:
        print_message(f"error: {exc}", stderr=True)
        raise typer.Exit(code=1) from None


def _report(outcome: ScheduleOutcome) -> None:
    # One plain line per pod, like a log: a rich Console per line would cost more than
    # the pod's scheduling cycle.
    if outcome.node is not None:
        numa = f" numa {list(outcome.numa.numa_ids)}" if outcome.numa is not None else ""
        print(f"bound {outcome.pod} -> {outcome.node}{numa}", flush=True)
    else:
        print(f"pending {outcome.pod}: {outcome.message or outcome.reason}", flush=True)


def scheduler(
    ctx: typer.Context,
    config: Path | None = typer.Option(  # noqa: B008 - typer reads options from defaults
        None,
        "--config",
        metavar="FILE",
        help="KubeSchedulerConfiguration (v1beta3 or v1), bare or inside a ConfigMap.",
    ),
    print_config: bool = typer.Option(
        False, "--print-config", help="Print the resolved profiles and exit."
    ),
    extender: bool = typer.Option(
        False, "--extender", help="Serve the kube-scheduler extender protocol instead."
    ),
    listen: str | None = typer.Option(
        None,
        "--listen",
        metavar="HOST:PORT",
        help="Where the extender (default 127.0.0.1:8888), or the standalone scheduler's "
        "/healthz, /readyz and /metrics (default: not served), listen.",
    ),
    profile: str | None = typer.Option(
        None, "--profile", help="The profile (schedulerName) the extender uses."
    ),
    interval: str = typer.Option(
        "100ms", "--interval", metavar=DURATION, help="Time between scheduling passes."
    ),
    bind_workers: int = typer.Option(
        DEFAULT_BIND_WORKERS,
        "--bind-workers",
        min=0,
        help="Bindings in flight at once while the next pods are scheduled, as "
        "kube-scheduler binds asynchronously (0: bind within each cycle). The embedded "
        "cluster always binds within the cycle.",
    ),
    stop_after: str | None = typer.Option(
        None,
        "--stop-after",
        metavar=DURATION,
        help="Stop after this long (default: run until stopped).",
    ),
    old_max_seconds: Annotated[str | None, old_option("scheduler", "--max-seconds")] = None,
    once: bool = typer.Option(
        False,
        "--once",
        help="Schedule the pods pending now, in one pass, and exit (3 when another replica "
        "holds the Lease).",
    ),
    tls_cert_file: Path | None = typer.Option(  # noqa: B008
        None, "--tls-cert-file", metavar="FILE", help="Serve HTTPS with this certificate."
    ),
    tls_private_key_file: Path | None = typer.Option(  # noqa: B008
        None, "--tls-private-key-file", metavar="FILE", help="The key of --tls-cert-file."
    ),
    client_ca_file: Path | None = typer.Option(  # noqa: B008
        None,
        "--client-ca-file",
        metavar="FILE",
        help="Require a client certificate signed by this CA (kube-scheduler's extender "
        "tlsConfig certFile/keyFile).",
    ),
    token_file: Path | None = typer.Option(  # noqa: B008
        None,
        "--token-file",
        metavar="FILE",
        help="Require 'Authorization: Bearer <the token in this file>' on every call but "
        "the probes.",
    ),
    extender_max_body_bytes: int = typer.Option(
        DEFAULT_MAX_BODY_BYTES,
        "--extender-max-body-bytes",
        min=1024,
        help="The largest ExtenderArgs body accepted (400 Node objects are about 1.1 MiB).",
    ),
    leader_elect: bool = typer.Option(
        True,
        "--leader-elect/--no-leader-elect",
        help="Schedule only while holding the scheduler Lease (needed with several "
        "replicas); followers keep their caches synced and bind nothing. Default: the "
        "configuration's leaderElection.leaderElect (true when absent, as kube-scheduler); "
        "the lease flags below likewise override its leaderElection fields.",
    ),
    lease_namespace: str = typer.Option(
        names.SYSTEM_NAMESPACE,
        "--lease-namespace",
        help="Namespace of the scheduler Lease (leaderElection.resourceNamespace).",
    ),
    lease_name: str = typer.Option(
        names.SCHEDULER_LEASE_NAME,
        "--lease-name",
        help="Name of the scheduler Lease (leaderElection.resourceName).",
    ),
    lease_duration: str = typer.Option(
        "15s",
        "--lease-duration",
        metavar=DURATION,
        help="How long followers wait after the last renewal before taking over.",
    ),
    renew_deadline: str = typer.Option(
        "10s",
        "--renew-deadline",
        metavar=DURATION,
        help="The leader stops scheduling when it could not renew for this long.",
    ),
    retry_period: str = typer.Option(
        "2s", "--retry-period", metavar=DURATION, help="Time between lease renewals."
    ),
    identity: str | None = typer.Option(
        None, "--identity", help="This replica's name in the Lease (default: hostname_random)."
    ),
    kubeconfig: Path | None = KUBECONFIG_OPTION,
    in_cluster: bool = IN_CLUSTER_OPTION,
    context: str | None = CONTEXT_OPTION,
    embedded: bool = EMBEDDED_OPTION,
) -> None:
    """Place pending pods with Katalyst's QoS- and NUMA-aware plugins.

    Schedules every pod whose schedulerName matches a profile, binding it through
    pods/binding."""
    cfg = _load(config)
    security = _security(
        tls_cert_file, tls_private_key_file, client_ca_file, token_file, extender_max_body_bytes
    )
    if print_config:
        print_message(cfg.to_yaml().rstrip("\n"))
        return
    election = _election(ctx, cfg, extender)
    if extender and once:
        print_message(ONCE_EXTENDER, stderr=True)
        raise typer.Exit(code=2)
    interval_s = parse_duration(interval, "--interval")
    stop_s = optional_duration(old_max_seconds or stop_after, "--stop-after")
    if extender:
        listen = listen or DEFAULT_EXTENDER_LISTEN
    address = listen_address(listen) if listen is not None else None
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    clock = RealClock()
    cluster, source = _connect(cfg, kubeconfig, in_cluster, context, embedded, clock)
    elector: LeaderElector | None = None
    if election is not None:
        elector = elect(cluster, identity, election[0], election[1])
    real = not source.embedded
    sched = Scheduler(cluster, cfg, bind_workers=bind_workers if real and not extender else 0)
    service = _extender(sched, profile) if extender else None
    _announce(cfg, extender)

    def listening() -> None:
        if address is not None:
            print_message(_listening(address, extender, security, client_ca_file is not None))

    try:
        code = run_scheduler(
            sched,
            clock,
            interval_s=interval_s,
            schedule=not extender,
            report=_report,
            extender=service,
            listen=address,
            on_ready=listening,
            max_seconds=stop_s,
            once=once,
            security=security,
            elector=elector,
            delay_cache=cfg.delay_cache_until_active,
        )
    except ServeError as exc:
        print_message(f"error: --listen {listen}: {exc}", stderr=True)
        raise typer.Exit(code=2) from None
    finally:
        _close(sched)
    _exit_for(code, once)


def _connect(
    cfg: SchedulerConfig,
    kubeconfig: Path | None,
    in_cluster: bool,
    context: str | None,
    embedded: bool,
    clock: RealClock,
) -> tuple[Cluster, ClusterSource]:
    """The cluster to schedule on; the configuration's clientConnection (kubeconfig, qps,
    burst) applies, as kube-scheduler's, where no flag names another."""
    if kubeconfig is None and not in_cluster and not embedded and cfg.kubeconfig:
        kubeconfig = Path(cfg.kubeconfig)
    return daemon_cluster(
        "scheduler",
        kubeconfig,
        in_cluster,
        context,
        embedded,
        clock,
        qps=cfg.client_qps,
        burst=cfg.client_burst,
    )


def _announce(cfg: SchedulerConfig, extender: bool) -> None:
    names_ = ", ".join(p.scheduler_name for p in cfg.profiles)
    mode = "extender" if extender else f"scheduling pods of {names_}"
    print_message(f"katalyst scheduler: {mode}")
    for name in cfg.no_effect:
        print_message(f"note: {name} is accepted and has no effect: {NO_EFFECT[name]}", stderr=True)


def _exit_for(code: int, once: bool) -> None:
    """Leave with `code` when the run ended without the lease, saying why."""
    if code == ONCE_NOT_LEADING:
        print_message("--once: another replica holds the scheduler lease: nothing scheduled")
        raise typer.Exit(code=code)
    if code != 0 and once:
        print_message("--once: could not take the scheduler lease: nothing scheduled", stderr=True)
        raise typer.Exit(code=code)
    if code != 0:
        print_message(
            "lost the scheduler lease: exiting so that a fresh start follows", stderr=True
        )
        raise typer.Exit(code=code)


def _given(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def _election(
    ctx: typer.Context, cfg: SchedulerConfig, extender: bool
) -> tuple[tuple[str, str], LeaderConfig] | None:
    """The Lease and timings to elect with, or None: the configuration's leaderElection,
    each field overridden by its flag when given (as kube-scheduler applies its flags). The
    extender does not elect (kube-scheduler's own election picks who calls it)."""
    le = cfg.leader_election
    p = ctx.params
    if extender:
        if _given(ctx, "leader_elect") and p["leader_elect"]:
            print_message(ELECTED_EXTENDER, stderr=True)
            raise typer.Exit(code=2)
        return None
    if not (p["leader_elect"] if _given(ctx, "leader_elect") else le.leaderElect):
        return None
    namespace = p["lease_namespace"] if _given(ctx, "lease_namespace") else le.resourceNamespace
    name = p["lease_name"] if _given(ctx, "lease_name") else le.resourceName
    timings = [
        p[key] if _given(ctx, key) else format_duration(seconds)
        for key, seconds in (
            ("lease_duration", le.leaseDuration),
            ("renew_deadline", le.renewDeadline),
            ("retry_period", le.retryPeriod),
        )
    ]
    return (namespace, name), leader_config(*timings)


ONCE_EXTENDER = (
    "error: --once: the extender answers kube-scheduler's calls as they come; there is no "
    "pass to run once (--stop-after ends a run)"
)
ELECTED_EXTENDER = (
    "error: --leader-elect: the extender answers kube-scheduler, whose own leader "
    "election picks the replica that asks; run the extender without it"
)


def _extender(sched: Scheduler, profile: str | None) -> ExtenderService:
    try:
        return ExtenderService(sched, profile)
    except ValueError as exc:
        print_message(f"error: {exc}", stderr=True)
        raise typer.Exit(code=1) from None


def _security(
    cert: Path | None, key: Path | None, client_ca: Path | None, token: Path | None, body: int
) -> ServeSecurity:
    """TLS, client certificates and the bearer token the servers ask for; a bad file is a
    usage error."""
    try:
        return ServeSecurity(
            server_ssl_context(cert, key, client_ca),
            load_token(token) if token is not None else None,
            body,
        )
    except ValueError as exc:
        print_message(f"error: {exc}", stderr=True)
        raise typer.Exit(code=2) from None


def _close(sched: Scheduler) -> None:
    """Finish the bindings in flight, and log how often the informers listed again."""
    for outcome in sched.close():
        _report(outcome)
    relists = ", ".join(f"{k} {v}" for k, v in sched.relists.items())
    log.info("informer relists since the start: %s", relists)


def _listening(
    address: tuple[str, int], extender: bool, security: ServeSecurity, client_certs: bool
) -> str:
    """Where the scheduler listens, for what, and who may ask."""
    what = "extender listening" if extender else "listening"
    verbs = "filter, prioritize, bind" if extender else "healthz, readyz, metrics"
    scheme = "https" if security.ssl_context is not None else "http"
    who = []
    if security.ssl_context is not None and client_certs:
        who.append("client certificate required")
    if security.token is not None:
        who.append("bearer token required")
    if extender and not who:
        who.append("no authentication")
    where = f"{what} on {scheme}://{address[0]}:{address[1]}"
    return f"{where} ({verbs}; {', '.join(who)})" if who else f"{where} ({verbs})"


def register(app: typer.Typer) -> None:
    app.command(name="scheduler")(scheduler)
