"""The agent configuration's disk I/O, kubelet and network sections, and the base of every
section (unknown fields refused, values frozen and validated, defaults included)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from pykatalyst.agent.host.base import IoLimit
from pykatalyst.agent.host.devices import repeated
from pykatalyst.agent.host.nics import nic_identifier
from pykatalyst.agent.io_policy import LevelIo, misordered
from pykatalyst.api import names
from pykatalyst.api.units import Bytes, Seconds
from pykatalyst.topology.vf import VfPolicy


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class DeviceLimitConfig(Section):
    """io.max of one block device: bytes (quantities such as 50Mi) and operations per second."""

    device: str = Field(description="the block device as MAJ:MIN (lsblk -o NAME,MAJ:MIN)")
    read_bps: Bytes | None = None
    write_bps: Bytes | None = None
    read_iops: int | None = Field(None, gt=0)
    write_iops: int | None = Field(None, gt=0)

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        return _device_id(v)

    @field_validator("read_bps", "write_bps")
    @classmethod
    def _positive(cls, v: int | None) -> int | None:
        if v is not None and v <= 0:
            raise ValueError("must be a positive quantity of bytes per second, e.g. 50Mi")
        return v

    def limit(self) -> IoLimit:
        return IoLimit(self.device, self.read_bps, self.write_bps, self.read_iops, self.write_iops)


class DeviceLatencyConfig(Section):
    device: str = Field(description="the block device as MAJ:MIN")
    target: Seconds = Field(description="io.latency target, a Go duration such as 10ms")

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        return _device_id(v)

    @field_validator("target")
    @classmethod
    def _target(cls, v: float) -> float:
        if v * 1e6 < 1:
            raise ValueError("must be at least 1us")
        return v


def _device_id(v: str) -> str:
    major, sep, minor = v.partition(":")
    if not (sep and major.isdigit() and minor.isdigit()):
        raise ValueError(f"accepted: a block device as MAJ:MIN such as 8:0; got {v!r}")
    return f"{int(major)}:{int(minor)}"


class LevelIoConfig(Section):
    weight: int | None = Field(
        None, ge=1, le=10000, description="io.weight (v1: blkio.bfq.weight, at most 1000)"
    )
    limits: tuple[DeviceLimitConfig, ...] = ()
    latency: tuple[DeviceLatencyConfig, ...] = Field((), description="cgroup v2 only")

    def value(self) -> LevelIo:
        return LevelIo(
            self.weight,
            tuple(lim.limit() for lim in self.limits),
            {t.device: max(round(t.target * 1e6), 1) for t in self.latency} or None,
        )


_LADDER = (
    names.QOS_RECLAIMED_CORES,
    names.QOS_SHARED_CORES,
    names.QOS_DEDICATED_CORES,
    names.QOS_SYSTEM_CORES,
)


class IoConfig(Section):
    """Disk I/O per QoS level (docs/agent.md, "Memory and disk I/O"); empty: not managed."""

    levels: dict[str, LevelIoConfig] = Field(
        default_factory=dict,
        description="per QoS level (reclaimed_cores, shared_cores, dedicated_cores, "
        "system_cores): weight, limits and latency targets written on each of its pods",
    )
    reclaimed_root: LevelIoConfig = Field(
        default_factory=LevelIoConfig,
        description="weight and limits of the reclaimed root: all reclaimed pods together",
    )

    @field_validator("levels")
    @classmethod
    def _levels(cls, v: dict[str, LevelIoConfig]) -> dict[str, LevelIoConfig]:
        bad = [k for k in v if k not in _LADDER]
        if bad:
            raise ValueError(f"unknown QoS level {bad[0]!r}; accepted: {', '.join(_LADDER)}")
        wrong = misordered({k: c.value() for k, c in v.items()}, _LADDER)
        if wrong:
            raise ValueError(
                f"{wrong[0]} has a higher io weight than a level above it; weights must "
                f"not fall along {' <= '.join(_LADDER)}"
            )
        return v

    def level_values(self) -> dict[str, LevelIo]:
        return {k: c.value() for k, c in self.levels.items()}


class KubeletConfig(Section):
    """Where the agent finds the kubelet's cpu manager (docs/agent.md, "Beside the kubelet's
    cpu manager")."""

    config_path: str = Field(
        "/var/lib/kubelet/config.yaml",
        description="the kubelet's KubeletConfiguration file, read for cpuManagerPolicy and "
        "reservedSystemCPUs ('' : not read, the policy is taken to be none)",
    )
    pod_resources_socket: str = Field(
        "/var/lib/kubelet/pod-resources/kubelet.sock",
        description="the kubelet's pod-resources gRPC socket (PodResourcesLister v1), asked "
        "for the cpus the static cpu manager gave out",
    )
    timeout_s: Seconds = Field(2.0, description="deadline of each pod-resources call")


# Katalyst's QoS levels in the order of their egress priority (HTB prio, lower first).
NET_LEVELS = (
    names.QOS_SYSTEM_CORES,
    names.QOS_DEDICATED_CORES,
    names.QOS_SHARED_CORES,
    names.QOS_RECLAIMED_CORES,
)
_MAX_CLASSID = 0xFFFF_FFFF


class NetLevelConfig(Section):
    """One QoS level's egress class: an HTB class on the egress device."""

    class_id: int = Field(
        gt=0,
        le=_MAX_CLASSID,
        description="the level's net class id (Katalyst's "
        "--network-resource-plugin-class-id-<level>), 0xMMMMmmmm = tc class MMMM:mmmm",
    )
    rate_ratio: float = Field(ge=0, le=1, description="bandwidth guaranteed, share of capacity")
    ceil_ratio: float = Field(gt=0, le=1, description="most it may borrow, share of capacity")
    prio: int = Field(ge=0, le=7, description="HTB priority when borrowing (0 first)")

    @model_validator(mode="after")
    def _ceil(self) -> NetLevelConfig:
        if self.ceil_ratio < self.rate_ratio:
            raise ValueError(
                f"ceil_ratio {self.ceil_ratio} is below rate_ratio {self.rate_ratio}; "
                "accepted: rate_ratio <= ceil_ratio <= 1"
            )
        return self


def _default_net_levels() -> dict[str, NetLevelConfig]:
    rows = {  # class id, guaranteed share, ceiling, priority
        names.QOS_SYSTEM_CORES: (0x1_0010, 0.05, 1.0, 0),
        names.QOS_DEDICATED_CORES: (0x1_0020, 0.3, 1.0, 1),
        names.QOS_SHARED_CORES: (0x1_0030, 0.5, 1.0, 1),
        names.QOS_RECLAIMED_CORES: (0x1_0040, 0.05, 1.0, 7),
    }
    return {
        level: NetLevelConfig(class_id=c, rate_ratio=r, ceil_ratio=ceil, prio=p)
        for level, (c, r, ceil, p) in rows.items()
    }


class NetworkConfig(Section):
    """Egress QoS on the node: one HTB class per QoS level on the egress device, pods'
    sockets classified into them (v1: net_cls.classid; v2: the socket's cgroup)."""

    enabled: bool = Field(False, description="shape egress by QoS level (off, as Katalyst)")
    device: str = Field("", description="the egress network device (e.g. eth0)")
    link_mbit: float = Field(0.0, ge=0, description="the device's line rate in Mbit/s")
    egress_ratio: float = Field(
        0.94, gt=0, le=1, description="share of the line rate given out (Katalyst: 0.94)"
    )
    default_level: str = Field(
        names.QOS_SHARED_CORES, description="the class of traffic no pod rule matches"
    )
    levels: dict[str, NetLevelConfig] = Field(default_factory=_default_net_levels)
    bandwidth_classes: bool = Field(
        True,
        description="give each pod with a net_bandwidth request whose nic_selection_result "
        "names the device a class of its own, guaranteed its request",
    )
    reclaimed_floor_ratio: float = Field(
        0.01,
        ge=0,
        le=1,
        description="the reclaimed class's ceiling never drops below this share of the "
        "capacity, however much bandwidth pods hold",
    )

    @field_validator("levels", mode="before")
    @classmethod
    def _merge_levels(cls, value: Any) -> Any:
        """Levels a config leaves out, and fields it leaves out, keep the defaults."""
        if not isinstance(value, dict):
            return value
        merged: dict[str, Any] = {k: v.model_dump() for k, v in _default_net_levels().items()}
        for key, given in value.items():
            if key not in NET_LEVELS:
                raise ValueError(f"unknown QoS level {key!r}; accepted: {', '.join(NET_LEVELS)}")
            base = merged.get(key, {})
            merged[key] = {**base, **given} if isinstance(given, dict) else given
        return merged

    @model_validator(mode="after")
    def _consistent(self) -> NetworkConfig:
        if self.default_level not in NET_LEVELS:
            raise ValueError(
                f"default_level: {self.default_level!r}; accepted: {', '.join(NET_LEVELS)}"
            )
        ids = [lv.class_id for lv in self.levels.values()]
        majors = {c >> 16 for c in ids}
        if len(set(ids)) != len(ids) or len(majors) != 1 or 0 in majors:
            raise ValueError(
                f"levels.*.class_id: {[hex(c) for c in ids]}; accepted: distinct ids with one "
                "tc major (0xMMMM0000, MMMM > 0) and minors other than 0 and 1"
            )
        if any(c & 0xFFFF in (0, 1) for c in ids):
            raise ValueError("levels.*.class_id: minor 0 and 1 are the root qdisc and class")
        total = sum(lv.rate_ratio for lv in self.levels.values())
        if total > 1 + 1e-9:
            raise ValueError(f"levels.*.rate_ratio add up to {total:.3f}; accepted: <= 1")
        if self.enabled and (not self.device or self.link_mbit <= 0):
            raise ValueError(
                "network.enabled needs device (the egress device) and link_mbit > 0 "
                f"(got device={self.device!r}, link_mbit={self.link_mbit})"
            )
        return self


DEVICE_SOURCES = ("none", "synthetic", "sysfs", "nvml")


class GpuConfig(Section):
    """One synthetic card (`devices.source: synthetic`)."""

    id: str = Field(min_length=1, description="the device id pods and the CNR name it by")
    numa: int = Field(0, ge=-1, description="its NUMA node (-1: none)")
    pcie_switch: str = Field("", description="the PCIe switch it hangs off")
    model: str = Field("", description="the card's model, e.g. A100-SXM4-80GB")
    healthy: bool = Field(True, description="false: reported unhealthy, given to no new pod")
    minor: int | None = Field(
        None, ge=0, description="its containers get /dev/nvidia<minor> (none when unset)"
    )
    device_node: str | None = Field(
        None,
        description="the host device node behind /dev/nvidia<minor> (default: the same path); "
        "for synthetic cards on a machine without them",
    )
    memory_mib: int | None = Field(
        None, gt=0, description="the card's memory: containers get CUDA_DEVICE_MEMORY_LIMIT"
    )

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if "," in v or "::" in v or v != v.strip():
            raise ValueError("a device id has no ',', no '::' and no surrounding blanks")
        return v


class DevicePluginConfig(Section):
    """The kubelet device plugin serving the cards (docs/devices.md)."""

    socket_dir: str = Field(
        "/var/lib/kubelet/device-plugins",
        description="the kubelet's device-plugin directory (its kubelet.sock is there)",
    )
    shares_per_gpu: int = Field(
        10,
        ge=1,
        le=1000,
        description="how many containers may share one card: each card is advertised this "
        "many times as nvidia.com/gpu",
    )
    poll_s: Seconds = Field(5.0, gt=0, description="how often health and the kubelet are checked")
    pending_timeout_s: Seconds = Field(
        300.0, gt=0, description="a pod allocated but not yet running holds its cards this long"
    )


NIC_SOURCES = ("none", "synthetic", "sysfs")
SRIOV_POLICIES = (names.SRIOV_POLICY_STATIC, names.SRIOV_POLICY_DYNAMIC)


class SriovConfig(Section):
    """Katalyst's SR-IOV resource plugin (docs/devices.md "SR-IOV VFs")."""

    policy: str = Field(
        names.SRIOV_POLICY_STATIC,
        description="static | dynamic (Katalyst's --sriov-policy-name): dynamic sizes the VF "
        "by a dedicated_cores pod's cpus",
    )
    large_vf_queue_count: int = Field(names.DEFAULT_SRIOV_LARGE_VF_QUEUE_COUNT, ge=1)
    large_vf_cpu_threshold: int = Field(names.DEFAULT_SRIOV_LARGE_VF_CPU_THRESHOLD, ge=1)
    large_vf_fail_on_exhaustion: bool = True
    small_vf_queue_count: int = Field(names.DEFAULT_SRIOV_SMALL_VF_QUEUE_COUNT, ge=1)
    small_vf_cpu_threshold: int = Field(names.DEFAULT_SRIOV_SMALL_VF_CPU_THRESHOLD, ge=1)
    small_vf_fail_on_exhaustion: bool = False
    pod_required_annotations: dict[str, str] = Field(
        default_factory=dict,
        description="dynamic: the annotations a pod must carry to be sized "
        "(Katalyst's --dynamic-pod-vf-required-annotations)",
    )
    device_node: str | None = Field(
        None,
        description="the host device node standing in for every VF's /dev/infiniband nodes "
        "(synthetic VFs on a machine without them); default: the same path",
    )

    @field_validator("policy")
    @classmethod
    def _policy(cls, v: str) -> str:
        if v not in SRIOV_POLICIES:
            raise ValueError(f"accepted: {', '.join(SRIOV_POLICIES)}; got {v!r}")
        return v

    @model_validator(mode="after")
    def _sizes(self) -> SriovConfig:
        if self.small_vf_cpu_threshold > self.large_vf_cpu_threshold:
            raise ValueError("small_vf_cpu_threshold must not exceed large_vf_cpu_threshold")
        return self

    def vf_policy(self) -> VfPolicy:
        return VfPolicy(
            self.policy,
            self.large_vf_queue_count,
            self.large_vf_cpu_threshold,
            self.large_vf_fail_on_exhaustion,
            self.small_vf_queue_count,
            self.small_vf_cpu_threshold,
            self.small_vf_fail_on_exhaustion,
            tuple(sorted(self.pod_required_annotations.items())),
        )


class NicConfig(Section):
    """One synthetic network interface (`devices.nic.source: synthetic`)."""

    name: str = Field(min_length=1, description="the interface name, e.g. eth0")
    netns: str = Field("", description="its network namespace ('' : the host's)")
    speed_mbps: int = Field(gt=0, description="its line rate in Mbps (sysfs `speed`)")
    numa: int = Field(0, ge=-1, description="its NUMA node (-1: none)")
    pcie_switch: str = Field("", description="the PCIe switch it hangs off")
    healthy: bool = Field(True, description="false: reported with no allocatable bandwidth")
    vfs: int = Field(0, ge=0, le=256, description="its SR-IOV virtual functions (sriov_nic)")
    vf_rdma: bool = Field(True, description="its VFs are RDMA-capable (have /dev/infiniband nodes)")
    vf_queue_counts: tuple[int, ...] = Field(
        (),
        description="the queue count of VF 0, 1, ...; VFs past the list take its last value "
        "(empty: unknown)",
    )

    @field_validator("name", "netns")
    @classmethod
    def _plain(cls, v: str) -> str:
        if v != v.strip() or "/" in v or "," in v:
            raise ValueError("no '/', no ',' and no surrounding blanks")
        return v


class NicsConfig(Section):
    """The node's NICs and the bandwidth they give out (Katalyst's network resource
    plugin: docs/devices.md "NICs and bandwidth")."""

    source: str = Field(
        "none", description="none | synthetic (the `interfaces` list) | sysfs (/sys/class/net)"
    )
    interfaces: tuple[NicConfig, ...] = Field(
        (), description="the interfaces when source is synthetic"
    )
    egress_capacity_rate: float = Field(
        names.DEFAULT_NIC_EGRESS_CAPACITY_RATE,
        gt=0,
        le=1,
        description="share of the line rate given out as egress bandwidth "
        "(Katalyst's --network-resource-plugin-egress-capacity-rate)",
    )
    ingress_capacity_rate: float = Field(
        names.DEFAULT_NIC_INGRESS_CAPACITY_RATE,
        gt=0,
        le=1,
        description="share of the line rate given out as ingress bandwidth "
        "(Katalyst's --network-resource-plugin-ingress-capacity-rate)",
    )
    reserved_bandwidth_mbps: int = Field(
        0,
        ge=0,
        description="Mbps kept back on the first interface "
        "(Katalyst's --network-resource-plugin-reserved-bandwidth)",
    )
    unknown_speed_mbps: int = Field(
        0,
        ge=0,
        description="the line rate assumed where sysfs gives none (virtio NICs); "
        "0: such an interface gives out no bandwidth",
    )
    sriov: SriovConfig = Field(
        default_factory=SriovConfig,
        description="how SR-IOV VFs are given out (sriov_nic)",
    )

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        if v not in NIC_SOURCES:
            raise ValueError(f"accepted: {', '.join(NIC_SOURCES)}; got {v!r}")
        return v

    @model_validator(mode="after")
    def _unique(self) -> NicsConfig:
        dup = repeated([nic_identifier(n.netns, n.name) for n in self.interfaces])
        if dup:
            raise ValueError(f"interfaces: (netns, name) must be unique; repeated: {dup}")
        return self


class DraConfig(Section):
    """The node's devices as Dynamic Resource Allocation ResourceSlices and the kubelet DRA
    plugin that prepares claims on them (docs/devices.md "DRA"). Off by default: a card
    both in a ResourceSlice and advertised by a device plugin could be given twice."""

    enabled: bool = Field(
        False, description="publish the node's GPUs, NICs and RDMA VFs as ResourceSlices"
    )
    vfs: bool = Field(True, description="publish RDMA-capable SR-IOV VFs as devices too")
    pcie_roots: dict[str, str] = Field(
        default_factory=dict,
        description="PCIe root complex (pci<domain>:<bus>) of each pcie_switch; a switch "
        "not listed stands for its own root",
    )
    poll_s: Seconds = Field(10.0, gt=0, description="how often the slices are reconciled")
    plugin_dir: str = Field(
        "/var/lib/kubelet/plugins", description="where the DRA plugin's socket is created"
    )
    registry_dir: str = Field(
        "/var/lib/kubelet/plugins_registry",
        description="the kubelet's plugin registration directory",
    )

    @field_validator("pcie_roots")
    @classmethod
    def _roots(cls, v: dict[str, str]) -> dict[str, str]:
        bad = sorted(r for r in v.values() if not _PCIE_ROOT.fullmatch(r))
        if bad:
            raise ValueError(f"roots are pci<domain>:<bus> (e.g. pci0000:00); got {bad}")
        return v


_PCIE_ROOT = re.compile(r"pci[0-9a-f]{4}:[0-9a-f]{2}")


class DevicesConfig(Section):
    """The node's GPUs: where they are read from, and how they are reported and served."""

    source: str = Field(
        "none",
        description="none | synthetic (the `gpus` list) | sysfs | nvml (pykatalyst[gpu])",
    )
    gpus: tuple[GpuConfig, ...] = Field((), description="the cards when source is synthetic")
    gpu_memory_per_gpu: int = Field(
        names.DEFAULT_GPU_MEMORY_PER_GPU,
        ge=1,
        description="gpu_memory units of one card (Katalyst's --gpu-memory-allocatable-per-gpu)",
    )
    sys_root: str = Field("/sys", description="where sysfs is mounted")
    proc_root: str = Field("/proc", description="where procfs is mounted")
    device_plugin: DevicePluginConfig = Field(default_factory=DevicePluginConfig)
    nic: NicsConfig = Field(
        default_factory=NicsConfig, description="the NICs and their bandwidth (net_bandwidth)"
    )
    dra: DraConfig = Field(
        default_factory=DraConfig, description="the devices as DRA ResourceSlices (off)"
    )

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        if v not in DEVICE_SOURCES:
            raise ValueError(f"accepted: {', '.join(DEVICE_SOURCES)}; got {v!r}")
        return v

    @model_validator(mode="after")
    def _unique(self) -> DevicesConfig:
        dup = repeated([g.id for g in self.gpus])
        if dup:
            raise ValueError(f"gpus: ids must be unique; repeated: {dup}")
        return self
