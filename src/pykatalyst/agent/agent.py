"""The node agent's loop: sample → advise → allocate → (evict) → enforce → report.

`Agent.reconcile(now)` is synchronous and returns an `AgentPlan`; `katalyst agent` calls it
on a real clock, tests and the simulator on a virtual one. Everything the loop learns from
the machine comes through the `Host`; everything it writes to cgroups goes through the
enforcer; everything it tells the cluster goes through the `Cluster` protocol.

Eviction plugs in after the plan is made and before it is enforced: each
`EvictionStage` is called with an `EvictionInput` (the plan, the pods, the metrics, the
sample) and returns the actions it took or would take; they are recorded in the plan.
Stages run in order, every tick; a stage that raises is reported and skipped, never
stopping the loop. An action with a `knob_overrides` mapping (cgroup -> {Knob: value})
changes this tick's desired knobs before they are enforced, so a stage can throttle
(shrink a quota, a limit) before it evicts.

The loop keeps its per-tick work small: pods are parsed once per resourceVersion, cgroups
are rediscovered only when a pod without a known cgroup appears (or every
`REDISCOVER_PERIOD_S`), and the enforcer — which reads the machine — is called only when the
desired knobs change, or every `resync_period_s` (default: every period) to undo drift.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pykatalyst.agent import (
    cpu_policy,
    cpu_state,
    isolation,
    kubelet_cpu,
    memory_policy,
    net_policy,
    regions,
)
from pykatalyst.agent import decide as steps
from pykatalyst.agent.advisor import (
    HeadroomSmoother,
    MemoryUser,
    RegulatorState,
    assemble_pools,
    cpu_headroom,
    estimate_container,
    memory_headroom,
    regulate,
)
from pykatalyst.agent.config import (
    CPU_LOAD_RATIO,
    CPU_SCHED_WAIT,
    CPU_USAGE_RATIO,
    AgentConfig,
    ReporterConfig,
    reclaim_setting,
)
from pykatalyst.agent.cpu_policy import DedicatedAssignment, Layout
from pykatalyst.agent.dynamic_config import AgentSettings
from pykatalyst.agent.executor import KnobEnforcer, KnobWriter
from pykatalyst.agent.host.base import CpuQuota, Host, Knob, KnobValue, NetShape, PodCgroup
from pykatalyst.agent.host.kubelet import KubeletView
from pykatalyst.agent.inputs import EvictionInput, EvictionStage, TickInputs
from pykatalyst.agent.metrics import MetricStore
from pykatalyst.agent.node_state import NodeState, NodeView
from pykatalyst.agent.plan import (
    AgentPlan,
    ContainerPlan,
    PlanEvent,
    PodPlan,
    ReclaimedFigure,
)
from pykatalyst.agent.rama import PIDState, rama_requirement, region_targets, spd_targets
from pykatalyst.agent.reporter import (
    NumaAllocation,
    PodCpus,
    Reporter,
    ReportInput,
    apportion,
    milli_cpu,
)
from pykatalyst.agent.state import ContainerCgroups, PodCache, PodSpec, match_cgroups
from pykatalyst.api import config_fields, names
from pykatalyst.api.timefmt import rfc3339
from pykatalyst.cluster.clock import Clock
from pykatalyst.cluster.events import EventRecorder, ObjectRef
from pykatalyst.cluster.protocol import ApiError, Cluster
from pykatalyst.cluster.skips import Skip, skip_reason
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology

__all__ = ["Agent", "Decision", "EvictionInput", "EvictionStage", "KnobEnforcer"]

log = logging.getLogger("pykatalyst.agent")

OOM_PRIORITY_IGNORED = (
    "oom_priority is not applied on this node: the agent's memory_advisor.oom_priority is "
    "off, so the kernel's OOM killer follows the kubelet's QoS-class oom_score_adj"
)

REDISCOVER_PERIOD_S = 30.0
UNMANAGED = "(unmanaged)"
BESTEFFORT = "besteffort"  # the kubelet's QoS class whose cgroup holds reclaimed pods

_log = logging.getLogger("pykatalyst.agent")


@dataclass(frozen=True, slots=True)
class _Shared:
    spec: PodSpec
    ramping: bool


@dataclass(frozen=True, slots=True)
class Decision:
    """What `decide` made of one tick's inputs: the plan before eviction and enforcement,
    and the layout and managed pods the executor reports from."""

    plan: AgentPlan
    layout: Layout
    valid: Mapping[str, PodSpec]


class Agent:
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
    ) -> None:
        self.node_name = node_name
        self.cluster = cluster
        self.host = host
        self.clock = clock
        self.base_config = config if config is not None else AgentConfig()
        self.config = self.base_config
        _log.info("agent for %s: %s", node_name, reclaim_setting(self.base_config))
        self.enforcer = enforcer
        self.eviction_stages: list[EvictionStage] = list(eviction_stages)
        self.dry_run = dry_run
        self.publish = publish and not dry_run
        self.topology: CPUTopology = host.topology()
        self._numa_of = {c: self.topology.numa_of(c) for c in self.topology.all_cpus}
        self._topo_terms = self._topology_terms()
        self.metrics = MetricStore(self.config.metrics.insurance_period_s)
        self.reporter = Reporter(node_name, cluster, self.config.reporter)
        self.events = EventRecorder(cluster, names.AGENT_COMPONENT, node_name)
        # The one holder of the node's pods and dynamic config, shared with the stages.
        self.node_state = node_state or NodeState(
            node_name,
            cluster,
            admin_qos=self.base_config.admin_qos_config,
            config_ttl_s=self.base_config.config_ttl_s,
        )
        self.settings = AgentSettings(node_name, self.base_config)
        self._init_caches()
        self.placement = cpu_state.CpuState()  # dedicated, NUMA-bound and pool cpus
        self._snb_domains: dict[int, CPUSet] = {}
        self._regulators: dict[str, RegulatorState] = {}
        self._isolated: frozenset[str] = frozenset()
        self._isolation_states: dict[tuple[str, str], regions.IsolationState] = {}
        self._borrowed: dict[str, CPUSet] = {}
        self._dedicated_regulators: dict[str, RegulatorState] = {}
        self._rama: dict[str, dict[str, PIDState]] = {}  # pool -> indicator -> controller
        self._rama_next: dict[str, dict[str, PIDState]] = {}
        self._spd_cache: dict[tuple[str, str], tuple[float, dict[str, float]]] = {}
        self._steps: dict[str, dict[str, Any]] = {}  # pool -> the step that last sized it
        self._kubelet = (
            None
            if kubelet is None
            else kubelet_cpu.KubeletCpuWatch(self.base_config.kubelet.config_path, kubelet)
        )
        self.cpu_state_error: str | None = None
        self._cpu_rebuild = True  # until a checkpoint says where pods are
        self._cpu_checkpoint = cpu_state.checkpoint_for(
            self.base_config.cpu_state_path,
            node_name,
            self.topology,
            _path_or_none(getattr(enforcer, "checkpoint_path", None)),
        )
        self._restore_cpu_state()
        self._events_sent: set[tuple[str, str, str]] = set()
        self._writer = KnobWriter(enforcer, dry_run)
        self._net_shape: NetShape | None = None  # the egress shape last applied
        self._net_error = ""
        # The headroom smoothers (cpu, memory): retuned, history kept, when the config changes.
        self._cpu_smoother = HeadroomSmoother(0, 0, 0, 0, 0, 0)
        self._mem_smoother = HeadroomSmoother(0, 0, 0, 0, 0, 0)
        _tune_smoothers(self._cpu_smoother, self._mem_smoother, self.config.reporter)

    def _init_caches(self) -> None:
        """What the tick remembers to stay cheap: parsed pods, cgroups, per-pod plans."""
        self._pods_version = -1
        self._cache = PodCache()
        self._specs: dict[str, PodSpec] = {}
        self._cgroups: dict[str, PodCgroup] = {}
        self._last_discovery: float | None = None
        self._unknown_at_discovery: set[str] = set()
        self._sample_list: list[str] = []
        self._sample_key: tuple[int, int] | None = None
        self._matched: dict[str, tuple[PodSpec, PodCgroup | None, ContainerCgroups]] = {}
        self._order: list[str] = []
        self._plan_cache: dict[
            str, tuple[tuple[Any, ...], PodPlan, list[tuple[str, dict[Knob, KnobValue]]]]
        ] = {}
        self._order_key: Mapping[str, PodSpec] | None = None
        self._first_tick = True
        self._first_seen: dict[str, float] = {}
        self._root_key: str | None = None  # reset by each discovery
        self._root: str | None = None
        self._dropped_at: dict[str, float] = {}  # reclaimed pod uid -> its last cache drop
        self._container_ids: set[str] = set()

    @property
    def config_status(self) -> dict[str, Any]:
        """Where the configuration in force comes from (the plan's `config`)."""
        return self.settings.status

    # --- cluster input ----------------------------------------------------------------------

    def _set_config(self, cfg: AgentConfig) -> None:
        if cfg == self.config:
            return
        self.config = cfg
        rc = cfg.reporter
        self.reporter.cfg = rc
        _tune_smoothers(self._cpu_smoother, self._mem_smoother, rc)
        self.metrics.insurance_period_s = cfg.metrics.insurance_period_s

    def _parse_pods(self, view: NodeView, now: float) -> dict[str, PodSpec]:
        """The node's pods that have not finished, parsed once per resourceVersion."""
        if view.pods_version != self._pods_version:
            self._specs = {
                uid: s
                for uid, s in self._cache.refresh(view.pods.values()).items()
                if not s.finished
            }
            self._pods_version = view.pods_version
        specs = self._specs
        for uid in specs:
            if uid not in self._first_seen:
                self._first_seen[uid] = -math.inf if self._first_tick else now
        if len(self._first_seen) > len(specs):
            self._first_seen = {u: t for u, t in self._first_seen.items() if u in specs}
            self._matched = {u: m for u, m in self._matched.items() if u in specs}
        self._first_tick = False
        return specs

    # --- cpu placement across restarts ------------------------------------------------------

    def _restore_cpu_state(self) -> None:
        ck = self._cpu_checkpoint
        if ck is None:
            return
        try:
            state = ck.load()
        except cpu_state.CpuStateError as exc:
            self.cpu_state_error = f"{ck.path}: {exc}"
            log.warning(
                "cpu state checkpoint %s refused: %s; rebuilding the placement from the "
                "cpusets the cgroups show",
                ck.path,
                exc,
            )
            return
        if state is not None:
            self.placement = state
            self._cpu_rebuild = False

    def _rebuild_cpu_state(self, specs: Mapping[str, PodSpec]) -> None:
        """Without a checkpoint, take the placement from the cpusets pods run on."""
        dedicated: dict[str, tuple[CPUSet, bool]] = {}
        snb: dict[str, CPUSet] = {}
        for s in sorted(specs.values(), key=lambda s: s.created_key):
            if s.qos is None or s.level not in (names.QOS_DEDICATED_CORES, names.QOS_SHARED_CORES):
                continue
            if s.level == names.QOS_SHARED_CORES and not s.qos.numa_binding:
                continue
            cg = self._match(s)
            cpus = CPUSet()
            for path in cg.containers.values():
                v = self.host.read_knobs(path).get(Knob.CPUSET_CPUS)
                if isinstance(v, CPUSet):
                    cpus = cpus | v
            if s.level == names.QOS_DEDICATED_CORES:
                dedicated[s.uid] = (cpus, s.qos.numa_exclusive)
            else:
                snb[s.uid] = cpus
        state = cpu_state.from_cgroups(self.topology, dedicated, snb)
        held = self.placement
        self.placement = cpu_state.CpuState(
            {**state.dedicated, **held.dedicated}, {**state.snb, **held.snb}, held.pools
        )
        if state.dedicated or state.snb:
            log.info(
                "cpu placement rebuilt from cgroups: %d dedicated, %d NUMA-bound shared pods",
                len(state.dedicated),
                len(state.snb),
            )

    def _save_cpu_state(self, warnings: list[str]) -> None:
        ck = self._cpu_checkpoint
        if ck is None or self.dry_run:
            return
        try:
            ck.save(self.placement)
        except OSError as exc:
            warnings.append(f"cannot checkpoint the cpu placement to {ck.path}: {exc}")

    # --- the loop -----------------------------------------------------------------------------

    def reconcile(self, now: float | None = None) -> AgentPlan:
        """One tick: gather the inputs, decide the plan, execute it."""
        now = self.clock.now() if now is None else now
        inputs = self.gather(now)
        return self.execute(inputs, self.decide(inputs))

    def gather(self, now: float) -> TickInputs:
        """Read the node's pods and config (one holder), the cgroups, and one sample."""
        warnings: list[str] = []
        events: list[PlanEvent] = []
        view = self.node_state.refresh(now)
        self._set_config(self.settings.update(view.config, warnings, events))
        warnings.extend(view.warnings)
        specs = self._parse_pods(view, now)
        self._discover(now, specs)
        if self._cpu_rebuild:
            self._cpu_rebuild = False
            self._rebuild_cpu_state(specs)
        sample = self.host.sample(now, self._cgroup_list(specs))
        self.metrics.ingest(sample)
        return TickInputs(
            now,
            view,
            self.config,
            dict(self.config_status),
            specs,
            sample,
            tuple(warnings),
            tuple(events),
        )

    def decide(self, inp: TickInputs) -> Decision:
        """The tick's plan: layout, pool sizes, cpusets, reclaimed figures, pod knobs."""
        now, cfg, topo = inp.now, inp.config, self.topology
        warnings, events = list(inp.warnings), list(inp.events)
        valid = steps.classify(inp.specs)
        self._pod_events(inp.specs, events)
        pins = None if self._kubelet is None else self._kubelet.observe(_refs(valid))
        lay, lay_warnings = steps.layout(topo, cfg, valid, self.placement, pins)
        warnings.extend(lay_warnings)
        for uid, why in lay.failed.items():
            self._event_once(events, valid[uid], "DedicatedPlacementFailed", why)
        for uid, why in lay.snb_failed.items():
            self._event_once(events, valid[uid], "NUMABindingFailed", why)
        pool_terms, estimates, sizes, snb_sizes = self._advise(now, valid, lay)
        alloc = steps.allocate(
            topo, cfg, lay, sizes, snb_sizes, self._snb_domains, self.placement.pools
        )
        # Regions the reclaim pool borrows from: share pools in overlap mode, idle cpus of
        # numa_exclusive dedicated pods; reclaimed pods run there under SCHED_IDLE.
        borrowed, borrowed_size, region_terms = self._borrow(
            now, lay, alloc.pools, sizes, snb_sizes, valid
        )
        alloc = steps.lend(lay, alloc, borrowed, borrowed_size, region_terms)
        warnings.extend(alloc.warnings)
        self.placement = cpu_state.CpuState(lay.dedicated, lay.snb, alloc.pools)
        self._save_cpu_state(warnings)
        # headroom: over the cpus reclaimed pods get, capped at the reclaimed cores size
        # when some are lent, so that a region's slack is not published twice.
        reclaimed_usage = self._reclaimed_usage(valid, now)
        cap = float(alloc.reclaimed_cores_size) if alloc.overlap else None
        cpu_fig, mem_fig = self._headroom(
            now, alloc.reclaimed_cpus, reclaimed_usage, valid, cap, lay.dedicated
        )
        pod_plans, knobs = self._pod_plans(
            now, inp.specs, valid, lay, alloc.pools, alloc.reclaimed_cpus, estimates
        )
        desired = self._with_root(self._without_pinned(knobs, valid, pins), alloc)
        iso = self._isolate(inp, valid, lay, (pod_plans, desired))
        warnings.extend(steps.failed_warnings(lay, valid))
        plan = AgentPlan(
            node=self.node_name,
            time=now,
            topology=self._topo_terms,
            pools=tuple(steps.pool_plans(lay, alloc, pool_terms)),
            pods=tuple(pod_plans),
            reclaimed_cpu=cpu_fig,
            reclaimed_memory=mem_fig,
            desired=desired,
            warnings=tuple(warnings),
            events=tuple(events),
            dry_run=self.dry_run,
            config=dict(inp.config_status),
            memory=iso.memory,
            io=iso.io,
        )
        return Decision(plan, lay, valid)

    def execute(self, inp: TickInputs, d: Decision) -> AgentPlan:
        """Run the eviction stages on the plan, enforce its knobs, report, send Events."""
        plan = d.plan
        warnings, events = list(plan.warnings), list(plan.events)
        desired = dict(plan.desired)  # eviction overrides may narrow this tick's knobs
        actions = self._evict(inp, d, desired, warnings)
        net_terms = self._network(d.valid, desired, warnings)
        enforce_terms = self._enforce(inp.now, desired, inp.specs, events, warnings)
        enforce_terms["network"] = net_terms
        report_terms = self._report(
            inp.now, d.layout, plan.reclaimed_cpu, plan.reclaimed_memory, d.valid, plan
        )
        self._emit_events(events, inp.now)
        return dataclasses.replace(
            plan,
            warnings=tuple(warnings),
            events=tuple(events),
            eviction_actions=tuple(actions),
            enforce=enforce_terms,
            desired=desired,
            report=report_terms,
            config=dict(self.config_status),
        )

    # --- steps --------------------------------------------------------------------------------

    def _pod_events(self, specs: Mapping[str, PodSpec], events: list[PlanEvent]) -> None:
        """Say, once each, which pods are left alone and which annotations are ignored."""
        for s in specs.values():
            if s.error is not None:
                self._event_once(events, s, "InvalidQoS", s.error)
                continue
            applied = self.config.memory_advisor.oom_priority
            if s.qos is not None and s.qos.enhancements.oom_priority is not None and not applied:
                self._event_once(events, s, "OOMPriorityIgnored", OOM_PRIORITY_IGNORED)
            if s.qos is not None and s.qos.warnings:
                warned = "; ".join(str(w) for w in s.qos.warnings)
                self._event_once(events, s, "QoSWarning", f"Pod {s.key}: {warned}")

    def _advise(
        self, now: float, valid: Mapping[str, PodSpec], lay: Layout
    ) -> tuple[
        dict[str, dict[str, Any]],
        dict[tuple[str, str], tuple[float, str]],
        dict[str, int],
        dict[int, dict[str, int]],
    ]:
        """Size the share pools: the unbound ones (an isolated pod's pool among them), then
        the NUMA-bound ones per NUMA node."""
        topo = self.topology

        def members(groups: Mapping[str, list[PodSpec]]) -> dict[str, list[_Shared]]:
            return {p: [_Shared(s, self._ramping(s, now)) for s in ms] for p, ms in groups.items()}

        isolated, isolation_sizes = self._load_isolation(now, valid, lay)
        unbound, bound = steps.snb_groups(valid, lay, isolated)
        nb_share = len(lay.share_numas) / max(topo.num_numa_nodes, 1)
        states: dict[str, RegulatorState] = {}
        pool_terms, estimates, sizes = self._advise_scope(
            now,
            members(unbound),
            len(lay.share_domain),
            lay.reserved_for_reclaim,
            nb_share,
            states,
            isolation_sizes,
        )
        snb_domains: dict[int, CPUSet] = {}
        snb_sizes: dict[int, dict[str, int]] = {}
        for numa, numa_pools in sorted(bound.items()):
            domain = lay.bound_leftover & topo.cpus_in_numa(numa)
            snb_domains[numa] = domain
            t, e, z = self._advise_scope(
                now,
                members(numa_pools),
                len(domain),
                lay.snb_reserved_for_reclaim.get(numa, 1),
                1 / max(topo.num_numa_nodes, 1),
                states,
            )
            pool_terms.update(t)
            estimates.update(e)
            snb_sizes[numa] = z
        self._regulators = states
        self._rama, self._rama_next = self._rama_next, {}
        self._snb_domains = snb_domains
        return pool_terms, estimates, sizes, snb_sizes

    def _without_pinned(
        self,
        desired: dict[str, dict[Knob, KnobValue]],
        valid: Mapping[str, PodSpec],
        pins: kubelet_cpu.KubeletPins | None,
    ) -> dict[str, dict[Knob, KnobValue]]:
        """The kubelet alone writes the cpusets of the containers it pinned."""
        policy = None if self._kubelet is None else self._kubelet.policy
        static = policy is not None and policy.static
        if pins is None and not static:
            return desired
        pods: dict[str, kubelet_cpu.PodContainers] = {}
        for uid, s in valid.items():
            pc = self._cgroups.get(uid)
            pods[uid] = kubelet_cpu.PodContainers(
                self._match(s).containers,
                frozenset(c.cgroup for c in pc.containers) if pc is not None else frozenset(),
                frozenset(
                    c.name
                    for c in s.containers
                    if kubelet_cpu.may_pin(c.request_cores, c.limit_cores)
                ),
            )
        return kubelet_cpu.strip_pinned(desired, kubelet_cpu.kubelet_owned(pins, static, pods))

    def _with_root(
        self, desired: dict[str, dict[Knob, KnobValue]], alloc: steps.Allocation
    ) -> dict[str, dict[Knob, KnobValue]]:
        """The reclaimed root's knobs (cpu.idle, the reclaim pool's quota) with the pods'."""
        root = self._reclaimed_root()
        if root is not None:
            desired[root] = self._root_knobs(alloc.reclaimed_cores_size)
        return desired

    def _isolate(
        self,
        inp: TickInputs,
        valid: Mapping[str, PodSpec],
        lay: Layout,
        desired: tuple[list[PodPlan], dict[str, dict[Knob, KnobValue]]],
    ) -> isolation.IsolationResult:
        """Memory and disk I/O knobs (agent/isolation.py), merged into the desired ones."""
        managed = [p for p in desired[0] if p.pool != UNMANAGED]
        iso = isolation.isolation_pass(
            inp.now,
            inp.config,
            self.host,
            self.topology,
            managed,
            valid,
            inp.sample,
            self._reclaimed_root(),
            lay.bound_numas,
            self._dropped_at,
        )
        isolation.merge(desired[1], iso.desired)
        self._dropped_at = dict(iso.dropped_at)
        return iso

    def _evict(
        self,
        inp: TickInputs,
        d: Decision,
        desired: dict[str, Mapping[Knob, KnobValue]],
        warnings: list[str],
    ) -> list[Any]:
        """Run the eviction stages in order; a stage that raises is reported and skipped.
        An action's `knob_overrides` (throttling before evicting) narrow this tick's knobs."""
        actions: list[Any] = []
        if not self.eviction_stages:
            return actions
        stage_input = EvictionInput(
            inp.now, d.plan, d.valid, self.metrics, inp.sample, node=inp.node
        )
        for stage in self.eviction_stages:
            try:
                actions.extend(stage(stage_input))
            except Exception as exc:  # a broken stage must not stop the loop
                warnings.append(f"eviction stage {getattr(stage, '__name__', stage)}: {exc}")
        for action in actions:
            overrides = getattr(action, "knob_overrides", None)
            if isinstance(overrides, Mapping):
                for cgroup, knobs in overrides.items():
                    desired[cgroup] = {**desired.get(cgroup, {}), **knobs}
        return actions

    def _discover(self, now: float, specs: Mapping[str, PodSpec]) -> None:
        # Discovery walks the cgroup tree: do it when a pod appears whose cgroup is not
        # known yet (once per such pod, not every tick while it has none), when a write
        # found a cgroup gone, and every REDISCOVER_PERIOD_S. A container the pod status
        # names but no cgroup was found for (a restart) counts too: cpusets sit on the
        # container cgroups, so a new one runs unconfined until it is found.
        unknown = self._unknown(specs)
        due = (
            self._last_discovery is None
            or now - self._last_discovery >= REDISCOVER_PERIOD_S
            or not unknown.issubset(self._unknown_at_discovery)
        )
        if not due:
            return
        self._last_discovery = now
        try:
            found = self.host.discover()
        except OSError:
            return
        self._cgroups = {p.pod_uid: p for p in found}
        self._root_key = None
        self._container_ids = {c.container_id for p in found for c in p.containers}
        self._unknown_at_discovery = self._unknown(specs)
        self._sample_key = None

    def _unknown(self, specs: Mapping[str, PodSpec]) -> set[str]:
        ids = self._container_ids
        out: set[str] = set()
        for uid, s in specs.items():
            if uid not in self._cgroups:
                out.add(uid)
                continue
            for c in s.containers:
                if c.container_id and c.container_id not in ids:
                    out.add(f"{uid}/{c.container_id}")
        return out

    def _reclaimed_root(self) -> str | None:
        """The cgroup above every reclaimed pod, when it exists on this machine.

        'auto' asks the host for the kubelet's best-effort cgroup, or else takes the parent
        of a discovered best-effort pod. The root is only written while it holds a
        discovered pod: that is how the agent knows it is there.
        """
        configured = self.config.reclaimed_root.strip("/")
        if not configured:
            return None
        key = configured
        if self._root_key == key:
            return self._root
        root: str | None = configured
        if configured == "auto":
            root = None
            try:
                besteffort = self.host.qos_cgroup(BESTEFFORT)
            except ValueError:
                besteffort = None
            root = besteffort.strip("/") if besteffort is not None else None
            if root is None:
                root = next(
                    (
                        p.cgroup.rsplit("/", 1)[0]
                        for p in self._cgroups.values()
                        if p.qos_class == BESTEFFORT and "/" in p.cgroup
                    ),
                    None,
                )
        if root is not None:
            prefix = root + "/"
            if not any(p.cgroup.startswith(prefix) for p in self._cgroups.values()):
                root = None
        self._root_key, self._root = key, root
        return root

    def _root_knobs(self, reclaim_cpus: int) -> dict[Knob, KnobValue]:
        """cpu.idle on the reclaimed root: the kernel decides wakeup preemption between the
        entities just below the common ancestor of the waking task and the running one, so
        a shared pod (under kubepods/burstable) preempts a reclaimed one at once only when
        the best-effort root itself is idle. But the kubelet writes cpu.shares to its
        best-effort cgroup at start and every minute, and the kernel refuses cpu.shares on
        an idle cgroup: a kubelet restarted under an idle root fails to start. So the root
        is idled only when `reclaimed_root_cpu_idle` says it is not the kubelet's, and
        otherwise kept at cpu.idle=0 (undoing an earlier agent's setting). The quota, when
        enabled, caps everything below the root at the reclaimed cores size (what Katalyst
        writes for its quota knob)."""
        cfg = self.config
        idle = cfg.reclaimed_cpu_idle and cfg.reclaimed_root_cpu_idle
        knobs: dict[Knob, KnobValue] = {Knob.CPU_IDLE: 1 if idle else 0}
        period = 100_000
        if cfg.reclaimed_root_quota:
            knobs[Knob.CPU_QUOTA] = CpuQuota(max(reclaim_cpus, 1) * period, period)
        else:
            knobs[Knob.CPU_QUOTA] = CpuQuota(None, period)
        return knobs

    def _cgroup_list(self, specs: Mapping[str, PodSpec]) -> list[str]:
        """The cgroups worth sampling: every pod's (usage, memory), and containers only
        where the estimate needs them (shared pods with several containers); a
        single-container pod is measured at its pod cgroup, which halves the reads."""
        key = (id(specs), id(self._cgroups))
        if key != self._sample_key:
            out: list[str] = []
            for uid, s in specs.items():
                pc = self._cgroups.get(uid)
                if pc is None:
                    continue
                out.append(pc.cgroup)
                if s.level == names.QOS_SHARED_CORES and len(s.containers) > 1:
                    out.extend(self._match(s).containers.values())
            self._sample_list = out
            self._sample_key = key
        return self._sample_list

    def _match(self, s: PodSpec) -> ContainerCgroups:
        pc = self._cgroups.get(s.uid)
        hit = self._matched.get(s.uid)
        if hit is not None and hit[0] is s and hit[1] is pc:
            return hit[2]
        m = match_cgroups(s, pc)
        self._matched[s.uid] = (s, pc, m)
        return m

    def _ramping(self, s: PodSpec, now: float) -> bool:
        start = s.started_at if s.started_at is not None else self._first_seen.get(s.uid)
        if start is None:
            return False
        return now - start < self.config.cpu.ramp_up_period_s

    def _advise_scope(
        self,
        now: float,
        shared: Mapping[str, list[_Shared]],
        domain_size: int,
        reserved_for_reclaim: int,
        numa_fraction: float,
        states: dict[str, RegulatorState],
        fixed: Mapping[str, int] | None = None,
    ) -> tuple[dict[str, dict[str, Any]], dict[tuple[str, str], tuple[float, str]], dict[str, int]]:
        """Size the share pools of one scope (the unbound NUMA nodes, or one NUMA node).

        In overlap mode the pools fill the scope, sized by their requests (Katalyst's
        allowExpand), and the regulator keeps the requirement: the reclaim pool overlaps
        each pool by what it does not require (`regions.borrow_from_pools`). `fixed` pools
        (isolation pools) have their size and no regulator."""
        adv = self.config.advisor
        overlap = self.config.cpu.overlap_reclaim_with_share
        pinned = dict(fixed or {})
        regular = {p: m for p, m in shared.items() if p not in pinned}
        rfr = 0
        if not overlap:
            rfr = cpu_policy.fit_reclaim_reserve(domain_size, reserved_for_reclaim, len(shared))
        available = domain_size - rfr
        reserved_each = adv.reserved_for_allocate_cpu * numa_fraction / max(len(regular), 1)
        estimates: dict[tuple[str, str], tuple[float, str]] = {}
        regulated: dict[str, int] = {}
        requests: dict[str, float] = {}
        terms: dict[str, dict[str, Any]] = {}
        scope: dict[str, RegulatorState] = {}
        for pool, members in sorted(shared.items()):
            requirement, _requests, sources = self._estimate_pool(members, now, estimates)
            if pool in pinned:
                terms[pool] = {"isolated": True, "size": pinned[pool], "pods": len(members)}
                continue
            requirement, provision = self._provision(
                pool, members, requirement, reserved_each, available, now
            )
            size, state, rterms = regulate(
                requirement,
                reserved_each,
                self._regulators.get(pool),
                now,
                adv.min_share_cpu_requirement,
                None,  # fitted below, all pools together
                adv,
            )
            scope[pool] = state
            regulated[pool] = size
            requests[pool] = sum(m.spec.request_cores for m in members)
            rterms["pods"] = len(members)
            rterms["estimate_sources"] = sources
            rterms["provision"] = provision
            terms[pool] = rterms
        sizes, _reclaim, aterms = assemble_pools(
            max(available, 0),
            regulated,
            requests,
            reclaim_enabled=adv.enable_reclaim and not overlap,
            reserved_for_reclaim=rfr,
            fixed=pinned,
        )
        for pool, size in sizes.items():
            if size != regulated.get(pool, size) or pool in pinned:
                if pool in scope and not overlap:
                    scope[pool] = RegulatorState(size, scope[pool].last_ramp_down)
                terms[pool]["assembled"] = size
                terms[pool]["assembly"] = aterms
            self._record_step(pool, size, terms[pool], now)
        states.update(scope)
        return terms, estimates, sizes

    def _load_isolation(
        self, now: float, valid: Mapping[str, PodSpec], lay: Layout
    ) -> tuple[frozenset[str], dict[str, int]]:
        """Katalyst's load isolator over the unbound shared pods: (isolated pods, size of
        each isolation pool = max(limit, request) summed over the pod's containers)."""
        cfg = self.config.advisor.isolation
        cands: list[regions.IsolationCandidate] = []
        for s in valid.values() if cfg.enabled else ():
            if s.level != names.QOS_SHARED_CORES or s.uid in lay.snb:
                continue
            cg = self._match(s)
            single = len(s.containers) == 1
            runnable: dict[str, float | None] = {}
            for c in s.containers:
                path = cg.pod if single else cg.containers.get(c.name)
                runnable[c.name] = self.metrics.runnable(path, now) if path else None
            resources = {c.name: max(c.limit_cores, c.request_cores) for c in s.containers}
            pool = s.pool or names.POOL_SHARE
            cands.append(
                regions.IsolationCandidate(s.uid, pool, resources, runnable, self._ramping(s, now))
            )
        isolated, self._isolation_states, _terms = regions.decide_isolation(
            cands, self._isolated, self._isolation_states, now, cfg
        )
        self._isolated = isolated
        by_uid = {c.uid: c for c in cands}
        sizes = {
            regions.isolation_pool_name(u): max(1, math.ceil(sum(by_uid[u].resources.values())))
            for u in sorted(isolated)
        }
        return isolated, sizes

    def _borrow(
        self,
        now: float,
        lay: Layout,
        pools: Mapping[str, CPUSet],
        sizes: Mapping[str, int],
        snb_sizes: Mapping[int, Mapping[str, int]],
        valid: Mapping[str, PodSpec],
    ) -> tuple[dict[str, CPUSet], int, dict[str, Any]]:
        """Cpus the reclaim pool borrows, by region (share pools in overlap mode, dedicated
        regions), the cores reclaimed pods may use there in all, and the terms."""
        cfg = self.config
        states = self._regulators
        prefix = f"{names.POOL_PREFIX_ISOLATION}-"
        isolation_sizes = {p: z for p, z in sizes.items() if p.startswith(prefix)}
        out: dict[str, CPUSet] = {}
        total = 0
        terms: dict[str, Any] = {}
        if cfg.cpu.overlap_reclaim_with_share:
            scopes = [
                (
                    "unbound",
                    [p for p in sorted(sizes) if p not in isolation_sizes],
                    len(lay.share_domain),
                    lay.reserved_for_reclaim,
                    isolation_sizes,
                )
            ]
            for numa, z in sorted(snb_sizes.items()):
                rfr = lay.snb_reserved_for_reclaim.get(numa, 1)
                scopes.append((f"NUMA{numa}", sorted(z), len(self._snb_domains[numa]), rfr, {}))
            for scope, members, avail, rfr, fixed in scopes:
                if not members:
                    continue
                got, size, t = regions.borrow_from_pools(
                    self.topology,
                    {p: pools[p] for p in members},
                    {p: states[p].size for p in members if p in states},
                    avail,
                    rfr,
                    self._borrowed,
                    reclaim_enabled=cfg.advisor.enable_reclaim,
                    whole_pools=cfg.reclaimed_root_quota,
                    fixed=fixed,
                )
                out.update(got)
                total += size
                terms[scope] = t
        for name, (cpus, size, t) in self._dedicated_regions(now, lay, valid).items():
            if cpus:
                out[name] = cpus
                total += size
            terms[name] = t
        self._borrowed = out
        return out, total, terms

    def _dedicated_regions(
        self,
        now: float,
        lay: Layout,
        valid: Mapping[str, PodSpec],
    ) -> dict[str, tuple[CPUSet, int, dict[str, Any]]]:
        """Per NUMA node of each numa_exclusive dedicated pod: the idle cpus reclaimed pods
        may run on (Katalyst's dedicated regions), with the pod's regulated requirement."""
        cfg = self.config
        adv = cfg.advisor
        topo = self.topology
        on = adv.enable_reclaim and cfg.reclaimed_cpu_idle
        reclaim_min = cpu_policy.reclaim_minimum(topo, cfg.cpu, adv.min_reclaimed_for_allocate_cpu)
        rfr = max(1, reclaim_min // max(topo.num_numa_nodes, 1))
        out: dict[str, tuple[CPUSet, int, dict[str, Any]]] = {}
        states: dict[str, RegulatorState] = {}
        for uid, a in sorted(lay.dedicated.items()):
            if not a.exclusive or uid not in valid or not a.cpuset:
                continue
            s = valid[uid]
            estimate, _ = self._pod_estimate(s, now, self._ramping(s, now))
            for n in a.numas:
                cpus = a.cpuset & topo.cpus_in_numa(n)
                if not cpus:
                    continue
                name = f"{names.POOL_DEDICATED}-{s.key}-NUMA{n}"
                requirement, state, rterms = regulate(
                    estimate * len(cpus) / len(a.cpuset),
                    adv.reserved_for_allocate_cpu / max(topo.num_numa_nodes, 1),
                    self._dedicated_regulators.get(name),
                    now,
                    min(adv.min_share_cpu_requirement, len(cpus)),
                    len(cpus),
                    adv,
                )
                states[name] = state
                size, t = regions.dedicated_reclaim_size(
                    len(cpus), requirement, min(rfr, len(cpus)), reclaim_enabled=on
                )
                if adv.enable_reclaim and not cfg.reclaimed_cpu_idle:
                    t["reclaim"] = "reclaimed_cpu_idle is off: reclaimed pods would not yield"
                picked = regions.pick_cpus(topo, cpus, size, self._borrowed.get(name, CPUSet()))
                t.update({"pod": s.key, "cpus": str(picked), "regulator": rterms})
                out[name] = (picked, size, t)
        self._dedicated_regulators = states
        return out

    def _pod_estimate(
        self, s: PodSpec, now: float, ramping: bool
    ) -> tuple[float, dict[str, tuple[float, str]]]:
        """Katalyst's canonical estimate of a pod: Σ over its containers, with each
        container's (cores, source)."""
        adv = self.config.advisor
        cg = self._match(s)
        single = len(s.containers) == 1
        per: dict[str, tuple[float, str]] = {}
        for c in s.containers:
            path = cg.pod if single else cg.containers.get(c.name)
            cm = self.metrics.cpu(path, now) if path else None
            est = estimate_container(
                c.request_cores,
                cm.usage if cm else None,
                cm.load1 if cm else None,
                cm.load5 if cm else None,
                ramping_up=ramping,
                reclaim_enabled=adv.enable_reclaim,
                cfg=adv,
            )
            per[c.name] = (est.cores, est.source)
        return sum(v[0] for v in per.values()), per

    def _estimate_pool(
        self,
        members: Sequence[_Shared],
        now: float,
        estimates: dict[tuple[str, str], tuple[float, str]],
    ) -> tuple[float, float, dict[str, int]]:
        """The pool's canonical requirement (Σ container estimates), its Σ requests, and how
        many estimates came from each source; each container's estimate into `estimates`."""
        requirement = 0.0
        req_total = 0.0
        sources: dict[str, int] = {}
        for m in members:
            total, per = self._pod_estimate(m.spec, now, m.ramping)
            requirement += total
            for c, est in per.items():
                estimates[(m.spec.uid, c)] = est
                sources[est[1]] = sources.get(est[1], 0) + 1
            req_total += m.spec.request_cores
        return requirement, req_total, sources

    def _record_step(self, pool: str, size: int, terms: Mapping[str, Any], now: float) -> None:
        """Keep, per pool, the provision step that last changed its size: the CNR carries
        it (cpu_pools annotation) for `katalyst explain node`, and is rewritten only then."""
        last = self._steps.get(pool)
        if last is not None and last["size"] == size:
            return
        self._steps[pool] = {
            "time": rfc3339(now),
            "size": size,
            "previous": None if last is None else last["size"],
            **dict(terms.get("provision") or {}),
        }

    def _provision(
        self,
        pool: str,
        members: Sequence[_Shared],
        canonical: float,
        reserved_for_allocate: float,
        available: int,
        now: float,
    ) -> tuple[float, dict[str, Any]]:
        """The pool's requirement by the configured provision policy, with its terms. rama
        runs as Katalyst runs it: with reclaim on, no burst buffer (its controllers are the
        buffer) and a pool size to start from; otherwise canonical's estimate stands."""
        adv = self.config.advisor
        if adv.provision_policy != "rama":
            return canonical, {"policy": "canonical"}
        prev = self._regulators.get(pool)
        why = None
        if not adv.enable_reclaim:
            why = "reclaim disabled"
        elif reserved_for_allocate > 0:
            why = (
                f"a burst buffer of {reserved_for_allocate:g} cores exists "
                "(rama needs advisor.reserved_for_allocate_cpu: 0)"
            )
        elif prev is None:
            why = "no pool size to start from yet"
        if why is None and prev is not None:
            targets, target_terms = region_targets(
                adv.rama.indicator_targets,
                {m.spec.key: self._spd_targets(m.spec, now) for m in members},
            )
            result = rama_requirement(
                float(prev.size),
                self._pool_indicators(pool, members, now),
                targets,
                adv.rama.pid_parameters,
                self._rama.get(pool, {}),
                lower_bound=adv.min_share_cpu_requirement,
                upper_bound=float(max(available, 1)),
            )
            if result is not None:
                self._rama_next[pool] = result.states
                return result.requirement, {"policy": "rama", **result.terms, **target_terms}
            why = "no indicator with a target was measured"
        return canonical, {"policy": "canonical", "rama_skipped": why}

    def _pool_indicators(
        self, pool: str, members: Sequence[_Shared], now: float
    ) -> dict[str, float | None]:
        """The pool's indicators over the cpus it has now (Katalyst averages the per-cpu
        metrics over the pool's cpuset)."""
        cpus = sorted(self.placement.pools.get(pool, CPUSet()))
        out: dict[str, float | None] = {}
        for name, series in (
            (CPU_SCHED_WAIT, self.metrics.cpu_sched_wait_us(now)),
            (CPU_USAGE_RATIO, self.metrics.cpu_usage_ratio(now)),
        ):
            have = [series[c] for c in cpus if series is not None and c < len(series)]
            out[name] = sum(have) / len(have) if have else None
        load = None
        for m in members:
            pc = self._cgroups.get(m.spec.uid)
            cm = self.metrics.cpu(pc.cgroup, now) if pc is not None else None
            if cm is not None and cm.load1 is not None:
                load = (load or 0.0) + cm.load1
        out[CPU_LOAD_RATIO] = None if load is None or not cpus else load / len(cpus)
        return out

    def _spd_targets(self, s: PodSpec, now: float) -> dict[str, float]:
        """The system indicator targets of the pod's ServiceProfileDescriptor, re-read
        every config_ttl_s; none when it has no SPD or the SPD cannot be read."""
        if not s.spd_name:
            return {}
        key = (s.namespace, s.spd_name)
        hit = self._spd_cache.get(key)
        if hit is not None and now - hit[0] < self.base_config.config_ttl_s:
            return hit[1]
        kind = names.SERVICE_PROFILE_DESCRIPTOR
        try:
            raw = self.cluster.get(kind, s.spd_name, s.namespace)
        except ApiError:
            raw = None
        targets: dict[str, float] = {}
        if raw is not None:
            body = {**raw, "apiVersion": kind.api_version, "kind": kind.kind}
            problems = config_fields.config_problems(body)
            if problems:
                message = (
                    f"{kind.kind} {s.namespace}/{s.spd_name} is invalid: "
                    f"{'; '.join(str(p) for p in problems)} (the agent sizes the pool of "
                    f"{s.key} on its default indicator targets)"
                )
                skip = Skip.of(kind, raw, skip_reason(raw), message)
                self.node_state.skips.report([skip], now)
            else:
                targets = spd_targets(raw)
        self._spd_cache[key] = (now, targets)
        return targets

    def _native_demand(
        self, valid: Mapping[str, PodSpec], now: float
    ) -> dict[str, tuple[float, float]]:
        """(Σ request, Σ usage) of cpu cores and memory bytes over the pods with native
        requests (reclaimed pods ask for none), for the realtime overcommit ratio."""
        cpu_req = cpu_use = mem_req = mem_use = 0.0
        for s in valid.values():
            if s.level == names.QOS_RECLAIMED_CORES or s.finished:
                continue
            cpu_req += s.request_cores
            mem_req += s.memory_request
            pc = self._cgroups.get(s.uid)
            if pc is None:
                continue
            cpu_use += self.metrics.cpu_usage(pc.cgroup, now) or 0.0
            mem = self.metrics.memory(pc.cgroup, now)
            if mem is not None and mem.rss is not None:
                mem_use += mem.rss
        return {names.RESOURCE_CPU: (cpu_req, cpu_use), names.RESOURCE_MEMORY: (mem_req, mem_use)}

    def _reclaimed_usage(self, valid: Mapping[str, PodSpec], now: float) -> float | None:
        total = 0.0
        seen = False
        for s in valid.values():
            if s.level != names.QOS_RECLAIMED_CORES:
                continue
            pc = self._cgroups.get(s.uid)
            if pc is None:
                continue
            u = self.metrics.cpu_usage(pc.cgroup, now)
            if u is not None:
                total += u
                seen = True
        return total if seen else None

    def _headroom(
        self,
        now: float,
        reclaim: CPUSet,
        reclaimed_usage: float | None,
        valid: Mapping[str, PodSpec],
        cap: float | None = None,
        dedicated: Mapping[str, DedicatedAssignment] | None = None,
    ) -> tuple[ReclaimedFigure, ReclaimedFigure]:
        cfg = self.config
        rc = cfg.reporter
        cpu_value, cpu_numa, cpu_terms = cpu_headroom(
            reclaim,
            self.metrics.cpu_usage_ratio(now),
            reclaimed_usage,
            cap,
            self._numa_of,
            whole_cores=cfg.advisor.headroom_whole_cores,
        )
        mem_value, mem_numa, mem_terms = self._memory_headroom(valid, now, dedicated or {})
        if not cfg.advisor.enable_reclaim:
            note = "reclaim disabled (advisor.enable_reclaim=false): 0 is published"
            cpu_terms["reclaim"] = mem_terms["reclaim"] = note
            return (
                ReclaimedFigure(names.RECLAIMED_MILLICPU, cpu_value, 0.0, {}, cpu_terms),
                ReclaimedFigure(names.RECLAIMED_MEMORY, mem_value, 0.0, {}, mem_terms),
            )
        cpu_rep, cpu_sm = self._cpu_smoother.update(now, cpu_value)
        mem_rep, mem_sm = self._mem_smoother.update(now, mem_value)
        cpu_terms["smoothing"] = cpu_sm
        mem_terms["smoothing"] = mem_sm
        if (
            cpu_rep is not None
            and mem_rep is not None
            and (
                cpu_rep <= rc.min_ignored_reclaimed_cpu
                or mem_rep <= rc.min_ignored_reclaimed_memory
            )
        ):
            why = "a reclaimed figure is below its ignore threshold: all reclaimed figures are 0"
            cpu_terms["zeroed"] = mem_terms["zeroed"] = why
            cpu_rep, mem_rep = 0.0, 0.0
        return (
            ReclaimedFigure(
                names.RECLAIMED_MILLICPU,
                cpu_value,
                cpu_rep,
                _rescale(cpu_numa, cpu_rep, grain_milli=self._cpu_grain()),
                cpu_terms,
            ),
            ReclaimedFigure(
                names.RECLAIMED_MEMORY, mem_value, mem_rep, _rescale(mem_numa, mem_rep), mem_terms
            ),
        )

    def _memory_headroom(
        self, valid: Mapping[str, PodSpec], now: float, dedicated: Mapping[str, DedicatedAssignment]
    ) -> tuple[float, dict[int, float], dict[str, Any]]:
        """Reclaimable memory: the machine's (or the sample's) memory less what pods use."""
        topo = self.topology
        users = self._memory_users(valid, now, dedicated)
        capacity = topo.total_memory
        last = self.metrics.last_sample
        if capacity <= 0 and last is not None and last.memory is not None:
            capacity = last.memory.total
        numa_free = (
            {n: m.free for n, m in last.numa_memory.items()}
            if last is not None and last.numa_memory
            else None
        )
        return memory_headroom(
            capacity, users, self.config.advisor, topo.memory_per_numa or None, numa_free
        )

    def _memory_users(
        self, valid: Mapping[str, PodSpec], now: float, dedicated: Mapping[str, DedicatedAssignment]
    ) -> list[MemoryUser]:
        """Each pod's memory as the headroom formula counts it (a numa_exclusive pod holds
        its NUMA nodes' memory whole)."""
        users: list[MemoryUser] = []
        for s in valid.values():
            pc = self._cgroups.get(s.uid)
            mm = self.metrics.memory(pc.cgroup, now) if pc is not None else None
            usage = None if mm is None else {"rss": mm.rss, "cache": mm.cache, "shmem": mm.shmem}
            held = dedicated.get(s.uid)
            whole = (
                memory_policy.exclusive_memory(self.topology, held.numas)
                if held is not None and held.exclusive
                else None
            )
            u = memory_policy.memory_user(s.level, s.memory_request, usage, whole)
            if u is not None:
                users.append(u)
        return users

    def _pod_plans(
        self,
        now: float,
        specs: Mapping[str, PodSpec],
        valid: Mapping[str, PodSpec],
        lay: Layout,
        pools: Mapping[str, CPUSet],
        reclaim: CPUSet,
        estimates: Mapping[tuple[str, str], tuple[float, str]],
    ) -> tuple[list[PodPlan], dict[str, dict[Knob, KnobValue]]]:
        cfg = self.config
        machine = steps.MachineDefaults.of(self.topology, lay)
        desired: dict[str, dict[Knob, KnobValue]] = {}
        plans: list[PodPlan] = []
        if self._order_key is not specs:
            self._order = sorted(specs, key=lambda u: specs[u].key)
            self._order_key = specs
        cache: dict[str, tuple[tuple[Any, ...], PodPlan, list[tuple[str, dict[Knob, KnobValue]]]]]
        cache = {}
        for uid in self._order:
            s = specs[uid]
            pc = self._cgroups.get(uid)
            if uid not in valid or uid in lay.failed:
                why = s.error or lay.failed.get(uid, "")
                plans.append(
                    PodPlan(
                        uid,
                        s.key,
                        s.level,
                        UNMANAGED,
                        CPUSet(),
                        CPUSet(),
                        pc.cgroup if pc else None,
                        note=f"left as placed: {why}",
                    )
                )
                continue
            ramping = s.level == names.QOS_SHARED_CORES and self._ramping(s, now)
            pool, cpus, mems, numas = steps.pod_placement(
                s, lay, pools, reclaim, self._snb_domains, ramping, machine, uid in self._isolated
            )
            ests = tuple(estimates.get((uid, c.name)) for c in s.containers)
            key = (s, pc, pool, cpus, mems, numas, ramping, ests, cfg.reclaimed_cpu_idle)
            hit = self._plan_cache.get(uid)
            if hit is None or hit[0] != key:
                plan, writes = self._pod_plan(s, pc, pool, cpus, mems, numas, ramping, ests)
                hit = (key, plan, writes)
            cache[uid] = hit
            plans.append(hit[1])
            for path, knobs in hit[2]:
                desired[path] = knobs
        self._plan_cache = cache
        return plans, desired

    def _pod_plan(
        self,
        s: PodSpec,
        pc: PodCgroup | None,
        pool: str,
        cpus: CPUSet,
        mems: CPUSet,
        numas: tuple[int, ...],
        ramping: bool,
        ests: tuple[tuple[float, str] | None, ...],
    ) -> tuple[PodPlan, list[tuple[str, dict[Knob, KnobValue]]]]:
        """One pod's plan and the knobs of its cgroups (cached while its inputs stay)."""
        pod_knobs: dict[Knob, KnobValue] = {}
        if s.level == names.QOS_RECLAIMED_CORES:
            if self.config.reclaimed_cpu_idle:
                pod_knobs[Knob.CPU_IDLE] = 1
            limit = memory_policy.reclaimed_memory_limit(s.reclaimed_memory)
            if limit is not None:
                pod_knobs[Knob.MEMORY_LIMIT] = limit
        # Cpusets go on the containers' cgroups only, the sandbox's included, never on the
        # pod's: the kubelet leaves pod cgroups with every cpu, and on cgroup v1 a pod cgroup
        # cannot narrow below a child that still holds a cpu (EBUSY), nor can a container
        # later be widened beyond its pod. v2 gets the same rule, so both behave alike.
        knobs: dict[Knob, KnobValue] = {Knob.CPUSET_CPUS: cpus, Knob.CPUSET_MEMS: mems}
        writes: list[tuple[str, dict[Knob, KnobValue]]] = []
        cg = self._match(s)
        containers = []
        for c, est in zip(s.containers, ests, strict=True):
            path = cg.containers.get(c.name)
            if path is not None:
                writes.append((path, knobs))
            containers.append(
                ContainerPlan(c.name, path, est[0] if est else None, est[1] if est else None, knobs)
            )
        if cg.pod is not None and pod_knobs:
            writes.append((cg.pod, pod_knobs))
        if pc is not None and len(pc.containers) > len(cg.containers):
            # Cgroups of the pod that match no spec container (the sandbox, a container whose
            # status is not reported yet) get the same cpus as the pod's containers.
            known = set(cg.containers.values())
            writes.extend((o.cgroup, knobs) for o in pc.containers if o.cgroup not in known)
        plan = PodPlan(
            s.uid,
            s.key,
            s.level,
            pool,
            cpus,
            mems,
            cg.pod,
            numas,
            ramping,
            pod_knobs,
            tuple(containers),
            note="" if pc is not None else "no cgroup found on this machine: not enforced",
        )
        return plan, writes

    def _enforce(
        self,
        now: float,
        desired: dict[str, Mapping[Knob, KnobValue]],
        specs: Mapping[str, PodSpec],
        events: list[PlanEvent],
        warnings: list[str],
    ) -> dict[str, Any]:
        outcome = self._writer.apply(now, desired, self.config.resync_s)
        if outcome.vanished:
            self._last_discovery = None  # those pods' cgroups moved or went: look again
        if outcome.failures:
            by_cgroup = self._pod_by_cgroup(specs)
            for cgroup, msg in outcome.failures:
                s = by_cgroup.get(cgroup)
                if s is not None:
                    self._event_once(events, s, "KnobWriteFailed", msg)
                else:
                    warnings.append(msg)
        warnings.extend(outcome.notes)
        return outcome.terms

    def _network(
        self,
        valid: Mapping[str, PodSpec],
        desired: dict[str, Mapping[Knob, KnobValue]],
        warnings: list[str],
    ) -> dict[str, Any]:
        """Egress QoS (net_policy): classid knobs into `desired`, the device's shape
        applied when it changes."""
        cfg = self.config.network
        if not cfg.enabled and self._net_shape is None:
            return {"enabled": False}
        pods = []
        for uid, s in valid.items():
            pc = self._cgroups.get(uid)
            if pc is not None:
                cgs = (pc.cgroup, *(c.cgroup for c in pc.containers))
                pods.append(net_policy.NetPod(s.key, s.level, cgs))
        plan = net_policy.decide(cfg, pods, self.host.cgroup_version)
        for cg, knobs in plan.knobs.items():
            desired[cg] = {**desired.get(cg, {}), **knobs}
        terms = dict(plan.terms)
        if self.dry_run or plan.shape == self._net_shape:
            return terms
        result = self.host.apply_net(plan.shape)
        terms["commands"] = list(result.commands)
        if result.ok:
            self._net_shape = plan.shape
        elif result.error != self._net_error:
            warnings.append(f"network shaping: {result.error}")
        self._net_error = result.error
        return terms

    def _pod_by_cgroup(self, specs: Mapping[str, PodSpec]) -> dict[str, PodSpec]:
        out: dict[str, PodSpec] = {}
        for uid, s in specs.items():
            pc = self._cgroups.get(uid)
            if pc is None:
                continue
            out[pc.cgroup] = s
            for c in pc.containers:
                out[c.cgroup] = s
        return out

    def _report(
        self,
        now: float,
        lay: Layout,
        cpu: ReclaimedFigure,
        mem: ReclaimedFigure,
        valid: Mapping[str, PodSpec],
        plan: AgentPlan,
    ) -> dict[str, Any]:
        if not self.publish:
            return {"state": "not published (dry run)" if self.dry_run else "not published"}
        inp_pools = {p.name for p in plan.pools}
        reserved_mem, reserve_terms = self._memory_reserve()
        allocations = self._allocations(lay, valid, plan, reserved_mem)
        policy, policy_source = self._topology_policy()
        terms = {
            names.RECLAIMED_MILLICPU: {"value": cpu.reported, **dict(cpu.terms)},
            names.RECLAIMED_MEMORY: {"value": mem.reported, **dict(mem.terms)},
            "time": rfc3339(now),
        }
        inp = ReportInput(
            self.topology,
            lay.reserve,
            cpu.reported,
            mem.reported,
            cpu.per_numa,
            mem.per_numa,
            allocations,
            terms,
            {p.name: p.cpuset for p in plan.pools},
            [PodCpus(p.key, p.uid, p.pool, p.cpuset, p.ramping_up, p.note) for p in plan.pods],
            reserved_mem,
            policy,
            self._cpu_grain(),
            {p: t for p, t in self._steps.items() if p in inp_pools},
        )
        out = self.reporter.report(inp, now)
        out["overcommit"] = self.reporter.publish_overcommit(
            self._native_demand(valid, now), self.config.overcommit, now
        )
        out["topology_policy"] = {"value": policy, "source": policy_source}
        out["numa_memory_reserve"] = reserve_terms
        return out

    def _cpu_grain(self) -> int:
        """Per-NUMA reclaimed cpu in whole cores (Katalyst), or in milli-cores."""
        return 1000 if self.config.advisor.headroom_whole_cores else 1

    def _topology_policy(self) -> tuple[str, str]:
        """The CNR's topologyPolicy and where it came from."""
        name = self.config.reporter.topology_policy_name
        if name:
            policy = kubelet_cpu.topology_policy_of(name, "container")
            return policy, f"reporter.topology_policy_name={name} (container scope)"
        kp = self._kubelet.policy if self._kubelet is not None else None
        if kp is None or kp.topology_manager_policy is None:
            return names.TOPOLOGY_POLICY_NONE, "unknown: the kubelet's config was not read"
        return kp.topology_policy, (
            f"kubelet topologyManagerPolicy={kp.topology_manager_policy}, "
            f"topologyManagerScope={kp.topology_manager_scope}"
        )

    def _memory_reserve(self) -> tuple[dict[int, int], dict[str, Any]]:
        """Memory kept for the system on each NUMA node (Katalyst's memory plugin reserve)."""
        mc = self.config.memory
        total = mc.reserved_memory_gb * memory_policy.GIB
        source = "memory.reserved_memory_gb"
        if mc.use_kubelet_reserved:
            kp = self._kubelet.policy if self._kubelet is not None else None
            if kp is not None and kp.topology_manager_policy is not None:
                total, source = kp.reserved_memory, "kubelet kubeReserved + systemReserved"
            else:
                source = "memory.reserved_memory_gb (the kubelet's config was not read)"
        per_numa = memory_policy.reserved_memory_per_numa(total, self.topology.numa_nodes)
        return per_numa, {"source": source, "per_numa_bytes": next(iter(per_numa.values()), 0)}

    def _allocations(
        self,
        lay: Layout,
        valid: Mapping[str, PodSpec],
        plan: AgentPlan,
        reserved_mem: Mapping[int, int],
    ) -> list[NumaAllocation]:
        """The zones' allocations, as Katalyst's reporter lists them: NUMA-bound pods with
        their cpus and memory there (an SNB pod with its requests, a numa_exclusive pod with
        its nodes' memory whole); without the pod-resources filter, every other pod the
        agent places too, with the cpus it runs on in each zone."""
        topo = self.topology
        out: list[NumaAllocation] = []
        for uid, a in lay.dedicated.items():
            s = valid[uid]
            consumer = f"{s.namespace}/{s.name}/{uid}"
            per_numa_mem = s.memory_request // max(len(a.numas), 1)
            for n in a.numas:
                mem = per_numa_mem
                if a.exclusive and topo.memory_per_numa:
                    mem = max(topo.memory_of_numa(n) - reserved_mem.get(n, 0), 0)
                cpus = len(a.cpuset & topo.cpus_in_numa(n))
                out.append(NumaAllocation(consumer, n, float(cpus), mem))
        for uid, numa in lay.snb.items():
            s = valid[uid]
            consumer = f"{s.namespace}/{s.name}/{uid}"
            out.append(NumaAllocation(consumer, numa, s.request_cores, s.memory_request))
        if self.config.reporter.enable_pod_resources_filter:
            return out
        bound = set(lay.dedicated) | set(lay.snb)
        for p in plan.pods:
            if p.uid in bound or p.uid not in valid or p.pool == UNMANAGED or not p.cpuset:
                continue
            for n in topo.numa_nodes:
                cpus = len(p.cpuset & topo.cpus_in_numa(n))
                if cpus:
                    out.append(NumaAllocation(f"{p.key}/{p.uid}", n, float(cpus), None))
        return out

    # --- events -------------------------------------------------------------------------------

    def _event_once(self, events: list[PlanEvent], s: PodSpec, reason: str, message: str) -> None:
        key = (s.uid, reason, message)
        if key in self._events_sent:
            return
        self._events_sent.add(key)
        events.append(PlanEvent(names.POD.kind, s.key, reason, message))

    def _emit_events(self, events: Sequence[PlanEvent], now: float) -> None:
        if len(self._events_sent) > 4 * max(len(self._specs), 64):
            live = set(self._specs)
            self._events_sent = {k for k in self._events_sent if k[0] in live}
        if not self.publish:
            return
        for ev in events:
            ns, _, name = ev.object_key.partition("/")
            uid = ev.uid
            if not uid:
                spec = next((s for s in self._specs.values() if s.key == ev.object_key), None)
                uid = spec.uid if spec else ""
            ref = ObjectRef(ev.object_kind, name, ns, uid, ev.api_version)
            self.events.record(ref, ev.type, ev.reason, ev.message, now)

    def _topology_terms(self) -> dict[str, Any]:
        t = self.topology
        return {
            "cpus": t.num_cpus,
            "cores": t.num_cores,
            "sockets": t.num_sockets,
            "numa_nodes": t.num_numa_nodes,
            "threads_per_core": t.threads_per_core,
            "memory_bytes": t.total_memory,
            "numa": {str(n): str(t.cpus_in_numa(n)) for n in t.numa_nodes},
        }


def _tune_smoothers(cpu: HeadroomSmoother, mem: HeadroomSmoother, rc: ReporterConfig) -> None:
    """Give the headroom smoothers the reporter's window, steps and report floors."""
    for sm, is_cpu in ((cpu, True), (mem, False)):
        sm.window_s = rc.sliding_window_s
        sm.sample_period_s = rc.headroom_sync_period_s
        sm.min_step = rc.min_step_cpu if is_cpu else float(rc.min_step_memory)
        sm.max_step = rc.max_step_cpu if is_cpu else float(rc.max_step_memory)
        sm.reserved_for_report = (
            rc.reserved_for_report_cpu if is_cpu else float(rc.reserved_for_report_memory)
        )
        sm.min_for_report = (
            rc.min_reclaimed_for_report_cpu if is_cpu else float(rc.min_reclaimed_for_report_memory)
        )


def _refs(specs: Mapping[str, PodSpec]) -> list[kubelet_cpu.PodRef]:
    return [kubelet_cpu.PodRef(s.uid, s.namespace, s.name) for s in specs.values()]


def _path_or_none(value: object) -> Path | None:
    return value if isinstance(value, Path) else None


def _rescale(
    per_numa: Mapping[int, float], total: float | None, *, grain_milli: int | None = None
) -> dict[int, float]:
    """Per-NUMA figures scaled to the published total, adding up to it exactly (cpu, with
    `grain_milli`: in whole grains where the total allows)."""
    if total is None:
        return {}
    zones = sorted(per_numa)
    if grain_milli is not None:
        milli = apportion(milli_cpu(total), per_numa, zones, grain_milli)
        return {k: v / 1000 for k, v in milli.items()}
    return {k: float(v) for k, v in apportion(int(total), per_numa, zones, 1).items()}
