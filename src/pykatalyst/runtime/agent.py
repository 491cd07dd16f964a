"""The node agent's runner: `Agent.reconcile` as a ticker of a ComponentHost, the share
pools' fast watch (`agent/reaction.py`) as another that kicks an early reconcile when a pool
must grow, the node's DRA ResourceSlices as a third when `devices.dra.enabled`, and
`/healthz`, `/readyz`, `/metrics` on Katalyst's agent port."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry

from pykatalyst.agent import factory
from pykatalyst.agent.agent import Agent
from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.dra.publish import SlicePublisher
from pykatalyst.agent.gpu import device_source
from pykatalyst.agent.host.base import Host
from pykatalyst.agent.host.kubelet import PodResourcesClient
from pykatalyst.agent.metrics import AgentExporter
from pykatalyst.agent.nic import nic_source
from pykatalyst.agent.plan import AgentPlan
from pykatalyst.agent.reaction import ShareWatch, WatchDecision
from pykatalyst.cluster.clock import Clock
from pykatalyst.cluster.protocol import Cluster
from pykatalyst.runtime.host import ComponentHost, Endpoint, HostStep

AGENT_PORT = 9316
"""katalyst-agent's metrics and health port."""

RECONCILE = "reconcile"
WATCH = "share-watch"
DRA_SLICES = "dra-slices"


def build_agent(
    node: str,
    cluster: Cluster,
    host: Host,
    clock: Clock,
    cfg: AgentConfig,
    checkpoint: Path | None,
    *,
    dry_run: bool,
    registry: CollectorRegistry | None = None,
    config_path: Path | None = None,
) -> Agent:
    """The agent as `katalyst agent` runs it: the eviction stage on the file's eviction
    section (its counters in `registry`, the one the agent's /metrics serves), the
    kubelet's pod-resources socket, and an enforcer that trusts its own writes between the
    agent's drift resyncs. With `devices.source` set, the node's cards (a synthetic list
    re-read from `config_path`) and who holds them become the CNR's GPU zones; with
    `devices.nic.source` set, the NICs and the pods' bandwidth become its NIC zones."""
    kubelet = PodResourcesClient(cfg.kubelet.pod_resources_socket, cfg.kubelet.timeout_s)
    devices = None if cfg.devices.source == "none" else device_source(cfg.devices, config_path)
    nics = None if cfg.devices.nic.source == "none" else nic_source(cfg.devices, config_path)
    return factory.build_agent(
        node,
        cluster,
        host,
        clock,
        cfg,
        checkpoint=checkpoint,
        eviction=cfg.eviction,
        kubelet=kubelet,
        devices=devices,
        device_view=kubelet,
        nics=nics,
        verify_period_s=cfg.resync_s,
        registry=registry,
        dry_run=dry_run,
    )


def agent_host(
    runner: Agent,
    clock: Clock,
    *,
    period_s: float,
    show: Callable[[AgentPlan], None],
    endpoint: Endpoint | None = None,
    registry: CollectorRegistry | None = None,
) -> ComponentHost:
    # The reconcile reads cgroups and /proc and calls the API server: it runs in a worker
    # thread so that probes and scrapes are answered during a slow tick on a dense node.
    # The servers share nothing with it but the metric registry, which is thread-safe.
    host = ComponentHost(
        "agent",
        clock=clock,
        registry=registry,
        reconcile_in_thread=True,
        stall_after_s=max(300.0, 10 * period_s),
    )
    exporter = AgentExporter(host.registry)
    watch = ShareWatch(runner.host, runner.metrics, runner.base_config.reaction)

    def tick(now: float) -> AgentPlan:
        plan = runner.reconcile(now)
        exporter.observe(plan, runner.config.advisor.enable_reclaim)
        adv = runner.config.advisor
        # The watch hurries canonical's usage-based sizing only: with reclaim off pools
        # follow requests, and rama's controllers keep their own pace.
        watch.observe(plan, active=adv.enable_reclaim and adv.provision_policy == "canonical")
        show(plan)
        return plan

    def fast(now: float) -> WatchDecision:
        decision = watch.tick(now, runner.config.advisor.usage_coefficient)
        if decision.trigger:
            host.kick(RECONCILE, now)
        return decision

    host.every(RECONCILE, period_s, tick)
    dra = runner.base_config.devices.dra
    if dra.enabled:
        slices = SlicePublisher(runner.node_name, runner.cluster, dra, runner.devices, runner.nics)
        host.every(DRA_SLICES, dra.poll_s, slices.tick)
    if watch.cfg.enabled:
        host.every(WATCH, watch.cfg.period_s, fast)
    if endpoint is not None:
        host.serve(endpoint)
    return host


def run_agent(
    runner: Agent,
    clock: Clock,
    *,
    period_s: float,
    once: bool,
    show: Callable[[AgentPlan], None],
    endpoint: Endpoint | None = None,
    registry: CollectorRegistry | None = None,
) -> int:
    """Reconcile every `period_s` until SIGTERM/SIGINT (exit 0). With `once`: one
    reconcile and no servers; exit 1 when it failed."""
    host = agent_host(
        runner,
        clock,
        period_s=period_s,
        show=show,
        endpoint=None if once else endpoint,
        registry=registry,
    )

    def on_step(step: HostStep) -> int | None:
        if once:
            return 1 if step.errors else 0
        return None

    return host.run_sync(on_step=on_step)
