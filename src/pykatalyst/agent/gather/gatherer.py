"""`Gatherer`: the reads of one agent tick, into a `TickInputs`.

It keeps what makes the reads cheap: pods are parsed once per resourceVersion, cgroups are
rediscovered only when a pod without a known cgroup appears (or every
`REDISCOVER_PERIOD_S`, or after the knob writer found a cgroup gone: `rediscover`), the
pods' cgroup matches and the list of cgroups to sample are kept until they change, SPDs are
re-read every config_ttl_s. The cpu placement comes back from its checkpoint at start
(`restored`), or else from the cpusets the pods' cgroups show, on the first tick.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from pykatalyst.agent import cpu_layout as steps
from pykatalyst.agent import cpu_placement, isolation, kubelet_cpu, nic
from pykatalyst.agent.agent_state import AgentState
from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.dynamic_config import AgentSettings
from pykatalyst.agent.gather.devices import DeviceReader
from pykatalyst.agent.gather.spd import SpdReader
from pykatalyst.agent.host.base import Host, Knob, PodCgroup
from pykatalyst.agent.host.devices import DeviceSource
from pykatalyst.agent.host.kubelet import KubeletDevicesView, KubeletView
from pykatalyst.agent.host.nics import NicSource
from pykatalyst.agent.inputs import EvictionStage, NodeFacts, TickInputs
from pykatalyst.agent.metrics import MetricStore
from pykatalyst.agent.node_watch import NodeState, NodeView
from pykatalyst.agent.plan import PlanEvent
from pykatalyst.agent.pods import ContainerCgroups, PodCache, PodSpec, match_cgroups
from pykatalyst.api import names
from pykatalyst.cluster.clock import is_due
from pykatalyst.cluster.protocol import Cluster
from pykatalyst.topology.cpuset import CPUSet

log = logging.getLogger("pykatalyst.agent")

REDISCOVER_PERIOD_S = 30.0
BESTEFFORT = "besteffort"  # the kubelet's QoS class whose cgroup holds reclaimed pods


@dataclasses.dataclass(frozen=True, slots=True)
class Sources:
    """What the gatherer reads besides the cluster and the Host (each optional)."""

    kubelet: KubeletView | None = None
    devices: DeviceSource | None = None
    device_view: KubeletDevicesView | None = None
    nics: NicSource | None = None
    enforcer_checkpoint: Path | None = None  # the cpu placement's checkpoint sits beside it


class Gatherer:
    """Every read of the agent's tick, and the caches that keep them cheap."""

    def __init__(
        self,
        facts: NodeFacts,
        cluster: Cluster,
        host: Host,
        config: AgentConfig,
        node_state: NodeState | None,
        sources: Sources,
        *,
        stages: Sequence[EvictionStage] = (),
        publish: bool = True,
    ) -> None:
        node_name = facts.node
        self.facts = facts
        self.host = host
        self.base_config = config
        self.config = config
        self.stages: list[EvictionStage] = list(stages)
        self.publish = publish
        self.metrics = MetricStore(config.metrics.insurance_period_s)
        # The one holder of the node's pods and dynamic config, shared with the stages.
        self.node_state = node_state or NodeState(
            node_name, cluster, admin_qos=config.admin_qos_config, config_ttl_s=config.config_ttl_s
        )
        self.settings = AgentSettings(node_name, config)
        self.spds = SpdReader(cluster, self.node_state.skips, config.config_ttl_s)
        self.devices = DeviceReader(
            config.devices, facts.topology, sources.devices, sources.device_view, sources.nics
        )
        self.kubelet = (
            None
            if sources.kubelet is None
            else kubelet_cpu.KubeletCpuWatch(config.kubelet.config_path, sources.kubelet)
        )
        self.checkpoint = cpu_placement.checkpoint_for(
            config.cpu_state_path, node_name, facts.topology, sources.enforcer_checkpoint
        )
        self.cpu_state_error: str | None = None
        self._cpu_rebuild = True  # until a checkpoint says where pods are
        self._init_caches()

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

    def rediscover(self) -> None:
        """Walk the cgroup tree again next tick (a write found a cgroup gone)."""
        self._last_discovery = None

    # --- the tick's reads -------------------------------------------------------------------

    def gather(self, now: float, state: AgentState) -> tuple[TickInputs, AgentState]:
        """Read the node's pods and config (one holder), the cgroups, one sample, the
        kubelet's pins and the indicator targets of the pods' profiles; `state` with the
        cpu placement rebuilt from the cgroups on the first tick without a checkpoint."""
        warnings: list[str] = []
        events: list[PlanEvent] = []
        view = self.node_state.refresh(now)
        self._set_config(self.settings.update(view.config, warnings, events))
        warnings.extend(view.warnings)
        specs = self._parse_pods(view, now)
        self._discover(now, specs)
        if self._cpu_rebuild:
            self._cpu_rebuild = False
            state = self._rebuild_cpu_state(specs, state)
        sample = self.host.sample(now, self._cgroup_list(specs))
        self.metrics.ingest(sample)
        cfg = self.config
        protect = cfg.memory_advisor.protection != "none"
        valid = steps.classify(specs)
        watch = self.kubelet
        pins = None if watch is None else watch.observe(_refs(valid))
        dev = self.devices
        inputs = TickInputs(
            now,
            view,
            cfg,
            dict(self.settings.status),
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
            kubelet=None if watch is None else watch.policy,
            reclaimed_root=self._reclaimed_root(),
            guaranteed_root=isolation.guaranteed_root(self.host) if protect else None,
            spd_targets=self._spd_targets(now, valid, state),
            reclaim_off=self._reclaim_off(now, valid),
            stages=tuple(self.stages),
            stage_reads=tuple(self._stage_reads(now, view, state)),
            # the eviction stages see the NIC zones last reported, before this tick's read
            nics=nic.allocatable_by_nic(dev.nic_report) if dev.nics is not None else None,
            gpus=dev.gpus(specs) if self.publish and dev.devices is not None else None,
            nic_zones=dev.nic_zones(specs) if self.publish and dev.nics is not None else None,
        )
        return inputs, state

    def _set_config(self, cfg: AgentConfig) -> None:
        if cfg == self.config:
            return
        self.config = cfg
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

    def _stage_reads(self, now: float, view: NodeView, state: AgentState) -> list[object]:
        """What each eviction stage reads for its decision (the error, when reading failed:
        the stage is then reported and skipped)."""
        out: list[object] = []
        held = state.stage_memory
        for i, stage in enumerate(self.stages):
            try:
                out.append(stage.gather(now, view, held[i] if i < len(held) else None))
            except Exception as exc:  # a broken stage must not stop the loop
                out.append(exc)
        return out

    def _spd_targets(
        self, now: float, valid: Mapping[str, PodSpec], state: AgentState
    ) -> dict[tuple[str, str], Mapping[str, float]]:
        """The indicator targets of the shared pods' ServiceProfileDescriptors, when rama
        sizes their pools: each re-read every config_ttl_s; none for an SPD that cannot be
        read."""
        adv = self.config.advisor
        rama = adv.provision_policy == "rama" and adv.enable_reclaim
        if not rama or adv.reserved_for_allocate_cpu > 0 or not state.regulators:
            return {}
        out: dict[tuple[str, str], Mapping[str, float]] = {}
        for s in valid.values():
            if s.spd_name and s.level == names.QOS_SHARED_CORES:
                key = (s.namespace, s.spd_name)
                if key not in out:
                    out[key] = self.spds.targets(s, now)
        return out

    def _reclaim_off(self, now: float, valid: Mapping[str, PodSpec]) -> dict[str, str]:
        """The pods that lend nothing to reclaimed pods under their SPD, with the rule;
        only while reclaim is on (off, no pod lends anyway)."""
        if not self.config.advisor.enable_reclaim:
            return {}
        return self.spds.reclaim_off(now, valid)

    # --- cgroups ------------------------------------------------------------------------------

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

    # --- cpu placement across restarts ------------------------------------------------------

    def restored(self, state: AgentState) -> AgentState:
        """`state` with the cpu placement its checkpoint holds, when it holds one."""
        ck = self.checkpoint
        if ck is None:
            return state
        try:
            placement = ck.load()
        except cpu_placement.CpuStateError as exc:
            self.cpu_state_error = f"{ck.path}: {exc}"
            log.warning(
                "cpu state checkpoint %s refused: %s; rebuilding the placement from the "
                "cpusets the cgroups show",
                ck.path,
                exc,
            )
            return state
        if placement is None:
            return state
        self._cpu_rebuild = False
        return dataclasses.replace(state, placement=placement)

    def _rebuild_cpu_state(self, specs: Mapping[str, PodSpec], state: AgentState) -> AgentState:
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
        found = cpu_placement.from_cgroups(self.facts.topology, dedicated, snb)
        held = state.placement
        placement = cpu_placement.CpuState(
            {**found.dedicated, **held.dedicated}, {**found.snb, **held.snb}, held.pools
        )
        if found.dedicated or found.snb:
            log.info(
                "cpu placement rebuilt from cgroups: %d dedicated, %d NUMA-bound shared pods",
                len(found.dedicated),
                len(found.snb),
            )
        return dataclasses.replace(state, placement=placement)


def _refs(specs: Mapping[str, PodSpec]) -> list[kubelet_cpu.PodRef]:
    return [kubelet_cpu.PodRef(s.uid, s.namespace, s.name) for s in specs.values()]
