"""What pykatalyst does with each of Katalyst's features: the one list.

Every Katalyst feature a user can configure (a CRD kind, a pod enhancement, a resource name)
has one `Feature` here, with the component that acts on it (`by`) or the reason nothing
does yet (`note`). A component that starts acting on a feature flips its entry: status,
`by`, note. Everything that tells a user what works reads this list:

- `katalyst validate` warns about objects of kinds, pod enhancements and resources whose
  feature is not acted on (errors under `--strict`), with the entry's note;
- `config_fields` explains config fields by it;
- the README's table is `markdown_table()` (`python -m pykatalyst.api.support` prints it,
  and a test compares the two).

`tests/api/test_support_matches_code.py` holds the list to the code: every kind, enhancement
and resource a row gives is defined in `api/names.py`, every enhancement and Katalyst
resource name there has a row, a row that is acted on is read by a component its `by`
names, and one that is not is read by none.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import cache

from pykatalyst.api import names


class Status(StrEnum):
    WORKS = "works"
    PARTIAL = "partly"
    NOT_YET = "not yet"


@dataclass(frozen=True, slots=True)
class Feature:
    """One Katalyst feature and what pykatalyst does with it.

    `kinds`, `enhancements` and `resources` are how a user asks for it (Katalyst's CRD
    kinds, pod enhancement keys, extended resource names); `by` is the pykatalyst component
    that acts on it ("" when none); `note` says what it does, or why not; `katalyst` and
    `koordinator` say what those do (for the README's table)."""

    key: str
    title: str
    status: Status
    katalyst: str
    koordinator: str
    note: str
    by: str = ""
    kinds: tuple[str, ...] = ()
    enhancements: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()

    @property
    def acted_on(self) -> bool:
        return self.status is not Status.NOT_YET

    def why_not(self) -> str:
        """The sentence a warning about this feature gives."""
        return f"pykatalyst does not act on {self.title} yet: {self.note}"


_NOT_READ = "the object is stored and nothing reads it"

FEATURES: tuple[Feature, ...] = (
    Feature(
        "qos-levels",
        "QoS levels (`dedicated_cores`, `shared_cores`, `reclaimed_cores`, `system_cores`)",
        Status.WORKS,
        "yes, through QRM in a patched kubelet (or ORM)",
        "5 QoS classes × 4 priority classes, other names",
        "Katalyst's annotations and enhancements, read unchanged; on a stock kubelet",
        by="agent, scheduler, webhook",
        enhancements=(names.ENH_CPUSET_POOL, names.ENH_OOM_PRIORITY),
    ),
    Feature(
        "stock-kubelet",
        "Runs beside a stock kubelet, no extra metrics daemon",
        Status.WORKS,
        "needs the KubeWharf kubelet for QRM, and malachite for metrics",
        "yes (NRI, runtime proxy or reconcile)",
        "cgroups written directly (v1 and v2, cgroupfs and systemd); metrics read in-process",
        by="agent",
    ),
    Feature(
        "reclaimed-resources",
        "Reclaimed capacity (`reclaimed_millicpu`, `reclaimed_memory`) on the CNR",
        Status.WORKS,
        "yes (sys-advisor headroom)",
        "`batch-cpu`, `batch-memory` (slo-controller)",
        "every published figure carries its terms (`katalyst explain node`)",
        by="agent",
        resources=(names.RECLAIMED_MILLICPU, names.RECLAIMED_MEMORY),
    ),
    Feature(
        "numa",
        "NUMA binding and exclusive NUMA nodes; NUMA-aware scheduling",
        Status.WORKS,
        "yes",
        "yes (NodeNUMAResource)",
        "`numa_binding`, `numa_exclusive`, `numa_number`/`numa_ids` on the agent and scheduler",
        by="agent, scheduler",
        enhancements=(
            names.ENH_NUMA_BINDING,
            names.ENH_NUMA_EXCLUSIVE,
            names.ENH_NUMA_NUMBER,
            names.ENH_NUMA_IDS,
            names.ENH_ALIGN_BY_SOCKET,
            names.ENH_DISTRIBUTE_EVENLY_ACROSS_NUMA,
        ),
    ),
    Feature(
        "scheduler",
        "QoS-aware scheduler plugins and Katalyst's scheduler configuration files",
        Status.WORKS,
        "yes (a scheduler binary)",
        "koord-scheduler",
        "standalone, or as a kube-scheduler extender",
        by="scheduler",
    ),
    Feature(
        "eviction",
        "Eviction on pressure",
        Status.PARTIAL,
        "reclaimed resources, memory, CPU load, RSS overuse, rootfs, network",
        "BE CPU and memory eviction",
        "reclaimed resources, memory (system and NUMA) and CPU load; not yet RSS overuse, "
        "rootfs or network",
        by="agent",
    ),
    Feature(
        "dynamic-config",
        "Dynamic configuration (KatalystCustomConfig, CustomNodeConfig, AdminQoSConfiguration)",
        Status.PARTIAL,
        "yes",
        "`slo-controller-config` → NodeSLO",
        "targets resolved per node; `katalyst validate` lists which AdminQoSConfiguration "
        "fields take effect",
        by="controller (kcc), agent",
        kinds=(
            names.KATALYST_CUSTOM_CONFIG.kind,
            names.CUSTOM_NODE_CONFIG.kind,
            names.ADMIN_QOS_CONFIGURATION.kind,
        ),
    ),
    Feature(
        "overcommit",
        "Node overcommit (NodeOvercommitConfig)",
        Status.WORKS,
        "yes",
        "no (batch and mid resources instead)",
        "ratios as Node annotations, applied to `nodes/status` by the webhook",
        by="controller (overcommit), webhook",
        kinds=(names.NODE_OVERCOMMIT_CONFIG.kind,),
    ),
    Feature(
        "explain",
        "Explanations: why this capacity, eviction or Pending pod",
        Status.WORKS,
        "logs and metrics",
        "schedule explanations",
        "`katalyst explain node` and `pod`, an Event and a record per action",
        by="explain",
    ),
    Feature(
        "simulator",
        "Simulator comparing policies on one workload",
        Status.WORKS,
        "no",
        "descheduler dry run",
        "`katalyst sim`, `katalyst demo`, the real components on a virtual cluster; "
        "what-if sweeps of settings and seeds (`--sweep`, on Ray)",
        by="sim",
    ),
    Feature(
        "spd",
        "Service profiles (ServiceProfileDescriptor)",
        Status.WORKS,
        "yes",
        "no",
        "an SPD per enabled workload, baseline sentinels, business level; a Poor or baseline "
        "pod lends nothing to reclaimed pods",
        by="controller (spd), agent, webhook",
        kinds=(names.SERVICE_PROFILE_DESCRIPTOR.kind,),
    ),
    Feature(
        "resource-recommend",
        "Resource recommendations (ResourceRecommend)",
        Status.WORKS,
        "yes",
        "no (a Recommendation CRD only)",
        "status from a real Prometheus with Katalyst's percentile rule or pykatalyst's "
        "recommender; `katalyst recommend` for offline what-if",
        by="controller (resourcerecommender), recommend",
        kinds=(names.RESOURCE_RECOMMEND.kind,),
    ),
    Feature(
        "kvpa",
        "Vertical autoscaling (KatalystVerticalPodAutoscaler)",
        Status.WORKS,
        "yes, through a patched kubelet",
        "no",
        "in-place resize through `pods/resize` on a stock kubelet, eviction as the fallback",
        by="controller (vpa), webhook",
        kinds=(names.KATALYST_VERTICAL_POD_AUTOSCALER.kind, names.VPA_RECOMMENDATION.kind),
    ),
    Feature(
        "ihpa",
        "Horizontal autoscaling (IntelligentHorizontalPodAutoscaler)",
        Status.WORKS,
        "yes, with a predictor the user supplies",
        "no",
        "an HPA per IHPA over predicted `spd_agg_metrics`, a built-in predictor, the external "
        "metrics API for the real HPA controller",
        by="controller (ihpa), metrics",
        kinds=(names.INTELLIGENT_HPA.kind, names.VIRTUAL_WORKLOAD.kind),
    ),
    Feature(
        "gpu",
        "GPU sharing (device plugin, scheduling by GPU memory)",
        Status.PARTIAL,
        "partly (a GPU QRM plugin, needs a patched kubelet)",
        "yes (DeviceShare)",
        "Katalyst's `nvidia.com/gpu` + `gpu_memory` pods: cards chosen by the scheduler's "
        "GPUShare plugin, handed to a stock kubelet by `katalyst device-plugin`; with an "
        "RDMA VF (`sriov_nic: 1`) cards and VF are paired under one PCIe switch, else one "
        "NUMA node (`gpu_rdma_affinity`, Koordinator's `device-joint-allocate` read as an "
        "alias); whole GPUs paired with a NIC under one PCIe root by the stock "
        "kube-scheduler through DRA (`devices.dra`, `katalyst dra-plugin`)",
        by="scheduler, device-plugin, agent",
        resources=(names.RESOURCE_NVIDIA_GPU, names.RESOURCE_GPU_MEMORY),
    ),
    Feature(
        "tmo",
        "Transparent memory offloading (TMO)",
        Status.NOT_YET,
        "yes",
        "no",
        _NOT_READ,
        kinds=(names.TMO_CONFIGURATION.kind,),
    ),
    Feature(
        "memory-bandwidth",
        "Memory bandwidth limits",
        Status.NOT_YET,
        "yes (mb plugin)",
        "yes (resctrl)",
        _NOT_READ,
        kinds=(names.MEMORY_BANDWIDTH_CONFIGURATION.kind,),
    ),
    Feature(
        "irq-tuning",
        "IRQ tuning",
        Status.NOT_YET,
        "yes",
        "no",
        _NOT_READ,
        kinds=(names.IRQ_TUNING_CONFIGURATION.kind,),
    ),
    Feature(
        "power",
        "Power management",
        Status.NOT_YET,
        "yes",
        "no",
        _NOT_READ,
        kinds=(names.POWER_MANAGEMENT_CONFIGURATION.kind,),
    ),
    Feature(
        "tide",
        "Tidal node pools (Tide)",
        Status.NOT_YET,
        "yes",
        "no",
        _NOT_READ,
        kinds=(names.TIDE_NODE_POOL.kind,),
    ),
    Feature(
        "strategy-groups",
        "Strategy groups",
        Status.NOT_YET,
        "yes",
        "no",
        _NOT_READ,
        kinds=(names.STRATEGY_GROUP_CONFIGURATION.kind, names.STRATEGY_GROUP.kind),
    ),
    Feature(
        "node-profile",
        "Node profiles (NodeProfileDescriptor)",
        Status.NOT_YET,
        "yes",
        "NodeMetric",
        _NOT_READ,
        kinds=(names.NODE_PROFILE_DESCRIPTOR.kind,),
    ),
    Feature(
        "eviction-configuration",
        "Katalyst's eviction configuration kinds (EvictionConfiguration)",
        Status.NOT_YET,
        "yes",
        "`slo-controller-config`",
        "eviction is configured by an AdminQoSConfiguration's `evictionConfig` or the agent's "
        "file; " + _NOT_READ,
        kinds=(names.EVICTION_CONFIGURATION_KIND,),
    ),
    Feature(
        "auth",
        "Access control for agent endpoints (AuthConfiguration)",
        Status.NOT_YET,
        "yes",
        "no",
        _NOT_READ,
        kinds=(names.AUTH_CONFIGURATION.kind,),
    ),
    Feature(
        "cpu-burst",
        "CPU burst",
        Status.NOT_YET,
        "yes",
        "yes",
        "the enhancement is read and checked, and no burst is set",
        enhancements=(names.ENH_CPU_BURST_POLICY, names.ENH_CPU_BURST_PERCENT),
    ),
    Feature(
        "suppression-eviction",
        "CPU suppression eviction of reclaimed pods",
        Status.NOT_YET,
        "yes",
        "yes",
        "the enhancement is read and checked, and nothing evicts on it",
        enhancements=(names.ENH_SUPPRESSION_TOLERANCE_RATE,),
    ),
    Feature(
        "rss-overuse",
        "RSS overuse eviction",
        Status.NOT_YET,
        "yes",
        "no",
        "the enhancement is read and checked, and nothing evicts on it",
        enhancements=(names.ENH_RSS_OVERUSE_THRESHOLD,),
    ),
    Feature(
        "cpu-placement-extras",
        "NUMA sharing limits and whole physical cores (`numa_share`, `full_pcpus_pairing`)",
        Status.NOT_YET,
        "yes",
        "yes (FullPCPUs)",
        "the enhancement is read and checked, and cpus are placed without it",
        enhancements=(names.ENH_NUMA_SHARE, names.ENH_FULL_PCPUS_PAIRING),
    ),
    Feature(
        "network",
        "NIC bandwidth and selection (`net_bandwidth`, `namespace_type`, "
        "`topology_affinity_restricted`)",
        Status.PARTIAL,
        "yes (network plugin, needs a patched kubelet)",
        "no",
        "the agent reports NICs and their bandwidth as CNR NIC zones; the scheduler's "
        "NICBandwidth plugin picks the NIC and writes `nic_selection_result`; with egress "
        "QoS on, the agent guarantees each bandwidth pod its request on the shaped device "
        "(one HTB class per pod) and caps reclaimed traffic to what is left; the eviction "
        "plugin evicts the holders of a NIC without allocatable; one shaped device, egress "
        "only",
        by="agent, scheduler",
        resources=(names.RESOURCE_NET_BANDWIDTH,),
        enhancements=(names.ENH_NAMESPACE_TYPE, names.ENH_TOPOLOGY_AFFINITY_RESTRICTED),
    ),
    Feature(
        "sriov",
        "SR-IOV / RDMA virtual functions (`sriov_nic`)",
        Status.PARTIAL,
        "yes (SR-IOV plugin, needs a patched kubelet)",
        "yes (`koordinator.sh/rdma`)",
        "the agent reports each PF's VFs (sysfs or synthetic) as CNR NIC zones under their "
        "NIC; the scheduler's SriovVF plugin gives each pod asking `sriov_nic: 1` one free "
        "RDMA VF (on its NUMA binding's socket, in Katalyst's order, static or dynamic "
        "policy) and writes `sriov_vf_result`; `katalyst device-plugin` serves that VF to "
        "the kubelet with its /dev/infiniband nodes and `pci-devices`; the webhook refuses "
        "other counts. Katalyst's bonding queue window and VF trust check are not read",
        by="agent, scheduler, device-plugin",
        resources=(names.RESOURCE_SRIOV_NIC,),
    ),
)


@cache
def _index() -> tuple[dict[str, Feature], dict[str, Feature], dict[str, Feature]]:
    kinds: dict[str, Feature] = {}
    enhancements: dict[str, Feature] = {}
    resources: dict[str, Feature] = {}
    for feature in FEATURES:
        for table, keys in (
            (kinds, feature.kinds),
            (enhancements, feature.enhancements),
            (resources, feature.resources),
        ):
            for key in keys:
                if key in table:
                    raise ValueError(f"{key} is claimed by {table[key].key} and {feature.key}")
                table[key] = feature
    return kinds, enhancements, resources


def feature(key: str) -> Feature:
    return next(f for f in FEATURES if f.key == key)


def for_kind(kind: str) -> Feature | None:
    return _index()[0].get(kind)


def for_enhancement(key: str) -> Feature | None:
    return _index()[1].get(key)


def for_resource(name: str) -> Feature | None:
    return _index()[2].get(name)


def markdown_table() -> str:
    """The README's table: each feature, what Katalyst and Koordinator do, and pykatalyst."""
    rows = [
        "| | Katalyst | Koordinator | pykatalyst |",
        "|---|---|---|---|",
    ]
    for f in FEATURES:
        if "|" in f.title + f.katalyst + f.koordinator + f.note:
            raise ValueError(f"{f.key}: '|' would split a table cell")
        ours = f"**{f.status.value}**: {f.note}"
        rows.append(f"| {f.title} | {f.katalyst} | {f.koordinator} | {ours} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
