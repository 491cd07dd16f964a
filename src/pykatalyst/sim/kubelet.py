"""The kubelets of a simulated cluster, as one stand-in: it registers the nodes, starts the
pods the scheduler bound on their node's `SimHost`, stops the pods something else deleted
(the agent's evictions) and deletes the pods that ended (OOM kills, finished tasks), as a
kubelet would; the pods' owners (`PodOwner`: the services' ReplicaSets, the batch
framework) hear of each start and stop and bring evicted or killed work back.

It keeps what the simulator knows of each pod (`pods`, by namespace/name) and says when
the set of running pods changed (`changed`), so that the machines rebuild their rows.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

from pykatalyst.api.names import NODE, POD
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.protocol import ApiError, NotFound
from pykatalyst.sim import manifests
from pykatalyst.sim.control import ControlPlane
from pykatalyst.sim.host import SimHost
from pykatalyst.sim.physics import oom_score_adj
from pykatalyst.sim.pods import NodeSim, SimPod
from pykatalyst.sim.recording import Recorder
from pykatalyst.sim.scenario import NodeGroup, Policy, Scenario
from pykatalyst.topology.machine import CPUTopology

_KUBE_QOS = {"guaranteed": "Guaranteed", "besteffort": "BestEffort"}


class PodOwner(Protocol):
    """What owns a pod (its ReplicaSet, the batch framework): told when the pod starts,
    when it is stopped before it started, and asked to bring its work back."""

    def started(self, pod: SimPod) -> None: ...

    def dropped(self, pod: SimPod) -> None: ...

    def restart(self, pod: SimPod) -> None: ...


def topology(group: NodeGroup) -> CPUTopology:
    """The cpus of a node of `group`."""
    numas = group.sockets * group.numa_per_socket
    return CPUTopology.synthetic(
        sockets=group.sockets,
        cores_per_socket=group.cores_per_socket,
        threads_per_core=group.threads_per_core,
        numa_per_socket=group.numa_per_socket,
        memory_per_numa=group.memory // numas,
    )


class SimKubelet:
    """Every node's kubelet. `control` and `owners` (by pod kind) are set once the control
    plane and the owners exist."""

    def __init__(
        self,
        scenario: Scenario,
        policy: Policy,
        cluster: MemoryCluster,
        clock: VirtualClock,
        recorder: Recorder,
    ) -> None:
        self.cluster = cluster
        self.clock = clock
        self.recorder = recorder
        self.nodes: list[NodeSim] = []
        self.node_index: dict[str, int] = {}
        for group in scenario.nodes:
            topo = topology(group)
            for i in range(group.count):
                name = f"{group.name}-{i}"
                host = SimHost(topo, group.memory, group.system_reserved_memory)
                self.node_index[name] = len(self.nodes)
                self.nodes.append(NodeSim(name, group, host, group.cpus, group.memory))
                cluster.create(NODE, manifests.node_manifest(name, group, policy))
        self.pods: dict[str, SimPod] = {}
        self.changed = True  # pods started or stopped since the machines' last rebuild
        self.control: ControlPlane | None = None
        self.owners: dict[str, PodOwner] = {}
        self._watch = cluster.watch(POD)

    def create(self, pod: SimPod, manifest: dict[str, Any]) -> None:
        """Create the pod through the API (for its owner) and keep it for when it is bound."""
        created = self.cluster.create(POD, manifest)
        pod.uid = created["metadata"]["uid"]
        self.pods[pod.key] = pod

    def running(self) -> list[SimPod]:
        return [p for p in self.pods.values() if p.node >= 0]

    def pending(self) -> int:
        return sum(1 for p in self.pods.values() if p.node < 0)

    def sync(self, step: int) -> None:
        """Start pods the scheduler bound; stop pods something else deleted (evictions)."""
        # The events are read here and now, never kept or changed: no copies.
        for ev in self._watch.next_events(copy=False):
            obj = ev.object
            meta = obj.get("metadata") or {}
            key = f"{meta.get('namespace')}/{meta.get('name')}"
            pod = self.pods.get(key)
            if pod is None or pod.uid != meta.get("uid"):
                continue
            if ev.type == "DELETED" or "deletionTimestamp" in meta:
                if not pod.terminating:
                    self._evicted(pod)
                continue
            node_name = (obj.get("spec") or {}).get("nodeName")
            if node_name and pod.node < 0:
                self._start(pod, node_name, step)

    def _start(self, pod: SimPod, node_name: str, step: int) -> None:
        idx = self.node_index[node_name]
        node = self.nodes[idx]
        node.host.start_pod(
            pod.uid,
            pod.qos_class,
            "app" if pod.kind == "service" else "task",
            pod.cpu_request_milli,
            pod.cpu_limit_milli,
            pod.memory_limit,
        )
        pod.node = idx
        pod.started = self.clock.now()
        self.recorder.event(pod.started, "Started", pod.key, node_name)
        qos = _KUBE_QOS.get(pod.qos_class, "Burstable")
        pod.oom_adj = oom_score_adj(qos, pod.memory_request, node.memory)
        self.owners[pod.kind].started(pod)
        self.changed = True
        if self.control is not None:
            self.control.pod_started(node_name, step)

    def _stop(self, pod: SimPod) -> None:
        if pod.node >= 0:
            self.nodes[pod.node].host.stop_pod(pod.uid)
        else:
            self.owners[pod.kind].dropped(pod)
        self.pods.pop(pod.key, None)
        self.changed = True

    def delete(self, pod: SimPod) -> None:
        """The pod ended: delete it (at once) and stop it."""
        pod.terminating = True
        with contextlib.suppress(NotFound):
            self.cluster.delete(POD, pod.name, pod.namespace, grace_period_seconds=0)
        self._stop(pod)

    def _evicted(self, pod: SimPod) -> None:
        """Something (the agent's eviction manager) deleted the pod."""
        pod.terminating = True
        if pod.node >= 0:
            self.recorder.evicted(self.clock.now(), pod.key, self.nodes[pod.node].name)
        with contextlib.suppress(ApiError):
            self.cluster.delete(POD, pod.name, pod.namespace, grace_period_seconds=0)
        self._stop(pod)
        self.owners[pod.kind].restart(pod)

    def oom_kill(self, pod: SimPod, now: float) -> None:
        """The kernel killed the pod's container: a service's restarts in place (the
        replica is down for this step); a batch pod fails and its owner runs it again."""
        self.recorder.oom_killed(now, pod.key, self.nodes[pod.node].name)
        if pod.kind == "service":
            self.recorder.service_restarted()
            return
        self.delete(pod)
        self.owners[pod.kind].restart(pod)
