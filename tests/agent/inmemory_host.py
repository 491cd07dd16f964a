"""An in-memory `Host` for agent tests: pods, their load and memory, and the knobs written.

The machine model is deliberately simple: a container with `load` busy threads uses
min(load, |cpuset|) cores spread evenly over its cpuset, and its runnable count is the
thread count. It is enough to see pools move with load and headroom follow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pykatalyst.agent.config import AgentConfig
from pykatalyst.agent.host import cgroupfs
from pykatalyst.agent.host.base import (
    ApplyResult,
    CgroupStats,
    ContainerCgroup,
    HostSample,
    Knob,
    KnobValue,
    KnobWrite,
    MemoryInfo,
    NetApplyResult,
    NetShape,
    PodCgroup,
    WriteFailure,
)
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology

GIB = 1 << 30
# What the shipped agent configs turn on (both are off by default, as in Katalyst).
RECLAIM_ON: dict[str, Any] = {"reclaimed_cpu_idle": True, "advisor": {"enable_reclaim": True}}


def reclaiming(overrides: dict[str, Any] | None = None) -> AgentConfig:
    """An agent config with reclaim on, plus `overrides` (merged one level deep)."""
    data: dict[str, Any] = {"reclaimed_cpu_idle": True}
    for key, value in (overrides or {}).items():
        data[key] = value
    data["advisor"] = {"enable_reclaim": True, **(overrides or {}).get("advisor", {})}
    return AgentConfig.model_validate(data)


@dataclass
class _Container:
    name: str
    cgroup: str
    load: float = 0.0
    rss: int = 0
    cache: int = 0


@dataclass
class _Pod:
    uid: str
    qos_class: str
    cgroup: str
    containers: dict[str, _Container] = field(default_factory=dict)


class InMemoryHost:
    cgroup_version = 1
    page_size = 1  # exact limits: no page rounding

    def __init__(self, topology: CPUTopology) -> None:
        self._topo = topology
        self.pods: dict[str, _Pod] = {}
        self.knobs: dict[str, dict[Knob, KnobValue]] = {}
        self.writes: list[KnobWrite] = []
        self.fail_knobs: set[tuple[str, Knob]] = set()
        self.silent: set[str] = set()  # cgroups whose stats the machine stops reporting
        self.discover_calls = 0
        self.net_shapes: list[NetShape | None] = []  # every shape the agent applied
        self.net_error = ""  # when set, apply_net fails with it
        self.sched_wait_us: list[float] = []  # per cpu, as /proc/schedstat would give it
        self.cpu_seconds: dict[str, float] = {}  # cumulative cpu time, by `advance`

    # -- test controls ---------------------------------------------------------------------

    def add_pod(
        self, uid: str, containers: Sequence[str] = ("app",), qos_class: str = "burstable"
    ) -> _Pod:
        base = "kubepods" if qos_class == "guaranteed" else f"kubepods/{qos_class}"
        pod = _Pod(uid, qos_class, f"{base}/pod{uid}")
        for name in containers:
            cid = f"{uid[:8]}-{name}"
            pod.containers[name] = _Container(name, f"{pod.cgroup}/{cid}")
        self.pods[uid] = pod
        return pod

    def remove_pod(self, uid: str) -> None:
        pod = self.pods.pop(uid)
        self.knobs.pop(pod.cgroup, None)
        for c in pod.containers.values():
            self.knobs.pop(c.cgroup, None)

    def set_load(self, uid: str, load: float, container: str = "app") -> None:
        self.pods[uid].containers[container].load = load

    def set_memory(self, uid: str, rss: int, cache: int = 0, container: str = "app") -> None:
        c = self.pods[uid].containers[container]
        c.rss, c.cache = rss, cache

    def advance(self, seconds: float) -> None:
        """Let `seconds` of time pass: every cgroup's cumulative cpu time grows by what its
        load uses on its cpuset meanwhile."""
        for pod in self.pods.values():
            for c in pod.containers.values():
                used = min(c.load, float(len(self.cpuset_of(c.cgroup)))) * seconds
                for path in (c.cgroup, pod.cgroup):
                    self.cpu_seconds[path] = self.cpu_seconds.get(path, 0.0) + used

    def cpuset_of(self, cgroup: str) -> CPUSet:
        v = self.knobs.get(cgroup, {}).get(Knob.CPUSET_CPUS)
        return v if isinstance(v, CPUSet) else self._topo.all_cpus

    # -- Host ------------------------------------------------------------------------------

    def topology(self) -> CPUTopology:
        return self._topo

    def discover(self) -> list[PodCgroup]:
        self.discover_calls += 1
        return [
            PodCgroup(
                p.uid,
                p.qos_class,
                p.cgroup,
                tuple(
                    ContainerCgroup(c.name, c.cgroup.rsplit("/", 1)[1], c.cgroup)
                    for c in p.containers.values()
                ),
            )
            for p in self.pods.values()
        ]

    def sample(self, now: float, cgroups: Sequence[str]) -> HostSample:
        ratio = [0.0] * self._topo.num_cpus
        busy: dict[CPUSet, float] = {}  # usage per distinct cpuset, spread once at the end
        stats: dict[str, CgroupStats] = {}
        for pod in self.pods.values():
            pod_usage = 0.0
            pod_rss = 0
            pod_cache = 0
            threads = 0
            for c in pod.containers.values():
                cpus = self.cpuset_of(c.cgroup)
                usage = min(c.load, float(len(cpus)))
                if usage > 0:
                    busy[cpus] = busy.get(cpus, 0.0) + usage
                n = round(c.load)
                stats[c.cgroup] = CgroupStats(
                    cpu_usage_cores=usage,
                    nr_running=n,
                    memory_rss=c.rss,
                    memory_cache=c.cache,
                    memory_shmem=0,
                )
                pod_usage += usage
                pod_rss += c.rss
                pod_cache += c.cache
                threads += n
            stats[pod.cgroup] = CgroupStats(
                cpu_usage_cores=pod_usage,
                nr_running=threads,
                memory_rss=pod_rss,
                memory_cache=pod_cache,
                memory_shmem=0,
            )
        for cpus, usage in busy.items():
            share = usage / len(cpus)
            for cpu in cpus:
                ratio[cpu] = min(1.0, ratio[cpu] + share)
        wanted = {cg: stats[cg] for cg in cgroups if cg in stats and cg not in self.silent}
        total = self._topo.total_memory or 64 * GIB
        return HostSample(
            time=now,
            cgroups=wanted,
            cpu_usage_ratio=ratio,
            cpu_sched_wait_us=list(self.sched_wait_us),
            memory=MemoryInfo(total=total, free=total // 2, available=total // 2),
        )

    def qos_cgroup(self, qos_class: str) -> str | None:
        return None  # no kubelet layout to ask: the agent infers it from the pods

    def memory_usage(self, cgroup: str) -> int | None:
        return None

    def cpu_usage_s(self, cgroup: str) -> float | None:
        return self.cpu_seconds.get(cgroup)

    def same_value(self, knob: Knob, desired: KnobValue, actual: KnobValue) -> bool:
        return cgroupfs.values_equal(knob, desired, actual, self.cgroup_version, self.page_size)

    def knob_problem(self, knob: Knob, value: KnobValue) -> str | None:
        return cgroupfs.check_knob_value(knob, value)

    def apply_net(self, shape: NetShape | None) -> NetApplyResult:
        if self.net_error:
            return NetApplyResult(False, self.net_error)
        self.net_shapes.append(shape)
        return NetApplyResult(True)

    def read_knobs(self, cgroup: str) -> dict[Knob, KnobValue]:
        return dict(self.knobs.get(cgroup, {}))

    def apply(self, writes: Sequence[KnobWrite]) -> ApplyResult:
        applied: list[KnobWrite] = []
        failed: list[WriteFailure] = []
        existing = {"kubepods", "kubepods/burstable", "kubepods/besteffort"}  # the kubelet's
        existing.update(p.cgroup for p in self.pods.values())
        existing.update(c.cgroup for p in self.pods.values() for c in p.containers.values())
        for w in writes:
            if w.cgroup not in existing:
                failed.append(WriteFailure(w, f"{w.cgroup}: no such cgroup", vanished=True))
                continue
            if (w.cgroup, w.knob) in self.fail_knobs:
                failed.append(WriteFailure(w, f"{w.cgroup}/{w.knob.value}: permission denied"))
                continue
            self.knobs.setdefault(w.cgroup, {})[w.knob] = w.value
            self.writes.append(w)
            applied.append(w)
        return ApplyResult(tuple(applied), tuple(failed))


# -- pods and nodes for a MemoryCluster --------------------------------------------------


def pod_json(
    name: str,
    *,
    node: str = "node-1",
    level: str | None = "shared_cores",
    cpu: str | None = "2",
    memory: str | None = "1Gi",
    annotations: dict[str, str] | None = None,
    reclaimed_cpu: str | None = None,
    reclaimed_memory: str | None = None,
    containers: Sequence[str] = ("app",),
    namespace: str = "default",
) -> dict[str, object]:
    from pykatalyst.api import names

    ann = dict(annotations or {})
    if level is not None:
        ann[names.QOS_LEVEL_ANNOTATION] = level
    res: dict[str, str] = {}
    if cpu is not None:
        res["cpu"] = cpu
    if memory is not None:
        res["memory"] = memory
    if reclaimed_cpu is not None:
        res[names.RECLAIMED_MILLICPU] = reclaimed_cpu
    if reclaimed_memory is not None:
        res[names.RECLAIMED_MEMORY] = reclaimed_memory
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": ann},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": c, "image": "busybox", "resources": {"requests": res, "limits": res}}
                for c in containers
            ],
        },
    }


def node_json(name: str = "node-1") -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {}}
