"""Every Katalyst name the system speaks, spelled once, exactly as Katalyst spells it.

Nothing else in the code base writes these strings out: import them from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

# --- QoS levels -------------------------------------------------------------------------

ANNOTATION_PREFIX: Final = "katalyst.kubewharf.io/"

QOS_LEVEL_ANNOTATION: Final = "katalyst.kubewharf.io/qos_level"
# names a pod's main container (the others are its sidecars); the first container otherwise
MAIN_CONTAINER_ANNOTATION: Final = "kubernetes.io/main-container-name"

QOS_DEDICATED_CORES: Final = "dedicated_cores"
QOS_SHARED_CORES: Final = "shared_cores"
QOS_RECLAIMED_CORES: Final = "reclaimed_cores"
QOS_SYSTEM_CORES: Final = "system_cores"
QOS_LEVELS: Final = (QOS_DEDICATED_CORES, QOS_SHARED_CORES, QOS_RECLAIMED_CORES, QOS_SYSTEM_CORES)
DEFAULT_QOS_LEVEL: Final = QOS_SHARED_CORES

# --- QoS enhancements -------------------------------------------------------------------

CPU_ENHANCEMENT_ANNOTATION: Final = "katalyst.kubewharf.io/cpu_enhancement"
MEMORY_ENHANCEMENT_ANNOTATION: Final = "katalyst.kubewharf.io/memory_enhancement"
NETWORK_ENHANCEMENT_ANNOTATION: Final = "katalyst.kubewharf.io/network_enhancement"
ENHANCEMENT_ANNOTATIONS: Final = (
    CPU_ENHANCEMENT_ANNOTATION,
    MEMORY_ENHANCEMENT_ANNOTATION,
    NETWORK_ENHANCEMENT_ANNOTATION,
)
NUMA_NUMBER_ANNOTATION: Final = "katalyst.kubewharf.io/numa_number"
NUMA_IDS_ANNOTATION: Final = "katalyst.kubewharf.io/numa_ids"

# keys inside memory_enhancement
ENH_NUMA_BINDING: Final = "numa_binding"
ENH_NUMA_EXCLUSIVE: Final = "numa_exclusive"
ENH_OOM_PRIORITY: Final = "oom_priority"
ENH_RSS_OVERUSE_THRESHOLD: Final = "rss_overuse_threshold"
# keys inside cpu_enhancement
ENH_CPUSET_POOL: Final = "cpuset_pool"
ENH_NUMA_SHARE: Final = "numa_share"
ENH_SUPPRESSION_TOLERANCE_RATE: Final = "suppression_tolerance_rate"
ENH_CPU_BURST_POLICY: Final = "cpu_burst_policy"
ENH_CPU_BURST_PERCENT: Final = "cpu_burst_percent"
ENH_ALIGN_BY_SOCKET: Final = "align_by_socket"
ENH_DISTRIBUTE_EVENLY_ACROSS_NUMA: Final = "distribute_evenly_across_numa"
ENH_FULL_PCPUS_PAIRING: Final = "full_pcpus_pairing"
# keys inside network_enhancement
ENH_NAMESPACE_TYPE: Final = "namespace_type"
ENH_TOPOLOGY_AFFINITY_RESTRICTED: Final = "topology_affinity_restricted"
# the NUMA hints, by the suffix of their own (non-JSON) annotations
ENH_NUMA_NUMBER: Final = "numa_number"
ENH_NUMA_IDS: Final = "numa_ids"

CPU_BURST_POLICIES: Final = ("default", "closed", "static", "dynamic")
CPU_BURST_POLICY_CLOSED: Final = "closed"
CPU_BURST_POLICY_DEFAULT: Final = "default"
CPU_BURST_POLICY_STATIC: Final = "static"
DEFAULT_CPU_BURST_PERCENT: Final = 100  # Katalyst's, without a dynamic config
NETWORK_NAMESPACE_TYPES: Final = (
    "host_ns",
    "host_ns_preferred",
    "anti_host_ns",
    "anti_host_ns_preferred",
)

# Pod annotations written by the system
NUMA_BIND_RESULT_ANNOTATION: Final = "katalyst.kubewharf.io/numa_bind_result"
# pykatalyst's own: why those cards (one line, read by `katalyst explain pod`).
GPU_SELECTION_REASON_ANNOTATION: Final = "katalyst.kubewharf.io/gpu_selection_reason"
POD_SOFT_EVICT_NOTIFY_ANNOTATION: Final = "katalyst.kubewharf.io/pod_soft_evict_notify"
POD_EVICT_SCORE_ANNOTATION: Final = "katalyst.kubewharf.io/pod_evict_score"
# pykatalyst's own: the decision record (JSON) an Event stands for, read by `katalyst explain`.
EVENT_RECORD_ANNOTATION: Final = "katalyst.kubewharf.io/decision-record"
# Events about cluster-scoped objects (Nodes, CNRs) go here, as the kubelet's do.
EVENT_NAMESPACE_FOR_NODES: Final = "default"

# Default shared pool and the reserve/reclaim pool names of the dynamic cpu policy
POOL_SHARE: Final = "share"
POOL_RECLAIM: Final = "reclaim"
POOL_RESERVE: Final = "reserve"
POOL_DEDICATED: Final = "dedicated"
POOL_PREFIX_ISOLATION: Final = "isolation"  # isolation-<pod uid>: a noisy shared pod's pool

# --- resources --------------------------------------------------------------------------

RESOURCE_CPU: Final = "cpu"
RESOURCE_MEMORY: Final = "memory"

# --- GPUs -------------------------------------------------------------------------------

# A pod asks `nvidia.com/gpu: N` cards and `gpu_memory: M` units of their memory (M/N on
# each card); a card has `DEFAULT_GPU_MEMORY_PER_GPU` units unless configured otherwise.
RESOURCE_NVIDIA_GPU: Final = "nvidia.com/gpu"
RESOURCE_GPU_MEMORY: Final = "resource.katalyst.kubewharf.io/gpu_memory"
DEFAULT_GPU_MEMORY_PER_GPU: Final = 100
# The cards chosen for a pod: comma-separated device ids in allocation order, written by
# the scheduler before the Binding (or by the node's device plugin when it is absent).
GPU_SELECTION_RESULT_ANNOTATION: Final = "katalyst.kubewharf.io/gpu_selection_result"
# spec.nodeResourceProperties entry naming the GPU zones' topology attributes, in order
# of priority.
GPU_TOPOLOGY_ATTRIBUTE_KEY: Final = "gpu_topology_attribute_key"
# attributes of a GPU zone
GPU_ATTR_NUMA: Final = "numa"
GPU_ATTR_SOCKET: Final = "socket"
GPU_ATTR_PCIE_SWITCH: Final = "pcie_switch"
GPU_ATTR_MODEL: Final = "gpu_model"
GPU_TOPOLOGY_ATTRIBUTES: Final = (GPU_ATTR_PCIE_SWITCH, GPU_ATTR_NUMA, GPU_ATTR_SOCKET)
# what a container is told of its cards (NVIDIA's container runtime and HAMi-core read them)
ENV_NVIDIA_VISIBLE_DEVICES: Final = "NVIDIA_VISIBLE_DEVICES"
ENV_CUDA_DEVICE_MEMORY_LIMIT: Final = "CUDA_DEVICE_MEMORY_LIMIT"
# --- NICs -------------------------------------------------------------------------------

# A pod asks `net_bandwidth` Mbps of one NIC; Katalyst's network resource plugin gives out
# line rate x capacity rate (egress, ingress) less the reserve, per NIC.
RESOURCE_NET_BANDWIDTH: Final = "resource.katalyst.kubewharf.io/net_bandwidth"
DEFAULT_NIC_EGRESS_CAPACITY_RATE: Final = 0.94
DEFAULT_NIC_INGRESS_CAPACITY_RATE: Final = 0.9
# The NIC chosen for a pod: its resource identifier, `<netns>-<ifname>` or `<ifname>` in
# the host's network namespace; written by the scheduler before the Binding.
NIC_SELECTION_RESULT_ANNOTATION: Final = "katalyst.kubewharf.io/nic_selection_result"
# pykatalyst's own: why that NIC (one line, read by `katalyst explain pod`).
NIC_SELECTION_REASON_ANNOTATION: Final = "katalyst.kubewharf.io/nic_selection_reason"
# attributes of a NIC zone: Katalyst's (the annotations of its topology-aware quantities)
# and pykatalyst's own placement and rate details
NIC_ATTR_RESOURCE_IDENTIFIER: Final = "katalyst.kubewharf.io/resource_identifier"
NIC_ATTR_NETNS_NAME: Final = "katalyst.kubewharf.io/netns_name"
NIC_ATTR_NAME: Final = "nic_name"
NIC_ATTR_SPEED: Final = "speed_mbps"
NIC_ATTR_EGRESS: Final = "egress_mbps"
NIC_ATTR_INGRESS: Final = "ingress_mbps"
# --- SR-IOV virtual functions ----------------------------------------------------------
# A pod asks `sriov_nic: 1` for one RDMA-capable VF (Katalyst's SR-IOV resource plugin
# accepts exactly 1); the VF's representor name goes into `sriov_vf_result`.
RESOURCE_SRIOV_NIC: Final = "resource.katalyst.kubewharf.io/sriov_nic"
SRIOV_VF_RESULT_ANNOTATION: Final = "katalyst.kubewharf.io/sriov_vf_result"
# pykatalyst's own: why that VF (one line, like nic_selection_reason).
SRIOV_VF_REASON_ANNOTATION: Final = "katalyst.kubewharf.io/sriov_vf_reason"
# A pod asking GPUs and an SR-IOV VF together: how close the VF must sit to its cards.
# `pcie_switch` (required: the VF under a switch that holds the pod's cards), `numa`
# (a switch preferred, the same NUMA node required), `preferred` (the default: a switch,
# else a NUMA node, else anywhere on the node) or `none` (no pairing).
GPU_RDMA_AFFINITY_ANNOTATION: Final = "katalyst.kubewharf.io/gpu_rdma_affinity"
GPU_RDMA_AFFINITY_PCIE_SWITCH: Final = "pcie_switch"
GPU_RDMA_AFFINITY_NUMA: Final = "numa"
GPU_RDMA_AFFINITY_PREFERRED: Final = "preferred"
GPU_RDMA_AFFINITY_NONE: Final = "none"
GPU_RDMA_AFFINITIES: Final = (
    GPU_RDMA_AFFINITY_PCIE_SWITCH,
    GPU_RDMA_AFFINITY_NUMA,
    GPU_RDMA_AFFINITY_PREFERRED,
    GPU_RDMA_AFFINITY_NONE,
)
# Koordinator's joint allocation, read as an alias: JSON {"deviceTypes": ["gpu", "rdma"],
# "requiredScope": "SamePCIe"} (requiredScope left out: preferred).
KOORDINATOR_JOINT_ALLOCATE_ANNOTATION: Final = "scheduling.koordinator.sh/device-joint-allocate"
KOORDINATOR_SCOPE_SAME_PCIE: Final = "SamePCIe"
# the container's annotations (Katalyst's --sriov-vf-pci-annotation-key and
# --sriov-vf-netns-annotation-key defaults): JSON [{"address","repName","vfName"}] and the
# VF's network namespace path when it is not the host's
SRIOV_PCI_DEVICES_ANNOTATION: Final = "pci-devices"
SRIOV_NETNS_ANNOTATION: Final = "netns"
SRIOV_RDMA_DEVICE_DIR: Final = "/dev/infiniband"
SRIOV_RDMA_CM: Final = "/dev/infiniband/rdma_cm"
# the VF's PCI address and representor name in the container's environment (pykatalyst's)
ENV_SRIOV_VF_PCI_ADDRESS: Final = "KATALYST_SRIOV_VF_PCI_ADDRESS"
ENV_SRIOV_VF_REP_NAME: Final = "KATALYST_SRIOV_VF_REP_NAME"
# attributes of a VF zone (a NIC-typed child of its PF's NIC zone)
VF_ATTR_PF: Final = "pf_name"
VF_ATTR_INDEX: Final = "vf_index"
VF_ATTR_PCI_ADDRESS: Final = "pci_address"
VF_ATTR_NAME: Final = "vf_name"
VF_ATTR_QUEUE_COUNT: Final = "queue_count"
VF_ATTR_RDMA: Final = "rdma"
VF_ATTR_IB_DEVICES: Final = "ib_devices"
# Katalyst's dynamic policy: a dedicated_cores pod's cpu count picks the VF size (queues)
SRIOV_POLICY_STATIC: Final = "static"
SRIOV_POLICY_DYNAMIC: Final = "dynamic"
DEFAULT_SRIOV_LARGE_VF_QUEUE_COUNT: Final = 32
DEFAULT_SRIOV_LARGE_VF_CPU_THRESHOLD: Final = 24
DEFAULT_SRIOV_SMALL_VF_QUEUE_COUNT: Final = 8
DEFAULT_SRIOV_SMALL_VF_CPU_THRESHOLD: Final = 8
# network_enhancement's namespace_type values
NETNS_HOST: Final = "host_ns"
NETNS_HOST_PREFERRED: Final = "host_ns_preferred"
NETNS_ANTI_HOST: Final = "anti_host_ns"
NETNS_ANTI_HOST_PREFERRED: Final = "anti_host_ns_preferred"
RESOURCE_EPHEMERAL_STORAGE: Final = "ephemeral-storage"
RESOURCE_PODS: Final = "pods"

RESOURCE_GROUP: Final = "resource.katalyst.kubewharf.io"
RECLAIMED_MILLICPU: Final = "resource.katalyst.kubewharf.io/reclaimed_millicpu"
RECLAIMED_MEMORY: Final = "resource.katalyst.kubewharf.io/reclaimed_memory"
RECLAIMED_RESOURCES: Final = (RECLAIMED_MILLICPU, RECLAIMED_MEMORY)

# The spelling older Katalyst releases (and its example scheduler policies) still use.
LEGACY_RESOURCE_GROUP: Final = "katalyst.kubewharf.io"
LEGACY_RECLAIMED_MILLICPU: Final = "katalyst.kubewharf.io/reclaimed_millicpu"
LEGACY_RECLAIMED_MEMORY: Final = "katalyst.kubewharf.io/reclaimed_memory"
RESOURCE_ALIASES: Final = {
    LEGACY_RECLAIMED_MILLICPU: RECLAIMED_MILLICPU,
    LEGACY_RECLAIMED_MEMORY: RECLAIMED_MEMORY,
}

# --- node / CNR -------------------------------------------------------------------------

TAINT_PREFIX: Final = "node.katalyst.kubewharf.io/"
# The taint a node condition turns into: node.katalyst.kubewharf.io/<ConditionName>
CONDITION_MEMORY_PRESSURE: Final = "MemoryPressure"
CONDITION_CPU_PRESSURE: Final = "CPUPressure"
CONDITION_NUMA_MEMORY_PRESSURE: Final = "NumaMemoryPressure"
CONDITION_RECLAIMED_RESOURCE_PRESSURE: Final = "ReclaimedResourcePressure"
# CNR taints carry a qosLevel; their effect is written "<qos>/<effect>".
CNR_TAINT_EFFECT_RECLAIMED_NO_SCHEDULE: Final = "reclaimed_cores/NoSchedule"
# The key the centralized backstop puts on a CNR whose agent stopped reporting.
UNSCHEDULABLE_TAINT_KEY: Final = "node.kubernetes.io/unschedulable"

TAINT_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")

# Eviction plugins (the agent's inner plugins) and the Events an eviction raises.
EVICTION_PLUGIN_RECLAIMED_RESOURCE: Final = "reclaimed-resource-pressure-eviction-plugin"
EVICTION_PLUGIN_RECLAIMED_NUMA_RESOURCE: Final = "reclaimed-numa-resource-pressure-eviction-plugin"
EVICTION_PLUGIN_NUMA_MEMORY: Final = "numa-memory-pressure-eviction-plugin"
EVICTION_PLUGIN_SYSTEM_MEMORY: Final = "system-memory-pressure-eviction-plugin"
EVICTION_PLUGIN_CPU_LOAD: Final = "cpu-pressure-load-plugin"
EVICTION_DRY_RUN_ALL: Final = "*"
# Katalyst's network eviction plugin (bandwidth pods on a NIC zone without allocatable).
EVICTION_PLUGIN_NETWORK: Final = "network-eviction-plugin"
EVENT_REASON_EVICT_CREATED: Final = "EvictCreated"
EVENT_REASON_EVICT_SUCCEEDED: Final = "EvictSucceeded"
EVENT_REASON_EVICT_FAILED: Final = "EvictFailed"
EVENT_REASON_INVALID_OVERCOMMIT_CONFIG: Final = "InvalidOvercommitConfig"
# The agent put a dynamic config (an AdminQoSConfiguration) in force.
EVENT_REASON_CONFIG_APPLIED: Final = "ConfigApplied"
# A component skipped a stored config object it cannot read (the message says why).
EVENT_REASON_INVALID_CONFIG: Final = "InvalidConfig"
# The agent's egress class for a bandwidth pod: its request guaranteed, less than it
# (the device cannot guarantee every request), or no class (another NIC, shaping off).
EVENT_REASON_NET_BANDWIDTH_GUARANTEED: Final = "NetBandwidthGuaranteed"
EVENT_REASON_NET_BANDWIDTH_SHORT: Final = "NetBandwidthShort"
EVENT_REASON_NET_BANDWIDTH_NOT_SHAPED: Final = "NetBandwidthNotShaped"
# The `reason` label of the components' objects-skipped counters.
SKIP_REASON_UNREADABLE: Final = "unreadable"  # the object breaks its kind's schema
SKIP_REASON_INVALID: Final = "invalid"  # it reads, but a value is refused

CNR_CONDITION_AGENT_READY: Final = "AgentReady"
CNR_CONDITION_AGENT_NOT_FOUND: Final = "AgentNotFound"

# topology zones of a CNR
ZONE_SOCKET: Final = "Socket"
ZONE_NUMA: Final = "Numa"
ZONE_GPU: Final = "GPU"
ZONE_NIC: Final = "NIC"
TOPOLOGY_POLICY_SINGLE_NUMA_CONTAINER: Final = "SingleNUMANodeContainerLevel"
TOPOLOGY_POLICY_NUMERIC_CONTAINER: Final = "NumericContainerLevel"
TOPOLOGY_POLICY_NONE: Final = "None"
TOPOLOGY_POLICY_SINGLE_NUMA_POD: Final = "SingleNUMANodePodLevel"
TOPOLOGY_POLICY_RESTRICTED_CONTAINER: Final = "RestrictedContainerLevel"
TOPOLOGY_POLICY_RESTRICTED_POD: Final = "RestrictedPodLevel"
TOPOLOGY_POLICY_BEST_EFFORT_CONTAINER: Final = "BestEffortContainerLevel"
TOPOLOGY_POLICY_BEST_EFFORT_POD: Final = "BestEffortPodLevel"
TOPOLOGY_POLICY_NUMERIC_POD: Final = "NumericPodLevel"
# The kubelet's topology manager (policy, scope) as Katalyst's CNR names the pair
# (katalyst-api GenerateTopologyPolicy); any other pair is None.
TOPOLOGY_POLICIES: Final = {
    ("single-numa-node", "container"): TOPOLOGY_POLICY_SINGLE_NUMA_CONTAINER,
    ("single-numa-node", "pod"): TOPOLOGY_POLICY_SINGLE_NUMA_POD,
    ("restricted", "container"): TOPOLOGY_POLICY_RESTRICTED_CONTAINER,
    ("restricted", "pod"): TOPOLOGY_POLICY_RESTRICTED_POD,
    ("best-effort", "container"): TOPOLOGY_POLICY_BEST_EFFORT_CONTAINER,
    ("best-effort", "pod"): TOPOLOGY_POLICY_BEST_EFFORT_POD,
    ("numeric", "container"): TOPOLOGY_POLICY_NUMERIC_CONTAINER,
    ("numeric", "pod"): TOPOLOGY_POLICY_NUMERIC_POD,
}
TOPOLOGY_MANAGER_POLICIES: Final = (
    "none",
    "best-effort",
    "restricted",
    "single-numa-node",
    "numeric",
)
TOPOLOGY_MANAGER_SCOPES: Final = ("container", "pod")

# --- overcommit -------------------------------------------------------------------------

OVERCOMMIT_NODE_POOL_LABEL: Final = "katalyst.kubewharf.io/overcommit_node_pool"
CPU_OVERCOMMIT_RATIO_ANNOTATION: Final = "katalyst.kubewharf.io/cpu_overcommit_ratio"
MEMORY_OVERCOMMIT_RATIO_ANNOTATION: Final = "katalyst.kubewharf.io/memory_overcommit_ratio"
REALTIME_CPU_OVERCOMMIT_RATIO_ANNOTATION: Final = (
    "katalyst.kubewharf.io/realtime_cpu_overcommit_ratio"
)
REALTIME_MEMORY_OVERCOMMIT_RATIO_ANNOTATION: Final = (
    "katalyst.kubewharf.io/realtime_memory_overcommit_ratio"
)
ORIGINAL_CAPACITY_CPU_ANNOTATION: Final = "katalyst.kubewharf.io/original_capacity_cpu"
ORIGINAL_CAPACITY_MEMORY_ANNOTATION: Final = "katalyst.kubewharf.io/original_capacity_memory"
ORIGINAL_ALLOCATABLE_CPU_ANNOTATION: Final = "katalyst.kubewharf.io/original_allocatable_cpu"
ORIGINAL_ALLOCATABLE_MEMORY_ANNOTATION: Final = "katalyst.kubewharf.io/original_allocatable_memory"
OVERCOMMIT_CAPACITY_CPU_ANNOTATION: Final = "katalyst.kubewharf.io/overcommit_capacity_cpu"
OVERCOMMIT_CAPACITY_MEMORY_ANNOTATION: Final = "katalyst.kubewharf.io/overcommit_capacity_memory"
OVERCOMMIT_ALLOCATABLE_CPU_ANNOTATION: Final = "katalyst.kubewharf.io/overcommit_allocatable_cpu"
OVERCOMMIT_ALLOCATABLE_MEMORY_ANNOTATION: Final = (
    "katalyst.kubewharf.io/overcommit_allocatable_memory"
)
CNR_GUARANTEED_CPUS_ANNOTATION: Final = "katalyst.kubewharf.io/guaranteed_cpus"
CNR_OVERCOMMIT_CPU_MANAGER_ANNOTATION: Final = "katalyst.kubewharf.io/overcommit_cpu_manager"
CNR_OVERCOMMIT_MEMORY_MANAGER_ANNOTATION: Final = "katalyst.kubewharf.io/overcommit_memory_manager"

# --- workload / VPA / SPD ---------------------------------------------------------------

SPD_NAME_ANNOTATION: Final = "spd.katalyst.kubewharf.io/name"
# A Deployment or StatefulSet annotated enable="true" gets an SPD of its own.
SPD_ENABLE_ANNOTATION: Final = "spd.katalyst.kubewharf.io/enable"
# The SPD controller's baseline sentinels (JSON {"timeStamp","podName"}; per extended
# indicator a JSON map name -> sentinel): pods at or before the sentinel are baseline.
SPD_BASELINE_SENTINEL_ANNOTATION: Final = "spd.katalyst.kubewharf.io/baselineSentinel"
SPD_EXTENDED_BASELINE_SENTINEL_ANNOTATION: Final = (
    "spd.katalyst.kubewharf.io/extendedBaselineSentinel"
)
# The status.aggMetrics scope of the resource-portrait indicator (Katalyst's plugin name).
SPD_SCOPE_RESOURCE_PORTRAIT: Final = "ResourcePortraitIndicatorPlugin"
SPD_ENABLED: Final = "true"
VPA_ENABLE_ANNOTATION: Final = "vpa.katalyst.kubewharf.io/enable"
VPA_ENABLE_ANNOTATION_VALUE: Final = "true"
# On a workload: the KVPA that targets it (kept by the vpa controller) and, for workloads
# that are not Deployments/StatefulSets/ReplicaSets, the selector of its pods.
VPA_NAME_ANNOTATION: Final = "vpa.katalyst.kubewharf.io/name"
VPA_SELECTOR_ANNOTATION: Final = "vpa.katalyst.kubewharf.io/selector"
# On a KVPA: its VerticalPodAutoscalerRecommendation, and whether it is deleted with its
# workload (`retain`: an ownerReference to the workload).
VPA_REC_NAME_ANNOTATION: Final = "vpa.katalyst.kubewharf.io/recName"
VPA_RETENTION_POLICY_ANNOTATION: Final = "vpa.katalyst.kubewharf.io/retentionPolicy"
VPA_RETENTION_POLICY_RETAIN: Final = "retain"
VPA_RETENTION_POLICY_DELETE: Final = "delete"
# On a pod: the resources a KVPA wants (JSON container -> requests/limits), the containers
# to restart on resize (JSON container -> "Restart"), and a resize under way.
POD_RESIZE_RESOURCES_ANNOTATION: Final = "pod.kubernetes.io/resizeResources"
POD_RESIZE_POLICY_ANNOTATION: Final = "pod.kubernetes.io/resizePolicy"
POD_INPLACE_UPDATE_RESIZING_ANNOTATION: Final = "pod.kubernetes.io/inplace-update-resizing"

# --- CRDs -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Kind:
    """A Kubernetes kind with where it lives in the API."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


NODE_GROUP: Final = "node.katalyst.kubewharf.io"
CONFIG_GROUP: Final = "config.katalyst.kubewharf.io"
OVERCOMMIT_GROUP: Final = "overcommit.katalyst.kubewharf.io"
WORKLOAD_GROUP: Final = "workload.katalyst.kubewharf.io"
AUTOSCALING_GROUP: Final = "autoscaling.katalyst.kubewharf.io"
RECOMMENDATION_GROUP: Final = "recommendation.katalyst.kubewharf.io"
TIDE_GROUP: Final = "tide.katalyst.kubewharf.io"

CUSTOM_NODE_RESOURCE: Final = Kind(
    NODE_GROUP, "v1alpha1", "CustomNodeResource", "customnoderesources", False, ("kcnr",)
)
CUSTOM_NODE_CONFIG: Final = Kind(
    CONFIG_GROUP, "v1alpha1", "CustomNodeConfig", "customnodeconfigs", False, ("cnc", "kcnc")
)
KATALYST_CUSTOM_CONFIG: Final = Kind(
    CONFIG_GROUP, "v1alpha1", "KatalystCustomConfig", "katalystcustomconfigs", True, ("kcc",)
)
ADMIN_QOS_CONFIGURATION: Final = Kind(
    CONFIG_GROUP, "v1alpha1", "AdminQoSConfiguration", "adminqosconfigurations", True, ("aqc",)
)
NODE_OVERCOMMIT_CONFIG: Final = Kind(
    OVERCOMMIT_GROUP, "v1alpha1", "NodeOvercommitConfig", "nodeovercommitconfigs", False, ("noc",)
)
SERVICE_PROFILE_DESCRIPTOR: Final = Kind(
    WORKLOAD_GROUP,
    "v1alpha1",
    "ServiceProfileDescriptor",
    "serviceprofiledescriptors",
    True,
    ("spd",),
)
KATALYST_VERTICAL_POD_AUTOSCALER: Final = Kind(
    AUTOSCALING_GROUP,
    "v1alpha1",
    "KatalystVerticalPodAutoscaler",
    "katalystverticalpodautoscalers",
    True,
    ("kvpa",),
)
# Katalyst's other kinds: served and stored (their CRDs are installed) so that a Katalyst
# cluster's objects survive, though no pykatalyst component acts on them.
INTELLIGENT_HPA: Final = Kind(
    AUTOSCALING_GROUP,
    "v1alpha2",
    "IntelligentHorizontalPodAutoscaler",
    "intelligenthorizontalpodautoscalers",
    True,
    ("ihpa",),
)
VPA_RECOMMENDATION: Final = Kind(
    AUTOSCALING_GROUP,
    "v1alpha1",
    "VerticalPodAutoscalerRecommendation",
    "verticalpodautoscalerrecommendations",
    True,
    ("vparec",),
)
VIRTUAL_WORKLOAD: Final = Kind(
    AUTOSCALING_GROUP, "v1alpha2", "VirtualWorkload", "virtualworkloads", True
)
AUTH_CONFIGURATION: Final = Kind(
    CONFIG_GROUP, "v1alpha1", "AuthConfiguration", "authconfigurations", True, ("ac",)
)
IRQ_TUNING_CONFIGURATION: Final = Kind(
    CONFIG_GROUP, "v1alpha1", "IRQTuningConfiguration", "irqtuningconfigurations", True, ("irqtc",)
)
MEMORY_BANDWIDTH_CONFIGURATION: Final = Kind(
    CONFIG_GROUP,
    "v1alpha1",
    "MemoryBandwidthConfiguration",
    "memorybandwidthconfigurations",
    True,
    ("mbc",),
)
POWER_MANAGEMENT_CONFIGURATION: Final = Kind(
    CONFIG_GROUP,
    "v1alpha1",
    "PowerManagementConfiguration",
    "powermanagementconfigurations",
    True,
    ("pmc",),
)
STRATEGY_GROUP_CONFIGURATION: Final = Kind(
    CONFIG_GROUP,
    "v1alpha1",
    "StrategyGroupConfiguration",
    "strategygroupconfigurations",
    False,
    ("sgc",),
)
STRATEGY_GROUP: Final = Kind(
    CONFIG_GROUP, "v1alpha1", "StrategyGroup", "strategygroups", False, ("sg",)
)
TMO_CONFIGURATION: Final = Kind(
    CONFIG_GROUP,
    "v1alpha1",
    "TransparentMemoryOffloadingConfiguration",
    "transparentmemoryoffloadingconfigurations",
    True,
    ("tmo",),
)
NODE_PROFILE_DESCRIPTOR: Final = Kind(
    NODE_GROUP, "v1alpha1", "NodeProfileDescriptor", "nodeprofiledescriptors", False, ("npd",)
)
RESOURCE_RECOMMEND: Final = Kind(
    RECOMMENDATION_GROUP, "v1alpha1", "ResourceRecommend", "resourcerecommends", True, ("rec",)
)
TIDE_NODE_POOL: Final = Kind(
    TIDE_GROUP, "v1alpha1", "TideNodePool", "tidenodepools", False, ("tnp",)
)
# A KatalystCustomConfig target kind of Katalyst's (config.katalyst.kubewharf.io) with no
# CRD of its own in katalyst-api: only its kind name is needed here.
EVICTION_CONFIGURATION_KIND: Final = "EvictionConfiguration"
KATALYST_KINDS: Final = (
    CUSTOM_NODE_RESOURCE,
    CUSTOM_NODE_CONFIG,
    KATALYST_CUSTOM_CONFIG,
    ADMIN_QOS_CONFIGURATION,
    NODE_OVERCOMMIT_CONFIG,
    SERVICE_PROFILE_DESCRIPTOR,
    KATALYST_VERTICAL_POD_AUTOSCALER,
    INTELLIGENT_HPA,
    VPA_RECOMMENDATION,
    VIRTUAL_WORKLOAD,
    AUTH_CONFIGURATION,
    IRQ_TUNING_CONFIGURATION,
    MEMORY_BANDWIDTH_CONFIGURATION,
    POWER_MANAGEMENT_CONFIGURATION,
    STRATEGY_GROUP_CONFIGURATION,
    STRATEGY_GROUP,
    TMO_CONFIGURATION,
    NODE_PROFILE_DESCRIPTOR,
    RESOURCE_RECOMMEND,
    TIDE_NODE_POOL,
)

# Dynamic Resource Allocation (resource.k8s.io/v1, GA in Kubernetes 1.34): the kinds, the
# driver name under which the agent publishes the node's GPUs, NICs and RDMA VFs, and the
# DeviceClass of each (docs/devices.md "DRA").
DRA_GROUP: Final = "resource.k8s.io"
RESOURCE_SLICE: Final = Kind(DRA_GROUP, "v1", "ResourceSlice", "resourceslices", False)
DEVICE_CLASS: Final = Kind(DRA_GROUP, "v1", "DeviceClass", "deviceclasses", False)
RESOURCE_CLAIM: Final = Kind(DRA_GROUP, "v1", "ResourceClaim", "resourceclaims", True)
RESOURCE_CLAIM_TEMPLATE: Final = Kind(
    DRA_GROUP, "v1", "ResourceClaimTemplate", "resourceclaimtemplates", True
)
DRA_KINDS: Final = (RESOURCE_SLICE, DEVICE_CLASS, RESOURCE_CLAIM, RESOURCE_CLAIM_TEMPLATE)
DRA_DRIVER: Final = "dra.katalyst.kubewharf.io"
DRA_CLASS_GPU: Final = "gpu.katalyst.kubewharf.io"
DRA_CLASS_NIC: Final = "nic.katalyst.kubewharf.io"
DRA_CLASS_RDMA_VF: Final = "rdma-vf.katalyst.kubewharf.io"
# Kubernetes' standard attribute: the PCIe root complex, `pci<domain>:<bus>`.
DRA_ATTR_PCIE_ROOT: Final = "resource.kubernetes.io/pcieRoot"

# Core Kubernetes kinds the system reads and writes.
POD: Final = Kind("", "v1", "Pod", "pods", True, ("po",))
NODE: Final = Kind("", "v1", "Node", "nodes", False, ("no",))
EVENT: Final = Kind("", "v1", "Event", "events", True, ("ev",))
NAMESPACE: Final = Kind("", "v1", "Namespace", "namespaces", False, ("ns",))
CONFIG_MAP: Final = Kind("", "v1", "ConfigMap", "configmaps", True, ("cm",))
LEASE: Final = Kind("coordination.k8s.io", "v1", "Lease", "leases", True)
# Asked, never stored: may this user do that? (delegated authorization of the metrics API)
SUBJECT_ACCESS_REVIEW: Final = Kind(
    "authorization.k8s.io", "v1", "SubjectAccessReview", "subjectaccessreviews", False
)
POD_DISRUPTION_BUDGET: Final = Kind(
    "policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", True, ("pdb",)
)
CRD: Final = Kind(
    "apiextensions.k8s.io",
    "v1",
    "CustomResourceDefinition",
    "customresourcedefinitions",
    False,
    ("crd", "crds"),
)
DEPLOYMENT: Final = Kind("apps", "v1", "Deployment", "deployments", True, ("deploy",))
STATEFUL_SET: Final = Kind("apps", "v1", "StatefulSet", "statefulsets", True, ("sts",))
REPLICA_SET: Final = Kind("apps", "v1", "ReplicaSet", "replicasets", True, ("rs",))
CORE_KINDS: Final = (POD, NODE, EVENT, NAMESPACE, CONFIG_MAP, LEASE, CRD)
# Workload and autoscaling kinds (apps/v1, autoscaling/v2) the IHPA controller reads and writes.
HORIZONTAL_POD_AUTOSCALER: Final = Kind(
    "autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", True, ("hpa",)
)
WORKLOAD_KINDS: Final = (DEPLOYMENT, STATEFUL_SET)
# Namespaces every Kubernetes cluster has. Events about cluster-scoped objects (Nodes) are
# written to DEFAULT_NAMESPACE, as the kubelet does.
DEFAULT_NAMESPACE: Final = "default"
KUBE_SYSTEM_NAMESPACE: Final = "kube-system"

# --- scheduler --------------------------------------------------------------------------

PLUGIN_QOS_AWARE_NODE_RESOURCES_FIT: Final = "QoSAwareNodeResourcesFit"
PLUGIN_QOS_AWARE_NODE_RESOURCES_BALANCED_ALLOCATION: Final = (
    "QoSAwareNodeResourcesBalancedAllocation"
)
PLUGIN_NODE_RESOURCE_TOPOLOGY: Final = "NodeResourceTopology"
PLUGIN_NODE_OVERCOMMITMENT: Final = "NodeOvercommitment"
# pykatalyst's device-aware plugin: shared and whole GPUs placed per card
PLUGIN_GPU_SHARE: Final = "GPUShare"
# pykatalyst's own: net_bandwidth placed NIC by NIC (docs/scheduler.md "NICs").
PLUGIN_NIC_BANDWIDTH: Final = "NICBandwidth"
# pykatalyst's own: one SR-IOV VF per pod asking sriov_nic (docs/scheduler.md "SR-IOV").
PLUGIN_SRIOV_VF: Final = "SriovVF"
DEFAULT_SCHEDULER_NAME: Final = "katalyst-scheduler"

# --- agent ------------------------------------------------------------------------------

AGENT_COMPONENT: Final = "katalyst-agent"
SCHEDULER_COMPONENT: Final = "katalyst-scheduler"
CONTROLLER_COMPONENT: Final = "katalyst-controller"
WEBHOOK_COMPONENT: Final = "katalyst-webhook"
# The namespace of the system's own objects (Deployments, Leases, ConfigMaps).
SYSTEM_NAMESPACE: Final = "katalyst-system"
# The Lease replicas of the controller elect their leader with (in SYSTEM_NAMESPACE).
CONTROLLER_LEASE_NAME: Final = "katalyst-controller"
# The Lease replicas of the scheduler elect their leader with (in SYSTEM_NAMESPACE).
SCHEDULER_LEASE_NAME: Final = "katalyst-scheduler"
# The agent explains each published reclaimed figure in this CNR annotation (JSON terms).
RECLAIMED_TERMS_ANNOTATION: Final = "katalyst.kubewharf.io/reclaimed_terms"
# The agent's cpu pools and where each pod runs (JSON): what `katalyst explain` reads back.
CPU_POOLS_ANNOTATION: Final = "katalyst.kubewharf.io/cpu_pools"
# On an AdminQoSConfiguration: the provision policy of the share pools of the nodes it
# configures (`canonical` or `rama`); Katalyst's schema has no field for it.
CPU_PROVISION_POLICY_ANNOTATION: Final = "katalyst.kubewharf.io/cpu_provision_policy"

# --- controllers ------------------------------------------------------------------------

# The controllers `katalyst controller --controllers` switches by name (Katalyst's names
# where Katalyst has the controller).
CONTROLLER_OVERCOMMIT: Final = "overcommit"
CONTROLLER_KCC: Final = "kcc"
CONTROLLER_LIFECYCLE: Final = "lifecycle"
CONTROLLER_BACKSTOP: Final = "backstop"
CONTROLLER_SPD: Final = "spd"
CONTROLLER_RESOURCE_RECOMMEND: Final = "resourcerecommender"
# ResourceRecommend status: its condition types, and where Katalyst's OOM recorder keeps its
# records (ConfigMap kube-system/oom-record, key oom-data: a JSON list).
RR_CONDITION_VALIDATED: Final = "Validated"
RR_CONDITION_INITIALIZED: Final = "Initialized"
RR_CONDITION_RECOMMENDATION_PROVIDED: Final = "RecommendationProvided"
# On a ResourceRecommend: the terms behind its last recommendation per container (JSON:
# percentile, half-life, margin, samples and span, estimate, OOM bump), which Katalyst's
# status has no field for; `katalyst explain pod` reads them.
RECOMMENDATION_TERMS_ANNOTATION: Final = "katalyst.kubewharf.io/recommendation_terms"
OOM_RECORD_CONFIG_MAP: Final = "oom-record"
OOM_RECORD_KEY: Final = "oom-data"
# Katalyst's `vpa` controller: its in-tree recommender (SPD -> VPARec), vparec (VPARec ->
# KVPA status) and vpa (KVPA -> pods: annotations, in-place resize, fallback eviction).
CONTROLLER_VPA: Final = "vpa"
CONTROLLER_IHPA: Final = "ihpa"
# The condition types and reasons the dynamic-config controller writes on KCCs and targets.
KCC_CONDITION_VALID: Final = "Valid"
KCC_CONDITION_CONFLICT: Final = "Conflict"
KCC_REASON_NORMAL: Final = "Normal"
KCC_REASON_VALIDATE_FAILED: Final = "ValidateFailed"
KCC_REASON_MATCH_MORE_OR_LESS: Final = "MatchMoreOrLessThanOneKCC"
KCC_REASON_CANARY_FAILED: Final = "CalculateCanaryCutoffFailed"
KCC_REASON_SAME_PRIORITY: Final = "SamePriorityConfigMatched"
# Where a KCC's target config types may live (Katalyst's --kcc-valid-api-group-set default).
KCC_VALID_API_GROUPS: Final = (CONFIG_GROUP,)
# The managed node annotations of the overcommit controller, all removed when no
# NodeOvercommitConfig selects the node.
OVERCOMMIT_MANAGED_ANNOTATIONS: Final = (
    CPU_OVERCOMMIT_RATIO_ANNOTATION,
    MEMORY_OVERCOMMIT_RATIO_ANNOTATION,
    REALTIME_CPU_OVERCOMMIT_RATIO_ANNOTATION,
    REALTIME_MEMORY_OVERCOMMIT_RATIO_ANNOTATION,
    OVERCOMMIT_ALLOCATABLE_CPU_ANNOTATION,
    OVERCOMMIT_CAPACITY_CPU_ANNOTATION,
    OVERCOMMIT_ALLOCATABLE_MEMORY_ANNOTATION,
    OVERCOMMIT_CAPACITY_MEMORY_ANNOTATION,
)
CPU_MANAGER_POLICY_STATIC: Final = "static"

# --- horizontal autoscaling (IHPA, resource portrait, external metrics) -----------------

# The HPA an IHPA owns is named IHPA_HPA_PREFIX + the IHPA's name.
IHPA_HPA_PREFIX: Final = "ihpa-"
# The External metric the custom-metrics server serves from SPD status.aggMetrics.
SPD_AGG_METRICS: Final = "spd_agg_metrics"
METRIC_SELECTOR_SPD_NAME: Final = "metric.katalyst.kubewharf.io/spd-name"
METRIC_SELECTOR_SPD_RESOURCE_NAME: Final = "metric.katalyst.kubewharf.io/spd-resource-name"
METRIC_SELECTOR_SPD_CONTAINER_NAME: Final = "metric.katalyst.kubewharf.io/spd-container-name"
METRIC_SELECTOR_SPD_SCOPE_NAME: Final = "metric.katalyst.kubewharf.io/spd-scope-name"
# The SPD extended indicator the IHPA configures, the aggMetrics scope its predictions are
# written under, and the fake container that carries them (<source>-<method>).
RESOURCE_PORTRAIT_INDICATOR: Final = "ResourcePortrait"
RESOURCE_PORTRAIT_SCOPE: Final = "ResourcePortraitIndicatorPlugin"
RESOURCE_PORTRAIT_SOURCE_IHPA: Final = "ihpa"
RESOURCE_PORTRAIT_METHOD_PREDICT: Final = "predict"
IHPA_PREDICT_CONTAINER: Final = "ihpa-predict"
# The prediction service's path (Katalyst's algorithm-serving contract).
PREDICT_PATH: Final = "/openapi/tsa/predict"
PERIODICITY_PREFIX: Final = "periodicity-"
EXTERNAL_METRICS_GROUP: Final = "external.metrics.k8s.io"
EXTERNAL_METRICS_VERSION: Final = "v1beta1"
# On the HPA an IHPA owns: a digest of the spec last written, so an unchanged IHPA costs no
# write (the API server's defaulting makes the stored spec differ from the written one).
IHPA_SPEC_HASH_ANNOTATION: Final = "autoscaling.katalyst.kubewharf.io/ihpa-spec-hash"
