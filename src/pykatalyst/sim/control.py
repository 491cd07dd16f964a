"""The control plane of a simulated cluster: the scheduler and the node agents.

The runner asks it to place pending pods and to let due agents reconcile; everything goes
through the cluster's API, as it would in production. Each component is timed as its
daemon is: by a `runtime.host.ComponentHost` of its own (the scheduler's, and one per
node's agent), stepped on the simulation's clock with `ComponentHost.step`. The hosts keep
time in steps (whole numbers, so their grids are exact); each ticker turns its step into
seconds for the component it runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import Clock
from pykatalyst.runtime.host import ComponentHost, HostStep
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
    def schedule(self, step: int) -> None: ...

    def pod_started(self, node_name: str, step: int) -> None: ...

    def reconcile_agents(self, step: int) -> None: ...

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


# The daemons' ticker names (`runtime.scheduler`, `runtime.agent`).
SCHEDULE = "schedule"
RECONCILE = "reconcile"


def _raise_errors(step: HostStep) -> None:
    """A component that raises stops the simulation (a daemon would log it and go on)."""
    for exc in step.errors.values():
        raise exc


class SimControlPlane:
    """The scheduler and, under the `katalyst` policy, one agent per node, each on its own
    `ComponentHost`: the scheduler every step, an agent every `period_steps` steps, node i
    first at step `-i mod period_steps` (staggered), plus once in a step where a pod
    started on its node (an extra run that leaves its grid)."""

    def __init__(self, sim: SimView) -> None:
        self.sim = sim
        self.scheduler = Scheduler(
            sim.cluster,
            scheduler_config(sim.policy),
            seed=sim.scenario.seed,
            record_scheduled_events=False,
            # the scheduler only reads what it watches: no copy of each event for it
            share_watched_objects=True,
        )
        dt = sim.dt
        self.scheduler_host = ComponentHost("scheduler")
        self.scheduler_host.every(
            SCHEDULE, 1.0, lambda step: self.scheduler.run_until_idle(step * dt)
        )
        self.agents: list[Any] = []
        self.agent_hosts: list[ComponentHost] = []
        self.plans: dict[int, Any] = {}
        self._reclaimed = np.zeros(len(sim.nodes))
        self.period_steps = max(1, round(sim.policy.agent.period / sim.dt))
        if sim.policy.name == "katalyst":
            self._start_agents()
            for i, agent in enumerate(self.agents):
                self.agent_hosts.append(self._agent_host(i, agent))

    def _agent_host(self, i: int, agent: Any) -> ComponentHost:
        host = ComponentHost("agent")
        dt, period = self.sim.dt, self.period_steps

        def tick(step: float) -> None:
            plan = agent.reconcile(step * dt)
            self.plans[i] = plan
            self.sim.tally.agent_reconciles += 1
            reported = plan.reclaimed_cpu.reported
            if reported is not None:
                self._reclaimed[i] = reported

        host.every(RECONCILE, float(period), tick, first=float(-i % period))
        return host

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
        # No enforcer journal: nothing reads it back in a simulation, and 4,096 writes
        # kept per node were 1 GiB of a 1,000-node day's 1.9.
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
                    journal_size=0,
                )
            )

    def schedule(self, step: int) -> None:
        _raise_errors(self.scheduler_host.step(float(step)))

    def pod_started(self, node_name: str, step: int) -> None:
        # The agent watches the pods of its node: a new pod gets its pool, weight and
        # cpu.idle at the agent's next tick, seconds after it starts in production. With a
        # simulation step of a minute that tick is this step (the next one when this step's
        # agents have run already), not the next period.
        # (The kubelet's status write is not simulated: the agent finds containers by name.)
        if self.agent_hosts:
            self.agent_hosts[self.sim.node_index[node_name]].run_extra(RECONCILE, float(step))

    def reconcile_agents(self, step: int) -> None:
        for host in self.agent_hosts:
            _raise_errors(host.step(float(step)))

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
