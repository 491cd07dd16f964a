"""The owners of a simulated cluster's pods: the services' ReplicaSets and the batch
framework. They create pods through the kubelet stand-in (`sim.kubelet`) and bring the
work back when a pod is evicted or killed: a ReplicaSet recreates the replica; the
framework requeues the task from scratch (its progress is lost)."""

from __future__ import annotations

from collections import deque

import numpy as np

from pykatalyst.api import names
from pykatalyst.api.quantity import parse_quantity
from pykatalyst.cluster.clock import Clock
from pykatalyst.sim import manifests
from pykatalyst.sim.kubelet import SimKubelet
from pykatalyst.sim.pods import SimPod, kube_qos
from pykatalyst.sim.recording import Tally
from pykatalyst.sim.scenario import Policy, Scenario
from pykatalyst.sim.workload import Workload


class ReplicaSets:
    """The services' ReplicaSets: every replica is created at the start and recreated
    when its pod is evicted."""

    def __init__(
        self, workload: Workload, policy: Policy, kubelet: SimKubelet, clock: Clock
    ) -> None:
        self.workload = workload
        self.policy = policy
        self.kubelet = kubelet
        self.clock = clock

    def create_all(self) -> None:
        for si, load in enumerate(self.workload.services):
            for r in range(load.service.replicas):
                self.create(si, r)

    def create(self, si: int, replica: int) -> None:
        svc = self.workload.services[si].service
        manifest = manifests.service_pod(svc, replica, self.policy)
        # what the kubelet reads from the manifest (dedicated cores round up to whole cpus)
        res = manifest["spec"]["containers"][0]["resources"]
        cpu_req = parse_quantity(res["requests"][names.RESOURCE_CPU]).milli_value()
        limit = res["limits"].get(names.RESOURCE_CPU)
        cpu_lim = None if limit is None else parse_quantity(limit).milli_value()
        pod = SimPod(
            key=f"{manifests.SERVICE_NAMESPACE}/{manifest['metadata']['name']}",
            name=manifest["metadata"]["name"],
            namespace=manifests.SERVICE_NAMESPACE,
            kind="service",
            index=si,
            replica=replica,
            qos_class=kube_qos(cpu_req, svc.memory_request, cpu_lim, svc.memory_request),
            reclaimed=False,
            cpu_request_milli=cpu_req,
            cpu_limit_milli=cpu_lim,
            memory_limit=svc.memory_request,
            memory_request=svc.memory_request,
            memory_used=int(svc.memory_request * svc.memory_usage),
            created=self.clock.now(),
        )
        self.kubelet.create(pod, manifest)

    def started(self, pod: SimPod) -> None:
        pass

    def dropped(self, pod: SimPod) -> None:
        pass

    def restart(self, pod: SimPod) -> None:
        self.create(pod.index, pod.replica)


class BatchFramework:
    """The batch framework: submits tasks as they arrive, keeping at most `max_pending`
    of its pods pending in the cluster and the rest in its own queue (`queue`: task,
    attempt); requeues evicted or killed tasks first, as their next attempt; deletes
    finished tasks' pods."""

    def __init__(
        self,
        scenario: Scenario,
        policy: Policy,
        workload: Workload,
        kubelet: SimKubelet,
        tally: Tally,
    ) -> None:
        self.tasks = workload.batch
        self.policy = policy
        self.kubelet = kubelet
        self.tally = tally
        self.max_pending = scenario.batch.max_pending if scenario.batch else 0
        self.queue: deque[tuple[int, int]] = deque()  # (task, attempt) waiting to submit
        self.next_task = 0
        self.pending = 0  # its pods pending in the cluster
        self._attempt: dict[int, int] = {}

    def arrivals(self, now: float) -> None:
        tasks = self.tasks
        while self.next_task < len(tasks) and tasks.arrival[self.next_task] <= now:
            self.queue.append((self.next_task, 0))
            self.next_task += 1
        while self.queue and self.pending < self.max_pending:
            task, attempt = self.queue.popleft()
            self._submit(task, attempt)

    def _submit(self, task: int, attempt: int) -> None:
        tasks = self.tasks
        cores = float(tasks.cores[task])
        memory = int(tasks.memory[task])
        manifest = manifests.batch_pod(task, attempt, cores, memory, self.policy)
        reclaimed = self.policy.name == "katalyst"
        cpu_req = 0 if reclaimed else manifests.milli(cores)
        mem_req = 0 if reclaimed else memory
        pod = SimPod(
            key=f"{manifests.BATCH_NAMESPACE}/{manifest['metadata']['name']}",
            name=manifest["metadata"]["name"],
            namespace=manifests.BATCH_NAMESPACE,
            kind="batch",
            index=task,
            replica=attempt,
            qos_class=kube_qos(cpu_req, mem_req, None, None if reclaimed else memory),
            reclaimed=reclaimed,
            cpu_request_milli=cpu_req,
            cpu_limit_milli=None,
            memory_limit=None if reclaimed else memory,
            memory_request=mem_req,
            memory_used=int(tasks.memory_used[task]),
            cores=cores,
            work=float(tasks.work[task]),
            created=self.kubelet.clock.now(),
        )
        self.kubelet.create(pod, manifest)
        self.pending += 1

    def arrival(self, pod: SimPod) -> float:
        return float(self.tasks.arrival[pod.index])

    def started(self, pod: SimPod) -> None:
        self.pending -= 1
        self.tally.wait_times.append(pod.started - self.arrival(pod))

    def dropped(self, pod: SimPod) -> None:
        self.pending -= 1

    def restart(self, pod: SimPod) -> None:
        if pod.started >= 0:
            self.tally.lost_work += pod.progress
            self.tally.evictions_batch += 1
        attempt = self._attempt.get(pod.index, 0) + 1
        self._attempt[pod.index] = attempt
        self.queue.appendleft((pod.index, attempt))

    def complete(self, running: list[SimPod], batch: np.ndarray, end: float) -> None:
        """Delete the pods (rows of `running` where `batch`) whose task finished by `end`."""
        for i in np.nonzero(batch)[0].tolist():
            pod = running[i]
            if pod.terminating or pod.progress < pod.work:
                continue
            self.tally.completed += 1
            self.tally.completed_work += pod.work
            node = self.kubelet.nodes[pod.node].name
            self.tally.events.append((end, "Completed", pod.key, node))
            self.tally.completion_times.append(end - self.arrival(pod))
            self.kubelet.delete(pod)
