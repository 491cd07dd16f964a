"""The eviction manager as a stage of the agent's loop.

`Agent(..., eviction_stages=[EvictionStage(node, cluster)])` runs it every tick after the
advisor and the allocation (`agent.factory.build_agent` wires it so). It reads the node's
pods and its AdminQoSConfiguration from the agent's node-state holder — the `NodeView` in
the `EvictionInput` — so the stage and the agent act on one read of each; run on its own
(`refresh_config`), it keeps a holder of its own. It turns the tick's plan (pools, pods,
the reclaimed figures about to be published), the metric store and the sample into an
`EvictionSnapshot`, lets the manager decide, and applies the decision through the
cluster. The returned actions (the `EvictionPlan` and the `ExecutionResult`) land in the
agent plan's `eviction_actions`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from pykatalyst.agent.eviction.config import EvictionConfig
from pykatalyst.agent.eviction.executor import EvictionExecutor
from pykatalyst.agent.eviction.manager import EvictionManager
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
from pykatalyst.agent.node_state import ConfigRead, NodeState
from pykatalyst.api import names
from pykatalyst.api.crds import AdminQoSConfiguration
from pykatalyst.api.objects import CustomNodeResource
from pykatalyst.cluster.protocol import ApiError, Cluster

if TYPE_CHECKING:
    from pykatalyst.agent.agent import EvictionInput
    from pykatalyst.agent.metrics import MetricStore
    from pykatalyst.agent.plan import AgentPlan, PodPlan
    from pykatalyst.agent.state import PodSpec

NON_SHARE_POOLS = (names.POOL_RESERVE, names.POOL_RECLAIM, names.POOL_DEDICATED)


class EvictionStage:
    """Callable stage: `stage(EvictionInput) -> [EvictionPlan, ExecutionResult]`."""

    __name__ = "eviction"

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
        self.last_plan: EvictionPlan | None = None

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
        view = inp.node if inp.node is not None else self._own_state().refresh(inp.now)
        self.apply_config(view.config)
        snap = self.snapshot(inp)
        plan = self.manager.decide(snap)
        self.last_plan = plan
        if not plan.ran:
            return []
        result = self.executor.apply(plan)
        return [plan, result]

    # --- building the snapshot ------------------------------------------------------------

    def snapshot(self, inp: EvictionInput) -> EvictionSnapshot:
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
            reclaimed=self._reclaimed(plan),
            pools=pools,
            reclaim_pool_cpus=reclaim.size if reclaim is not None else None,
            reclaim_pool_floor=int(floor) if isinstance(floor, int | float) else None,
            nic_allocatable=self._nics(inp),
        )

    def _nics(self, inp: EvictionInput) -> Mapping[str, int | None] | None:
        """The NIC zones' allocatable: the agent's own report, else (the stage run on its
        own) the node's CNR, read only while NIC health eviction is on."""
        if inp.nics is not None:
            return inp.nics
        if not self.manager.config.network.enabled:
            return None
        return read_cnr_nics(self.cluster, self.node)

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

    def _reclaimed(self, plan: AgentPlan) -> ReclaimedCapacity | None:
        cpu, mem = plan.reclaimed_cpu, plan.reclaimed_memory
        if cpu.reported is not None and mem.reported is not None:
            per_numa = {
                n: NumaReclaimed(
                    round(cpu.per_numa.get(n, 0.0) * 1000), int(mem.per_numa.get(n, 0.0))
                )
                for n in sorted(set(cpu.per_numa) | set(mem.per_numa))
            }
            return ReclaimedCapacity(
                round(cpu.reported * 1000), int(mem.reported), per_numa, "agent plan"
            )
        return read_cnr_reclaimed(self.cluster, self.node)


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
