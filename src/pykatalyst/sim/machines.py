"""The simulated machines of one cluster, as the physics sees them.

Every running pod is a row of arrays (`arrays.PodRows`), rebuilt when pods start or stop
or a host's knobs change; each step the cpu each pod gets, the services' p99 latencies,
the pods' cpu time and batch progress, memory and OOM kills are computed with the pure
functions of `sim.physics` for all nodes at once. The machines also answer what each
`SimHost` reports to its agent (`pod_usage`, `node_usage`), from the last step's figures.
"""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt

from pykatalyst.sim.arrays import CpuStep, NodeArrays, PodRows, no_rows, node_arrays, pod_rows
from pykatalyst.sim.host import NodeUsage, PodKnobs, PodUsage, run_queue_waits_us
from pykatalyst.sim.physics import latency_p99, model_constants, oom_victims, share_cpu
from pykatalyst.sim.pods import NodeSim, SimPod
from pykatalyst.sim.scenario import Scenario
from pykatalyst.sim.workload import Workload

F64 = npt.NDArray[np.float64]


def cpus_on_sample(running: list[SimPod], masks: list[int], sample: int) -> tuple[float, float]:
    """The cpus services and batch pods may run on, on the sample node."""
    share_mask = 0
    reclaim_mask = 0
    for i, p in enumerate(running):
        if p.node == sample:
            if p.kind == "service":
                share_mask |= masks[i]
            else:
                reclaim_mask |= masks[i]
    return float(share_mask.bit_count()), float(reclaim_mask.bit_count())


class Machines:
    """The nodes' hardware and the running pods as arrays, stepped by the physics."""

    def __init__(self, nodes: list[NodeSim], scenario: Scenario, workload: Workload) -> None:
        self.nodes = nodes
        self.dt = scenario.step
        self.services = workload.services
        self.constants = model_constants(scenario.model.overrides())
        self.cache_pressure = scenario.batch.cache_pressure if scenario.batch else 0.0
        max_cpus = max(n.cpus for n in nodes)
        self.static: NodeArrays = node_arrays(
            nodes, max_cpus, max(g.sockets for g in scenario.nodes)
        )
        self.rows: PodRows = no_rows(max_cpus)
        self.row: dict[str, int] = {}  # pod uid -> its row
        self.sample_node = 0
        self.sample_pools = (0.0, 0.0)
        self.last_granted: F64 = np.zeros(0)
        self.last_demand: F64 = np.zeros(0)
        self.runnable: F64 = np.zeros(0)
        self.per_cpu_all: F64 = np.zeros((0, 0))
        self.node_mem_used: F64 = np.zeros(len(nodes))
        self.node_load = np.zeros((len(nodes), 3))
        # every node's busy shares and run-queue waits, worked out for all nodes at once
        # on the first `node_usage` after a step (None: not yet)
        self._busy: tuple[F64, F64] | None = None
        self.load_decay = np.exp(-self.dt / np.array([60.0, 300.0, 900.0]))
        for idx, node_sim in enumerate(nodes):
            node_sim.host.pod_usage = self.pod_usage
            node_sim.host.node_usage = functools.partial(self.node_usage, idx)

    # --- the rows ---------------------------------------------------------------------

    def knobs_changed(self) -> bool:
        return any(node_sim.host.dirty for node_sim in self.nodes)

    def rebuild(self, running: list[SimPod]) -> None:
        """The rows of the pods running now, each pod's knobs read again from its host when
        they changed."""
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
        self.rows = pod_rows(running, knobs, self.static.max_cpus)
        self.sample_pools = cpus_on_sample(running, [k.cpus for k in knobs], self.sample_node)
        self.row = {p.uid: i for i, p in enumerate(running)}

    def step_view(self) -> dict[str, object]:
        """The last step's per-pod arrays (for checks and tests): node, cpus allowed,
        quota-and-cpuset limit, demand and granted cpu, in the same order."""
        r = self.rows
        return {
            "pods": list(r.running),
            "node": r.node,
            "limit": r.limit,
            "demand": self.last_demand,
            "granted": self.last_granted,
            "node_cpus": self.static.cpus,
        }

    # --- the step's physics -------------------------------------------------------------

    def share(self, step: int) -> CpuStep:
        """Every running pod's demand and the cpu it is granted, and the usage by domain,
        cpu and node that follows."""
        r = self.rows
        is_svc = r.is_svc
        demand = r.cores.copy()
        for si, load in enumerate(self.services):
            sel = r.svc_idx == si
            if sel.any():
                demand[sel] = load.demand[step, r.replica[sel]]
        cap, domain, idle, weight = r.cap, r.domain, r.idle, r.weight
        granted = share_cpu(domain, cap, demand, r.limit, weight, idle)
        self.last_granted = granted
        self.last_demand = demand
        nd = len(cap)
        batch = ~is_svc
        normal_use = np.bincount(domain[~idle], granted[~idle], nd)
        idle_use = np.bincount(domain[idle], granted[idle], nd)
        batch_normal = np.bincount(domain[batch & ~idle], granted[batch & ~idle], nd)
        # Normal batch at a tiny weight beside the domain's lightest service is preempted
        # at wakeup (ModelConstants.light_preempt_ms): it leaves the service's queue.
        svc_weight = np.full(nd, np.inf)
        np.minimum.at(svc_weight, domain[is_svc], weight[is_svc])
        light = batch & ~idle & (weight <= self.constants.light_weight_ratio * svc_weight[domain])
        light_use = np.bincount(domain[light], granted[light], nd)
        batch_all = np.bincount(domain[batch], granted[batch], nd)
        total_dom = normal_use + idle_use
        shape = (len(self.nodes), self.static.max_cpus)
        safe_cap = np.maximum(cap, 1.0)
        # per-cpu busy shares (a domain's usage is spread evenly over its cpus)
        per_cpu_batch = np.zeros(shape)
        per_cpu_all = np.zeros(shape)
        if nd:
            np.add.at(per_cpu_batch, r.dom_node, r.dm * (batch_all / safe_cap)[:, None])
            np.add.at(per_cpu_all, r.dom_node, r.dm * (total_dom / safe_cap)[:, None])
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

    def _corunner_load(self, cpu: CpuStep) -> tuple[np.ndarray, np.ndarray]:
        """Per cpu domain, the busy share of its cpus' hyperthread siblings and of its
        sockets (the latter times the batch's cache pressure)."""
        r, st = self.rows, self.static
        sib_busy = np.take_along_axis(cpu.per_cpu_batch, st.sib, axis=1) * st.has_sib
        nsock = st.sock_cpus.shape[1]
        sock_busy = np.zeros((len(self.nodes), nsock))
        for sidx in range(nsock):
            sock_busy[:, sidx] = (cpu.per_cpu_batch * (st.sock == sidx) * st.valid).sum(
                axis=1
            ) / st.sock_cpus[:, sidx]
        sock_busy_cpu = np.take_along_axis(sock_busy, st.sock, axis=1)
        dom_h = (r.dm * sib_busy[r.dom_node]).sum(axis=1) / cpu.safe_cap
        dom_b = (r.dm * sock_busy_cpu[r.dom_node]).sum(axis=1) / cpu.safe_cap
        return dom_h, dom_b * self.cache_pressure

    def latencies(self, cpu: CpuStep) -> tuple[list[float], tuple[int, int, float]]:
        """Each service's p99 latency this step (mean over its running replicas, 0 with
        none), and (replicas over their SLO, replicas running, the worst p99 / SLO)."""
        r = self.rows
        is_svc = r.is_svc
        if not is_svc.any():
            return [0.0] * len(self.services), (0, 0, 0.0)
        safe_cap = cpu.safe_cap
        dom_h, dom_b = self._corunner_load(cpu)
        sv = np.nonzero(is_svc)[0]
        d = r.domain[sv]
        svc_defs = [ld.service for ld in self.services]
        base = np.array([svc_defs[i].base_latency_ms for i in r.svc_idx[sv]])
        slo = np.array([svc_defs[i].slo_p99_ms for i in r.svc_idx[sv]])
        burst = base * np.array([svc_defs[i].cpu_burst_fraction for i in r.svc_idx[sv]])
        queued = cpu.normal_use[d] - cpu.light_use[d]
        rho = queued / safe_cap[d]
        bshare = np.divide(
            cpu.batch_normal[d] - cpu.light_use[d], queued, out=np.zeros(len(sv)), where=queued > 0
        )
        want = np.minimum(cpu.demand[sv], r.limit[sv])
        starved = cpu.granted[sv] < want * (1 - 1e-6) - 1e-9
        starved |= cpu.demand[sv] > r.limit[sv] * (1 + 1e-9)
        p99 = latency_p99(
            base,
            burst,
            r.cap[d].astype(np.int64),
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
        per_service = []
        for si in range(len(self.services)):
            sel = r.svc_idx[sv] == si
            per_service.append(float(p99[sel].mean()) if sel.any() else 0.0)
        return per_service, (int((p99 > slo).sum()), len(sv), float((p99 / slo).max()))

    def account(self, cpu: CpuStep) -> float:
        """The cpu time, throttling and batch progress of every running pod; returns the
        core-seconds batch pods ran this step."""
        running = self.rows.running
        dt = self.dt
        batch_cpu = float(cpu.granted[cpu.batch].sum()) * dt
        periods = int(dt * 10)  # CFS periods of 100 ms
        throttled = (cpu.demand > self.rows.limit * (1 + 1e-9)).tolist()
        for i, g in enumerate(cpu.granted.tolist()):
            pod = running[i]
            pod.cpu_s += g * dt
            pod.periods += periods
            if throttled[i]:
                pod.throttled_periods += periods
            if pod.kind == "batch":
                pod.progress += g * dt
        return batch_cpu

    def memory(self) -> tuple[list[int], np.ndarray]:
        """The pods the kernel kills (over their cgroup limit, then by the OOM killer on a
        node out of memory), and each node's memory used by pods."""
        r = self.rows
        nn = len(self.nodes)
        mem = r.mem_used
        killed: list[int] = list(np.nonzero(mem > r.mem_limit)[0])
        node_mem = np.bincount(r.node, mem, nn) if len(r.running) else np.zeros(nn)
        avail = self.static.memory - self.static.sys_memory
        killed_set = set(killed)
        for nidx in np.nonzero(node_mem > avail)[0]:
            members = np.nonzero(r.node == nidx)[0]
            members = np.array([m for m in members if m not in killed_set], dtype=np.int64)
            for v in oom_victims(mem[members], r.adj[members], float(avail[nidx])):
                killed.append(int(members[v]))
        return killed, node_mem

    def report_to_hosts(self, cpu: CpuStep, node_mem: np.ndarray) -> None:
        """What the hosts report to their agents next time they look."""
        self.runnable = np.asarray(np.minimum(cpu.demand, self.rows.limit), dtype=np.float64)
        self.per_cpu_all = cpu.per_cpu_all
        self.node_mem_used = np.asarray(node_mem, dtype=np.float64)
        runnable_node = np.bincount(self.rows.node, self.runnable, len(self.nodes))
        decay = self.load_decay
        self.node_load = self.node_load * decay + runnable_node[:, None] * (1 - decay)
        self._busy = None

    # --- what the machines report (read lazily by SimHost.sample) ------------------------

    def pod_usage(self, uid: str) -> PodUsage | None:
        i = self.row.get(uid)
        if i is None or i >= len(self.last_granted):
            return None
        pod = self.rows.running[i]
        return PodUsage(
            cpu_cores=float(self.last_granted[i]),
            cpu_total_s=pod.cpu_s,
            runnable=float(self.runnable[i]),
            throttled_periods=pod.throttled_periods,
            periods=pod.periods,
            memory=pod.memory_used,
        )

    def node_usage(self, nidx: int) -> NodeUsage:
        if not len(self.per_cpu_all):
            ratio: list[float] = []
            waits: list[float] = []
        else:
            if self._busy is None:
                # elementwise, so each node's figures are those of its own row alone; one
                # pass over the cluster costs what a few nodes' passes did
                busy = np.clip(self.per_cpu_all, 0.0, 1.0)
                self._busy = (busy, run_queue_waits_us(busy))
            valid = self.static.valid[nidx]
            ratio = self._busy[0][nidx][valid].tolist()
            waits = self._busy[1][nidx][valid].tolist()
        load = self.node_load[nidx]
        return NodeUsage(
            cpu_ratio=tuple(ratio),
            sched_wait_us=tuple(waits),
            load=(float(load[0]), float(load[1]), float(load[2])),
            memory_used=int(self.node_mem_used[nidx]),
        )
