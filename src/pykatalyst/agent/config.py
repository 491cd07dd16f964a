"""The node agent's configuration: every default from Katalyst, validated at start.

Defaults follow Katalyst's agent flags and dynamic-config (AdminQoSConfiguration)
defaults, reclaim included: `advisor.enable_reclaim` and `reclaimed_cpu_idle` are off unless
the configuration turns them on, so a Katalyst user's config means what it meant. The
configs pykatalyst ships (deploy/manifests, examples/, the simulator's scenarios) turn both
on; the agent says at start which is in force (`reclaim_setting`).

The configuration is read once at start (`load_config`) and refused with the field named
when it is wrong. Part of it can be overlaid at run time by an AdminQoSConfiguration from
the cluster (`AgentConfig.with_admin_qos`), as Katalyst's dynamic configuration does; the
`eviction` section is the eviction manager's base configuration, which the same object's
`evictionConfig` overlays in the eviction stage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from pykatalyst.agent.config_sections import DevicesConfig, IoConfig, KubeletConfig
from pykatalyst.agent.config_sections import NetworkConfig as NetworkConfig
from pykatalyst.agent.config_sections import Section as _Section
from pykatalyst.agent.eviction.config import EvictionConfig
from pykatalyst.api import names
from pykatalyst.api.crds import AdminQoSConfiguration
from pykatalyst.api.problems import one_line
from pykatalyst.api.qos_model import CPUBurst, PodQoS
from pykatalyst.api.units import Bytes, Cores, Seconds
from pykatalyst.api.yamlio import load_yaml
from pykatalyst.topology.cpuset import CPUSet

GI = 1024**3
MI = 1024**2
PROTECTION_MODES = ("none", "low", "min")  # memory_advisor.protection


class CpuPolicyConfig(_Section):
    """The dynamic cpu policy (Katalyst's qrm cpu plugin flags)."""

    reserved_cpus: int = Field(0, ge=0, description="cpus kept for the system (reserve pool)")
    reserved_cpu_list: str | None = Field(
        None, description='explicit reserve pool, e.g. "0-1"; overrides reserved_cpus'
    )
    reserve_cpus_reversely: bool = Field(False, description="take the reserve from high cpu ids")
    min_reclaim_pool_cpus: int = Field(
        4,
        ge=0,
        description="the reclaim pool never has fewer than max(this, #NUMA) cpus; 0 (with "
        "advisor.min_reclaimed_for_allocate_cpu: 0) lets the share pools take every cpu of "
        "a small node, the reclaim pool then overlapping them",
    )
    ramp_up_period_s: Seconds = Field(
        30.0, description="a new shared pod runs on all pooled cpus this long"
    )
    overlap_reclaim_with_share: bool = Field(
        False,
        description="reclaimed pods may also run on the share pools' cpus, under SCHED_IDLE "
        "(Katalyst's allowSharedCoresOverlapReclaimedCores, off by default as in Katalyst: "
        "on machines with hyperthreads batch on a service's sibling threads slows it)",
    )
    default_cpu_burst_percent: int = Field(
        names.DEFAULT_CPU_BURST_PERCENT,
        ge=0,
        le=100,
        description="cpu burst percent of a pod whose cpu_enhancement names none "
        "(Katalyst's defaultCPUBurstPercent)",
    )
    dedicated_cores_default_cpu_burst: bool | None = Field(
        None,
        description="a dedicated pod whose cpu burst policy is default: true static, false "
        "closed, unset left default (Katalyst's enableDedicatedCoresDefaultCPUBurst)",
    )
    shared_cores_default_cpu_burst: bool | None = Field(
        None,
        description="a shared pod whose cpu burst policy is default: true static when it is "
        "the node's only shared pod (else closed), false closed, unset left default "
        "(Katalyst's enableSharedCoresDefaultCPUBurst)",
    )

    def cpu_burst(self, qos: PodQoS, shared_pods: int) -> CPUBurst:
        """The cpu burst Katalyst's cpu plugin gives the pod `qos` on a node running
        `shared_pods` active shared_cores pods, under these defaults."""
        return qos.cpu_burst(
            self.default_cpu_burst_percent,
            self.dedicated_cores_default_cpu_burst,
            self.shared_cores_default_cpu_burst,
            sole_shared=shared_pods == 1,
        )

    @model_validator(mode="after")
    def _reserved_list(self) -> CpuPolicyConfig:
        if self.reserved_cpu_list:
            try:
                CPUSet.parse(self.reserved_cpu_list)
            except ValueError as exc:
                raise ValueError(f"reserved_cpu_list: {exc}") from exc
        return self


PROVISION_POLICIES = ("canonical", "rama")
_REGIONS = "spec.config.advisorConfig.cpuAdvisorConfig.cpuProvisionConfig.regionIndicators"
CPU_SCHED_WAIT = "cpu_sched_wait"  # µs a task waits on the run queue, average of the pool's cpus
CPU_USAGE_RATIO = "cpu_usage_ratio"  # busy share of the pool's cpus
CPU_LOAD_RATIO = "cpu_load_ratio"  # 1-min load of the pool's pods per pool cpu
INDICATORS = (CPU_SCHED_WAIT, CPU_USAGE_RATIO, CPU_LOAD_RATIO)


class PIDParams(_Section):
    """One indicator's controller (Katalyst's FirstOrderPIDParams)."""

    kpp: float = Field(ge=0, description="proportional gain while the indicator is too high")
    kpn: float = Field(ge=0, description="proportional gain while it is too low")
    kdp: float = Field(0.0, ge=0, description="derivative gain, error growing")
    kdn: float = Field(0.0, ge=0, description="derivative gain, error shrinking")
    adjustment_upper: float = Field(10.0, ge=0, description="largest total step up (cores)")
    adjustment_lower: float = Field(2.0, ge=0, description="largest total step down (cores)")
    deadband_upper_pct: float = Field(ge=0, description="no action up to target × (1 + this)")
    deadband_lower_pct: float = Field(ge=0, description="no action down to target × (1 − this)")


def _default_pid() -> dict[str, PIDParams]:
    # Katalyst's defaults (sysadvisor PolicyRamaConfiguration); the load ratio, which
    # Katalyst lacks, is held like the usage ratio.
    usage = PIDParams(kpp=0.1, kpn=0.04, deadband_upper_pct=0.01, deadband_lower_pct=0.06)
    return {
        CPU_SCHED_WAIT: PIDParams(
            kpp=0.05, kpn=0.009, deadband_upper_pct=0.05, deadband_lower_pct=0.2
        ),
        CPU_USAGE_RATIO: usage,
        CPU_LOAD_RATIO: usage,
    }


class RamaConfig(_Section):
    """The rama provision policy: PID controllers holding indicators at their targets."""

    indicator_targets: dict[str, float] = Field(
        default_factory=lambda: {CPU_SCHED_WAIT: 460.0, CPU_USAGE_RATIO: 0.8},
        description="target of each indicator for share pools (Katalyst's share-region "
        "defaults: cpu_sched_wait 460 µs, cpu_usage_ratio 0.8); an indicator without a "
        "target is not controlled",
    )
    pid_parameters: dict[str, PIDParams] = Field(
        default_factory=_default_pid, description="each indicator's controller"
    )

    @field_validator("pid_parameters", mode="before")
    @classmethod
    def _merge_defaults(cls, value: Any) -> Any:
        """Indicators a config leaves out keep Katalyst's parameters."""
        if not isinstance(value, dict):
            return value
        merged: dict[str, Any] = {k: v.model_dump() for k, v in _default_pid().items()}
        for key, given in value.items():
            base = merged.get(key, {})
            merged[key] = {**base, **given} if isinstance(given, dict) else given
        return merged

    @model_validator(mode="after")
    def _known(self) -> RamaConfig:
        for where, keys in (
            ("indicator_targets", self.indicator_targets),
            ("pid_parameters", self.pid_parameters),
        ):
            for key in keys:
                if key not in INDICATORS:
                    raise ValueError(
                        f"{where}: unknown indicator {key!r}; accepted: {', '.join(INDICATORS)}"
                    )
        for key, target in self.indicator_targets.items():
            if not target > 0:
                raise ValueError(f"indicator_targets.{key}: must be > 0, not {target!r}")
        return self


class IsolationConfig(_Section):
    """Katalyst's load isolator (`--isolation-*` flags): a shared pod with too many runnable
    threads for long enough gets a pool of its own. Off by default, as in Katalyst."""

    enabled: bool = Field(
        False, description="isolate noisy shared pods (Katalyst: --isolation-disable=false)"
    )
    cpu_ratio: float = Field(
        1.5, gt=0, description="isolate above ratio x max(limit, request) runnable threads"
    )
    cpu_size: float = Field(
        2.0, ge=0, description="... or above max(limit, request) + this many runnable threads"
    )
    max_resource_ratio: float = Field(
        0.2, ge=0, le=1, description="at most this share of a pool's cores is isolated"
    )
    max_pod_ratio: float = Field(
        0.5, ge=0, le=1, description="at most this share of a pool's pods is isolated"
    )
    lockin_threshold: int = Field(3, ge=1, description="ticks over the threshold to isolate")
    lockout_period_s: Seconds = Field(
        120.0, description="time under the threshold before an isolated pod goes back"
    )
    disabled_pools: tuple[str, ...] = Field(
        (), description="share pools whose pods are never isolated (--isolation-disable-pools)"
    )


class AdvisorConfig(_Section):
    """Sys-advisor: canonical provisioning, regulator, headroom (Katalyst defaults)."""

    enable_reclaim: bool = Field(False, description="publish reclaimed capacity (as Katalyst)")
    reserved_for_allocate_cpu: Cores = Field(
        4.0, description="burst buffer added to the share pools' requirement"
    )
    reserved_for_allocate_memory: Bytes = Field(5 * GI, description="memory kept from reclaim")
    min_reclaimed_for_allocate_cpu: Cores = Field(
        4.0, description="cpus always left to the reclaim pool (reservedForReclaim)"
    )
    min_share_cpu_requirement: Cores = Field(4.0, description="lower bound of a share pool")
    headroom_whole_cores: bool = Field(
        True, description="publish reclaimed cpu per NUMA node in whole cores (Katalyst)"
    )
    usage_coefficient: float = Field(1.25, gt=0, description="estimate = max(k × usage, loads)")
    fallback_cpu_estimate: Cores = Field(4.0, description="estimate when it would be <= 0")
    max_ramp_up_step: Cores = Field(10.0, description="a pool grows at most this much per tick")
    max_ramp_down_step: Cores = Field(2.0, description="a pool shrinks at most this much")
    min_ramp_down_period_s: Seconds = Field(30.0, description="at most one shrink per period")
    ht_align: bool = Field(False, description="round pool sizes up to whole physical cores")
    memory_usage_coefficient: float = Field(
        1.1, gt=0, description="memory requirement = k × (rss + cache + shmem)"
    )
    system_memory_coefficient: float = Field(1.0, gt=0, description="system pods: k × rss")
    fallback_memory_estimate: Bytes = Field(8 * GI, description="memory estimate when <= 0")
    provision_policy: str = Field(
        "canonical",
        description="how share pools are sized: 'canonical' (estimates of the pods' needs) "
        "or 'rama' (PID controllers holding the pool's indicators at their targets); "
        "Katalyst's --cpu-provision-policy-priority for share regions",
    )
    rama: RamaConfig = Field(default_factory=RamaConfig)
    isolation: IsolationConfig = Field(default_factory=IsolationConfig)

    @model_validator(mode="after")
    def _policy(self) -> AdvisorConfig:
        if self.provision_policy not in PROVISION_POLICIES:
            raise ValueError(
                f"provision_policy {self.provision_policy!r}: accepted: "
                + ", ".join(PROVISION_POLICIES)
            )
        return self


class OvercommitAdviceConfig(_Section):
    """The realtime overcommit ratio the agent publishes on its CNR (Katalyst's
    overcommitment-aware sys-advisor plugin; docs/controllers.md)."""

    enabled: bool = Field(True, description="publish the realtime overcommit ratio")
    period_s: Seconds = Field(10.0, gt=0, description="how often it is worked out")
    cpu_target_load: float = Field(0.6, gt=0, le=1, description="cpu usage / allocatable to aim at")
    memory_target_load: float = Field(0.8, gt=0, le=1, description="same for memory")
    cpu_estimated_pod_load: float = Field(
        0.4, gt=0, le=1, description="the least usage / request assumed of a pod's cpu"
    )
    memory_estimated_pod_load: float = Field(0.8, gt=0, le=1, description="same for memory")


class ReporterConfig(_Section):
    """Headroom reporting to the CNR and the Node (Katalyst's headroom_reporter)."""

    period_s: Seconds = Field(5.0, description="CNR writes and the AgentReady heartbeat")
    headroom_sync_period_s: Seconds = Field(30.0, description="smoothing sample period")
    sliding_window_s: Seconds = Field(120.0, description="headroom averaged over this window")
    min_step_cpu: Cores = 0.3
    min_step_memory: Bytes = 300 * MI
    max_step_cpu: Cores = 4.0
    max_step_memory: Bytes = 5 * GI
    reserved_for_report_cpu: Cores = 0.0
    reserved_for_report_memory: Bytes = 0
    min_reclaimed_for_report_cpu: Cores = 4.0
    min_reclaimed_for_report_memory: Bytes = 5 * GI
    min_ignored_reclaimed_cpu: Cores = 0.1
    min_ignored_reclaimed_memory: Bytes = 100 * MI
    publish_node_extended_resources: bool = Field(
        True, description="also patch the Node's status so kube-scheduler sees reclaimed_*"
    )
    topology_policy_name: str = Field(
        "",
        description="the topology manager policy to publish as the CNR's topologyPolicy, at "
        "container scope (Katalyst's --topology-policy-name); '': the kubelet's own "
        "topologyManagerPolicy and topologyManagerScope, from kubelet.config_path",
    )
    enable_pod_resources_filter: bool = Field(
        True,
        description="list only NUMA-bound pods (dedicated, SNB) in the NUMA zones' "
        "allocations, as Katalyst's --enable-pod-resources-filter; false lists every pod "
        "the agent places, with the cpus it runs on in each zone",
    )

    @model_validator(mode="after")
    def _policy_name(self) -> ReporterConfig:
        accepted = ("", *names.TOPOLOGY_MANAGER_POLICIES)
        if self.topology_policy_name not in accepted:
            raise ValueError(
                f"topology_policy_name {self.topology_policy_name!r}: accepted: "
                + ", ".join(repr(a) for a in accepted)
            )
        return self

    @model_validator(mode="after")
    def _steps(self) -> ReporterConfig:
        if self.max_step_cpu and self.min_step_cpu > self.max_step_cpu:
            raise ValueError("min_step_cpu must not exceed max_step_cpu")
        if self.max_step_memory and self.min_step_memory > self.max_step_memory:
            raise ValueError("min_step_memory must not exceed max_step_memory")
        return self


class MetricsConfig(_Section):
    insurance_period_s: Seconds = Field(
        60.0, description="a metric older than this counts as missing"
    )


class ReactionConfig(_Section):
    """The fast watch between reconciles: share pods' cpu usage over a short window, and an
    early reconcile when it says a share pool must grow (docs/agent.md, "Reacting to a load
    step"). Katalyst has no such watch: its pools follow load once per period."""

    enabled: bool = Field(
        True, description="watch the share pools between reconciles (off: once per period)"
    )
    period_s: Seconds = Field(
        0.5, gt=0, description="how often the share pods' cpu usage is read; its window"
    )
    grow_band: float = Field(
        0.2,
        ge=0,
        description="an early reconcile only when the usage-based requirement exceeds the one "
        "the pool was last sized for by more than this fraction (hysteresis)",
    )
    cooldown_s: Seconds = Field(2.0, description="at least this long between two early reconciles")


class MemoryConfig(_Section):
    """The memory plugin's reserve (Katalyst's qrm memory plugin flags)."""

    reserved_memory_gb: int = Field(
        0,
        ge=0,
        description="GiB kept for system agents, spread over the NUMA nodes as "
        "ceil(GiB / #NUMA) each and left out of each NUMA zone's allocatable memory "
        "(Katalyst's --memory-resource-plugin-reserved)",
    )
    use_kubelet_reserved: bool = Field(
        False,
        description="take the reserve from the kubelet's kubeReserved + systemReserved "
        "memory instead (Katalyst's --use-kubelet-reserved-config)",
    )


class MemoryGuardConfig(_Section):
    """Katalyst's memory advisor plugins on the node: pressure, memory guard, cache reaper,
    protection of latency-sensitive pods and the OOM priority ladder (docs/agent.md,
    "Memory and disk I/O")."""

    guard: bool = Field(
        False,
        description="hold the reclaimed root's memory limit to what reclaimed pods use plus "
        "the free memory above each NUMA node's low watermark, memory.high at 95 % of it on "
        "cgroup v2 (Katalyst's memory-guard plugin, off by default as there)",
    )
    critical_watermark_scale_factor: float = Field(
        1.0, gt=0, description="the guard keeps free memory above low watermark × this"
    )
    min_critical_watermark: Bytes = Field(
        4 * GI,
        description="per NUMA node, the least free memory the guard and the pressure states "
        "keep (Katalyst's --memory-advisor-min-critical-watermark)",
    )
    drop_cache: bool = Field(
        False,
        description="under memory pressure, drop the page cache of reclaimed pods, largest "
        "first (Katalyst's cache-reaper plugin): memory.reclaim on v2, memory.force_empty on v1",
    )
    min_cache_utilization: float = Field(
        0.005,
        ge=0,
        le=1,
        description="a reclaimed pod whose cache is below this share of memory is not reaped",
    )
    drop_cache_interval_s: Seconds = Field(
        60.0, description="a pod's cache is dropped at most once per this interval"
    )
    protection: str = Field(
        "none",
        description="memory.low / memory.min of latency-sensitive pods on cgroup v2: 'low' "
        "gives shared, dedicated and system pods memory.low = their request, 'min' gives "
        "dedicated and system pods memory.min instead, 'none' leaves them alone",
    )
    oom_priority: bool = Field(
        False,
        description="write each pod's OOM priority (memory_enhancement oom_priority, else its "
        "level's default) as its processes' oom_score_adj (Katalyst's --enable-oom-priority)",
    )

    @field_validator("protection")
    @classmethod
    def _mode(cls, v: str) -> str:
        if v not in PROTECTION_MODES:
            raise ValueError(f"accepted: {', '.join(PROTECTION_MODES)}; got {v!r}")
        return v


class AgentConfig(_Section):
    """Everything the agent can be told. Load from YAML with `load_config`."""

    period_s: Seconds = Field(5.0, gt=0, description="reconcile period (Katalyst: 5s)")
    resync_period_s: Seconds | None = Field(
        None,
        description="knobs changed behind the agent's back are put back within this "
        "(default: every period)",
    )
    cpu: CpuPolicyConfig = Field(default_factory=CpuPolicyConfig)
    advisor: AdvisorConfig = Field(default_factory=AdvisorConfig)
    reporter: ReporterConfig = Field(default_factory=ReporterConfig)
    overcommit: OvercommitAdviceConfig = Field(default_factory=OvercommitAdviceConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    kubelet: KubeletConfig = Field(default_factory=KubeletConfig)
    devices: DevicesConfig = Field(
        default_factory=DevicesConfig,
        description="the node's GPUs: discovery, CNR zones, device plugin (docs/devices.md)",
    )
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    memory_advisor: MemoryGuardConfig = Field(default_factory=MemoryGuardConfig)
    io: IoConfig = Field(default_factory=IoConfig)
    reaction: ReactionConfig = Field(default_factory=ReactionConfig)
    eviction: EvictionConfig = Field(
        default_factory=EvictionConfig,
        description="the eviction manager: thresholds, dry-run plugins (docs/eviction.md)",
    )
    reclaimed_cpu_idle: bool = Field(
        False,
        description="cpu.idle=1 (SCHED_IDLE) on reclaimed pods (off, as Katalyst's "
        "--enable-cpu-idle)",
    )
    reclaimed_root_cpu_idle: bool = Field(
        False,
        description="cpu.idle=1 on the reclaimed root as well; only for a root the kubelet "
        "does not manage: a kubelet cannot start while its best-effort cgroup is idle",
    )
    reclaimed_root: str = Field(
        "auto",
        description="cgroup all reclaimed pods live under, relative to the hierarchy root "
        "(Katalyst's --reclaim-relative-root-cgroup-path); 'auto' is the kubelet's "
        "best-effort cgroup in the node's layout; '' leaves the root alone",
    )
    reclaimed_root_quota: bool = Field(
        False,
        description="cap the reclaimed root's cfs quota at the advisor's reclaim pool size; "
        "off, the root's quota is kept unlimited",
    )
    admin_qos_config: str | None = Field(
        None,
        description="namespace/name of an AdminQoSConfiguration to overlay; when unset the "
        "agent follows its CustomNodeConfig's target, if any",
    )
    config_ttl_s: Seconds = Field(15.0, description="how often dynamic config is re-read")
    checkpoint_path: str | None = Field(
        "/var/lib/pykatalyst/agent-enforcer.json",
        description="where the enforcer keeps its desired-state checkpoint (None: none)",
    )
    cpu_state_path: str | None = Field(
        "auto",
        description="where the cpu placement (dedicated, SNB, pools) is checkpointed: 'auto' "
        "puts agent-cpu-state.json next to the enforcer's checkpoint, in the agent's state "
        "directory; None: not kept (a restart rebuilds it from the cgroups' cpusets)",
    )
    network: NetworkConfig = Field(
        default_factory=NetworkConfig, description="egress QoS by level (docs/agent.md)"
    )

    @property
    def resync_s(self) -> float:
        """How long the agent trusts the knobs it wrote before reading them again."""
        return self.period_s if self.resync_period_s is None else self.resync_period_s

    @model_validator(mode="after")
    def _root(self) -> AgentConfig:
        root = self.reclaimed_root.strip("/")
        if root and any(p in ("", ".", "..") for p in root.split("/")):
            raise ValueError(
                f"reclaimed_root must be 'auto', '' or a cgroup path, not {self.reclaimed_root!r}"
            )
        return self

    @model_validator(mode="after")
    def _aqc_ref(self) -> AgentConfig:
        ref = self.admin_qos_config
        if ref is not None and (ref.count("/") != 1 or not all(ref.split("/"))):
            raise ValueError(f"admin_qos_config must be namespace/name, not {ref!r}")
        return self

    def with_admin_qos(self, aqc: AdminQoSConfiguration) -> AgentConfig:
        """Overlay the fields the AdminQoSConfiguration sets (unset ones keep their value)."""
        rrc = aqc.spec.config.reclaimed_resource_config
        base = self._with_provision(aqc)._with_cpu(aqc)
        if "reclaimed_resource_config" not in aqc.spec.config.model_fields_set:
            return base
        adv: dict[str, Any] = {}
        rep: dict[str, Any] = {}
        given = rrc.model_fields_set
        if "enable_reclaim" in given:
            adv["enable_reclaim"] = rrc.enable_reclaim

        def pair(
            field: str, into: dict[str, Any], cpu_key: str | None, mem_key: str | None
        ) -> None:
            if field not in given:
                return
            values = getattr(rrc, field) or {}
            if cpu_key and "cpu" in values:
                into[cpu_key] = values["cpu"].milli_value() / 1000.0
            if mem_key and "memory" in values:
                into[mem_key] = values["memory"].value()

        pair(
            "reserved_resource_for_allocate",
            adv,
            "reserved_for_allocate_cpu",
            "reserved_for_allocate_memory",
        )
        pair("min_reclaimed_resource_for_allocate", adv, "min_reclaimed_for_allocate_cpu", None)
        pair(
            "reserved_resource_for_report",
            rep,
            "reserved_for_report_cpu",
            "reserved_for_report_memory",
        )
        pair(
            "min_reclaimed_resource_for_report",
            rep,
            "min_reclaimed_for_report_cpu",
            "min_reclaimed_for_report_memory",
        )
        pair(
            "min_ignored_reclaimed_resource_for_report",
            rep,
            "min_ignored_reclaimed_cpu",
            "min_ignored_reclaimed_memory",
        )
        data = base.model_dump()
        data["advisor"].update(adv)
        data["reporter"].update(rep)
        return AgentConfig.model_validate(data)

    def _with_cpu(self, aqc: AdminQoSConfiguration) -> AgentConfig:
        """The cpu policy's fields the AdminQoSConfiguration sets: the overlap switch and
        the cpu burst defaults (`fineGrainedResourceConfig.cpuBurstConfig`)."""
        cpu: dict[str, Any] = {}
        cpu_adv = aqc.spec.config.advisor_config.cpu_advisor_config
        if "allow_shared_cores_overlap_reclaimed_cores" in cpu_adv.model_fields_set:
            cpu["overlap_reclaim_with_share"] = cpu_adv.allow_shared_cores_overlap_reclaimed_cores
        fine = aqc.spec.config.fine_grained_resource_config
        burst = fine.cpu_burst_config if fine is not None else None
        if burst is not None:
            # a field left out keeps its value (Katalyst applies only the fields given)
            for field, ours in (
                ("default_cpu_burst_percent", "default_cpu_burst_percent"),
                ("enable_dedicated_cores_default_cpu_burst", "dedicated_cores_default_cpu_burst"),
                ("enable_shared_cores_default_cpu_burst", "shared_cores_default_cpu_burst"),
            ):
                value = getattr(burst, field)
                if value is not None:
                    cpu[ours] = value
        if not cpu:
            return self
        return self.model_copy(update={"cpu": self.cpu.model_copy(update=cpu)})

    def _with_provision(self, aqc: AdminQoSConfiguration) -> AgentConfig:
        """The provision policy (the AQC's annotation) and the share pools' indicator
        targets (its `cpuProvisionConfig.regionIndicators` for regionType share; indicators
        pykatalyst does not measure, such as cpi, are left out)."""
        adv: dict[str, Any] = {}
        policy = aqc.metadata.annotations.get(names.CPU_PROVISION_POLICY_ANNOTATION)
        if policy is not None:
            adv["provision_policy"] = policy
        provision = aqc.spec.config.advisor_config.cpu_advisor_config.cpu_provision_config
        targets: dict[str, float] = {}
        share = False
        for region in provision.get("regionIndicators") or []:
            if not isinstance(region, dict) or region.get("regionType") != "share":
                continue
            share = True
            for t in region.get("targets") or []:
                if isinstance(t, dict) and t.get("name") in INDICATORS:
                    targets[str(t["name"])] = t.get("target")  # type: ignore[assignment]
        if share:
            adv["rama"] = {**self.advisor.rama.model_dump(), "indicator_targets": targets}
        if not adv:
            return self
        data = self.model_dump()
        data["advisor"].update(adv)
        try:
            return AgentConfig.model_validate(data)
        except ValidationError as exc:
            where = names.CPU_PROVISION_POLICY_ANNOTATION if policy is not None else _REGIONS
            problems = one_line(exc)
            raise ValueError(f"{where}: {problems}") from None


def reclaim_setting(cfg: AgentConfig) -> str:
    """The start line that says whether this agent reclaims, and how."""
    reclaim = "on" if cfg.advisor.enable_reclaim else "off"
    idle = "on" if cfg.reclaimed_cpu_idle else "off"
    return (
        f"reclaim {reclaim} (advisor.enable_reclaim={str(cfg.advisor.enable_reclaim).lower()}), "
        f"cpu.idle on reclaimed pods {idle} "
        f"(reclaimed_cpu_idle={str(cfg.reclaimed_cpu_idle).lower()}); "
        "an AdminQoSConfiguration's enableReclaim overrides the first"
    )


class ConfigError(ValueError):
    """The agent configuration is invalid; the message names the field."""


def parse_config(data: Any, source: str = "config") -> AgentConfig:
    if data is None:
        data = {}
    try:
        return AgentConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"invalid agent {source}: {one_line(exc)}") from None


def load_config(path: str | Path | None) -> AgentConfig:
    """Read a YAML agent configuration (None: all defaults)."""
    if path is None:
        return AgentConfig()
    p = Path(path)
    try:
        data = load_yaml(p.read_text(), str(p))
    except OSError as exc:
        raise ConfigError(f"cannot read agent config {p}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"agent config {p} is not valid YAML: {exc}") from None
    return parse_config(data, f"config {p}")
