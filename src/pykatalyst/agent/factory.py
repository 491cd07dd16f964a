"""One way to wire a node agent: config + cluster + host + clock -> `Agent`.

`katalyst agent` (`runtime.agent.build_agent`) and the simulator (`sim.control`) both build
their agents here, so a node in the simulator runs the loop a real node runs: one
node-state holder shared by the agent and its eviction stage, one enforcer, the eviction
stage when there is an eviction config.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from pykatalyst.agent.agent import Agent
from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.enforcer import Enforcer
from pykatalyst.agent.eviction import EvictionConfig, EvictionStage
from pykatalyst.agent.host.base import Host
from pykatalyst.agent.host.devices import DeviceSource
from pykatalyst.agent.host.kubelet import KubeletDevicesView, KubeletView
from pykatalyst.agent.host.nics import NicSource
from pykatalyst.agent.node_watch import NodeState
from pykatalyst.api import names
from pykatalyst.cluster.clock import Clock
from pykatalyst.cluster.events import EventRecorder
from pykatalyst.cluster.protocol import Cluster
from pykatalyst.cluster.skips import SkippedObjects


def build_agent(
    node: str,
    cluster: Cluster,
    host: Host,
    clock: Clock,
    cfg: AgentConfig,
    *,
    checkpoint: Path | None = None,
    eviction: EvictionConfig | None = None,
    eviction_period_s: float | None = None,
    kubelet: KubeletView | None = None,
    devices: DeviceSource | None = None,
    device_view: KubeletDevicesView | None = None,
    nics: NicSource | None = None,
    verify_period_s: float = 0.0,
    journal_size: int = 4096,
    registry: CollectorRegistry | None = None,
    dry_run: bool = False,
) -> Agent:
    """The agent for `node`.

    `eviction` is the eviction stage's base config (no stage without one; the node's
    AdminQoSConfiguration is overlaid on it, from the agent's read); with `eviction_period_s`
    the stage decides at most that often. `checkpoint`, `verify_period_s` (trust its own
    writes that long between reads) and `journal_size` (the writes `explain` keeps; 0 keeps
    none) go to the enforcer, `kubelet` is where the agent learns the kubelet's cpu pins,
    `registry` holds the eviction counters (fresh if None).
    """
    # the objects-skipped counter in `registry`, beside the eviction counters
    skips = SkippedObjects("agent", EventRecorder(cluster, names.AGENT_COMPONENT, node), registry)
    state = NodeState(
        node,
        cluster,
        admin_qos=cfg.admin_qos_config,
        config_ttl_s=cfg.config_ttl_s,
        skips=skips,
    )
    stages: list[EvictionStage] = []
    if eviction is not None:
        stage = EvictionStage(
            node,
            cluster,
            eviction,
            records_path=eviction.records_path,
            dry_run=dry_run,
            admin_qos=cfg.admin_qos_config,
            config_ttl_s=cfg.config_ttl_s,
            registry=registry,
            node_state=state,
            period_s=eviction_period_s,
        )
        stages.append(stage)
    return Agent(
        node,
        cluster,
        host,
        clock,
        cfg,
        Enforcer(host, checkpoint, clock, journal_size, verify_period_s),
        eviction_stages=stages,
        dry_run=dry_run,
        kubelet=kubelet,
        node_state=state,
        devices=devices,
        device_view=device_view,
        nics=nics,
    )
