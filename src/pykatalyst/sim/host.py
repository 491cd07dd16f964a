"""`SimHost`: one simulated machine behind the agent's `Host` protocol.

The agent cannot tell it from `LinuxHost`: `discover()` lists the pods the simulation
started on the node in kubelet's cgroupfs layout, `sample()` returns what the physics
measured over the last step, `read_knobs()`/`apply()` read and record cgroup knobs. The
physics then honours the recorded knobs (`PodKnobs`), exactly as the kernel would honour
the files.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pykatalyst.agent.host import cgroupfs
from pykatalyst.agent.host.base import (
    ApplyResult,
    CgroupStats,
    ContainerCgroup,
    CpuQuota,
    HostSample,
    Knob,
    KnobValue,
    KnobWrite,
    MemoryInfo,
    NetApplyResult,
    NetShape,
    NumaMemory,
    PodCgroup,
    WriteFailure,
)
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology

KUBEPODS = "kubepods"
_QOS_DIR = {"guaranteed": "", "burstable": "burstable", "besteffort": "besteffort"}
MIN_SHARES = 2
_CGROUP_VERSION = 1
_PAGE_SIZE = 1  # simulated limits are exact: no page rounding
MAX_SHARES = 262144


def container_id(pod_uid: str, container: str) -> str:
    """A stable 64-hex runtime id, as containerd would show it."""
    return hashlib.sha256(f"{pod_uid}/{container}".encode()).hexdigest()


def pod_cgroup_path(uid: str, qos_class: str) -> str:
    q = _QOS_DIR[qos_class]
    return f"{KUBEPODS}/{q}/pod{uid}" if q else f"{KUBEPODS}/pod{uid}"


def milli_to_shares(milli: int) -> int:
    """The kubelet's cpu.shares for a cpu request (MilliCPUToShares)."""
    if milli <= 0:
        return MIN_SHARES
    return max(MIN_SHARES, min(MAX_SHARES, milli * 1024 // 1000))


@dataclass(frozen=True, slots=True)
class PodKnobs:
    """The knobs of one pod as the kernel applies them: the cpuset its tasks may use (the
    intersection down the hierarchy), the tightest quota, the pod's weight, SCHED_IDLE if
    any level has cpu.idle=1, the tightest memory limit."""

    cpus: int  # bitmask of allowed cpus
    quota_cores: float | None
    shares: int
    idle: bool
    memory_limit: int | None


@dataclass(slots=True)
class _SimPod:
    uid: str
    qos_class: str  # guaranteed | burstable | besteffort
    cgroup: str
    container: ContainerCgroup
    defaults: dict[Knob, KnobValue]


@dataclass(slots=True)
class PodUsage:
    """What the physics measured for a pod over the last step."""

    cpu_cores: float = 0.0
    cpu_total_s: float = 0.0
    runnable: float = 0.0
    throttled_periods: int = 0
    periods: int = 0
    memory: int = 0


@dataclass(slots=True)
class NodeUsage:
    """What the physics measured for the whole machine over the last step."""

    cpu_ratio: tuple[float, ...] = ()
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)
    memory_used: int = 0
    sched_wait_us: tuple[float, ...] = ()  # per cpu, see `run_queue_wait_us`


# A task's typical run between waits, and the longest wait the model reports (a cpu busy
# all the time holds its queue for a tick or more).
SCHED_SERVICE_US = 100.0
SCHED_WAIT_CAP_US = 100_000.0


def run_queue_wait_us(busy: float) -> float:
    """The run-queue wait per timeslice of a cpu busy `busy` (0..1) of the time: a single
    server queue, service × ρ / (1 − ρ), so waiting stays short until the cpu is nearly
    always busy and then grows steeply (460 µs at ρ ≈ 0.82)."""
    return float(run_queue_waits_us(np.array([busy], dtype=np.float64))[0])


def run_queue_waits_us(busy: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """`run_queue_wait_us` of every cpu at once."""
    rho = np.clip(busy, 0.0, 1.0)
    full = rho >= 1.0
    wait = SCHED_SERVICE_US * rho / np.where(full, 1.0, 1.0 - rho)
    return np.where(full, SCHED_WAIT_CAP_US, np.minimum(wait, SCHED_WAIT_CAP_US))


# check_knob_value's answers, shared by every simulated host (it is a pure function).
_KNOB_PROBLEMS: dict[tuple[object, ...], str | None] = {}
_KNOB_PROBLEMS_MAX = 65_536
_PLAIN = (CPUSet, int, bool, type(None))


def _knob_key(knob: Knob, value: KnobValue) -> tuple[object, ...] | None:
    """What `check_knob_value`'s answer depends on: the value and the types in it (1 and
    True, or a quota of 1 and of 1.0, are equal yet not equally valid); None for values
    not remembered."""
    kind = type(value)
    if kind in _PLAIN:
        return (knob, kind, value)
    if isinstance(value, CpuQuota):
        q, p = value.quota_us, value.period_us
        return (knob, kind, type(q), q, type(p), p)
    return None


def _no_pod(uid: str) -> PodUsage | None:
    return None


def _no_node() -> NodeUsage:
    return NodeUsage()


class SimHost:
    """A simulated node. The runner starts and stops pods on it and feeds it usage; the
    agent sees only the `Host` protocol."""

    def __init__(self, topology: CPUTopology, memory: int, system_memory: int) -> None:
        self._topology = topology
        self.memory = memory
        self.system_memory = system_memory
        self.all_cpus = topology.all_cpus.mask
        self._pods: dict[str, _SimPod] = {}
        self._by_cgroup: dict[str, str] = {}  # pod or container cgroup -> pod uid
        self._knobs: dict[str, dict[Knob, KnobValue]] = {}
        # Where samples come from: the runner points these at its last physics step, so
        # a sample costs only the cgroups the agent asks about.
        self.pod_usage: Callable[[str], PodUsage | None] = _no_pod
        self.node_usage: Callable[[], NodeUsage] = _no_node
        self.dirty: set[str] = set()  # pods whose effective knobs changed
        self.writes = 0

    # --- the Host protocol ------------------------------------------------------------

    @property
    def cgroup_version(self) -> int:
        return _CGROUP_VERSION

    @property
    def page_size(self) -> int:
        return _PAGE_SIZE

    def qos_cgroup(self, qos_class: str) -> str | None:
        return None  # the agent infers it from the pods' cgroups, as on a bare node

    def memory_usage(self, cgroup: str) -> int | None:
        return None  # the sample's per-cgroup stats carry usage

    def cpu_usage_s(self, cgroup: str) -> float | None:
        return None  # the simulator's agents run no fast watch: their pools follow the period

    def same_value(self, knob: Knob, desired: KnobValue, actual: KnobValue) -> bool:
        return desired == actual or cgroupfs.values_equal(
            knob, desired, actual, _CGROUP_VERSION, _PAGE_SIZE
        )

    def knob_problem(self, knob: Knob, value: KnobValue) -> str | None:
        """`cgroupfs.check_knob_value`, remembered per (knob, type, value): the enforcer
        asks about every knob of every cgroup each pass, mostly the same few values."""
        key = _knob_key(knob, value)
        if key is None:
            return cgroupfs.check_knob_value(knob, value)
        try:
            return _KNOB_PROBLEMS[key]
        except KeyError:
            pass
        if len(_KNOB_PROBLEMS) >= _KNOB_PROBLEMS_MAX:
            _KNOB_PROBLEMS.clear()
        problem = _KNOB_PROBLEMS[key] = cgroupfs.check_knob_value(knob, value)
        return problem

    def apply_net(self, shape: NetShape | None) -> NetApplyResult:
        return NetApplyResult(False, "the simulator has no network to shape", unsupported=True)

    def topology(self) -> CPUTopology:
        return self._topology

    def discover(self) -> list[PodCgroup]:
        return [
            PodCgroup(p.uid, p.qos_class, p.cgroup, (p.container,)) for p in self._pods.values()
        ]

    def sample(self, now: float, cgroups: Sequence[str]) -> HostSample:
        u = self.node_usage()
        stats: dict[str, CgroupStats] = {}
        for cg in cgroups:
            cg = cg.strip("/")
            uid = self._by_cgroup.get(cg)
            if uid is None:
                continue
            pu = self.pod_usage(uid)
            if pu is None:
                continue
            stats[cg] = CgroupStats(
                cpu_usage_cores=pu.cpu_cores,
                cpu_usage_total_s=pu.cpu_total_s,
                nr_running=round(pu.runnable),
                nr_periods=pu.periods,
                nr_throttled=pu.throttled_periods,
                memory_usage=pu.memory,
                memory_rss=pu.memory,
                memory_cache=0,
                memory_shmem=0,
                memory_working_set=pu.memory,
            )
        used = u.memory_used + self.system_memory
        free = max(self.memory - used, 0)
        numas = self._topology.numa_nodes
        per = self.memory // max(len(numas), 1)
        numa_free = free // max(len(numas), 1)
        return HostSample(
            time=now,
            cgroups=stats,
            cpu_usage_ratio=u.cpu_ratio,
            cpu_sched_wait_us=u.sched_wait_us,
            load=u.load,
            memory=MemoryInfo(total=self.memory, free=free, available=free),
            numa_memory={
                n: NumaMemory(
                    total=per,
                    free=numa_free,
                    watermark_min=per // 400,
                    watermark_low=per // 320,
                    watermark_high=per // 267,
                )
                for n in numas
            },
        )

    def read_knobs(self, cgroup: str) -> dict[Knob, KnobValue]:
        cg = cgroup.strip("/")
        out: dict[Knob, KnobValue] = {}
        uid = self._by_cgroup.get(cg)
        if uid is not None:
            out.update(self._pods[uid].defaults)
        elif not _is_qos_cgroup(cg):
            return {}
        else:
            out.update(_qos_defaults(self.all_cpus))
        out.update(self._knobs.get(cg, {}))
        return out

    def apply(self, writes: Sequence[KnobWrite]) -> ApplyResult:
        applied: list[KnobWrite] = []
        failed: list[WriteFailure] = []
        for w in writes:
            cg = w.cgroup.strip("/")
            uid = self._by_cgroup.get(cg)
            if uid is None and not _is_qos_cgroup(cg):
                failed.append(WriteFailure(w, f"no cgroup {cg}", vanished=True))
                continue
            problem = _check(w.knob, w.value, self.all_cpus)
            if problem:
                failed.append(WriteFailure(w, problem))
                continue
            self._knobs.setdefault(cg, {})[w.knob] = w.value
            self.writes += 1
            if uid is not None:
                self.dirty.add(uid)
            else:
                self.dirty.update(self._pods)  # a QoS-level knob touches every pod below
            applied.append(w)
        return ApplyResult(tuple(applied), tuple(failed))

    # --- the simulation's side ----------------------------------------------------------

    def start_pod(
        self,
        uid: str,
        qos_class: str,
        container: str,
        cpu_request_milli: int,
        cpu_limit_milli: int | None,
        memory_limit: int | None,
    ) -> None:
        """The kubelet starts a pod: its cgroups get the kubelet's knobs."""
        cgroup = pod_cgroup_path(uid, qos_class)
        cid = container_id(uid, container)
        ccg = ContainerCgroup(container, cid, f"{cgroup}/{cid}")
        quota = CpuQuota(None if cpu_limit_milli is None else cpu_limit_milli * 100)
        defaults: dict[Knob, KnobValue] = {
            Knob.CPUSET_CPUS: CPUSet.from_mask(self.all_cpus),
            Knob.CPUSET_MEMS: CPUSet.of(self._topology.numa_nodes),
            Knob.CPU_SHARES: MIN_SHARES
            if qos_class == "besteffort"
            else milli_to_shares(cpu_request_milli),
            Knob.CPU_QUOTA: quota,
            Knob.CPU_IDLE: 0,
            Knob.MEMORY_LIMIT: memory_limit,
        }
        self._pods[uid] = _SimPod(uid, qos_class, cgroup, ccg, defaults)
        self._by_cgroup[cgroup] = uid
        self._by_cgroup[ccg.cgroup] = uid
        self.dirty.add(uid)

    def stop_pod(self, uid: str) -> None:
        pod = self._pods.pop(uid, None)
        if pod is None:
            return
        for cg in (pod.cgroup, pod.container.cgroup):
            self._by_cgroup.pop(cg, None)
            self._knobs.pop(cg, None)
        self.dirty.discard(uid)

    def has_pod(self, uid: str) -> bool:
        return uid in self._pods

    def effective(self, uid: str) -> PodKnobs:
        """The knobs the kernel would apply to the pod's tasks."""
        pod = self._pods[uid]
        levels = [*_ancestors(pod.cgroup), pod.cgroup, pod.container.cgroup]
        cpus = self.all_cpus
        quota: float | None = None
        idle = False
        mem: int | None = None
        shares = MIN_SHARES
        for cg in (pod.cgroup, pod.container.cgroup):
            v = self._knobs.get(cg, {}).get(Knob.CPU_SHARES)
            if isinstance(v, int):
                shares = v
                break
        else:
            d = pod.defaults.get(Knob.CPU_SHARES)
            shares = d if isinstance(d, int) else MIN_SHARES
        for cg in levels:
            own = cg in (pod.cgroup, pod.container.cgroup)
            vals = self._knobs.get(cg, {})
            cs = vals.get(Knob.CPUSET_CPUS, pod.defaults[Knob.CPUSET_CPUS] if own else None)
            if isinstance(cs, CPUSet) and not cs.is_empty():
                cpus &= cs.mask
            q = vals.get(Knob.CPU_QUOTA, pod.defaults[Knob.CPU_QUOTA] if own else None)
            if isinstance(q, CpuQuota) and q.cores is not None:
                quota = q.cores if quota is None else min(quota, q.cores)
            if vals.get(Knob.CPU_IDLE) == 1:
                idle = True
            m = vals.get(Knob.MEMORY_LIMIT, pod.defaults[Knob.MEMORY_LIMIT] if own else None)
            if isinstance(m, int):
                mem = m if mem is None else min(mem, m)
        if cpus == 0:  # the kernel never lets a cgroup run on no cpu: it keeps the parent's
            cpus = self.all_cpus
        return PodKnobs(cpus, quota, shares, idle, mem)


def _is_qos_cgroup(cg: str) -> bool:
    return cg in (KUBEPODS, f"{KUBEPODS}/burstable", f"{KUBEPODS}/besteffort")


def _qos_defaults(all_cpus: int) -> dict[Knob, KnobValue]:
    return {
        Knob.CPUSET_CPUS: CPUSet.from_mask(all_cpus),
        Knob.CPU_QUOTA: CpuQuota(None),
        Knob.CPU_IDLE: 0,
        Knob.MEMORY_LIMIT: None,
    }


def _ancestors(cgroup: str) -> list[str]:
    parts = cgroup.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _check(knob: Knob, value: KnobValue, all_cpus: int) -> str:
    if knob in (Knob.CPUSET_CPUS, Knob.CPUSET_MEMS):
        if not isinstance(value, CPUSet) or value.is_empty():
            return f"{knob.value}: needs a non-empty cpuset, got {value!r}"
        if knob is Knob.CPUSET_CPUS and value.mask & ~all_cpus:
            return f"{knob.value}: {value} names cpus the machine lacks"
    elif knob is Knob.CPU_SHARES:
        if not isinstance(value, int) or not MIN_SHARES <= value <= MAX_SHARES:
            return f"cpu.shares: needs an integer in 2..262144, got {value!r}"
    elif knob is Knob.CPU_QUOTA:
        if not isinstance(value, CpuQuota):
            return f"cpu quota: needs a CpuQuota, got {value!r}"
    elif knob is Knob.CPU_IDLE:
        if value not in (0, 1):
            return f"cpu.idle: needs 0 or 1, got {value!r}"
    elif knob in (Knob.MEMORY_LIMIT, Knob.MEMORY_HIGH) and not (
        value is None or (isinstance(value, int) and value > 0)
    ):
        return f"{knob.value}: needs bytes or None, got {value!r}"
    return ""
