"""The args of the scheduler plugins: one pydantic model per plugin that takes args,
validated and defaulted the way kube-scheduler and Katalyst do (`default_args` fills what
kube's SetDefaults fills after decoding).

The plugins import their args from here and the configuration loader validates a profile's
`pluginConfig` against them; neither imports the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pykatalyst.api import names
from pykatalyst.api.digest import canonical_resource
from pykatalyst.scheduler import registry as reg
from pykatalyst.topology.vf import VfPolicy


class StrictModel(BaseModel):
    # kube-scheduler decodes its configuration strictly: an unknown field is an error.
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ResourceSpec(StrictModel):
    name: str
    weight: int = 1

    @field_validator("name")
    @classmethod
    def _alias(cls, value: str) -> str:
        if not value:
            raise ValueError("a resource name is required")
        return canonical_resource(value)

    @field_validator("weight")
    @classmethod
    def _weight(cls, value: int) -> int:
        # kube defaults a zero weight to 1 and accepts 1..100.
        if value == 0:
            return 1
        if not 1 <= value <= 100:
            raise ValueError(f"weight {value} is not in the valid range [1, 100]")
        return value


class UtilizationShapePoint(StrictModel):
    utilization: int
    score: int


class RequestedToCapacityRatioParam(StrictModel):
    shape: list[UtilizationShapePoint] = Field(default_factory=list)
    # Deprecated upstream in favour of scoringStrategy.resources, still accepted.
    resources: list[ResourceSpec] | None = None

    @field_validator("shape")
    @classmethod
    def _shape(cls, shape: list[UtilizationShapePoint]) -> list[UtilizationShapePoint]:
        if not shape:
            raise ValueError("at least one point must be specified")
        for i, point in enumerate(shape):
            if not 0 <= point.utilization <= 100:
                raise ValueError(
                    f"shape[{i}].utilization {point.utilization} is not in the valid range [0, 100]"
                )
            if not 0 <= point.score <= reg.MAX_CUSTOM_PRIORITY_SCORE:
                raise ValueError(
                    f"shape[{i}].score {point.score} is not in the valid range "
                    f"[0, {reg.MAX_CUSTOM_PRIORITY_SCORE}]"
                )
            if i and point.utilization <= shape[i - 1].utilization:
                raise ValueError(
                    f"shape[{i}].utilization {point.utilization}: utilization values must be "
                    "sorted in strictly increasing order"
                )
        return shape


StrategyType = Literal["LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"]

DEFAULT_RESOURCES: Final = (names.RESOURCE_CPU, names.RESOURCE_MEMORY)
DEFAULT_RECLAIMED_RESOURCES: Final = names.RECLAIMED_RESOURCES


def _default_specs(names_: Sequence[str]) -> list[ResourceSpec]:
    return [ResourceSpec(name=n, weight=1) for n in names_]


class ScoringStrategy(StrictModel):
    type: StrategyType = "LeastAllocated"
    resources: list[ResourceSpec] = Field(default_factory=list)
    requestedToCapacityRatio: RequestedToCapacityRatioParam | None = None

    def defaulted(self) -> None:
        if not self.resources:
            self.resources = _default_specs(DEFAULT_RESOURCES)


class QoSScoringStrategy(ScoringStrategy):
    reclaimedResources: list[ResourceSpec] = Field(default_factory=list)
    reclaimedRequestedToCapacityRatio: RequestedToCapacityRatioParam | None = None

    def defaulted(self) -> None:
        ScoringStrategy.defaulted(self)
        if not self.reclaimedResources:
            self.reclaimedResources = _default_specs(DEFAULT_RECLAIMED_RESOURCES)


class NodeResourcesFitArgs(StrictModel):
    ignoredResources: list[str] = Field(default_factory=list)
    ignoredResourceGroups: list[str] = Field(default_factory=list)
    scoringStrategy: ScoringStrategy = Field(default_factory=ScoringStrategy)

    @field_validator("ignoredResourceGroups")
    @classmethod
    def _groups(cls, groups: list[str]) -> list[str]:
        for g in groups:
            if not g or "/" in g:
                raise ValueError(f"{g!r} is not a resource group name (no '/' allowed)")
        return groups

    def ignored_groups(self) -> frozenset[str]:
        """The groups the native fit skips. The legacy Katalyst group stands for the current
        one too, so Katalyst's example policies keep ignoring the reclaimed resources after
        their rename."""
        out = set(self.ignoredResourceGroups)
        if names.LEGACY_RESOURCE_GROUP in out:
            out.add(names.RESOURCE_GROUP)
        return frozenset(out)


class NodeResourcesBalancedAllocationArgs(StrictModel):
    resources: list[ResourceSpec] = Field(default_factory=lambda: _default_specs(DEFAULT_RESOURCES))


class QoSAwareNodeResourcesFitArgs(StrictModel):
    scoringStrategy: QoSScoringStrategy = Field(default_factory=QoSScoringStrategy)


class QoSAwareNodeResourcesBalancedAllocationArgs(StrictModel):
    resources: list[ResourceSpec] = Field(default_factory=lambda: _default_specs(DEFAULT_RESOURCES))
    reclaimedResources: list[ResourceSpec] = Field(
        default_factory=lambda: _default_specs(DEFAULT_RECLAIMED_RESOURCES)
    )


NUMAStrategyType = Literal["LeastAllocated", "MostAllocated", "BalancedAllocation"]


class NUMAScoringStrategy(StrictModel):
    type: NUMAStrategyType = "LeastAllocated"
    resources: list[ResourceSpec] = Field(default_factory=list)


class NodeResourceTopologyArgs(StrictModel):
    scoringStrategy: NUMAScoringStrategy = Field(default_factory=NUMAScoringStrategy)
    alignedResources: list[str] = Field(default_factory=lambda: list(DEFAULT_RESOURCES))
    resourcePluginPolicy: Literal["dynamic", "native"] = "dynamic"
    # pykatalyst's own: which zones Reserve charges a pod to until the CNR lists it —
    # "All" (Katalyst's: every zone of the node) or "Chosen" (the zones it picked)
    reservedZones: Literal["All", "Chosen"] = "All"

    @field_validator("alignedResources")
    @classmethod
    def _aligned(cls, value: list[str]) -> list[str]:
        bad = [v for v in value if v not in DEFAULT_RESOURCES]
        if bad:
            raise ValueError(f"{bad[0]!r} cannot be NUMA-aligned; accepted: cpu, memory")
        return value


GPUPolicy = Literal[
    "katalyst",
    "binpack",
    "spread",
    "fgd",
    "random",
    "bestfit",
    "dotproduct",
    "packing",
    "clustering",
]
GPUCardPolicy = Literal["", "katalyst", "binpack", "spread", "fgd", "random"]


class GPUShareArgs(StrictModel):
    """How GPUShare places GPU pods (docs/scheduler.md, "GPUs"): `policy` scores the nodes
    and picks the cards; `cardPolicy` overrides how the cards inside the chosen node are
    picked (HAMi's default is policy binpack with cardPolicy spread)."""

    policy: GPUPolicy = "katalyst"
    cardPolicy: GPUCardPolicy = ""
    # the node label (and, where the CNR's cards carry none, the model) a pod's model
    # constraint names, as nodeSelector or a required node-affinity `In` term
    modelLabel: str = "nvidia.com/gpu.product"
    # fgd: the task mix is learned from the last `taskMixWindow` pods seen, keeping the
    # most popular classes that make up `taskMixCoverage` percent of them
    taskMixWindow: int = Field(default=2000, ge=1, le=1_000_000)
    taskMixCoverage: int = Field(default=95, ge=1, le=100)
    # fgd: among nodes where fragmentation grows alike, take the one with the least cpu and
    # GPU left (`bestfit`), or draw one at random (`random`, the paper's plain rule)
    fgdTieBreak: Literal["bestfit", "random"] = "bestfit"
    # fgd: the host resources a task class must find free to fit a node (the paper: cpu)
    fgdHostResources: Literal["cpu", "cpu-memory"] = "cpu-memory"
    # a pod asking GPUs and an SR-IOV VF: rank the nodes by the closest GPU-VF pair they
    # offer (one PCIe switch, then one NUMA node) before the policy's score
    rdmaPairScoring: bool = True
    seed: int = 0


class SriovVFArgs(StrictModel):
    """How SriovVF gives out SR-IOV VFs (docs/scheduler.md "SR-IOV VFs"): the agent's
    `devices.nic.sriov` policy, which the scheduler must share to pick the VF the agent's
    device plugin would (Katalyst's --sriov-policy-name and dynamic sizes)."""

    policy: Literal["static", "dynamic"] = "static"
    largeVFQueueCount: int = Field(default=names.DEFAULT_SRIOV_LARGE_VF_QUEUE_COUNT, ge=1)
    largeVFCPUThreshold: int = Field(default=names.DEFAULT_SRIOV_LARGE_VF_CPU_THRESHOLD, ge=1)
    largeVFFailOnExhaustion: bool = True
    smallVFQueueCount: int = Field(default=names.DEFAULT_SRIOV_SMALL_VF_QUEUE_COUNT, ge=1)
    smallVFCPUThreshold: int = Field(default=names.DEFAULT_SRIOV_SMALL_VF_CPU_THRESHOLD, ge=1)
    smallVFFailOnExhaustion: bool = False
    podRequiredAnnotations: dict[str, str] = Field(default_factory=dict)

    def vf_policy(self) -> VfPolicy:
        return VfPolicy(
            self.policy,
            self.largeVFQueueCount,
            self.largeVFCPUThreshold,
            self.largeVFFailOnExhaustion,
            self.smallVFQueueCount,
            self.smallVFCPUThreshold,
            self.smallVFFailOnExhaustion,
            tuple(sorted(self.podRequiredAnnotations.items())),
        )


class TopologySpreadConstraintModel(BaseModel):
    model_config = ConfigDict(extra="allow")
    maxSkew: int = 1
    topologyKey: str
    whenUnsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"]


class PodTopologySpreadArgs(StrictModel):
    defaultConstraints: list[TopologySpreadConstraintModel] = Field(default_factory=list)
    defaultingType: Literal["System", "List"] = "System"


class NodeAffinityArgs(StrictModel):
    addedAffinity: dict[str, Any] | None = None


class DefaultPreemptionArgs(StrictModel):
    minCandidateNodesPercentage: int = 10
    minCandidateNodesAbsolute: int = 100


class InterPodAffinityArgs(StrictModel):
    hardPodAffinityWeight: int = 1
    ignorePreferredTermsOfExistingPods: bool = False


class VolumeBindingArgs(BaseModel):
    model_config = ConfigDict(extra="allow")
    bindTimeoutSeconds: int = 600


class OpaqueArgs(BaseModel):
    """Args of a plugin that has no typed args here; kept as written."""

    model_config = ConfigDict(extra="allow")


def default_args(model: BaseModel) -> None:
    strategy = getattr(model, "scoringStrategy", None)
    if isinstance(strategy, ScoringStrategy):
        strategy.defaulted()
        rtcr = strategy.type == "RequestedToCapacityRatio"
        if rtcr and strategy.requestedToCapacityRatio is None:
            raise ValueError(
                "scoringStrategy.requestedToCapacityRatio: required when type is "
                "RequestedToCapacityRatio"
            )
    if (
        isinstance(strategy, QoSScoringStrategy)
        and strategy.type == "RequestedToCapacityRatio"
        and strategy.reclaimedRequestedToCapacityRatio is None
    ):
        # Katalyst falls back to the native shape for reclaimed resources.
        strategy.reclaimedRequestedToCapacityRatio = strategy.requestedToCapacityRatio
    if isinstance(strategy, NUMAScoringStrategy) and not strategy.resources:
        strategy.resources = _default_specs(DEFAULT_RESOURCES)
