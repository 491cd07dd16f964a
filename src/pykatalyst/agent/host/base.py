"""The agent's only door to the machine: the `Host` protocol and the values it trades in.

`LinuxHost` implements it over sysfs, /proc and real cgroups (v1 or v2); the simulator
implements it with node physics; tests use fake trees. Units here are the canonical ones,
chosen once: cpu weight in cgroup-v1 shares (Kubernetes' convention), cpu quota as
(quota_us, period_us) with None for "no limit", memory in bytes with None for "no limit".
Every conversion to v2 files happens inside `LinuxHost`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology


class Knob(enum.Enum):
    """A cgroup control the agent owns. Values (see `KnobValue`):

    CPUSET_CPUS, CPUSET_MEMS -> CPUSet
    CPU_SHARES               -> int, cgroup-v1 shares (2..262144); v2 writes cpu.weight
    CPU_QUOTA                -> CpuQuota
    CPU_IDLE                 -> int, 0 or 1 (SCHED_IDLE for the whole cgroup)
    MEMORY_LIMIT             -> int | None, bytes (None = unlimited)
    MEMORY_HIGH              -> int | None, bytes (None = unlimited; v1 has no such file)
    MEMORY_LOW, MEMORY_MIN   -> int, bytes of protection (0 = none; v2 only)
    MEMORY_RECLAIM           -> int, bytes to reclaim now (a one-shot action, never read back:
                                v2 memory.reclaim; v1 memory.force_empty, which takes all it can)
    OOM_SCORE_ADJ            -> int in [-1000, 1000], written to every process of the cgroup
    IO_WEIGHT                -> int in [1, 10000], v2 io.weight units (v1 blkio.bfq.weight,
                                clamped to its [1, 1000])
    IO_MAX                   -> IoLimits, per-device bytes and operations per second
    IO_LATENCY               -> IoLatency, per-device latency targets (v2 only)
    NET_CLS_CLASSID          -> int, u32 net class id (v1 net_cls; v2 has no such file)
    """

    CPUSET_CPUS = "cpuset.cpus"
    CPUSET_MEMS = "cpuset.mems"
    CPU_SHARES = "cpu.shares"
    CPU_QUOTA = "cpu.quota"
    CPU_IDLE = "cpu.idle"
    MEMORY_LIMIT = "memory.limit"
    MEMORY_HIGH = "memory.high"
    MEMORY_LOW = "memory.low"
    MEMORY_MIN = "memory.min"
    MEMORY_RECLAIM = "memory.reclaim"
    OOM_SCORE_ADJ = "oom_score_adj"
    IO_WEIGHT = "io.weight"
    IO_MAX = "io.max"
    IO_LATENCY = "io.latency"
    NET_CLS_CLASSID = "net_cls.classid"

    # Knobs key the enforcer's maps, looked up hundreds of times a reconcile; Enum's own
    # hash is a Python call (hash of the name). Members are singletons and compare by
    # identity, so the identity hash agrees with equality; like the name's string hash it
    # differs between processes, so nothing may depend on the order of a set of knobs.
    __hash__ = object.__hash__


# Knobs that are actions rather than states: written whenever they are desired, never read
# back, never checkpointed (a restarted agent does not replay them).
ONE_SHOT_KNOBS = frozenset({Knob.MEMORY_RECLAIM})


@dataclass(frozen=True, slots=True)
class CpuQuota:
    """CFS bandwidth: at most `quota_us` of cpu time per `period_us` (None = unlimited)."""

    quota_us: int | None
    period_us: int = 100_000

    @property
    def cores(self) -> float | None:
        return None if self.quota_us is None else self.quota_us / self.period_us


@dataclass(frozen=True, slots=True)
class IoLimit:
    """io.max of one block device ("MAJ:MIN"); None = unlimited."""

    device: str
    rbps: int | None = None
    wbps: int | None = None
    riops: int | None = None
    wiops: int | None = None

    @property
    def unlimited(self) -> bool:
        return all(v is None for v in (self.rbps, self.wbps, self.riops, self.wiops))


@dataclass(frozen=True, slots=True)
class IoLimits:
    """io.max of a cgroup: the devices it is limited on, sorted by device, no unlimited
    entry (a device that is not listed has no limit)."""

    devices: tuple[IoLimit, ...] = ()

    @staticmethod
    def of(limits: Sequence[IoLimit]) -> IoLimits:
        by_dev = {lim.device: lim for lim in limits if not lim.unlimited}
        return IoLimits(tuple(by_dev[d] for d in sorted(by_dev)))


@dataclass(frozen=True, slots=True)
class IoLatency:
    """io.latency of a cgroup: (device "MAJ:MIN", target µs), sorted by device."""

    targets: tuple[tuple[str, int], ...] = ()

    @staticmethod
    def of(targets: Mapping[str, int]) -> IoLatency:
        return IoLatency(tuple(sorted((d, t) for d, t in targets.items() if t > 0)))


KnobValue = CPUSet | CpuQuota | IoLimits | IoLatency | int | None


@dataclass(frozen=True, slots=True)
class KnobWrite:
    """Set `knob` of the cgroup at `cgroup` (a path relative to the cgroup root of the
    hierarchy, '/'-separated, e.g. 'kubepods/besteffort/pod<uid>/<container-id>')."""

    cgroup: str
    knob: Knob
    value: KnobValue
    reason: str = ""


@dataclass(frozen=True, slots=True)
class WriteFailure:
    write: KnobWrite
    error: str  # names the file and the kernel's complaint
    vanished: bool = False  # the cgroup is gone (pod deleted): skip and forget
    unsupported: bool = False  # this machine has no such file (kernel or cgroup version)
    errno: int | None = None  # the OS error number, when the kernel refused the write


@dataclass(frozen=True, slots=True)
class ApplyResult:
    applied: tuple[KnobWrite, ...] = ()
    failed: tuple[WriteFailure, ...] = ()


@dataclass(frozen=True, slots=True)
class ContainerCgroup:
    """A container's cgroup as found on the node."""

    name: str  # container name when known (from the pod spec), else the runtime id
    container_id: str  # runtime id (without the runtime:// prefix)
    cgroup: str


@dataclass(frozen=True, slots=True)
class PodCgroup:
    """A pod's cgroup as found in kubelet's layout (cgroupfs or systemd driver)."""

    pod_uid: str
    qos_class: str  # "guaranteed" | "burstable" | "besteffort", from the cgroup path
    cgroup: str
    containers: tuple[ContainerCgroup, ...] = ()


@dataclass(frozen=True, slots=True)
class CgroupStats:
    """Usage of one cgroup over the last sampling interval (rates) and right now (gauges).
    A field is None when the machine cannot tell (missing file, first sample for rates)."""

    cpu_usage_cores: float | None = None  # cpu time per second over the interval
    cpu_usage_total_s: float | None = None  # cumulative cpu seconds
    nr_running: int | None = None  # runnable tasks now (the agent smooths it into loads)
    nr_periods: int | None = None
    nr_throttled: int | None = None
    throttled_s: float | None = None
    memory_usage: int | None = None
    memory_rss: int | None = None
    memory_cache: int | None = None
    memory_shmem: int | None = None
    memory_working_set: int | None = None
    memory_psi_some_avg10: float | None = None
    cpu_psi_some_avg10: float | None = None


@dataclass(frozen=True, slots=True)
class NumaMemory:
    """Per-NUMA memory from node meminfo and /proc/zoneinfo (bytes)."""

    total: int
    free: int
    file_inactive: int = 0
    watermark_min: int = 0
    watermark_low: int = 0
    watermark_high: int = 0


@dataclass(frozen=True, slots=True)
class MemoryInfo:
    """Machine-wide memory from /proc/meminfo and /proc/vmstat (bytes, pages/s)."""

    total: int
    free: int
    available: int
    cached: int = 0
    shmem: int = 0
    watermark_scale_factor: int = 10  # vm.watermark_scale_factor
    kswapd_steal_pages_per_s: float | None = None
    psi_some_avg10: float | None = None
    psi_full_avg10: float | None = None


@dataclass(frozen=True, slots=True)
class HostSample:
    """What the machine looked like at `time`."""

    time: float
    cgroups: Mapping[str, CgroupStats] = field(default_factory=dict)  # by cgroup path
    cpu_usage_ratio: Sequence[float] = ()  # per cpu id, busy share over the interval, 0..1
    # per cpu id, µs a task waited on the run queue per timeslice over the interval
    # (`cpu.schedwait.cpu`); empty when the machine cannot tell (no /proc/schedstat)
    cpu_sched_wait_us: Sequence[float] = ()
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)  # /proc/loadavg
    memory: MemoryInfo | None = None
    numa_memory: Mapping[int, NumaMemory] = field(default_factory=dict)
    cpu_psi_some_avg10: float | None = None


@dataclass(frozen=True, slots=True)
class NetClass:
    """One egress class: an HTB class `classid` (0xMMMMmmmm = tc MMMM:mmmm) under the
    device's root class, guaranteed `rate_bps` and borrowing up to `ceil_bps`, lower
    `prio` borrowing first. `level` names a QoS level's class, or, for the class of one
    bandwidth pod, that pod (`<namespace>/<name>`)."""

    level: str
    classid: int
    rate_bps: int
    ceil_bps: int
    prio: int


@dataclass(frozen=True, slots=True)
class NetMatch:
    """Traffic that goes to class `classid`: with `source`, packets the node forwards from
    that address (a pod in a network namespace of its own); else sockets of the cgroup-v2
    `cgroup` and below (a path relative to the unified hierarchy), or, when `cgroup` is
    None too, sockets whose net_cls class id (cgroup v1) is `classid`."""

    classid: int
    cgroup: str | None = None
    source: str | None = None  # an IPv4 or IPv6 address


@dataclass(frozen=True, slots=True)
class NetShape:
    """Egress shaping of one device: a root class of `capacity_bps`, one class per QoS
    level, and the socket matches that put pods' traffic into them (anything else goes to
    `default_classid`)."""

    device: str
    capacity_bps: int
    default_classid: int
    classes: tuple[NetClass, ...]
    matches: tuple[NetMatch, ...] = ()


@dataclass(frozen=True, slots=True)
class NetApplyResult:
    ok: bool
    error: str = ""  # names the command and what it said
    unsupported: bool = False  # this host cannot shape traffic (no tc/nft, no device)
    commands: tuple[str, ...] = ()  # what was run, for `explain`


class Host(Protocol):
    """The machine, as the agent sees it."""

    @property
    def cgroup_version(self) -> int:
        """1 or 2."""
        ...

    def topology(self) -> CPUTopology: ...

    def discover(self) -> list[PodCgroup]:
        """Pods and containers found in kubelet's cgroup layout right now."""
        ...

    def sample(self, now: float, cgroups: Sequence[str]) -> HostSample:
        """Stats of the given cgroups and of the machine at `now`."""
        ...

    def read_knobs(self, cgroup: str) -> dict[Knob, KnobValue]:
        """The knob values the cgroup has now (knobs the machine lacks are absent)."""
        ...

    def apply(self, writes: Sequence[KnobWrite]) -> ApplyResult:
        """Write in the order given; a failing write does not stop the others."""
        ...

    @property
    def page_size(self) -> int:
        """Bytes per memory page: the kernel keeps memory limits in whole pages."""
        ...

    def qos_cgroup(self, qos_class: str) -> str | None:
        """Kubelet's cgroup of a QoS class ("guaranteed", "burstable", "besteffort"),
        relative to the hierarchy root; None when this host has no kubelet layout to ask
        (the agent then infers it from the pods' cgroups). ValueError for another class."""
        ...

    def memory_usage(self, cgroup: str) -> int | None:
        """The cgroup's current memory charge in bytes; None when unknown."""
        ...

    def same_value(self, knob: Knob, desired: KnobValue, actual: KnobValue) -> bool:
        """Whether writing `desired` over `actual` would change nothing the kernel keeps
        (v2 weights are coarser than shares; memory limits are kept in whole pages).
        Equal values are always the same: the enforcer skips them without asking."""
        ...

    def knob_problem(self, knob: Knob, value: KnobValue) -> str | None:
        """Why `value` cannot be written to `knob` here (None when it can), naming the
        accepted values."""
        ...

    def apply_net(self, shape: NetShape | None) -> NetApplyResult:
        """Shape egress as `shape` says, replacing what the agent set before (None: remove
        the agent's shaping). Not a cgroup knob: the device's qdisc and socket rules."""
        ...

    def cpu_usage_s(self, cgroup: str) -> float | None:
        """The cgroup's cumulative cpu time in seconds, read now (one file: cheap enough to
        call between samples); None when unknown."""
        ...
