"""The eviction manager as a stage of the agent's loop.

`Agent(..., eviction_stages=[EvictionStage(node, cluster)])` runs it every tick after the
advisor and the allocation: it turns the tick's plan (pools, pods, the reclaimed figures
about to be published), the metric store and the sample into an `EvictionSnapshot`, lets
the manager decide, and applies the decision through the cluster. The returned actions
(the `EvictionPlan` and the `ExecutionResult`) land in the agent plan's
`eviction_actions`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from pydantic import ValidationError

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
    pod_info,
)
from pykatalyst.agent.state import ParsedPods
from pykatalyst.api import config_fields, names
from pykatalyst.api.crds import AdminQoSConfiguration, CustomNodeConfig
from pykatalyst.api.objects import CustomNodeResource
from pykatalyst.cluster.informer import Informer
from pykatalyst.cluster.protocol import ApiError, Cluster
from pykatalyst.cluster.skips import Skip, SkippedObjects, skip_reason

if TYPE_CHECKING:
    from pykatalyst.agent.agent import EvictionInput
    from pykatalyst.agent.metrics import MetricStore
    from pykatalyst.agent.plan import AgentPlan, PodPlan
    from pykatalyst.agent.state import PodSpec

NON_SHARE_POOLS = (names.POOL_RESERVE, names.POOL_RECLAIM, names.POOL_DEDICATED)


def _problem(exc: ValueError) -> str:
    """A config model's refusal as `katalyst validate` words it."""
    if isinstance(exc, ValidationError):
        return "; ".join(str(p) for p in config_fields.problems_of(exc))
    return str(exc)


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
        self._config_read: float | None = None
        self.config_warning: str | None = None
        self.manager = EvictionManager(node, cfg)
        self.recorder = EvictionRecorder(registry, cfg.records_limit, records_path)
        self.executor = EvictionExecutor(cluster, node, self.recorder, dry_run=dry_run)
        # the agent's objects-skipped counter, in the registry its /metrics serves
        self.skips = SkippedObjects("agent", self.executor.events, registry)
        self._pods = Informer(cluster, names.POD, field_selector=f"spec.nodeName={node}")
        # What the agent's own parse of the pod lacks (priority, annotations, labels, owners)
        # per (uid, resourceVersion): a tick only adds the agent's figures and the usage.
        self._parsed: ParsedPods[PodInfo] = ParsedPods(_pod_metadata)
        self.last_plan: EvictionPlan | None = None

    def set_config(self, config: EvictionConfig) -> None:
        if self.dry_run:
            config = config.model_copy(update={"dry_run": (names.EVICTION_DRY_RUN_ALL,)})
        self.manager.set_config(config)

    def refresh_config(self, now: float) -> None:
        """Overlay the AdminQoSConfiguration's `evictionConfig` every `config_ttl_s`: the
        one named by `admin_qos` ("namespace/name"), else the one the node's
        CustomNodeConfig targets, as the agent does for its own settings. A missing or
        invalid object keeps the configuration in force; an unreadable one is counted in
        `katalyst_agent_objects_skipped_total` (the CNC's Warning Event is written here,
        the AdminQoSConfiguration's by the agent's own config read)."""
        if self._config_read is not None and now - self._config_read < self.config_ttl_s:
            return
        self._config_read = now
        ref = self.admin_qos or self._admin_qos_from_cnc(now)
        if ref is None:
            self.set_config(self.base_config)
            return
        ns, _, name = ref.partition("/")
        try:
            raw = self.cluster.get(names.ADMIN_QOS_CONFIGURATION, name, ns)
        except ApiError as exc:
            self.config_warning = f"eviction config from {ref}: {exc} (keeping the current one)"
            return
        try:
            self.set_config(self.base_config.with_admin_qos(AdminQoSConfiguration.from_json(raw)))
            self.config_warning = None
        except ValueError as exc:
            problem = _problem(exc)
            self.config_warning = f"eviction config from {ref}: {problem} (keeping the current one)"
            kind = names.ADMIN_QOS_CONFIGURATION
            skip = Skip.of(kind, raw, skip_reason(raw), f"{ref} is invalid: {problem}")
            self.skips.report([skip], now, event=False)

    def _admin_qos_from_cnc(self, now: float) -> str | None:
        try:
            raw = self.cluster.get(names.CUSTOM_NODE_CONFIG, self.node)
        except ApiError:
            return None
        try:
            cnc = CustomNodeConfig.from_json(raw)
        except ValueError as exc:
            message = (
                f"CustomNodeConfig {self.node} is unreadable: {_problem(exc)} (the agent on "
                f"{self.node} takes no dynamic config from it)"
            )
            kind = names.CUSTOM_NODE_CONFIG
            self.skips.report([Skip.of(kind, raw, skip_reason(raw), message)], now)
            return None
        for target in cnc.status.katalyst_custom_config_list:
            if target.config_type.resource == names.ADMIN_QOS_CONFIGURATION.plural:
                return f"{target.config_namespace}/{target.config_name}"
        return None

    def __call__(self, inp: EvictionInput) -> list[Any]:
        self.refresh_config(inp.now)
        snap = self.snapshot(inp)
        plan = self.manager.decide(snap)
        self.last_plan = plan
        if not plan.ran:
            return []
        result = self.executor.apply(plan)
        return [plan, result]

    # --- building the snapshot ------------------------------------------------------------

    def snapshot(self, inp: EvictionInput) -> EvictionSnapshot:
        # On an API error keep the last known objects: the agent's own pods are the authority.
        with contextlib.suppress(ApiError):
            self._pods.sync()
        now = inp.now
        plan = inp.plan
        plans = {pp.uid: pp for pp in plan.pods}
        objects = []
        for uid, spec in inp.pods.items():
            obj = self._pods.get(spec.name, spec.namespace)
            if obj is not None and str((obj.get("metadata") or {}).get("uid", "")) == uid:
                objects.append(obj)
        parsed = self._parsed.refresh(objects)
        infos = [
            self._pod(uid, spec, parsed.get(uid), plans.get(uid), inp.metrics, inp.sample, now)
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
        )

    def _pod(
        self,
        uid: str,
        spec: PodSpec,
        parsed: PodInfo | None,
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
        # QoS level and requests as the agent parsed them (cached by resourceVersion there)
        usage.update(
            qos_level=spec.level,
            terminating=spec.terminating,
            request_milli_cpu=round(spec.request_cores * 1000),
            request_memory=spec.memory_request,
            reclaimed_milli_cpu=spec.reclaimed_milli_cpu,
            reclaimed_memory=spec.reclaimed_memory,
        )
        if parsed is not None:
            return dataclasses.replace(parsed, **usage)
        return PodInfo(uid=uid, namespace=spec.namespace, name=spec.name, **usage)

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


def _pod_metadata(obj: Any) -> PodInfo:
    """A pod's `PodInfo` without the fields the agent's `PodSpec` carries already."""
    return pod_info(
        obj,
        qos_level=names.DEFAULT_QOS_LEVEL,
        request_milli_cpu=0,
        request_memory=0,
        reclaimed_milli_cpu=0,
        reclaimed_memory=0,
    )


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
