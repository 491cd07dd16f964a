"""What the simulator knows of each pod and node beyond their API objects: the pod's
resources as the kubelet read them, its place, its work and the kernel's counters
(`SimPod`); the node's group and its `SimHost` (`NodeSim`). The kubelet (`sim.kubelet`),
the pods' owners (`sim.owners`), the machines (`sim.machines`) and the tallies
(`sim.recording`) all work on these."""

from __future__ import annotations

from dataclasses import dataclass

from pykatalyst.api import names
from pykatalyst.api.qos_model import kube_qos_class
from pykatalyst.sim.host import PodKnobs, SimHost
from pykatalyst.sim.scenario import NodeGroup


@dataclass(slots=True)
class SimPod:
    key: str  # namespace/name
    name: str
    namespace: str
    kind: str  # "service" | "batch"
    index: int  # service index or task index
    replica: int
    qos_class: str  # kubelet's: guaranteed | burstable | besteffort
    reclaimed: bool
    cpu_request_milli: int
    cpu_limit_milli: int | None
    memory_limit: int | None
    memory_request: int
    memory_used: int
    cores: float = 0.0
    work: float = 0.0
    progress: float = 0.0
    uid: str = ""
    node: int = -1
    created: float = 0.0
    started: float = -1.0
    terminating: bool = False
    cpu_s: float = 0.0  # cumulative cpu seconds (cpuacct.usage)
    knobs: PodKnobs | None = None  # as the kernel applies them; None: read again
    periods: int = 0
    throttled_periods: int = 0
    oom_adj: int = 0


@dataclass(slots=True)
class NodeSim:
    name: str
    group: NodeGroup
    host: SimHost
    cpus: int
    memory: int


def kube_qos(
    requests_cpu: int, requests_mem: int, limits_cpu: int | None, limits_mem: int | None
) -> str:
    """The kubelet's QoS class (`api.qos_model.kube_qos_class`), lower-case as in cgroup
    paths, of a one-container pod with these requests and limits (milli-cpu, bytes)."""
    requests = {names.RESOURCE_CPU: requests_cpu, names.RESOURCE_MEMORY: requests_mem}
    limits = {
        r: v
        for r, v in ((names.RESOURCE_CPU, limits_cpu), (names.RESOURCE_MEMORY, limits_mem))
        if v is not None
    }
    return kube_qos_class([(requests, limits)], 0).lower()
