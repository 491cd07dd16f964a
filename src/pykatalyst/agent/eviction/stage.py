"""The eviction manager as a stage of the agent's loop, in three parts.

`Agent(..., eviction_stages=[EvictionStage(node, cluster)])` runs it every tick after the
advisor and the allocation (`agent.factory.build_agent` wires it so, with `period_s` when
it runs less often than the agent ticks):

- `gather(now, node)` reads what the decision needs: the node's AdminQoSConfiguration
  overlaid on the base config (from the agent's node-state holder — the `NodeView` the
  agent read — so the stage and the agent act on one read of each; run on its own it
  keeps a holder of its own), and the node's CNR where the agent's own figures may be
  missing (the reclaimed allocatable, the NIC zones);
- `decide(inp, reads, memory)` is pure: it turns the tick's plan (pools, pods, the
  reclaimed figures about to be published), the metric store and the sample into an
  `EvictionSnapshot` and lets the manager decide (`manager.decide_round`), from the
  `StageMemory` the last tick left (kept in the agent's `AgentState`);
- `act(decision)` applies the round's `EvictionPlan` through the cluster (`EvictionExecutor`:
  evictions, taints, Events) and returns the `ExecutionResult`.

The plan and the result land in the agent plan's `eviction_actions`. Called on its own,
`stage(inp)` does all three with a memory of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from pykatalyst.agent.eviction.config import EvictionConfig
from pykatalyst.agent.eviction.executor import EvictionExecutor, ExecutionResult
from pykatalyst.agent.eviction.manager import EvictionManager, EvictionMemory, decide_round
from pykatalyst.agent.eviction.records import EvictionRecorder
from pykatalyst.agent.eviction.types import (
    EvictionPlan,
    EvictionSnapshot,
    NumaReclaimed,
    PodInfo,
    PoolState,
    ReclaimedCapacity,
    from_digest,
)
from pykatalyst.agent.node_watch import ConfigRead, NodeState, NodeView
from pykatalyst.agent.plan import StageDecision
from pykatalyst.api import names
from pykatalyst.api.crds import AdminQoSConfiguration
from pykatalyst.api.objects import CustomNodeResource
from pykatalyst.cluster.clock import is_due
from pykatalyst.cluster.protocol import ApiError, Cluster

if TYPE_CHECKING:
    from pykatalyst.agent.inputs import EvictionInput
    from pykatalyst.agent.metrics import MetricStore
    from pykatalyst.agent.plan import AgentPlan, PodPlan
    from pykatalyst.agent.pods import PodSpec

NON_SHARE_POOLS = (names.POOL_RESERVE, names.POOL_RECLAIM, names.POOL_DEDICATED)


@dataclass(frozen=True, slots=True)
class StageReads:
    """What the stage read for one tick: the eviction config in force, and the node's CNR
    figures (None where not read or not there) for when the agent has none of its own."""

    config: EvictionConfig
    cnr_reclaimed: ReclaimedCapacity | None = None
    cnr_nics: Mapping[str, int | None] | None = None


@dataclass(frozen=True, slots=True)
class StageMemory:
    """What one tick's eviction leaves the next: when the stage last ran (it runs at most
    once per `period_s`), the manager's memory, and whether its last round lacked the
    agent's reclaimed figures (the next reads the CNR's instead)."""

    last_run: float | None = None
    manager: EvictionMemory = field(default_factory=EvictionMemory)
    cnr_wanted: bool = True

    def due(self, now: float, period_s: float | None) -> bool:
        return period_s is None or is_due(self.last_run, now, period_s, slack_s=1e-6)


class EvictionStage:
    """The eviction stage: `gather`, a pure `decide`, and `act` (see the module's text);
    `stage(EvictionInput) -> [EvictionPlan, ExecutionResult]` runs all three."""

    name = "eviction"

    def __init__(
        self,
        node: str,
        cluster: Cluster,
        config: EvictionConfig | None = None,
        *,
        registry: CollectorRegistry | None = None,
        records_path: str | Path | None = None,
        dry_run: bool = False,
        admin_qos: str | None = None,
        config_ttl_s: float = 15.0,
        node_state: NodeState | None = None,
        period_s: float | None = None,
    ) -> None:
        cfg = config if config is not None else EvictionConfig()
        self.dry_run = dry_run
        if dry_run:
            # A dry-run agent records what every plugin would do and does none of it.
            cfg = cfg.model_copy(update={"dry_run": (names.EVICTION_DRY_RUN_ALL,)})
        self.node = node
        self.cluster = cluster
        self.base_config = cfg
        self.admin_qos = admin_qos
        self.config_ttl_s = config_ttl_s
        # The agent's holder when built with it; else one of its own, made on first use.
        self._state = node_state
        self._config_read: ConfigRead | None = None
        self.config_warning: str | None = None
        self.manager = EvictionManager(node, cfg)
        self.recorder = EvictionRecorder(registry, cfg.records_limit, records_path)
        self.executor = EvictionExecutor(cluster, node, self.recorder, dry_run=dry_run)
        self.period_s = period_s
        self.last_plan: EvictionPlan | None = None
        self._memory = StageMemory()

    def set_config(self, config: EvictionConfig) -> None:
        if self.dry_run:
            config = config.model_copy(update={"dry_run": (names.EVICTION_DRY_RUN_ALL,)})
        self.manager.set_config(config)

    def refresh_config(self, now: float) -> None:
        """Overlay the AdminQoSConfiguration's `evictionConfig` every `config_ttl_s`: the
        one named by `admin_qos` ("namespace/name"), else the one the node's
        CustomNodeConfig targets, as the agent does for its own settings. A missing or
        invalid object keeps the configuration in force. Inside an agent the stage takes
        the agent's read instead (`EvictionInput.node`)."""
        self.apply_config(self._own_state().config(now))

    def apply_config(self, read: ConfigRead) -> None:
        """Overlay one read of the node's dynamic config (once per read)."""
        if read is self._config_read:
            return
        self._config_read = read
        if read.ref is None:
            self.set_config(self.base_config)
            return
        problem = read.error
        if read.raw is not None:
            try:
                aqc = AdminQoSConfiguration.from_json(read.raw)
                self.set_config(self.base_config.with_admin_qos(aqc))
                self.config_warning = None
                return
            except ValueError as exc:
                problem = str(exc)
        self.config_warning = (
            f"eviction config from {read.ref}: {problem} (keeping the current one)"
        )

    def _own_state(self) -> NodeState:
        if self._state is None:
            self._state = NodeState(
                self.node, self.cluster, admin_qos=self.admin_qos, config_ttl_s=self.config_ttl_s
            )
        return self._state

    def __call__(self, inp: EvictionInput) -> list[Any]:
        """Gather, decide and act in one go, with the stage's own memory."""
        reads = self.gather(inp.now, inp.node, self._memory)
        decision, self._memory = self.decide(inp, reads, self._memory)
        return [*decision.actions, *self.act(decision)]

    def gather(self, now: float, node: NodeView | None, memory: object = None) -> StageReads:
        """Overlay the node's dynamic config (the agent's read, else the stage's own) and,
        when the stage is due, read the CNR figures the decision may need: the reclaimed
        allocatable while the agent had none of its own last round (`memory`), the NIC
        zones while NIC health eviction is on (used only when the agent reads no NICs)."""
        view = node if node is not None else self._own_state().refresh(now)
        self.apply_config(view.config)
        cfg = self.manager.config
        held = memory if isinstance(memory, StageMemory) else StageMemory()
        if not cfg.enabled or not held.due(now, self.period_s):
            return StageReads(cfg)
        reclaimed = nics = None
        if cfg.reclaimed_resource.enabled and held.cnr_wanted:
            reclaimed = read_cnr_reclaimed(self.cluster, self.node)
        if cfg.network.enabled:
            nics = read_cnr_nics(self.cluster, self.node)
        return StageReads(cfg, reclaimed, nics)

    def decide(
        self, inp: EvictionInput, reads: object, memory: object
    ) -> tuple[StageDecision, StageMemory]:
        """The round's `EvictionPlan` (none while the stage is not due, or the manager did
        not run) and the memory for the next tick; `memory` None starts afresh."""
        if not isinstance(reads, StageReads):
            raise TypeError(f"eviction stage: reads must be StageReads, not {type(reads)}")
        held = memory if isinstance(memory, StageMemory) else StageMemory()
        now = float(inp.now)
        if not held.due(now, self.period_s):
            return StageDecision(self.name), held
        snap = self.snapshot(inp, reads)
        plan, mgr = decide_round(self.node, reads.config, snap, held.manager)
        figures = inp.plan.reclaimed_cpu.reported, inp.plan.reclaimed_memory.reported
        new = StageMemory(now if self.period_s is not None else held.last_run, mgr, None in figures)
        return StageDecision(self.name, (plan,) if plan.ran else (), plan=plan), new

    def act(self, decision: StageDecision) -> tuple[ExecutionResult, ...]:
        """Apply the round's plan through the cluster: evictions, taints, Events."""
        plan = decision.plan
        if not isinstance(plan, EvictionPlan):
            return ()
        self.last_plan = plan
        if not plan.ran:
            return ()
        return (self.executor.apply(plan),)

    # --- building the snapshot ------------------------------------------------------------

    def snapshot(self, inp: EvictionInput, reads: StageReads | None = None) -> EvictionSnapshot:
        now = inp.now
        plan = inp.plan
        plans = {pp.uid: pp for pp in plan.pods}
        infos = [
            self._pod(spec, plans.get(uid), inp.metrics, inp.sample, now)
            for uid, spec in inp.pods.items()
        ]
        pools = _pools(plan, infos)
        reclaim = plan.pool(names.POOL_RECLAIM)
        floor = reclaim.terms.get("reserved_for_reclaim") if reclaim is not None else None
        return EvictionSnapshot(
            now=now,
            node=self.node,
            pods=tuple(infos),
            sample=inp.sample,
            reclaimed=_reclaimed(plan, reads),
            pools=pools,
            reclaim_pool_cpus=reclaim.size if reclaim is not None else None,
            reclaim_pool_floor=int(floor) if isinstance(floor, int | float) else None,
            nic_allocatable=_nics(inp, reads),
        )

    def _pod(
        self,
        spec: PodSpec,
        pp: PodPlan | None,
        metrics: MetricStore,
        sample: Any,
        now: float,
    ) -> PodInfo:
        usage: dict[str, Any] = {}
        if pp is not None:
            usage["pool"] = pp.pool
            usage["numa_nodes"] = tuple(pp.numa_nodes)
            cgroups = [pp.cgroup] if pp.cgroup else [c.cgroup for c in pp.containers if c.cgroup]
            usage.update(_usage(cgroups, metrics, sample, now))
        # The pod's digest as the agent holds it, at the QoS level the agent manages it
        # (the default one for a pod it leaves alone), with its usage.
        return from_digest(spec.digest, qos_level=spec.level, **usage)


def _nics(inp: EvictionInput, reads: StageReads | None) -> Mapping[str, int | None] | None:
    """The NIC zones' allocatable: the agent's own report, else the node's CNR as read."""
    if inp.nics is not None:
        return inp.nics
    return None if reads is None else reads.cnr_nics


def _reclaimed(plan: AgentPlan, reads: StageReads | None) -> ReclaimedCapacity | None:
    """The reclaimed figures the agent is about to publish, else the CNR's as read."""
    cpu, mem = plan.reclaimed_cpu, plan.reclaimed_memory
    if cpu.reported is not None and mem.reported is not None:
        per_numa = {
            n: NumaReclaimed(round(cpu.per_numa.get(n, 0.0) * 1000), int(mem.per_numa.get(n, 0.0)))
            for n in sorted(set(cpu.per_numa) | set(mem.per_numa))
        }
        return ReclaimedCapacity(
            round(cpu.reported * 1000), int(mem.reported), per_numa, "agent plan"
        )
    return None if reads is None else reads.cnr_reclaimed


def read_cnr_reclaimed(cluster: Cluster, node: str) -> ReclaimedCapacity | None:
    """The reclaimed allocatable published in the node's CNR, or None when there is none."""
    try:
        cnr = CustomNodeResource(cluster.get(names.CUSTOM_NODE_RESOURCE, node))
    except ApiError:
        return None
    alloc = cnr.allocatable()
    if names.RECLAIMED_MILLICPU not in alloc and names.RECLAIMED_MEMORY not in alloc:
        return None
    per_numa: dict[int, NumaReclaimed] = {}
    for zone in cnr.numa_zones():
        if not zone.name.isdigit():
            continue
        cpu = zone.allocatable.get(names.RECLAIMED_MILLICPU)
        mem = zone.allocatable.get(names.RECLAIMED_MEMORY)
        if cpu is None and mem is None:
            continue
        per_numa[int(zone.name)] = NumaReclaimed(
            cpu.value() if cpu is not None else 0, mem.value() if mem is not None else 0
        )
    return ReclaimedCapacity(cnr.reclaimed_milli_cpu(), cnr.reclaimed_memory(), per_numa, "cnr")


def read_cnr_nics(cluster: Cluster, node: str) -> dict[str, int | None] | None:
    """The NIC zones of the node's CNR: allocatable net_bandwidth (Mbps) by NIC, None for a
    zone that reports none; None when the CNR cannot be read."""
    try:
        cnr = CustomNodeResource(cluster.get(names.CUSTOM_NODE_RESOURCE, node))
    except ApiError:
        return None
    out: dict[str, int | None] = {}
    for zone in cnr.zones():
        # a NIC's SR-IOV VF zones (its children, with sriov_nic) are not NICs of their own
        if zone.type == names.ZONE_NIC and names.RESOURCE_SRIOV_NIC not in zone.capacity:
            q = zone.allocatable.get(names.RESOURCE_NET_BANDWIDTH)
            out[zone.name] = None if q is None else int(q.value())
    return out


def _usage(cgroups: list[str], metrics: MetricStore, sample: Any, now: float) -> dict[str, Any]:
    cpu = load = None
    memory = None
    psi = None
    stats_by_cg: Mapping[str, Any] = getattr(sample, "cgroups", {}) or {}
    for cg in cgroups:
        m = metrics.cpu(cg, now)
        if m is not None:
            if m.usage is not None:
                cpu = (cpu or 0.0) + m.usage
            if m.load1 is not None:
                load = (load or 0.0) + m.load1
        stats = stats_by_cg.get(cg)
        ws = getattr(stats, "memory_working_set", None) if stats is not None else None
        if ws is None:
            mm = metrics.memory(cg, now)
            ws = mm.rss if mm is not None else None
        if ws is not None:
            memory = (memory or 0) + int(ws)
        p = getattr(stats, "memory_psi_some_avg10", None) if stats is not None else None
        if p is not None:
            psi = max(psi or 0.0, float(p))
    return {"cpu_usage": cpu, "load1": load, "memory": memory, "memory_psi_avg10": psi}


def _pools(plan: AgentPlan, infos: list[PodInfo]) -> tuple[PoolState, ...]:
    out = []
    for pool in plan.pools:
        if pool.name in NON_SHARE_POOLS:
            continue
        members = [p for p in infos if p.pool == pool.name]
        loads = [p.load1 for p in members if p.load1 is not None]
        out.append(PoolState(pool.name, pool.size, sum(loads) if loads else None))
    return tuple(out)
