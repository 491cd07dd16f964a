"""The node agent's loop: gather → decide → execute (evict, enforce, report).

`Agent.reconcile(now)` is synchronous and returns an `AgentPlan`; `katalyst agent` calls it
on a real clock, tests and the simulator on a virtual one. Everything the loop learns from
the machine comes through the `Host`; everything it writes to cgroups goes through the
enforcer; everything it tells the cluster goes through the `Cluster` protocol. Gathering
(`Agent.gather -> TickInputs`, `agent/inputs.py`) does every read; deciding is pure
(`agent/decide.py`): `decide(inputs, state) -> (plan, state)`, where the state is the value
one tick leaves the next; the agent keeps the current one and swaps it after executing the
plan. The plan holds every knob the tick wants (the network's classid knobs and the
eviction overrides included), the egress shape, the eviction stages' decisions and the CNR
status to publish; executing (`Agent.execute`) only performs it: evictions and taints,
the shape when it changed, the knobs (`agent/executor.py`), the CNR (`agent/reporter.py`)
and the Events.

Eviction plugs in after the plan is made and before it is enforced, in the same three
parts: each `EvictionStage` reads in `gather` (its config, the CNR), decides in `decide`
on an `EvictionInput` (the plan, the pods, the metrics, the sample) from the memory its
last decision left in the `AgentState`, and the executor performs the decision
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
import math
from collections.abc import Mapping, Sequence
from typing import Any

from pykatalyst.agent import cpu_layout as steps
from pykatalyst.agent import cpu_placement, gpu, isolation, kubelet_cpu, nic
from pykatalyst.agent import decide as deciding
from pykatalyst.agent.config import AgentConfig, reclaim_setting
from pykatalyst.agent.decide import Notes
from pykatalyst.agent.dra import holds as dra_holds
from pykatalyst.agent.dynamic_config import AgentSettings
from pykatalyst.agent.executor import KnobEnforcer, KnobWriter
from pykatalyst.agent.host.base import Host, Knob, KnobValue, NetShape, PodCgroup
from pykatalyst.agent.host.devices import DeviceSource, DeviceUnavailable
from pykatalyst.agent.host.kubelet import KubeletDevicesView, KubeletUnavailable, KubeletView
from pykatalyst.agent.host.nics import NicSource
from pykatalyst.agent.inputs import (
    AgentState,
    EvictionInput,
    EvictionStage,
    GpuReport,
    NicReport,
    NodeFacts,
    TickInputs,
    Zones,
    smoother,
)
from pykatalyst.agent.metrics import MetricStore
from pykatalyst.agent.node_watch import NodeState, NodeView
from pykatalyst.agent.plan import UNMANAGED as UNMANAGED
from pykatalyst.agent.plan import AgentPlan, PlanEvent
from pykatalyst.agent.pods import ContainerCgroups, PodCache, PodSpec, match_cgroups
from pykatalyst.agent.rama import spd_targets
from pykatalyst.agent.reporter import Reporter
from pykatalyst.api import config_fields, names
from pykatalyst.api import spd as spd_api
from pykatalyst.cluster.clock import Clock, is_due
from pykatalyst.cluster.events import EventRecorder, ObjectRef
from pykatalyst.cluster.protocol import JSON, ApiError, Cluster
from pykatalyst.cluster.skips import Skip, skip_reason
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology

__all__ = ["Agent", "AgentState", "EvictionInput", "EvictionStage", "KnobEnforcer"]

log = logging.getLogger("pykatalyst.agent")

REDISCOVER_PERIOD_S = 30.0
# The SPD cache's mark of an SPD that breaks its schema.
_UNREADABLE: JSON = {}
BESTEFFORT = "besteffort"  # the kubelet's QoS class whose cgroup holds reclaimed pods


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
        devices: DeviceSource | None = None,
        device_view: KubeletDevicesView | None = None,
        nics: NicSource | None = None,
    ) -> None:
        self.node_name = node_name
        self.cluster = cluster
        self.host = host
        self.clock = clock
        self.base_config = config if config is not None else AgentConfig()
        self.config = self.base_config
        log.info("agent for %s: %s", node_name, reclaim_setting(self.base_config))
        self.enforcer = enforcer
        self.eviction_stages: list[EvictionStage] = list(eviction_stages)
        self.dry_run = dry_run
        self.publish = publish and not dry_run
        self.topology: CPUTopology = host.topology()
        self.facts = NodeFacts.of(node_name, self.topology, host.cgroup_version, dry_run)
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
        rc = self.config.reporter
        self.state = AgentState(cpu_smoother=smoother(rc, True), mem_smoother=smoother(rc, False))
        self._spd_cache: dict[tuple[str, str], tuple[float, JSON | None]] = {}
        self._kubelet = (
            None
            if kubelet is None
            else kubelet_cpu.KubeletCpuWatch(self.base_config.kubelet.config_path, kubelet)
        )
        self.devices = devices
        self._device_view = device_view
        self._gpu_report: tuple[dict[int, list[dict[str, Any]]], list[dict[str, Any]]] = ({}, [])
        self.nics = nics
        self._nic_report: dict[int, list[dict[str, Any]]] = {}
        self.cpu_state_error: str | None = None
        self._cpu_rebuild = True  # until a checkpoint says where pods are
        self._cpu_checkpoint = cpu_placement.checkpoint_for(
            self.base_config.cpu_state_path,
            node_name,
            self.topology,
            None if enforcer is None else enforcer.checkpoint_path,
        )
        self._restore_cpu_state()
        self._writer = KnobWriter(enforcer, dry_run)
        self._net_shape: NetShape | None = None  # the egress shape last applied
        self._net_error = ""

    def _init_caches(self) -> None:
        """What gathering remembers to stay cheap: parsed pods, cgroups, matches."""
        self._pods_version = -1
        self._cache = PodCache()
        self._specs: dict[str, PodSpec] = {}
        self._order: tuple[str, ...] = ()
        self._cgroups: dict[str, PodCgroup] = {}
        self._last_discovery: float | None = None
        self._unknown_at_discovery: set[str] = set()
        self._sample_list: list[str] = []
        self._sample_key: tuple[int, int] | None = None
        self._matched: dict[str, tuple[PodSpec, PodCgroup | None, ContainerCgroups]] = {}
        self._first_tick = True
        self._first_seen: dict[str, float] = {}
        self._root_key: str | None = None  # reset by each discovery
        self._root: str | None = None
        self._container_ids: set[str] = set()

    @property
    def config_status(self) -> dict[str, Any]:
        """Where the configuration in force comes from (the plan's `config`)."""
        return self.settings.status

    @property
    def placement(self) -> cpu_placement.CpuState:
        """Where dedicated, NUMA-bound and pooled pods run now."""
        return self.state.placement

    # --- cluster input ----------------------------------------------------------------------

    def _set_config(self, cfg: AgentConfig) -> None:
        if cfg == self.config:
            return
        self.config = cfg
        self.reporter.cfg = cfg.reporter
        self.metrics.insurance_period_s = cfg.metrics.insurance_period_s

    def _parse_pods(self, view: NodeView, now: float) -> dict[str, PodSpec]:
        """The node's pods that have not finished, parsed once per resourceVersion."""
        if view.pods_version != self._pods_version:
            self._specs = {
                uid: s
                for uid, s in self._cache.refresh(view.pods.values()).items()
                if not s.finished
            }
            self._order = tuple(sorted(self._specs, key=lambda u: self._specs[u].key))
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
        except cpu_placement.CpuStateError as exc:
            self.cpu_state_error = f"{ck.path}: {exc}"
            log.warning(
                "cpu state checkpoint %s refused: %s; rebuilding the placement from the "
                "cpusets the cgroups show",
                ck.path,
                exc,
            )
            return
        if state is not None:
            self.state = dataclasses.replace(self.state, placement=state)
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
            cpus = CPUSet()
            for path in self._match(s).containers.values():
                v = self.host.read_knobs(path).get(Knob.CPUSET_CPUS)
                if isinstance(v, CPUSet):
                    cpus = cpus | v
            if s.level == names.QOS_DEDICATED_CORES:
                dedicated[s.uid] = (cpus, s.qos.numa_exclusive)
            else:
                snb[s.uid] = cpus
        state = cpu_placement.from_cgroups(self.topology, dedicated, snb)
        held = self.state.placement
        placement = cpu_placement.CpuState(
            {**state.dedicated, **held.dedicated}, {**state.snb, **held.snb}, held.pools
        )
        self.state = dataclasses.replace(self.state, placement=placement)
        if state.dedicated or state.snb:
            log.info(
                "cpu placement rebuilt from cgroups: %d dedicated, %d NUMA-bound shared pods",
                len(state.dedicated),
                len(state.snb),
            )

    def _save_cpu_state(self, placement: cpu_placement.CpuState, warnings: list[str]) -> None:
        ck = self._cpu_checkpoint
        if ck is None or self.dry_run:
            return
        try:
            ck.save(placement)
        except OSError as exc:
            warnings.append(f"cannot checkpoint the cpu placement to {ck.path}: {exc}")

    # --- the loop -----------------------------------------------------------------------------

    def reconcile(self, now: float | None = None) -> AgentPlan:
        """One tick: gather the inputs, decide the plan, execute it."""
        now = self.clock.now() if now is None else now
        inputs = self.gather(now)
        decided, state = self.decide(inputs)
        plan, self.state = self.execute(inputs, decided, state)
        return plan

    def decide(
        self, inputs: TickInputs, state: AgentState | None = None
    ) -> tuple[AgentPlan, AgentState]:
        """The tick's plan and next state from `inputs` and `state` (the agent's own by
        default), changing neither (`agent/decide.py`)."""
        return deciding.decide(inputs, self.state if state is None else state)

    def gather(self, now: float) -> TickInputs:
        """Read the node's pods and config (one holder), the cgroups, one sample, the
        kubelet's pins and the indicator targets of the pods' profiles."""
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
        cfg = self.config
        protect = cfg.memory_advisor.protection != "none"
        valid = steps.classify(specs)
        pins = None if self._kubelet is None else self._kubelet.observe(_refs(valid))
        return TickInputs(
            now,
            view,
            cfg,
            dict(self.config_status),
            specs,
            sample,
            self.facts,
            self.metrics,
            tuple(warnings),
            tuple(events),
            order=self._order,
            first_seen=dict(self._first_seen),
            cgroups=self._cgroups,
            matched={uid: self._match(s) for uid, s in specs.items()},
            pins=pins,
            kubelet=None if self._kubelet is None else self._kubelet.policy,
            reclaimed_root=self._reclaimed_root(),
            guaranteed_root=isolation.guaranteed_root(self.host) if protect else None,
            spd_targets=self._spd_targets(now, valid),
            reclaim_off=self._reclaim_off(now, valid),
            stages=tuple(self.eviction_stages),
            stage_reads=tuple(self._stage_reads(now, view)),
            # the eviction stages see the NIC zones last reported, before this tick's read
            nics=nic.allocatable_by_nic(self._nic_report) if self.nics is not None else None,
            gpus=self._gpus() if self.publish and self.devices is not None else None,
            nic_zones=self._nic_zones() if self.publish and self.nics is not None else None,
        )

    def _stage_reads(self, now: float, view: NodeView) -> list[object]:
        """What each eviction stage reads for its decision (the error, when reading failed:
        the stage is then reported and skipped)."""
        out: list[object] = []
        held = self.state.stage_memory
        for i, stage in enumerate(self.eviction_stages):
            try:
                out.append(stage.gather(now, view, held[i] if i < len(held) else None))
            except Exception as exc:  # a broken stage must not stop the loop
                out.append(exc)
        return out

    def execute(
        self, inp: TickInputs, plan: AgentPlan, state: AgentState
    ) -> tuple[AgentPlan, AgentState]:
        """Perform the plan: the eviction stages' decisions, the egress shape, the knobs,
        the CNR status, the Events; the plan as executed (what each part did), and
        `state` with the Events it sent."""
        notes = Notes(plan.warnings, plan.events, state.events_sent)
        self._save_cpu_state(state.placement, notes.warnings)
        actions = self._evict(inp, plan, notes.warnings)
        net_terms = self._shape(inp, plan, notes)
        enforce_terms = self._enforce(inp, plan.desired, notes)
        enforce_terms["network"] = net_terms
        report_terms = self._report(inp, plan)
        sent = self._emit_events(notes, inp.now)
        plan = dataclasses.replace(
            plan,
            warnings=tuple(notes.warnings),
            events=tuple(notes.events),
            eviction_actions=tuple(actions),
            enforce=enforce_terms,
            report=report_terms,
            config=dict(self.config_status),
        )
        return plan, dataclasses.replace(state, events_sent=sent)

    # --- gathering ------------------------------------------------------------------------

    def _spd_targets(
        self, now: float, valid: Mapping[str, PodSpec]
    ) -> dict[tuple[str, str], Mapping[str, float]]:
        """The indicator targets of the shared pods' ServiceProfileDescriptors, when rama
        sizes their pools: each re-read every config_ttl_s; none for an SPD that cannot be
        read."""
        adv = self.config.advisor
        rama = adv.provision_policy == "rama" and adv.enable_reclaim
        if not rama or adv.reserved_for_allocate_cpu > 0 or not self.state.regulators:
            return {}
        out: dict[tuple[str, str], Mapping[str, float]] = {}
        for s in valid.values():
            if s.spd_name and s.level == names.QOS_SHARED_CORES:
                key = (s.namespace, s.spd_name)
                if key not in out:
                    out[key] = self._spd(s, now)
        return out

    def _spd(self, s: PodSpec, now: float) -> dict[str, float]:
        raw = self._spd_object(s, now)
        return spd_targets(raw) if raw is not None and raw is not _UNREADABLE else {}

    def _spd_object(self, s: PodSpec, now: float) -> JSON | None:
        """The pod's SPD, re-read every config_ttl_s: None when there is none,
        `_UNREADABLE` when it breaks its schema (reported once per version as skipped)."""
        key = (s.namespace, s.spd_name)
        hit = self._spd_cache.get(key)
        if hit is not None and now - hit[0] < self.base_config.config_ttl_s:
            return hit[1]
        kind = names.SERVICE_PROFILE_DESCRIPTOR
        try:
            raw: JSON | None = self.cluster.get(kind, s.spd_name, s.namespace)
        except ApiError:
            raw = None
        if raw is not None:
            body = {**raw, "apiVersion": kind.api_version, "kind": kind.kind}
            problems = config_fields.config_problems(body)
            if problems:
                message = (
                    f"{kind.kind} {s.namespace}/{s.spd_name} is invalid: "
                    f"{'; '.join(str(p) for p in problems)} (the agent sizes the pool of "
                    f"{s.key} on its default indicator targets and keeps it out of reclaim)"
                )
                skip = Skip.of(kind, raw, skip_reason(raw), message)
                self.node_state.skips.report([skip], now)
                raw = _UNREADABLE
        self._spd_cache[key] = (now, raw)
        return raw

    def _reclaim_off(self, now: float, valid: Mapping[str, PodSpec]) -> dict[str, str]:
        """The pods that lend nothing to reclaimed pods under their SPD (Katalyst's
        PodEnableReclaim: a Poor business level, or a baseline pod), with the rule; only
        while reclaim is on (off, no pod lends anyway)."""
        if not self.config.advisor.enable_reclaim:
            return {}
        out: dict[str, str] = {}
        for s in valid.values():
            if not s.spd_name or s.level == names.QOS_RECLAIMED_CORES:
                continue
            raw = self._spd_object(s, now)
            if raw is _UNREADABLE:
                out[s.uid] = f"SPD {s.namespace}/{s.spd_name} is invalid: reclaim is off"
            elif raw is not None:
                created = s.created_key[0]
                meta = spd_api.PodMeta(created if math.isfinite(created) else 0.0, s.name)
                rule = spd_api.reclaim_rule(meta, raw)
                if rule:
                    out[s.uid] = rule
        return out

    def _discover(self, now: float, specs: Mapping[str, PodSpec]) -> None:
        # Discovery walks the cgroup tree: do it when a pod appears whose cgroup is not
        # known yet (once per such pod, not every tick while it has none), when a write
        # found a cgroup gone, and every REDISCOVER_PERIOD_S. A container the pod status
        # names but no cgroup was found for (a restart) counts too: cpusets sit on the
        # container cgroups, so a new one runs unconfined until it is found.
        unknown = self._unknown(specs)
        due = is_due(self._last_discovery, now, REDISCOVER_PERIOD_S) or not unknown.issubset(
            self._unknown_at_discovery
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
        if self._root_key == configured:
            return self._root
        root: str | None = configured
        if configured == "auto":
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
        self._root_key, self._root = configured, root
        return root

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

    # --- executing ------------------------------------------------------------------------

    def _evict(self, inp: TickInputs, plan: AgentPlan, warnings: list[str]) -> list[object]:
        """Perform each stage's decision, in order: its decided actions, then what it did;
        a stage that raises is reported and skipped."""
        actions: list[object] = []
        for stage, decision in zip(inp.stages, plan.evictions, strict=True):
            actions.extend(decision.actions)
            try:
                actions.extend(stage.act(decision))
            except Exception as exc:  # a broken stage must not stop the loop
                warnings.append(f"eviction stage {stage.name}: {exc}")
        return actions

    def _enforce(
        self, inp: TickInputs, desired: Mapping[str, Mapping[Knob, KnobValue]], notes: Notes
    ) -> dict[str, Any]:
        outcome = self._writer.apply(inp.now, desired, self.config.resync_s)
        if outcome.vanished:
            self._last_discovery = None  # those pods' cgroups moved or went: look again
        if outcome.failures:
            by_cgroup = _pod_by_cgroup(inp.specs, inp.cgroups)
            for cgroup, msg in outcome.failures:
                s = by_cgroup.get(cgroup)
                if s is not None:
                    notes.once(s, "KnobWriteFailed", msg)
                else:
                    notes.warnings.append(msg)
        notes.warnings.extend(outcome.notes)
        return outcome.terms

    def _shape(self, inp: TickInputs, plan: AgentPlan, notes: Notes) -> dict[str, Any]:
        """Apply the egress plan's device shape when it differs from the one applied; each
        bandwidth pod told (an Event) what it is given once its shape is in force."""
        net = plan.net
        if net is None:
            return {}
        if net.shape is None and self._net_shape is None:
            return dict(net.terms)
        terms = dict(net.terms)
        if not self.dry_run and net.shape != self._net_shape:
            result = self.host.apply_net(net.shape)
            terms["commands"] = list(result.commands)
            if result.ok:
                self._net_shape = net.shape
            elif result.error != self._net_error:
                notes.warnings.append(f"network shaping: {result.error}")
            self._net_error = result.error
        if net.shape is not None and net.shape == self._net_shape:
            _bandwidth_events(net.terms, inp.specs, notes)
        return terms

    def _report(self, inp: TickInputs, plan: AgentPlan) -> dict[str, Any]:
        """Publish the plan's CNR status, node extended resources and overcommit advice."""
        if not self.publish or plan.cnr is None:
            return {"state": "not published (dry run)" if self.dry_run else "not published"}
        out = self.reporter.report(plan.cnr, inp.now)
        out["overcommit"] = self.reporter.publish_overcommit(
            plan.native_demand or {}, self.config.overcommit, inp.now
        )
        out.update(plan.cnr_terms)
        return out

    def _gpus(self) -> GpuReport:
        """The GPU zones and spec properties to report, and how they were read: the last
        good ones while the cards cannot be read; capacity only while the kubelet cannot
        say who holds them."""
        assert self.devices is not None
        held = None
        note = "cards and holds read"
        if self._device_view is not None:
            try:
                held = dra_holds.gpu_assignments(
                    self._device_view,
                    gpu.GPU_RESOURCES,
                    self.devices,
                    self.base_config.devices.dra.enabled,
                )
            except KubeletUnavailable as exc:
                note = f"holds unknown: {exc}"
        uids = {s.key: s.uid for s in self._specs.values()}
        try:
            self._gpu_report = gpu.node_gpu_report(
                self.devices,
                held,
                self.base_config.devices.gpu_memory_per_gpu,
                self.topology,
                uids.get,
            )
        except DeviceUnavailable as exc:
            note = f"cards unreadable, last report kept: {exc}"
        return self._gpu_report[0], self._gpu_report[1], note

    def _nic_zones(self) -> NicReport:
        """The NIC zones to report and how they were read (the last good ones while the
        NICs cannot be read)."""
        assert self.nics is not None
        pods = [
            nic.BandwidthPod(s.namespace, s.name, s.uid, *deciding.nic_hold(s), _vf_hold(s))
            for s in self._specs.values()
        ]
        try:
            self._nic_report = nic.node_nic_report(
                self.nics, self.base_config.devices.nic, pods, self.topology
            )
        except DeviceUnavailable as exc:
            return self._nic_report, f"NICs unreadable, last report kept: {exc}"
        if self.base_config.devices.dra.enabled and self._device_view is not None:
            self._nic_report = self._with_claimed_nics(self._nic_report)
        return self._nic_report, "NICs and holds read"

    def _with_claimed_nics(self, zones: Zones) -> Zones:
        """The NIC zones with the pods holding a NIC through a DRA claim."""
        assert self._device_view is not None and self.nics is not None
        try:
            held = self._device_view.device_assignments(dra_holds.DRA)
            nics = self.nics.nics()
        except (KubeletUnavailable, DeviceUnavailable):
            return zones
        uids = {s.key: s.uid for s in self._specs.values()}
        return dra_holds.with_nic_consumers(zones, dra_holds.nic_consumers(held, nics, uids.get))

    def _emit_events(self, notes: Notes, now: float) -> frozenset[tuple[str, str, str]]:
        """Send the tick's Events; the Events sent so far, forgetting pods long gone."""
        sent = notes.sent
        if len(sent) > 4 * max(len(self._specs), 64):
            live = set(self._specs)
            sent = {k for k in sent if k[0] in live}
        if self.publish:
            for ev in notes.events:
                ns, _, name = ev.object_key.partition("/")
                uid = ev.uid
                if not uid:
                    spec = next((s for s in self._specs.values() if s.key == ev.object_key), None)
                    uid = spec.uid if spec else ""
                ref = ObjectRef(ev.object_kind, name, ns, uid, ev.api_version)
                self.events.record(ref, ev.type, ev.reason, ev.message, now)
        return frozenset(sent)


def _bandwidth_events(terms: Mapping[str, Any], valid: Mapping[str, PodSpec], notes: Notes) -> None:
    """An Event per bandwidth pod, once per thing said: its class on the shaped device
    (a Warning when it gets less than it asks), or why it has none."""
    bw = terms.get("bandwidth", {})
    by_key = {s.key: s for s in valid.values()}
    for key, c in bw.get("pods", {}).items():
        s = by_key.get(key)
        if s is not None:
            short = c["rate_bps"] < c["request_bps"]
            message = (
                f"egress class {c['classid']}: rate {c['rate_bps']} bit/s, ceil "
                f"{c['ceil_bps']} bit/s; {c['reason']}"
            )
            reason = (
                names.EVENT_REASON_NET_BANDWIDTH_SHORT
                if short
                else names.EVENT_REASON_NET_BANDWIDTH_GUARANTEED
            )
            notes.once(s, reason, message, "Warning" if short else "Normal")
    for key, why in bw.get("not_shaped", {}).items():
        s = by_key.get(key)
        if s is not None:
            notes.once(s, names.EVENT_REASON_NET_BANDWIDTH_NOT_SHAPED, why, "Normal")


def _vf_hold(s: PodSpec) -> str:
    """The SR-IOV VF a pod asking sriov_nic holds (its sriov_vf_result; "" otherwise)."""
    if s.digest.request(names.RESOURCE_SRIOV_NIC) <= 0:
        return ""
    return str(s.digest.annotations.get(names.SRIOV_VF_RESULT_ANNOTATION) or "")


def _pod_by_cgroup(
    specs: Mapping[str, PodSpec], cgroups: Mapping[str, PodCgroup]
) -> dict[str, PodSpec]:
    out: dict[str, PodSpec] = {}
    for uid, s in specs.items():
        pc = cgroups.get(uid)
        if pc is None:
            continue
        out[pc.cgroup] = s
        for c in pc.containers:
            out[c.cgroup] = s
    return out


def _refs(specs: Mapping[str, PodSpec]) -> list[kubelet_cpu.PodRef]:
    return [kubelet_cpu.PodRef(s.uid, s.namespace, s.name) for s in specs.values()]
