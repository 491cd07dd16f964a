"""Pydantic models of the Katalyst custom resources the system reads and writes.

Every model keeps fields it does not know (`extra="allow"`), takes and writes Kubernetes'
camelCase names, and accepts snake_case in Python. Dump with `to_json()` so that unset
fields stay absent and an object read from the cluster goes back unchanged.
Quantities are `Quantity` values; they are written back in canonical form.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from pykatalyst.api import names
from pykatalyst.api.duration import Duration
from pykatalyst.api.quantity import Quantity

ResourceMap = dict[str, Quantity]


class KubeModel(BaseModel):
    model_config = ConfigDict(
        extra="allow", populate_by_name=True, alias_generator=to_camel, validate_assignment=True
    )

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Self:
        return cls.model_validate(raw)


class ObjectMeta(KubeModel):
    name: str = ""
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: list[str] = Field(default_factory=list)
    owner_references: list[dict[str, Any]] = Field(default_factory=list)


class Condition(KubeModel):
    type: str
    status: str
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None
    last_heartbeat_time: str | None = None
    observed_generation: int | None = None


class KubeResource(KubeModel):
    api_version: str = ""
    kind: str = ""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)


# --- CustomNodeResource -----------------------------------------------------------------


class CNRTaint(KubeModel):
    """A CNR taint: like a node taint, scoped to one QoS level (always written: the CRD
    requires it)."""

    key: str
    effect: str
    value: str | None = None
    qos_level: str = names.QOS_RECLAIMED_CORES
    time_added: str | None = None

    @model_validator(mode="after")
    def _always_scoped(self) -> Self:
        self.__pydantic_fields_set__.add("qos_level")
        return self


class Property(KubeModel):
    property_name: str
    property_values: list[str] | None = None
    property_quantity: Quantity | None = None


class CNRSpec(KubeModel):
    node_resource_properties: list[Property] = Field(default_factory=list)
    taints: list[CNRTaint] = Field(default_factory=list)


class Resources(KubeModel):
    allocatable: ResourceMap | None = None
    capacity: ResourceMap | None = None


class Allocation(KubeModel):
    consumer: str
    requests: ResourceMap | None = None


class Attribute(KubeModel):
    name: str
    value: str = ""


class TopologyZone(KubeModel):
    type: str
    name: str
    resources: Resources | None = None
    allocations: list[Allocation] = Field(default_factory=list)
    attributes: list[Attribute] = Field(default_factory=list)
    children: list[TopologyZone] = Field(default_factory=list)
    siblings: list[dict[str, Any]] = Field(default_factory=list)

    def walk(self) -> list[TopologyZone]:
        out = [self]
        for child in self.children:
            out.extend(child.walk())
        return out


class CNRResources(KubeModel):
    allocatable: ResourceMap | None = None
    capacity: ResourceMap | None = None
    resource_packages: list[dict[str, Any]] | None = None
    resource_pools: list[dict[str, Any]] | None = None


class CNRStatus(KubeModel):
    resources: CNRResources = Field(default_factory=CNRResources)
    topology_zone: list[TopologyZone] = Field(default_factory=list)
    topology_policy: str | None = None
    conditions: list[Condition] = Field(default_factory=list)
    node_metric_status: dict[str, Any] | None = None


class CustomNodeResourceModel(KubeResource):
    api_version: str = names.CUSTOM_NODE_RESOURCE.api_version
    kind: str = names.CUSTOM_NODE_RESOURCE.kind
    spec: CNRSpec = Field(default_factory=CNRSpec)
    status: CNRStatus = Field(default_factory=CNRStatus)

    def zones(self) -> list[TopologyZone]:
        out: list[TopologyZone] = []
        for zone in self.status.topology_zone:
            out.extend(zone.walk())
        return out

    def numa_zones(self) -> list[TopologyZone]:
        return [z for z in self.zones() if z.type == names.ZONE_NUMA]


def new_cnr(node_name: str, *, uid: str | None = None) -> CustomNodeResourceModel:
    """An empty CNR for a node, named after it (one CNR per node, cluster-scoped)."""
    meta = ObjectMeta(name=node_name)
    if uid is not None:
        # Owned by the node, so deleting the node deletes its CNR.
        meta.owner_references = [
            {
                "apiVersion": names.NODE.api_version,
                "kind": names.NODE.kind,
                "name": node_name,
                "uid": uid,
            }
        ]
    cnr = CustomNodeResourceModel(
        api_version=names.CUSTOM_NODE_RESOURCE.api_version,
        kind=names.CUSTOM_NODE_RESOURCE.kind,
        metadata=meta,
        spec=CNRSpec(),
        status=CNRStatus(),
    )
    return cnr


# --- CustomNodeConfig / KatalystCustomConfig --------------------------------------------


class GroupVersionResource(KubeModel):
    group: str
    version: str
    resource: str


class TargetConfig(KubeModel):
    config_type: GroupVersionResource
    config_name: str
    config_namespace: str
    hash: str = ""


class CNCStatus(KubeModel):
    katalyst_custom_config_list: list[TargetConfig] = Field(default_factory=list)
    service_profile_config_list: list[dict[str, Any]] = Field(default_factory=list)


class CustomNodeConfig(KubeResource):
    api_version: str = names.CUSTOM_NODE_CONFIG.api_version
    kind: str = names.CUSTOM_NODE_CONFIG.kind
    spec: dict[str, Any] = Field(default_factory=dict)
    status: CNCStatus = Field(default_factory=CNCStatus)


class PriorityKeyList(KubeModel):
    priority: int
    key_list: list[str]


class KCCSpec(KubeModel):
    target_type: GroupVersionResource
    disable_revision_history: bool = True
    node_label_selector_allowed_key_list: list[PriorityKeyList] = Field(default_factory=list)


class KCCStatus(KubeModel):
    observed_generation: int | None = None
    invalid_target_config_list: list[str] = Field(default_factory=list)
    conditions: list[Condition] = Field(default_factory=list)


class KatalystCustomConfig(KubeResource):
    api_version: str = names.KATALYST_CUSTOM_CONFIG.api_version
    kind: str = names.KATALYST_CUSTOM_CONFIG.kind
    spec: KCCSpec
    status: KCCStatus = Field(default_factory=KCCStatus)


# --- AdminQoSConfiguration --------------------------------------------------------------


class EphemeralSelector(KubeModel):
    node_names: list[str] = Field(default_factory=list)
    last_duration: str | None = None


class GenericConfigSpec(KubeModel):
    """The selection and rollout fields every dynamic-config target embeds."""

    node_label_selector: str | None = None
    priority: int = 0
    ephemeral_selector: EphemeralSelector | None = None
    paused: bool = False
    update_strategy: dict[str, Any] | None = None
    revision_history_limit: int | None = None


class ReclaimedResourceConfig(KubeModel):
    enable_reclaim: bool = False
    disable_reclaim_share_pools: list[str] = Field(default_factory=list)
    reserved_resource_for_report: ResourceMap = Field(
        default_factory=lambda: {"cpu": Quantity.parse("0"), "memory": Quantity.parse("0")}
    )
    min_reclaimed_resource_for_report: ResourceMap = Field(
        default_factory=lambda: {"cpu": Quantity.parse("4"), "memory": Quantity.parse("5Gi")}
    )
    min_ignored_reclaimed_resource_for_report: ResourceMap = Field(
        default_factory=lambda: {"cpu": Quantity.parse("100m"), "memory": Quantity.parse("100Mi")}
    )
    reserved_resource_for_allocate: ResourceMap = Field(
        default_factory=lambda: {"cpu": Quantity.parse("4"), "memory": Quantity.parse("5Gi")}
    )
    min_reclaimed_resource_for_allocate: ResourceMap = Field(
        default_factory=lambda: {"cpu": Quantity.parse("4"), "memory": Quantity.parse("0")}
    )
    numa_min_reclaimed_resource_ratio_for_allocate: ResourceMap | None = None
    numa_min_reclaimed_resource_for_allocate: ResourceMap = Field(
        default_factory=lambda: {"cpu": Quantity.parse("2")}
    )
    cpu_headroom_config: dict[str, Any] | None = None
    memory_headroom_config: dict[str, Any] | None = None


class CPUPressureEvictionConfig(KubeModel):
    enable_load_eviction: bool = False
    load_upper_bound_ratio: float = 1.8
    load_lower_bound_ratio: float = 1.0
    load_threshold_met_percentage: float = 0.8
    load_metric_ring_size: int = 10
    load_eviction_cool_down_time: Duration = 300.0
    enable_suppression_eviction: bool = False
    max_suppression_tolerance_rate: float = 5.0
    min_suppression_tolerance_duration: Duration = 300.0
    grace_period: int | None = Field(None, ge=0)


class MemoryPressureEvictionConfig(KubeModel):
    enable_numa_level_eviction: bool = True
    enable_system_level_eviction: bool = True
    numa_victim_minimum_utilization_threshold: float = 0.001
    numa_free_below_watermark_times_threshold: int = 12
    numa_free_below_watermark_times_reclaimed_threshold: int = 6
    system_kswapd_rate_threshold: int = 2000
    system_kswapd_rate_exceed_duration_threshold: int = 120
    enable_rss_overuse_eviction: bool = Field(False, alias="enableRSSOveruseEviction")
    rss_overuse_rate_threshold: float = 1.05
    system_free_memory_threshold_minimum: Quantity | None = None
    grace_period: int | None = Field(None, ge=0)


class ReclaimedResourcesEvictionConfig(KubeModel):
    eviction_threshold: dict[str, float] = Field(
        default_factory=lambda: {names.RECLAIMED_MILLICPU: 5.0, names.RECLAIMED_MEMORY: 5.0}
    )
    soft_eviction_threshold: dict[str, float] = Field(
        default_factory=lambda: {names.RECLAIMED_MILLICPU: 1.5, names.RECLAIMED_MEMORY: 1.2}
    )
    grace_period: int = 60
    threshold_met_tolerance_duration: int = 0


class NetworkEvictionConfig(KubeModel):
    """Katalyst's NIC health eviction (its Go field: EnableNICHealthEviction)."""

    enable_nic_network_eviction: bool = Field(False, alias="enableNICNetworkEviction")
    nic_unhealthy_tolerance_duration: Duration = Field(300.0, alias="nicUnhealthyToleranceDuration")
    grace_period: int | None = Field(None, ge=0)


class EvictionConfig(KubeModel):
    dry_run: list[str] = Field(default_factory=list)
    cpu_pressure_eviction_config: CPUPressureEvictionConfig = Field(
        default_factory=CPUPressureEvictionConfig
    )
    memory_pressure_eviction_config: MemoryPressureEvictionConfig = Field(
        default_factory=MemoryPressureEvictionConfig
    )
    reclaimed_resources_eviction_config: ReclaimedResourcesEvictionConfig = Field(
        default_factory=ReclaimedResourcesEvictionConfig
    )
    rootfs_pressure_eviction_config: dict[str, Any] | None = None
    network_eviction_config: NetworkEvictionConfig = Field(default_factory=NetworkEvictionConfig)

    @field_validator("dry_run")
    @classmethod
    def _dry_run_names(cls, value: list[str]) -> list[str]:
        for item in value:
            if not item:
                raise ValueError("dryRun entries must be plugin names or '*'")
        return value


class CPUAdvisorConfig(KubeModel):
    allow_shared_cores_overlap_reclaimed_cores: bool = False
    # Katalyst requires it whenever cpuAdvisorConfig is written.
    cpu_provision_config: dict[str, Any] = Field(default_factory=dict)


class MemoryGuardConfig(KubeModel):
    enable: bool = True
    critical_watermark_scale_factor: float = 1.0


class MemoryAdvisorConfig(KubeModel):
    memory_guard_config: MemoryGuardConfig = Field(default_factory=MemoryGuardConfig)


class AdvisorConfig(KubeModel):
    cpu_advisor_config: CPUAdvisorConfig = Field(default_factory=CPUAdvisorConfig)
    memory_advisor_config: MemoryAdvisorConfig = Field(default_factory=MemoryAdvisorConfig)


class CPUBurstConfig(KubeModel):
    """`fineGrainedResourceConfig.cpuBurstConfig`: the cpu burst a pod gets when its
    cpu_enhancement leaves the policy at `default` or names no percent."""

    default_cpu_burst_percent: int | None = Field(
        None, ge=0, le=100, alias="defaultCPUBurstPercent"
    )
    enable_dedicated_cores_default_cpu_burst: bool | None = Field(
        None, alias="enableDedicatedCoresDefaultCPUBurst"
    )
    enable_shared_cores_default_cpu_burst: bool | None = Field(
        None, alias="enableSharedCoresDefaultCPUBurst"
    )


class FineGrainedResourceConfig(KubeModel):
    cpu_burst_config: CPUBurstConfig | None = None
    cpu_weight_config: dict[str, Any] | None = None


class AdminQoSConfig(KubeModel):
    reclaimed_resource_config: ReclaimedResourceConfig = Field(
        default_factory=ReclaimedResourceConfig
    )
    qrm_plugin_config: dict[str, Any] | None = None
    eviction_config: EvictionConfig = Field(default_factory=EvictionConfig)
    advisor_config: AdvisorConfig = Field(default_factory=AdvisorConfig)
    fine_grained_resource_config: FineGrainedResourceConfig | None = None


class AdminQoSSpec(GenericConfigSpec):
    config: AdminQoSConfig = Field(default_factory=AdminQoSConfig)


class GenericConfigStatus(KubeModel):
    target_nodes: int | None = None
    canary_nodes: int | None = None
    updated_target_nodes: int | None = None
    updated_nodes: int | None = None
    current_hash: str | None = None
    collision_count: int | None = None
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)


class AdminQoSConfiguration(KubeResource):
    api_version: str = names.ADMIN_QOS_CONFIGURATION.api_version
    kind: str = names.ADMIN_QOS_CONFIGURATION.kind
    spec: AdminQoSSpec = Field(default_factory=AdminQoSSpec)
    status: GenericConfigStatus = Field(default_factory=GenericConfigStatus)


# --- NodeOvercommitConfig ---------------------------------------------------------------


class NOCSpec(KubeModel):
    node_overcommit_selector_val: str = ""
    resource_overcommit_ratio: dict[str, str] = Field(default_factory=dict)

    @field_validator("resource_overcommit_ratio")
    @classmethod
    def _ratios(cls, value: dict[str, str]) -> dict[str, str]:
        for resource, ratio in value.items():
            try:
                number = float(ratio)
            except ValueError:
                number = -1.0
            if not number >= 1.0:
                raise ValueError(
                    f"resourceOvercommitRatio[{resource}] = {ratio!r}: "
                    'accepted: a number >= 1 written as a string, e.g. "1.5"'
                )
        return value


class NOCStatus(KubeModel):
    matched_node_list: list[str] = Field(default_factory=list)


class NodeOvercommitConfig(KubeResource):
    api_version: str = names.NODE_OVERCOMMIT_CONFIG.api_version
    kind: str = names.NODE_OVERCOMMIT_CONFIG.kind
    spec: NOCSpec = Field(default_factory=NOCSpec)
    status: NOCStatus = Field(default_factory=NOCStatus)


# --- ServiceProfileDescriptor -----------------------------------------------------------


class CrossVersionObjectReference(KubeModel):
    kind: str
    name: str
    api_version: str | None = None


class Indicator(KubeModel):
    indicator_level: str
    value: float

    @field_validator("indicator_level")
    @classmethod
    def _level(cls, value: str) -> str:
        if value not in ("LowerBound", "UpperBound"):
            raise ValueError(f"{value!r}: accepted: LowerBound, UpperBound")
        return value


class IndicatorGroup(KubeModel):
    name: str
    indicators: list[Indicator] = Field(default_factory=list)


class SPDSpec(KubeModel):
    target_ref: CrossVersionObjectReference
    baseline_percent: int | None = Field(default=None, ge=0, le=100)
    business_indicator: list[IndicatorGroup] = Field(default_factory=list)
    system_indicator: list[IndicatorGroup] = Field(default_factory=list)
    extended_indicator: list[dict[str, Any]] = Field(default_factory=list)


class SPDStatus(KubeModel):
    agg_metrics: list[dict[str, Any]] = Field(default_factory=list)
    business_status: list[dict[str, Any]] = Field(default_factory=list)


class ServiceProfileDescriptor(KubeResource):
    api_version: str = names.SERVICE_PROFILE_DESCRIPTOR.api_version
    kind: str = names.SERVICE_PROFILE_DESCRIPTOR.kind
    spec: SPDSpec
    status: SPDStatus = Field(default_factory=SPDStatus)


# --- KatalystVerticalPodAutoscaler ------------------------------------------------------


class UpdatePolicy(KubeModel):
    pod_updating_strategy: str = "Off"
    pod_matching_strategy: str = "All"
    pod_apply_strategy: str = "Group"


class ContainerResourcePolicy(KubeModel):
    container_name: str | None = None
    min_allowed: ResourceMap | None = None
    max_allowed: ResourceMap | None = None
    controlled_resources: list[str] = Field(default_factory=list)
    # Katalyst's defaults, which its API server fills in when they are left out.
    controlled_values: str = "RequestsAndLimits"
    resource_resize_policy: str = "None"


class ResourcePolicy(KubeModel):
    algorithm_policy: dict[str, Any] | None = None
    container_policies: list[ContainerResourcePolicy] = Field(default_factory=list)


class KVPASpec(KubeModel):
    target_ref: CrossVersionObjectReference
    update_policy: UpdatePolicy = Field(default_factory=UpdatePolicy)
    resource_policy: ResourcePolicy = Field(default_factory=ResourcePolicy)


class KVPAStatus(KubeModel):
    pod_resources: list[dict[str, Any]] = Field(default_factory=list)
    container_resources: list[dict[str, Any]] = Field(default_factory=list)
    conditions: list[Condition] = Field(default_factory=list)


class KatalystVerticalPodAutoscaler(KubeResource):
    api_version: str = names.KATALYST_VERTICAL_POD_AUTOSCALER.api_version
    kind: str = names.KATALYST_VERTICAL_POD_AUTOSCALER.kind
    spec: KVPASpec
    status: KVPAStatus = Field(default_factory=KVPAStatus)
