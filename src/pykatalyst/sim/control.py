"""The control plane of a simulated cluster: the scheduler and the node agents.

The runner asks it to place pending pods and to let due agents reconcile; everything goes
through the cluster's API, as it would in production.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import Clock
from pykatalyst.scheduler import registry as reg
from pykatalyst.scheduler.config import (
    API_VERSIONS,
    KIND,
    SchedulerConfig,
    default_config,
    load_config,
    resolve,
)
from pykatalyst.scheduler.scheduler import Scheduler
from pykatalyst.sim.host import SimHost
from pykatalyst.sim.scenario import Policy, Scenario


class SimNodeView(Protocol):
    """What the control plane reads of a simulated node."""

    @property
    def name(self) -> str: ...

    @property
    def host(self) -> SimHost: ...


class SimTallyView(Protocol):
    agent_reconciles: int


class SimView(Protocol):
    """What the control plane reads of the simulation that runs it (`runner.PolicySim`):
    the cluster it writes through, its clock, its nodes and the step; it counts the agents'
    reconciles in the tally."""

    @property
    def scenario(self) -> Scenario: ...

    @property
    def policy(self) -> Policy: ...

    @property
    def dt(self) -> float: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def cluster(self) -> MemoryCluster: ...

    @property
    def nodes(self) -> Sequence[SimNodeView]: ...

    @property
    def node_index(self) -> Mapping[str, int]: ...

    @property
    def tally(self) -> SimTallyView: ...


class ControlPlane(Protocol):
    def schedule(self, now: float) -> None: ...

    def pod_started(self, node_name: str) -> None: ...

    def reconcile_agents(self, now: float) -> None: ...

    def reclaimed_capacity(self, node: int) -> float: ...

    def reclaimed_capacity_total(self) -> float: ...

    def pool_sizes(self, node: int) -> tuple[float, float] | None: ...


def katalyst_scheduler_config() -> dict[str, Any]:
    """The `katalyst` policy's scheduler: Katalyst's QoS-aware fit and balanced allocation
    in place of the native ones, spreading by LeastAllocated on native and reclaimed
    resources (the shape of Katalyst's "spread" policy)."""
    native = [
        {"name": names.RESOURCE_CPU, "weight": 1},
        {"name": names.RESOURCE_MEMORY, "weight": 1},
    ]
    reclaimed = [{"name": r, "weight": 1} for r in names.RECLAIMED_RESOURCES]
    fit = names.PLUGIN_QOS_AWARE_NODE_RESOURCES_FIT
    balanced = names.PLUGIN_QOS_AWARE_NODE_RESOURCES_BALANCED_ALLOCATION
    return {
        "apiVersion": API_VERSIONS[-1],
        "kind": KIND,
        "profiles": [
            {
                "schedulerName": names.DEFAULT_SCHEDULER_NAME,
                "plugins": {
                    "preFilter": {"enabled": [{"name": fit}]},
                    "filter": {
                        "enabled": [{"name": fit}],
                        "disabled": [{"name": reg.NODE_RESOURCES_FIT}],
                    },
                    "score": {
                        "enabled": [{"name": fit, "weight": 4}, {"name": balanced, "weight": 1}],
                        "disabled": [
                            {"name": reg.NODE_RESOURCES_FIT},
                            {"name": reg.NODE_RESOURCES_BALANCED_ALLOCATION},
                        ],
                    },
                    "reserve": {"enabled": [{"name": fit}]},
                },
                "pluginConfig": [
                    {
                        "name": fit,
                        "args": {
                            "scoringStrategy": {
                                "type": "LeastAllocated",
                                "resources": native,
                                "reclaimedResources": reclaimed,
                            }
                        },
                    },
                    {
                        "name": balanced,
                        "args": {"resources": native, "reclaimedResources": reclaimed},
                    },
                ],
            }
        ],
    }


def scheduler_config(policy: Policy) -> SchedulerConfig:
    if policy.scheduler.config is not None:
        return load_config(policy.scheduler.config)
    if policy.name == "katalyst":
        return resolve(katalyst_scheduler_config(), "katalyst policy")
    return default_config()


class SimControlPlane:
    def __init__(self, sim: SimView) -> None:
        self.sim = sim
        self.scheduler = Scheduler(
            sim.cluster,
            scheduler_config(sim.policy),
            seed=sim.scenario.seed,
            record_scheduled_events=False,
        )
        self._fresh: set[int] = set()  # nodes where pods started since their agent ran
        self.agents: list[Any] = []
        self.plans: dict[int, Any] = {}
        self._reclaimed = np.zeros(len(sim.nodes))
        self.period_steps = max(1, round(sim.policy.agent.period / sim.dt))
        if sim.policy.name == "katalyst":
            self._start_agents()

    def _start_agents(self) -> None:
        from pykatalyst.agent.config import parse_config
        from pykatalyst.agent.factory import build_agent

        settings = self.sim.policy.agent
        data = dict(settings.config)
        data.setdefault("period_s", settings.period)
        # The agent samples once per period here: its smoothing and staleness windows are
        # counted in samples, so they scale with the period (unless the scenario sets them).
        reporter = dict(data.get("reporter") or {})
        reporter.setdefault("headroom_sync_period_s", settings.period)
        reporter.setdefault("sliding_window_s", max(120.0, 2 * settings.period))
        reporter.setdefault("period_s", settings.period)
        # Simulated nodes have no kubelet config to read: their agents place NUMA-bound
        # pods themselves, numerically, and say so (Katalyst's --topology-policy-name).
        reporter.setdefault("topology_policy_name", "numeric")
        data["reporter"] = reporter
        metrics = dict(data.get("metrics") or {})
        metrics.setdefault("insurance_period_s", max(60.0, 2 * settings.period))
        data["metrics"] = metrics
        # Katalyst's default: reclaimed pods stay in the reclaim pool, off the share pools'
        # cpus (the agent can overlap them under SCHED_IDLE; a scenario may ask for that).
        cpu = dict(data.get("cpu") or {})
        cpu.setdefault("overlap_reclaim_with_share", False)
        data["cpu"] = cpu
        config = parse_config(data, "policies[katalyst].agent.config")
        eviction_config = None
        if settings.eviction:
            from pykatalyst.agent.eviction import EvictionConfig

            eviction_config = EvictionConfig.model_validate(settings.eviction_config)
        for node in self.sim.nodes:
            self.agents.append(
                build_agent(
                    node.name,
                    self.sim.cluster,
                    node.host,
                    self.sim.clock,
                    config,
                    eviction=eviction_config,
                    eviction_period_s=settings.eviction_period or settings.period,
                )
            )

    def schedule(self, now: float) -> None:
        self.scheduler.run_until_idle(now)

    def pod_started(self, node_name: str) -> None:
        # The agent watches the pods of its node: a new pod gets its pool, weight and
        # cpu.idle at the agent's next tick, seconds after it starts in production. With a
        # simulation step of a minute that tick is this step, not the next period.
        # (The kubelet's status write is not simulated: the agent finds containers by name.)
        self._fresh.add(self.sim.node_index[node_name])

    def reconcile_agents(self, now: float) -> None:
        if not self.agents:
            return
        due = self.nodes_due(now) | self._fresh
        self._fresh = set()
        for i in sorted(due):
            plan = self.agents[i].reconcile(now)
            self.plans[i] = plan
            self.sim.tally.agent_reconciles += 1
            reported = plan.reclaimed_cpu.reported
            if reported is not None:
                self._reclaimed[i] = reported

    def nodes_due(self, now: float) -> set[int]:
        step = round(now / self.sim.dt)
        return {i for i in range(len(self.sim.nodes)) if (step + i) % self.period_steps == 0}

    def reclaimed_capacity(self, node: int) -> float:
        return float(self._reclaimed[node])

    def reclaimed_capacity_total(self) -> float:
        return float(self._reclaimed.sum())

    def pool_sizes(self, node: int) -> tuple[float, float] | None:
        plan = self.plans.get(node)
        if plan is None:
            return None
        share = plan.pool(names.POOL_SHARE)
        reclaim = plan.pool(names.POOL_RECLAIM)
        return (
            float(share.size) if share is not None else 0.0,
            float(reclaim.size) if reclaim is not None else 0.0,
        )


def make_control_plane(sim: SimView) -> ControlPlane:
    return SimControlPlane(sim)
