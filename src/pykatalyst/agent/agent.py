"""The node agent's loop: gather → decide → execute (evict, enforce, report).

`Agent.reconcile(now)` is synchronous and returns an `AgentPlan`; `katalyst agent` calls it
on a real clock, tests and the simulator on a virtual one. Everything the loop learns from
the machine comes through the `Host`; everything it writes to cgroups goes through the
enforcer; everything it tells the cluster goes through the `Cluster` protocol. The agent
composes three parts, one per folder:

- gathering (`agent/gather/`, `Gatherer`) does every read and keeps the caches that make
  them cheap, producing the frozen `TickInputs` (`agent/inputs.py`);
- deciding is pure (`agent/decide.py`): `decide(inputs, state) -> (plan, state)`, where the
  state (`agent/agent_state.py`) is the value one tick leaves the next; the agent keeps the
  current one and swaps it after executing the plan;
- acting (`agent/act/`, `Performer`) only applies the plan: evictions and taints (each
  stage's `act`), the shape when it changed, the knobs (`agent/act/knobs.py`), the CNR
  (`agent/reporter.py`), the Events and the cpu placement's checkpoint, and says what it did
  in a `Performed`, which the agent records in the plan.

The plan holds every knob the tick wants (the network's classid knobs and the eviction
overrides included), the egress shape, the eviction stages' decisions and the CNR status to
publish.

Eviction plugs in after the plan is made and before it is enforced, in the same three
parts: each `EvictionStage` reads in `gather` (its config, the CNR), decides in `decide`
on an `EvictionInput` (the plan, the pods, the metrics, the sample) from the memory its
last decision left in the `AgentState`, and the performer performs the decision
(`stage.act`: evictions, taints, Events); the decided and performed actions are recorded
in the plan. Stages run in order, every tick; a stage that raises is reported and
skipped, never stopping the loop. A decision's `knob_overrides` (cgroup -> {Knob: value})
change this tick's desired knobs before they are enforced, so a stage can throttle
(shrink a quota, a limit) before it evicts.

The loop keeps its per-tick work small: pods are parsed once per resourceVersion, cgroups
are rediscovered only when a pod without a known cgroup appears (or every
`REDISCOVER_PERIOD_S`), and the enforcer — which reads the machine — is called only when the
desired knobs change, or every `resync_period_s` (default: every period) to undo drift.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from pykatalyst.agent import cpu_placement
from pykatalyst.agent import decide as deciding
from pykatalyst.agent.act import KnobEnforcer, Performer
from pykatalyst.agent.agent_state import AgentState, smoother
from pykatalyst.agent.config import AgentConfig, reclaim_setting
from pykatalyst.agent.dynamic_config import AgentSettings
from pykatalyst.agent.gather import REDISCOVER_PERIOD_S, Gatherer
from pykatalyst.agent.gather.gatherer import Sources
from pykatalyst.agent.host.base import Host
from pykatalyst.agent.host.devices import DeviceSource
from pykatalyst.agent.host.kubelet import KubeletDevicesView, KubeletView
from pykatalyst.agent.host.nics import NicSource
from pykatalyst.agent.inputs import EvictionInput, EvictionStage, NodeFacts, TickInputs
from pykatalyst.agent.metrics import MetricStore
from pykatalyst.agent.node_watch import NodeState
from pykatalyst.agent.plan import UNMANAGED as UNMANAGED
from pykatalyst.agent.plan import AgentPlan
from pykatalyst.agent.reporter import Reporter
from pykatalyst.cluster.clock import Clock
from pykatalyst.cluster.events import EventRecorder
from pykatalyst.cluster.protocol import Cluster
from pykatalyst.topology.machine import CPUTopology

__all__ = [
    "REDISCOVER_PERIOD_S",
    "Agent",
    "AgentState",
    "EvictionInput",
    "EvictionStage",
    "KnobEnforcer",
]

log = logging.getLogger("pykatalyst.agent")


class Agent:
    """One node's agent: a `Gatherer` (reads), the pure `decide`, a `Performer` (writes),
    and the `AgentState` one tick leaves the next."""

    def __init__(
        self,
        node_name: str,
        cluster: Cluster,
        host: Host,
        clock: Clock,
        config: AgentConfig | None = None,
        enforcer: KnobEnforcer | None = None,
        *,
        eviction_stages: Sequence[EvictionStage] = (),
        dry_run: bool = False,
        publish: bool = True,
        kubelet: KubeletView | None = None,
        node_state: NodeState | None = None,
        devices: DeviceSource | None = None,
        device_view: KubeletDevicesView | None = None,
        nics: NicSource | None = None,
    ) -> None:
        self.node_name = node_name
        self.cluster = cluster
        self.host = host
        self.clock = clock
        self.base_config = config if config is not None else AgentConfig()
        log.info("agent for %s: %s", node_name, reclaim_setting(self.base_config))
        self.enforcer = enforcer
        self.dry_run = dry_run
        self.publish = publish and not dry_run
        self.topology: CPUTopology = host.topology()
        self.facts = NodeFacts.of(node_name, self.topology, host.cgroup_version, dry_run)
        self.devices = devices
        self.nics = nics
        ck = None if enforcer is None else enforcer.checkpoint_path
        self.gatherer = Gatherer(
            self.facts,
            cluster,
            host,
            self.base_config,
            node_state,
            Sources(kubelet, devices, device_view, nics, ck),
            stages=eviction_stages,
            publish=self.publish,
        )
        self.performer = Performer(
            node_name,
            cluster,
            host,
            self.base_config,
            enforcer,
            dry_run=dry_run,
            publish=self.publish,
            checkpoint=self.gatherer.checkpoint,
        )
        rc = self.base_config.reporter
        state = AgentState(cpu_smoother=smoother(rc, True), mem_smoother=smoother(rc, False))
        self.state = self.gatherer.restored(state)

    # --- what outside code reads ----------------------------------------------------------

    @property
    def config(self) -> AgentConfig:
        """The configuration in force (the dynamic config over the base one)."""
        return self.gatherer.config

    @property
    def config_status(self) -> dict[str, Any]:
        """Where the configuration in force comes from (the plan's `config`)."""
        return self.gatherer.settings.status

    @property
    def placement(self) -> cpu_placement.CpuState:
        """Where dedicated, NUMA-bound and pooled pods run now."""
        return self.state.placement

    @property
    def eviction_stages(self) -> list[EvictionStage]:
        return self.gatherer.stages

    @eviction_stages.setter
    def eviction_stages(self, stages: Sequence[EvictionStage]) -> None:
        self.gatherer.stages = list(stages)

    @property
    def node_state(self) -> NodeState:
        return self.gatherer.node_state

    @property
    def settings(self) -> AgentSettings:
        return self.gatherer.settings

    @property
    def metrics(self) -> MetricStore:
        return self.gatherer.metrics

    @property
    def cpu_state_error(self) -> str | None:
        """Why the cpu placement's checkpoint was refused at start (None if it was not)."""
        return self.gatherer.cpu_state_error

    @property
    def reporter(self) -> Reporter:
        return self.performer.reporter

    @property
    def events(self) -> EventRecorder:
        return self.performer.events

    # --- the loop -----------------------------------------------------------------------------

    def reconcile(self, now: float | None = None) -> AgentPlan:
        """One tick: gather the inputs, decide the plan, execute it."""
        now = self.clock.now() if now is None else now
        inputs = self.gather(now)
        decided, state = self.decide(inputs)
        plan, self.state = self.execute(inputs, decided, state)
        return plan

    def gather(self, now: float) -> TickInputs:
        """Read everything the tick decides from (`agent/gather/`); the cpu placement
        rebuilt from the cgroups on the first tick without a checkpoint."""
        inputs, self.state = self.gatherer.gather(now, self.state)
        return inputs

    def decide(
        self, inputs: TickInputs, state: AgentState | None = None
    ) -> tuple[AgentPlan, AgentState]:
        """The tick's plan and next state from `inputs` and `state` (the agent's own by
        default), changing neither (`agent/decide.py`)."""
        return deciding.decide(inputs, self.state if state is None else state)

    def execute(
        self, inp: TickInputs, plan: AgentPlan, state: AgentState
    ) -> tuple[AgentPlan, AgentState]:
        """Perform the plan (`agent/act/`): the eviction stages' decisions, the egress
        shape, the knobs, the CNR status, the Events; the plan as executed (what each part
        did), and `state` with the Events it sent."""
        done = self.performer.perform(inp, plan, state)
        if done.vanished:
            self.gatherer.rediscover()  # those pods' cgroups moved or went: look again
        plan = dataclasses.replace(
            plan,
            warnings=done.warnings,
            events=done.events,
            eviction_actions=done.actions,
            enforce=done.enforce,
            report=done.report,
            config=dict(self.config_status),
        )
        return plan, dataclasses.replace(state, events_sent=done.events_sent)
