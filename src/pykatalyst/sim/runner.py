"""The runner: one simulated cluster per policy, stepped on a virtual clock.

`PolicySim` composes the parts of a simulated cluster, each in its own module:
- `sim.owners`: the pods' owners, the batch framework (arrivals, submission, retries) and
  the services' ReplicaSets;
- `sim.control`: the scheduler and the node agents, each timed by a `ComponentHost`;
- `sim.kubelet`: the kubelets (nodes, pods starting, stopping, evicted, OOM-killed);
- `sim.machines`: the physics on arrays (`sim.arrays`, `sim.physics`) and what the hosts
  report to their agents;
- `sim.recording`: the series, tallies and latencies the report is written from.

Each step, in the order a real cluster would see it:
1. the batch framework submits tasks that have arrived (keeping at most `max_pending`
   pods pending in the cluster, the rest in its own queue);
2. the scheduler places pending pods (bindings through `pods/binding`);
3. the kubelet starts bound pods on their `SimHost` and stops deleted ones;
4. each node's agent whose period is due reconciles against its `SimHost` (pools, knobs,
   reclaimed capacity, evictions) through the same `Cluster` API it uses in production;
   the kubelet then starts and stops what that changed;
5. the physics computes, for every pod on every node at once, the cpu it gets, its
   memory, OOM kills and each service replica's p99 latency; batch tasks progress;
6. the step is recorded, then OOM kills and finished tasks change the pod set.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from pykatalyst.api import names
from pykatalyst.apiserver.memory import MemoryCluster
from pykatalyst.cluster.clock import VirtualClock
from pykatalyst.sim import manifests
from pykatalyst.sim.arrays import CpuStep
from pykatalyst.sim.control import ControlPlane, make_control_plane
from pykatalyst.sim.kubelet import SimKubelet
from pykatalyst.sim.machines import Machines
from pykatalyst.sim.owners import BatchFramework, ReplicaSets
from pykatalyst.sim.pods import NodeSim, SimPod
from pykatalyst.sim.recording import PolicyRun, Progress, Recorder, Tally
from pykatalyst.sim.scenario import Policy, Scenario
from pykatalyst.sim.workload import Workload

# Allocations between young-generation collections while a simulation runs (Python's
# default is 700): at least GC_YOUNG_THRESHOLD, and GC_YOUNG_PER_NODE for each node.
GC_YOUNG_THRESHOLD = 20_000
GC_YOUNG_PER_NODE = 1_000


@contextlib.contextmanager
def few_collections(nodes: int = 0) -> Iterator[None]:
    """Collect cycles less often while simulating: a run allocates millions of short-lived
    objects and makes few cycles, and every full collection rescans the whole cluster
    store (14 % of a 100-node run's CPU at Python's defaults). What a young collection
    walks grows with the cluster (the objects that survive it are mostly the store's, and
    the young containers hold the whole cluster's rows), so the threshold grows with the
    `nodes` too: at 1,000 nodes and 20,000 a collection took 40-70 ms, 12 % of the run.
    The objects alive at the start are frozen out of collections; both settings are
    restored afterwards."""
    old = gc.get_threshold()
    gc.freeze()
    if old[0]:  # 0: automatic collection is off, and stays off
        young = max(GC_YOUNG_THRESHOLD, GC_YOUNG_PER_NODE * nodes, old[0])
        gc.set_threshold(young, *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


class PolicySim:
    """One policy's simulated cluster: its API server (a MemoryCluster on a virtual clock)
    and the parts that act on it, stepped in the order of the module's docstring."""

    def __init__(self, scenario: Scenario, policy: Policy, workload: Workload) -> None:
        self.scenario = scenario
        self.policy = policy
        self.workload = workload
        self.dt = scenario.step
        self.clock = VirtualClock(0.0)
        self.cluster = MemoryCluster(clock=self.clock, watch_history=20_000, seed=scenario.seed)
        for ns in (manifests.SERVICE_NAMESPACE, manifests.BATCH_NAMESPACE):
            self.cluster.create(names.NAMESPACE, {"metadata": {"name": ns}})
        self.recorder = Recorder(workload)
        self.kubelet = SimKubelet(scenario, policy, self.cluster, self.clock, self.recorder)
        self.machines = Machines(self.kubelet.nodes, scenario, workload)
        self.control: ControlPlane = make_control_plane(self)
        self.kubelet.control = self.control
        self.services = ReplicaSets(workload, policy, self.kubelet, self.clock)
        self.batch = BatchFramework(scenario, policy, workload, self.kubelet, self.recorder.tally)
        self.kubelet.owners = {"service": self.services, "batch": self.batch}
        self.services.create_all()

    # what the control plane reads (`control.SimView`)

    @property
    def nodes(self) -> Sequence[NodeSim]:
        return self.kubelet.nodes

    @property
    def node_index(self) -> Mapping[str, int]:
        return self.kubelet.node_index

    @property
    def tally(self) -> Tally:
        return self.recorder.tally

    def step_view(self) -> dict[str, Any]:
        """The last step's per-pod arrays (for checks and tests): node, cpus allowed,
        quota-and-cpuset limit, demand and granted cpu, in the same order."""
        return self.machines.step_view()

    # --- the step -----------------------------------------------------------------------

    def run(self, progress: Progress | None = None) -> PolicyRun:
        steps = self.scenario.steps
        with few_collections(len(self.nodes)):
            for step in range(steps):
                self.step(step)
                if progress is not None:
                    progress(step + 1, steps)
        return self.recorder.run(self.policy, self.nodes[self.machines.sample_node].name)

    def step(self, step: int) -> None:
        now = step * self.dt
        self.clock.set(now)
        self.recorder.begin_step()
        if self.scenario.batch is not None:
            self.batch.arrivals(now)
        self.control.schedule(step)
        self.kubelet.sync(step)
        self.control.reconcile_agents(step)
        self.kubelet.sync(step)
        if self.kubelet.changed or self.machines.knobs_changed():
            self.machines.rebuild(self.kubelet.running())
            self.kubelet.changed = False
        cpu, killed = self._physics(step, now)
        self._settle(now, killed, cpu.batch)
        self.recorder.end_step(self.kubelet.pending(), self.batch.pending, len(self.batch.queue))

    def _physics(self, step: int, now: float) -> tuple[CpuStep, list[int]]:
        """The step's physics, recorded; returns its cpu and the rows the kernel killed."""
        m = self.machines
        cpu = m.share(step)
        per_service, (viol, replicas, worst) = m.latencies(cpu)
        self.recorder.latencies(per_service)
        # replicas that are not running (pending, restarting) serve nobody: violating
        total_replicas = sum(ld.service.replicas for ld in self.workload.services)
        viol += total_replicas - replicas
        self.tally.batch_cpu_used += m.account(cpu)
        killed, node_mem = m.memory()
        m.report_to_hosts(cpu, node_mem)
        sample = m.sample_node
        reclaimed = (
            self.control.reclaimed_capacity_total(),
            self.control.reclaimed_capacity(sample),
        )
        pools = self.control.pool_sizes(sample)
        if pools is None:  # no plan yet: the cpusets on the machine say
            pools = m.sample_pools
        self.recorder.record(now, cpu, node_mem, (viol, total_replicas, worst), m, reclaimed, pools)
        return cpu, killed

    def _settle(self, now: float, killed: list[int], batch: np.ndarray) -> None:
        """OOM kills and completions change the pod set (`batch`: which rows are batch)."""
        running: list[SimPod] = self.machines.rows.running
        for i in sorted(set(killed)):
            self.kubelet.oom_kill(running[i], now)
        self.batch.complete(running, batch, now + self.dt)
