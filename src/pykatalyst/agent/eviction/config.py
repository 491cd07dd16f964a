"""Eviction configuration: the manager's knobs and every inner plugin's thresholds.

Defaults are Katalyst's (agent flags and the AdminQoSConfiguration `evictionConfig`
defaults). An AdminQoSConfiguration found in the cluster overlays the fields it sets
(`EvictionConfig.with_admin_qos`), as Katalyst's dynamic configuration does; fields it
leaves unset keep the agent's value.

Two deliberate additions to Katalyst, both documented in docs/eviction.md:
- the reclaimed-resource plugin uses the soft thresholds (1.5 cpu / 1.2 memory, which
  Katalyst defines but leaves unused) to raise a CNR condition — a reclaimed-only taint —
  before the hard threshold (5.0) evicts anything;
- hard thresholds on cpu wait until the agent's throttle step (shrinking the reclaim pool)
  has settled for `throttle_settle_s`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from pykatalyst.api import names
from pykatalyst.api.crds import AdminQoSConfiguration
from pykatalyst.api.crds import EvictionConfig as EvictionConfigCRD
from pykatalyst.api.units import Seconds

Ratio = Annotated[float, Field(gt=0)]

RECLAIMED_THRESHOLD_KEYS = (names.RECLAIMED_MILLICPU, names.RECLAIMED_MEMORY)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


def _reclaimed_thresholds(value: dict[str, float], what: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, ratio in value.items():
        canonical = names.RESOURCE_ALIASES.get(key, key)
        if canonical not in RECLAIMED_THRESHOLD_KEYS:
            raise ValueError(
                f"{what}: unknown resource {key!r}; accepted: {', '.join(RECLAIMED_THRESHOLD_KEYS)}"
            )
        if ratio <= 0:
            raise ValueError(f"{what}[{key}]: must be > 0, got {ratio}")
        out[canonical] = float(ratio)
    return out


class ReclaimedResourcePressureConfig(_Section):
    """Σ reclaimed requests against threshold × published reclaimed allocatable."""

    enabled: bool = True
    numa_enabled: bool = Field(True, description="also check each NUMA zone of the CNR")
    eviction_threshold: dict[str, float] = Field(
        default_factory=lambda: {names.RECLAIMED_MILLICPU: 5.0, names.RECLAIMED_MEMORY: 5.0},
        description="hard: evict when Σ requests > ratio × allocatable",
    )
    soft_eviction_threshold: dict[str, float] = Field(
        default_factory=lambda: {names.RECLAIMED_MILLICPU: 1.5, names.RECLAIMED_MEMORY: 1.2},
        description="soft: taint the CNR (reclaimed only) when Σ requests > ratio × allocatable",
    )
    grace_period_s: Seconds = Field(0.0, description="threshold must hold this long")
    deletion_grace_s: int = Field(60, ge=0, description="victims' termination grace period")

    @field_validator("eviction_threshold")
    @classmethod
    def _hard(cls, value: dict[str, float]) -> dict[str, float]:
        return _reclaimed_thresholds(value, "eviction_threshold")

    @field_validator("soft_eviction_threshold")
    @classmethod
    def _soft(cls, value: dict[str, float]) -> dict[str, float]:
        return _reclaimed_thresholds(value, "soft_eviction_threshold")


class SystemMemoryPressureConfig(_Section):
    """Node memory: free below the watermark, sustained kswapd reclaim, memory PSI."""

    enabled: bool = True
    free_threshold_minimum: int = Field(
        0, ge=0, description="bytes; free must stay above max(this, total × scale/10000)"
    )
    kswapd_eviction: bool = Field(
        False,
        description="also evict on sustained kswapd reclaim (Katalyst now relies on PSI)",
    )
    kswapd_rate_threshold: float = Field(2000.0, ge=0, description="pages/s stolen by kswapd")
    kswapd_rate_exceed_duration_s: Seconds = Field(120.0, description="how long it must last")
    psi_node_threshold: float = Field(15.0, ge=0, description="memory some avg10 of the node")
    psi_pod_threshold: float = Field(4.0, ge=0, description="mean avg10 of pressured pods")
    psi_pod_active: float = Field(1.0, ge=0, description="a pod counts when its avg10 > this")
    psi_min_pods: int = Field(
        3, ge=0, description="pods above psi_pod_active needed for system pressure"
    )
    psi_reclaimed_duration_s: Seconds = Field(15.0, description="then evict reclaimed pods")
    psi_any_duration_s: Seconds = Field(45.0, description="then evict any pod")
    grace_period_s: Seconds = 0.0
    cool_down_s: Seconds = Field(35.0, description="no new victim this long after one")
    deletion_grace_s: int | None = Field(None, ge=0, description="None: the pod's own")


class NumaMemoryPressureConfig(_Section):
    """Per-NUMA free pages against the zone watermarks (/proc/zoneinfo)."""

    enabled: bool = True
    reclaimed_times_threshold: int = Field(
        6, ge=1, description="counter above this evicts reclaimed pods"
    )
    any_times_threshold: int = Field(12, ge=1, description="counter at this evicts any pod")
    fast_eviction_wait_cycle: int = Field(
        1, ge=0, description="free below min lifts the counter to any_times_threshold - this"
    )
    victim_minimum_utilization: float = Field(
        0.001, ge=0, le=1, description="victims use at least this share of the NUMA"
    )
    early_warning: bool = Field(
        False,
        description="also report below-low pressure short of the thresholds (soft) and "
        "raise the NumaMemoryPressure CNR condition (Katalyst: neither)",
    )
    grace_period_s: Seconds = 0.0
    cool_down_s: Seconds = 0.0
    deletion_grace_s: int | None = Field(None, ge=0)


class LoadPressureConfig(_Section):
    """Share-pool load against the pool size, over a ring of samples (Katalyst: off)."""

    enabled: bool = False
    soft_ratio: Ratio = Field(1.0, description="load above ratio × pool size is 'over' (soft)")
    hard_ratio: Ratio = Field(1.8, description="load above ratio × pool size is 'over' (hard)")
    met_percentage: float = Field(0.8, gt=0, le=1, description="share of the ring over")
    ring_size: int = Field(10, ge=1)
    skip_pools: tuple[str, ...] = (
        names.POOL_RECLAIM,
        names.POOL_DEDICATED,
        "fallback",
        names.POOL_RESERVE,
    )
    grace_period_s: Seconds = 0.0
    cool_down_s: Seconds = Field(300.0, description="no new victim this long after one")
    deletion_grace_s: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> LoadPressureConfig:
        if self.soft_ratio > self.hard_ratio:
            raise ValueError(
                f"soft_ratio ({self.soft_ratio}) must not exceed hard_ratio ({self.hard_ratio})"
            )
        return self


class NicHealthConfig(_Section):
    """Bandwidth pods on a NIC whose zone has no allocatable net_bandwidth (Katalyst's
    network eviction plugin; off, as there)."""

    enabled: bool = False
    tolerance_s: Seconds = Field(
        300.0, description="the NIC must have been without allocatable this long"
    )
    deletion_grace_s: int | None = Field(
        0, ge=0, description="victims' termination grace period (Katalyst: 0; None: the pod's)"
    )


class EvictionConfig(_Section):
    """The eviction manager and its inner plugins."""

    enabled: bool = True
    sync_period_s: Seconds = Field(5.0, gt=0, description="one round per period")
    eviction_burst: int = Field(3, ge=1, description="at most this many kills per round")
    condition_transition_period_s: Seconds = Field(
        300.0, description="a condition (and its taint) stays this long after it clears"
    )
    throttle_settle_s: Seconds = Field(
        10.0, description="a cpu hard threshold evicts only after the reclaim pool held still"
    )
    dry_run: tuple[str, ...] = Field((), description='plugins that only log and count ("*" = all)')
    skipped_annotations: tuple[str, ...] = Field((), description="pods with any: never evicted")
    skipped_labels: tuple[str, ...] = Field((), description="pods with any: never evicted")
    inflight_timeout_s: Seconds = Field(
        300.0, description="forget a victim still running this long after its eviction"
    )
    records_limit: int = Field(1000, ge=1, description="decision records kept in memory")
    records_path: str | None = Field(
        None, description="also append every record to this JSON-lines file (katalyst explain)"
    )
    reclaimed_resource: ReclaimedResourcePressureConfig = Field(
        default_factory=ReclaimedResourcePressureConfig
    )
    system_memory: SystemMemoryPressureConfig = Field(default_factory=SystemMemoryPressureConfig)
    numa_memory: NumaMemoryPressureConfig = Field(default_factory=NumaMemoryPressureConfig)
    load: LoadPressureConfig = Field(default_factory=LoadPressureConfig)
    network: NicHealthConfig = Field(default_factory=NicHealthConfig)

    def is_dry_run(self, plugin: str) -> bool:
        return names.EVICTION_DRY_RUN_ALL in self.dry_run or plugin in self.dry_run

    def with_admin_qos(self, aqc: AdminQoSConfiguration) -> EvictionConfig:
        """Overlay `spec.config.evictionConfig` (only the fields it sets)."""
        if "eviction_config" not in aqc.spec.config.model_fields_set:
            return self
        return self.with_crd(aqc.spec.config.eviction_config)

    def with_crd(self, ec: EvictionConfigCRD) -> EvictionConfig:
        data = self.model_dump()
        given = ec.model_fields_set
        if "dry_run" in given:
            data["dry_run"] = tuple(ec.dry_run)
        if "reclaimed_resources_eviction_config" in given:
            _reclaimed_overlay(ec, data["reclaimed_resource"])
        if "memory_pressure_eviction_config" in given:
            _memory_overlay(ec, data["system_memory"], data["numa_memory"])
        if "cpu_pressure_eviction_config" in given:
            cc = ec.cpu_pressure_eviction_config
            cset = cc.model_fields_set
            load = data["load"]
            for crd_field, ours in (
                ("enable_load_eviction", "enabled"),
                ("load_upper_bound_ratio", "hard_ratio"),
                ("load_lower_bound_ratio", "soft_ratio"),
                ("load_threshold_met_percentage", "met_percentage"),
                ("load_metric_ring_size", "ring_size"),
                ("load_eviction_cool_down_time", "cool_down_s"),
                ("grace_period", "deletion_grace_s"),
            ):
                if crd_field in cset:
                    load[ours] = getattr(cc, crd_field)
        if "network_eviction_config" in given:
            _network_overlay(ec, data["network"])
        try:
            return EvictionConfig.model_validate(data)
        except ValidationError as exc:
            raise ValueError(f"evictionConfig overlay is invalid: {exc}") from None


def _reclaimed_overlay(ec: EvictionConfigCRD, sub: dict[str, Any]) -> None:
    """The reclaimed-resources fields `ec` sets, over `sub` (our reclaimed_resource)."""
    rc = ec.reclaimed_resources_eviction_config
    rset = rc.model_fields_set
    if "eviction_threshold" in rset:
        sub["eviction_threshold"] = {**sub["eviction_threshold"], **rc.eviction_threshold}
    if "soft_eviction_threshold" in rset:
        sub["soft_eviction_threshold"] = {
            **sub["soft_eviction_threshold"],
            **rc.soft_eviction_threshold,
        }
    if "grace_period" in rset:
        sub["deletion_grace_s"] = rc.grace_period
    if "threshold_met_tolerance_duration" in rset:
        sub["grace_period_s"] = float(rc.threshold_met_tolerance_duration)


def _network_overlay(ec: EvictionConfigCRD, sub: dict[str, Any]) -> None:
    """The network-eviction fields `ec` sets, over our `network` section."""
    nc = ec.network_eviction_config
    nset = nc.model_fields_set
    for crd_field, ours in (
        ("enable_nic_network_eviction", "enabled"),
        ("nic_unhealthy_tolerance_duration", "tolerance_s"),
        ("grace_period", "deletion_grace_s"),
    ):
        if crd_field in nset:
            sub[ours] = getattr(nc, crd_field)


def _memory_overlay(ec: EvictionConfigCRD, sysm: dict[str, Any], numa: dict[str, Any]) -> None:
    """The memory-pressure fields `ec` sets, over our system_memory and numa_memory."""
    mc = ec.memory_pressure_eviction_config
    mset = mc.model_fields_set
    pairs: list[tuple[str, dict[str, Any], str]] = [
        ("enable_system_level_eviction", sysm, "enabled"),
        ("system_kswapd_rate_threshold", sysm, "kswapd_rate_threshold"),
        (
            "system_kswapd_rate_exceed_duration_threshold",
            sysm,
            "kswapd_rate_exceed_duration_s",
        ),
        ("enable_numa_level_eviction", numa, "enabled"),
        ("numa_free_below_watermark_times_threshold", numa, "any_times_threshold"),
        (
            "numa_free_below_watermark_times_reclaimed_threshold",
            numa,
            "reclaimed_times_threshold",
        ),
        ("numa_victim_minimum_utilization_threshold", numa, "victim_minimum_utilization"),
    ]
    for crd_field, into, ours in pairs:
        if crd_field in mset:
            into[ours] = getattr(mc, crd_field)
    if "grace_period" in mset:
        sysm["deletion_grace_s"] = numa["deletion_grace_s"] = mc.grace_period
    floor = mc.system_free_memory_threshold_minimum
    if "system_free_memory_threshold_minimum" in mset and floor is not None:
        sysm["free_threshold_minimum"] = int(floor.value())
