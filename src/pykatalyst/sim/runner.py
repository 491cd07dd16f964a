"""The runner: one simulated cluster per policy, stepped on a virtual clock.

Each step, in the order a real cluster would see it:
1. the batch framework submits tasks that have arrived (keeping at most `max_pending`
   pods pending in the cluster, the rest in its own queue);
2. the scheduler places pending pods (bindings through `pods/binding`);
3. the kubelet (the runner) starts bound pods on their `SimHost` and stops deleted ones;
4. each node's agent whose period is due reconciles against its `SimHost` (pools, knobs,
   reclaimed capacity, evictions) through the same `Cluster` API it uses in production;
5. the physics computes, for every pod on every node at once, the cpu it gets, its
   memory, OOM kills and each service replica's p99 latency; batch tasks progress and the
   finished ones leave.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import math
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from pykatalyst.api import names
from pykatalyst.api.names import NODE, POD
from pykatalyst.api.quantity import parse_quantity
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.cluster.memory import MemoryCluster
from pykatalyst.cluster.protocol import ApiError, NotFound
from pykatalyst.sim import manifests
from pykatalyst.sim.arrays import CpuStep, domains, mask_rows
from pykatalyst.sim.control import ControlPlane, make_control_plane
from pykatalyst.sim.host import NodeUsage, PodKnobs, PodUsage, SimHost, run_queue_waits_us
from pykatalyst.sim.physics import (
    latency_p99,
    model_constants,
    oom_score_adj,
    oom_victims,
    share_cpu,
)
from pykatalyst.sim.scenario import NodeGroup, Policy, Scenario
from pykatalyst.sim.workload import Workload
from pykatalyst.topology.machine import CPUTopology

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

Progress = Callable[[int, int], None]


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


@dataclass(slots=True)
class Series:
    """Per-step time series of one policy's run."""

    time: list[float] = field(default_factory=list)
    cpu_util: list[float] = field(default_factory=list)
    cpu_util_services: list[float] = field(default_factory=list)
    cpu_util_batch: list[float] = field(default_factory=list)
    mem_util: list[float] = field(default_factory=list)
    slo_violations: list[int] = field(default_factory=list)  # replica-steps over SLO
    replicas: list[int] = field(default_factory=list)
    p99_ratio_max: list[float] = field(default_factory=list)  # worst p99 / SLO
    batch_running: list[int] = field(default_factory=list)
    batch_pending: list[int] = field(default_factory=list)
    batch_queued: list[int] = field(default_factory=list)
    evictions: list[int] = field(default_factory=list)  # in this step
    oom_kills: list[int] = field(default_factory=list)
    reclaimed_capacity: list[float] = field(default_factory=list)  # cores, cluster
    sample_share_pool: list[float] = field(default_factory=list)
    sample_reclaim_pool: list[float] = field(default_factory=list)
    sample_reclaimed_capacity: list[float] = field(default_factory=list)
    sample_reclaimed_usage: list[float] = field(default_factory=list)
    sample_service_usage: list[float] = field(default_factory=list)


@dataclass(slots=True)
class Tally:
    completed: int = 0
    completed_work: float = 0.0  # core-seconds of finished tasks
    completion_times: list[float] = field(default_factory=list)
    wait_times: list[float] = field(default_factory=list)
    lost_work: float = 0.0  # core-seconds thrown away by evictions and OOM kills
    batch_cpu_used: float = 0.0  # core-seconds batch ran, finished or not
    evictions: int = 0
    evictions_batch: int = 0
    oom_kills: int = 0
    service_restarts: int = 0
    pods_pending_max: int = 0
    agent_reconciles: int = 0
    events: list[tuple[float, str, str, str]] = field(default_factory=list)


@dataclass(slots=True)
class PolicyRun:
    policy: Policy
    series: Series
    tally: Tally
    latency: dict[str, list[float]]  # per service: p99 per step (mean over replicas)
    sample_node: str
    wall_s: float = 0.0


# Allocations between young-generation collections while a simulation runs (Python's
# default is 700).
GC_YOUNG_THRESHOLD = 20_000


@contextlib.contextmanager
def few_collections() -> Iterator[None]:
    """Collect cycles less often while simulating: a run allocates millions of short-lived
    objects and makes few cycles, and every full collection rescans the whole cluster
    store (14 % of a 100-node run's CPU at Python's defaults). The objects alive at the
    start are frozen out of collections; both settings are restored afterwards."""
    old = gc.get_threshold()
    gc.freeze()
    if old[0]:  # 0: automatic collection is off, and stays off
        gc.set_threshold(max(GC_YOUNG_THRESHOLD, old[0]), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


def _topology(group: NodeGroup) -> CPUTopology:
    numas = group.sockets * group.numa_per_socket
    return CPUTopology.synthetic(
        sockets=group.sockets,
        cores_per_socket=group.cores_per_socket,
        threads_per_core=group.threads_per_core,
        numa_per_socket=group.numa_per_socket,
        memory_per_numa=group.memory // numas,
    )


def _kube_qos(
    requests_cpu: int, requests_mem: int, limits_cpu: int | None, limits_mem: int | None
) -> str:
    if requests_cpu == 0 and requests_mem == 0 and limits_cpu is None and limits_mem is None:
        return "besteffort"
    if limits_cpu is not None and limits_cpu == requests_cpu and limits_mem == requests_mem:
        return "guaranteed"
    return "burstable"


class PolicySim:
    """One policy's simulated cluster."""

    def __init__(self, scenario: Scenario, policy: Policy, workload: Workload) -> None:
        self.scenario = scenario
        self.policy = policy
        self.workload = workload
        self.dt = scenario.step
        self.clock = VirtualClock(0.0)
        self.cluster = MemoryCluster(clock=self.clock, watch_history=20_000, seed=scenario.seed)
        for ns in (manifests.SERVICE_NAMESPACE, manifests.BATCH_NAMESPACE):
            self.cluster.create(names.NAMESPACE, {"metadata": {"name": ns}})
        self.nodes: list[NodeSim] = []
        self.node_index: dict[str, int] = {}
        for group in scenario.nodes:
            topo = _topology(group)
            for i in range(group.count):
                name = f"{group.name}-{i}"
                host = SimHost(topo, group.memory, group.system_reserved_memory)
                self.node_index[name] = len(self.nodes)
                self.nodes.append(NodeSim(name, group, host, group.cpus, group.memory))
                self.cluster.create(NODE, manifests.node_manifest(name, group, policy))
        self.pods: dict[str, SimPod] = {}
        self.series = Series()
        self.tally = Tally()
        self.latency: dict[str, list[float]] = {s.service.name: [] for s in workload.services}
        self.queue: deque[tuple[int, int]] = deque()  # (task, attempt) waiting to submit
        self.next_task = 0
        self.pending_batch = 0
        self._attempt: dict[int, int] = {}
        self._arrays_dirty = True
        self._a: dict[str, Any] = {}
        self._watch = self.cluster.watch(POD)
        self._max_cpus = max(n.cpus for n in self.nodes)
        self._static_node_arrays()
        self.control: ControlPlane = make_control_plane(self)
        self._create_services()
        self.sample_node = 0
        self._step = 0
        self._node_load = np.zeros((len(self.nodes), 3))
        self._sample_pools = (0.0, 0.0)
        self.last_granted: F64 = np.zeros(0)
        self.last_demand: F64 = np.zeros(0)
        self._row: dict[str, int] = {}
        self._runnable: F64 = np.zeros(0)
        self._per_cpu_all: F64 = np.zeros((0, 0))
        self._node_mem_used: F64 = np.zeros(len(self.nodes))
        self._load_decay = np.exp(-self.dt / np.array([60.0, 300.0, 900.0]))
        for idx, node_sim in enumerate(self.nodes):
            node_sim.host.pod_usage = self._pod_usage
            node_sim.host.node_usage = functools.partial(self._node_usage, idx)
        self._cache_pressure = scenario.batch.cache_pressure if scenario.batch else 0.0
        self.constants = model_constants(scenario.model.overrides())

    # --- setup --------------------------------------------------------------------------

    def _static_node_arrays(self) -> None:
        n, c = len(self.nodes), self._max_cpus
        sib = np.tile(np.arange(c), (n, 1))
        has_sib = np.zeros((n, c), dtype=bool)
        sock = np.zeros((n, c), dtype=np.int64)
        valid = np.zeros((n, c), dtype=bool)
        nsock = max(g.sockets for g in self.scenario.nodes)
        sock_cpus = np.ones((n, nsock))
        for i, node in enumerate(self.nodes):
            topo = node.host.topology()
            for info in topo.cpu_infos:
                valid[i, info.cpu] = True
                sock[i, info.cpu] = info.socket
                others = [x for x in topo.siblings(info.cpu) if x != info.cpu]
                if others:
                    sib[i, info.cpu] = others[0]
                    has_sib[i, info.cpu] = True
            for s in topo.sockets:
                sock_cpus[i, s] = len(topo.cpus_in_socket(s))
        self._sib, self._has_sib, self._sock, self._valid = sib, has_sib, sock, valid
        self._sock_cpus = sock_cpus
        self._node_cpus = np.array([n_.cpus for n_ in self.nodes], dtype=np.float64)
        self._node_mem = np.array([n_.memory for n_ in self.nodes], dtype=np.float64)
        self._node_sys_mem = np.array(
            [n_.group.system_reserved_memory for n_ in self.nodes], dtype=np.float64
        )

    def _create_services(self) -> None:
        for si, load in enumerate(self.workload.services):
            svc = load.service
            for r in range(svc.replicas):
                self._create_service_pod(si, r)

    def _create_service_pod(self, si: int, replica: int) -> None:
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
            qos_class=_kube_qos(cpu_req, svc.memory_request, cpu_lim, svc.memory_request),
            reclaimed=False,
            cpu_request_milli=cpu_req,
            cpu_limit_milli=cpu_lim,
            memory_limit=svc.memory_request,
            memory_request=svc.memory_request,
            memory_used=int(svc.memory_request * svc.memory_usage),
            created=self.clock.now(),
        )
        self._submit(pod, manifest)

    def _submit(self, pod: SimPod, manifest: dict[str, Any]) -> None:
        created = self.cluster.create(POD, manifest)
        pod.uid = created["metadata"]["uid"]
        self.pods[pod.key] = pod

    # --- batch framework ----------------------------------------------------------------

    def _arrivals(self, now: float) -> None:
        tasks = self.workload.batch
        while self.next_task < len(tasks) and tasks.arrival[self.next_task] <= now:
            self.queue.append((self.next_task, 0))
            self.next_task += 1
        limit = self.scenario.batch.max_pending if self.scenario.batch else 0
        while self.queue and self.pending_batch < limit:
            task, attempt = self.queue.popleft()
            self._submit_task(task, attempt)

    def _submit_task(self, task: int, attempt: int) -> None:
        tasks = self.workload.batch
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
            qos_class=_kube_qos(cpu_req, mem_req, None, None if reclaimed else memory),
            reclaimed=reclaimed,
            cpu_request_milli=cpu_req,
            cpu_limit_milli=None,
            memory_limit=None if reclaimed else memory,
            memory_request=mem_req,
            memory_used=int(tasks.memory_used[task]),
            cores=cores,
            work=float(tasks.work[task]),
            created=self.clock.now(),
        )
        self._submit(pod, manifest)
        self.pending_batch += 1

    # --- the kubelet --------------------------------------------------------------------

    def _sync_pods(self) -> None:
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
                self._start(pod, node_name)

    def _start(self, pod: SimPod, node_name: str) -> None:
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
        self.tally.events.append((pod.started, "Started", pod.key, node_name))
        pod.oom_adj = oom_score_adj(
            {"guaranteed": "Guaranteed", "besteffort": "BestEffort"}.get(
                pod.qos_class, "Burstable"
            ),
            pod.memory_request,
            node.memory,
        )
        if pod.kind == "batch":
            self.pending_batch -= 1
            self.tally.wait_times.append(pod.started - self._arrival(pod))
        self._arrays_dirty = True
        self.control.pod_started(node_name, self._step)

    def _arrival(self, pod: SimPod) -> float:
        return float(self.workload.batch.arrival[pod.index])

    def _stop(self, pod: SimPod) -> None:
        if pod.node >= 0:
            self.nodes[pod.node].host.stop_pod(pod.uid)
        elif pod.kind == "batch":
            self.pending_batch -= 1
        self.pods.pop(pod.key, None)
        self._arrays_dirty = True

    def _delete(self, pod: SimPod) -> None:
        pod.terminating = True
        with contextlib.suppress(NotFound):
            self.cluster.delete(POD, pod.name, pod.namespace, grace_period_seconds=0)
        self._stop(pod)

    def _evicted(self, pod: SimPod) -> None:
        """Something (the agent's eviction manager) deleted the pod."""
        pod.terminating = True
        now = self.clock.now()
        if pod.node >= 0:
            self.tally.evictions += 1
            self._evict_count += 1
            self.tally.events.append((now, "Evicted", pod.key, self.nodes[pod.node].name))
        with contextlib.suppress(ApiError):
            self.cluster.delete(POD, pod.name, pod.namespace, grace_period_seconds=0)
        self._stop(pod)
        self._restart(pod)

    def _restart(self, pod: SimPod) -> None:
        """The owner brings the work back: a service's ReplicaSet recreates the replica; the
        batch framework requeues the task from scratch (its progress is lost)."""
        if pod.kind == "service":
            self._create_service_pod(pod.index, pod.replica)
            return
        if pod.started >= 0:
            self.tally.lost_work += pod.progress
            self.tally.evictions_batch += 1
        attempt = self._attempt.get(pod.index, 0) + 1
        self._attempt[pod.index] = attempt
        self.queue.appendleft((pod.index, attempt))

    # --- arrays for the physics ---------------------------------------------------------

    def step_view(self) -> dict[str, Any]:
        """The last step's per-pod arrays (for checks and tests): node, cpus allowed,
        quota-and-cpuset limit, demand and granted cpu, in the same order."""
        a = self._a
        return {
            "pods": list(a.get("running", [])),
            "node": a.get("node", np.zeros(0, np.int64)),
            "limit": a.get("limit", np.zeros(0)),
            "demand": self.last_demand,
            "granted": self.last_granted,
            "node_cpus": self._node_cpus,
        }

    def _running(self) -> list[SimPod]:
        return [p for p in self.pods.values() if p.node >= 0]

    def _rebuild(self) -> None:
        running = self._running()
        n = len(running)
        dirty: set[str] = set()
        for node_sim in self.nodes:
            if node_sim.host.dirty:
                dirty |= node_sim.host.dirty
                node_sim.host.dirty.clear()
        knobs: list[PodKnobs] = []
        for p in running:
            if p.knobs is None or p.uid in dirty:
                p.knobs = self.nodes[p.node].host.effective(p.uid)
            knobs.append(p.knobs)
        node = np.fromiter((p.node for p in running), np.int64, n)
        is_svc = np.fromiter((p.kind == "service" for p in running), bool, n)
        masks = [k.cpus for k in knobs]
        ncpu = np.fromiter((m.bit_count() for m in masks), np.float64, n)
        quota = np.fromiter(
            (math.inf if k.quota_cores is None else k.quota_cores for k in knobs), np.float64, n
        )
        limit = np.minimum(ncpu, quota)
        weight = np.fromiter((k.shares for k in knobs), np.float64, n)
        idle = np.fromiter((k.idle for k in knobs), bool, n)
        mem_limit = np.fromiter(
            (math.inf if k.memory_limit is None else k.memory_limit for k in knobs), np.float64, n
        )
        domain, dom_mask, dom_node = domains([p.node for p in running], masks)
        dm = mask_rows(dom_mask, self._max_cpus)
        cap = dm.sum(axis=1).astype(np.float64)
        svc_idx = np.fromiter(
            (p.index if p.kind == "service" else -1 for p in running), np.int64, n
        )
        self._sample_pools = self._cpus_on_sample(running, masks)
        self._row = {p.uid: i for i, p in enumerate(running)}
        self._a = {
            "running": running,
            "node": node,
            "is_svc": is_svc,
            "svc_idx": svc_idx,
            "replica": np.fromiter((p.replica for p in running), np.int64, n),
            "limit": limit,
            "weight": weight,
            "idle": idle,
            "domain": domain,
            "dom_node": np.asarray(dom_node, dtype=np.int64),
            "dm": dm,
            "cap": cap,
            "cores": np.fromiter((p.cores for p in running), np.float64, n),
            "mem_used": np.fromiter((p.memory_used for p in running), np.float64, n),
            "mem_limit": mem_limit,
            "adj": np.fromiter((p.oom_adj for p in running), np.int64, n),
        }
        self._arrays_dirty = False

    def _cpus_on_sample(self, running: list[SimPod], masks: list[int]) -> tuple[float, float]:
        """The cpus services and batch pods may run on, on the sample node."""
        share_mask = 0
        reclaim_mask = 0
        for i, p in enumerate(running):
            if p.node == self.sample_node:
                if p.kind == "service":
                    share_mask |= masks[i]
                else:
                    reclaim_mask |= masks[i]
        return float(share_mask.bit_count()), float(reclaim_mask.bit_count())

    # --- the step -----------------------------------------------------------------------

    def run(self, progress: Progress | None = None) -> PolicyRun:
        steps = self.scenario.steps
        with few_collections():
            for step in range(steps):
                self.step(step)
                if progress is not None:
                    progress(step + 1, steps)
        return PolicyRun(
            self.policy,
            self.series,
            self.tally,
            self.latency,
            self.nodes[self.sample_node].name,
        )

    def step(self, step: int) -> None:
        now = step * self.dt
        self.clock.set(now)
        self._step = step
        self._evict_count = 0
        self._oom_count = 0
        if self.scenario.batch is not None:
            self._arrivals(now)
        self.control.schedule(step)
        self._sync_pods()
        self.control.reconcile_agents(step)
        self._sync_pods()
        for node_sim in self.nodes:
            if node_sim.host.dirty:
                self._arrays_dirty = True
                break
        if self._arrays_dirty:
            self._rebuild()
        self._physics(step, now)
        pending = sum(1 for p in self.pods.values() if p.node < 0)
        self.tally.pods_pending_max = max(self.tally.pods_pending_max, pending)
        self.series.batch_pending.append(self.pending_batch)
        self.series.batch_queued.append(len(self.queue))
        self.series.evictions.append(self._evict_count)
        self.series.oom_kills.append(self._oom_count)

    def _physics(self, step: int, now: float) -> None:
        cpu = self._share(step)
        viol, replicas, worst = self._latencies(cpu)
        # replicas that are not running (pending, restarting) serve nobody: violating
        total_replicas = sum(ld.service.replicas for ld in self.workload.services)
        viol += total_replicas - replicas
        self._progress(cpu)
        killed, node_mem = self._memory()
        self._host_figures(cpu, node_mem)
        self._record(now, cpu, node_mem, (viol, total_replicas, worst))
        self._settle(now, killed, cpu.batch)

    def _share(self, step: int) -> CpuStep:
        """Every running pod's demand and the cpu it is granted, and the usage by domain,
        cpu and node that follows."""
        a = self._a
        is_svc = a["is_svc"]
        demand = a["cores"].copy()
        for si, load in enumerate(self.workload.services):
            sel = a["svc_idx"] == si
            if sel.any():
                demand[sel] = load.demand[step, a["replica"][sel]]
        cap = a["cap"]
        domain = a["domain"]
        granted = share_cpu(domain, cap, demand, a["limit"], a["weight"], a["idle"])
        self.last_granted = granted
        self.last_demand = demand
        nd = len(cap)
        idle = a["idle"]
        batch = ~is_svc
        normal_use = np.bincount(domain[~idle], granted[~idle], nd)
        idle_use = np.bincount(domain[idle], granted[idle], nd)
        batch_normal = np.bincount(domain[batch & ~idle], granted[batch & ~idle], nd)
        # Normal batch at a tiny weight beside the domain's lightest service is preempted
        # at wakeup (ModelConstants.light_preempt_ms): it leaves the service's queue.
        weight = a["weight"]
        svc_weight = np.full(nd, np.inf)
        np.minimum.at(svc_weight, domain[is_svc], weight[is_svc])
        light = batch & ~idle & (weight <= self.constants.light_weight_ratio * svc_weight[domain])
        light_use = np.bincount(domain[light], granted[light], nd)
        batch_all = np.bincount(domain[batch], granted[batch], nd)
        total_dom = normal_use + idle_use
        nn = len(self.nodes)
        c = self._max_cpus
        dom_node = a["dom_node"]
        dm = a["dm"]
        safe_cap = np.maximum(cap, 1.0)
        # per-cpu busy shares (a domain's usage is spread evenly over its cpus)
        per_cpu_batch = np.zeros((nn, c))
        per_cpu_all = np.zeros((nn, c))
        if nd:
            np.add.at(per_cpu_batch, dom_node, dm * (batch_all / safe_cap)[:, None])
            np.add.at(per_cpu_all, dom_node, dm * (total_dom / safe_cap)[:, None])
        return CpuStep(
            demand,
            granted,
            batch,
            normal_use,
            idle_use,
            batch_normal,
            light_use,
            safe_cap,
            per_cpu_batch,
            per_cpu_all,
        )

    def _latencies(self, cpu: CpuStep) -> tuple[int, int, float]:
        """Each service replica's p99 latency this step, appended per service: (replicas
        over their SLO, replicas running, the worst p99 / SLO)."""
        a = self._a
        is_svc = a["is_svc"]
        if not is_svc.any():
            for ld in self.workload.services:
                self.latency[ld.service.name].append(0.0)
            return 0, 0, 0.0
        domain, cap, safe_cap = a["domain"], a["cap"], cpu.safe_cap
        dom_node, dm = a["dom_node"], a["dm"]
        nn = len(self.nodes)
        sib_busy = np.take_along_axis(cpu.per_cpu_batch, self._sib, axis=1) * self._has_sib
        nsock = self._sock_cpus.shape[1]
        sock_busy = np.zeros((nn, nsock))
        for sidx in range(nsock):
            sock_busy[:, sidx] = (cpu.per_cpu_batch * (self._sock == sidx) * self._valid).sum(
                axis=1
            ) / self._sock_cpus[:, sidx]
        sock_busy_cpu = np.take_along_axis(sock_busy, self._sock, axis=1)
        dom_h = (dm * sib_busy[dom_node]).sum(axis=1) / safe_cap
        dom_b = (dm * sock_busy_cpu[dom_node]).sum(axis=1) / safe_cap * self._cache_pressure
        sv = np.nonzero(is_svc)[0]
        d = domain[sv]
        svc_defs = [ld.service for ld in self.workload.services]
        base = np.array([svc_defs[i].base_latency_ms for i in a["svc_idx"][sv]])
        slo = np.array([svc_defs[i].slo_p99_ms for i in a["svc_idx"][sv]])
        burst = base * np.array([svc_defs[i].cpu_burst_fraction for i in a["svc_idx"][sv]])
        queued = cpu.normal_use[d] - cpu.light_use[d]
        rho = queued / safe_cap[d]
        bshare = np.divide(
            cpu.batch_normal[d] - cpu.light_use[d], queued, out=np.zeros(len(sv)), where=queued > 0
        )
        want = np.minimum(cpu.demand[sv], a["limit"][sv])
        starved = cpu.granted[sv] < want * (1 - 1e-6) - 1e-9
        starved |= cpu.demand[sv] > a["limit"][sv] * (1 + 1e-9)
        p99 = latency_p99(
            base,
            burst,
            cap[d].astype(np.int64),
            rho,
            bshare,
            cpu.idle_use[d] / safe_cap[d],
            dom_h[d],
            dom_b[d],
            starved,
            slo,
            self.constants,
            light_busy=cpu.light_use[d] / safe_cap[d],
        )
        for si, ld in enumerate(self.workload.services):
            sel = a["svc_idx"][sv] == si
            self.latency[ld.service.name].append(float(p99[sel].mean()) if sel.any() else 0.0)
        return int((p99 > slo).sum()), len(sv), float((p99 / slo).max())

    def _progress(self, cpu: CpuStep) -> None:
        """The cpu time, throttling and batch progress of every running pod."""
        a = self._a
        running: list[SimPod] = a["running"]
        dt = self.dt
        self.tally.batch_cpu_used += float(cpu.granted[cpu.batch].sum()) * dt
        periods = int(dt * 10)  # CFS periods of 100 ms
        throttled = (cpu.demand > a["limit"] * (1 + 1e-9)).tolist()
        for i, g in enumerate(cpu.granted.tolist()):
            pod = running[i]
            pod.cpu_s += g * dt
            pod.periods += periods
            if throttled[i]:
                pod.throttled_periods += periods
            if pod.kind == "batch":
                pod.progress += g * dt

    def _memory(self) -> tuple[list[int], np.ndarray]:
        """The pods the kernel kills (over their cgroup limit, then by the OOM killer on a
        node out of memory), and each node's memory used by pods."""
        a = self._a
        nn = len(self.nodes)
        mem = a["mem_used"]
        killed: list[int] = list(np.nonzero(mem > a["mem_limit"])[0])
        node_mem = np.bincount(a["node"], mem, nn) if len(a["running"]) else np.zeros(nn)
        avail = self._node_mem - self._node_sys_mem
        killed_set = set(killed)
        for nidx in np.nonzero(node_mem > avail)[0]:
            members = np.nonzero(a["node"] == nidx)[0]
            members = np.array([m for m in members if m not in killed_set], dtype=np.int64)
            for v in oom_victims(mem[members], a["adj"][members], float(avail[nidx])):
                killed.append(int(members[v]))
        return killed, node_mem

    def _host_figures(self, cpu: CpuStep, node_mem: np.ndarray) -> None:
        """What the hosts report to their agents next time they look."""
        a = self._a
        self._runnable = np.asarray(np.minimum(cpu.demand, a["limit"]), dtype=np.float64)
        self._per_cpu_all = cpu.per_cpu_all
        self._node_mem_used = np.asarray(node_mem, dtype=np.float64)
        runnable_node = np.bincount(a["node"], self._runnable, len(self.nodes))
        decay = self._load_decay
        self._node_load = self._node_load * decay + runnable_node[:, None] * (1 - decay)

    def _record(
        self, now: float, cpu: CpuStep, node_mem: np.ndarray, slo: tuple[int, int, float]
    ) -> None:
        """The step's figures into the series: (replicas violating, replicas, worst p99
        / SLO) in `slo`."""
        a = self._a
        s = self.series
        nn = len(self.nodes)
        is_svc, granted = a["is_svc"], cpu.granted
        node_used = np.asarray(np.bincount(a["node"], granted, nn), dtype=np.float64)
        node_svc_used = np.bincount(a["node"][is_svc], granted[is_svc], nn)
        mem_used_total = float(node_mem.sum() + self._node_sys_mem.sum())
        total_cpus = float(self._node_cpus.sum())
        s.time.append(now)
        s.cpu_util.append(float(node_used.sum()) / total_cpus)
        s.cpu_util_services.append(float(node_svc_used.sum()) / total_cpus)
        s.cpu_util_batch.append(float(node_used.sum() - node_svc_used.sum()) / total_cpus)
        s.mem_util.append(mem_used_total / float(self._node_mem.sum()))
        s.slo_violations.append(slo[0])
        s.replicas.append(slo[1])
        s.p99_ratio_max.append(slo[2])
        s.batch_running.append(int(cpu.batch.sum()))
        s.reclaimed_capacity.append(self.control.reclaimed_capacity_total())
        sn = self.sample_node
        on_node = a["node"] == sn
        s.sample_service_usage.append(float(granted[on_node & is_svc].sum()))
        s.sample_reclaimed_usage.append(float(granted[on_node & cpu.batch].sum()))
        share, reclaim = self._pool_sizes(sn)
        s.sample_share_pool.append(share)
        s.sample_reclaim_pool.append(reclaim)
        s.sample_reclaimed_capacity.append(self.control.reclaimed_capacity(sn))

    def _settle(self, now: float, killed: list[int], batch: np.ndarray) -> None:
        """OOM kills and completions change the pod set (`batch`: which pods are batch)."""
        a = self._a
        running: list[SimPod] = a["running"]
        for i in sorted(set(killed)):
            pod = running[i]
            self._oom_count += 1
            self.tally.oom_kills += 1
            self.tally.events.append((now, "OOMKilled", pod.key, self.nodes[pod.node].name))
            if pod.kind == "service":
                # the container restarts in place; the replica is down for this step
                self.tally.service_restarts += 1
                self.series.slo_violations[-1] += 1
                continue
            self._delete(pod)
            self._restart(pod)
        end = now + self.dt
        for i in np.nonzero(batch)[0].tolist():
            pod = running[i]
            if pod.terminating or pod.progress < pod.work:
                continue
            self.tally.completed += 1
            self.tally.completed_work += pod.work
            self.tally.events.append((end, "Completed", pod.key, self.nodes[pod.node].name))
            self.tally.completion_times.append(end - self._arrival(pod))
            self._delete(pod)

    def _pool_sizes(self, nidx: int) -> tuple[float, float]:
        """The sample node's share pool (cpus services may use) and reclaim pool (cpus batch
        may use), as the cpusets on the machine say."""
        plan_sizes = self.control.pool_sizes(nidx)
        if plan_sizes is not None:
            return plan_sizes
        return self._sample_pools

    # --- what the machines report (read lazily by SimHost.sample) ------------------------

    def _pod_usage(self, uid: str) -> PodUsage | None:
        i = self._row.get(uid)
        if i is None or i >= len(self.last_granted):
            return None
        pod: SimPod = self._a["running"][i]
        return PodUsage(
            cpu_cores=float(self.last_granted[i]),
            cpu_total_s=pod.cpu_s,
            runnable=float(self._runnable[i]),
            throttled_periods=pod.throttled_periods,
            periods=pod.periods,
            memory=pod.memory_used,
        )

    def _node_usage(self, nidx: int) -> NodeUsage:
        per_cpu = self._per_cpu_all[nidx][self._valid[nidx]] if len(self._per_cpu_all) else ()
        load = self._node_load[nidx]
        ratio = np.clip(np.asarray(per_cpu, dtype=np.float64), 0.0, 1.0)
        return NodeUsage(
            cpu_ratio=tuple(ratio.tolist()),
            sched_wait_us=tuple(run_queue_waits_us(ratio).tolist()),
            load=(float(load[0]), float(load[1]), float(load[2])),
            memory_used=int(self._node_mem_used[nidx]),
        )
