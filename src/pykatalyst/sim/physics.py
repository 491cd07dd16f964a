"""Node physics: how cpus are shared, how memory overflows, how latency responds.

All functions are pure and work on flat numpy arrays covering every pod (or every cpu
domain) of every node at once, so one simulated step costs a handful of array operations
whatever the cluster size. The equations and constants are written out, with their
sources, in docs/simulator.md; `MODEL_CONSTANTS` is what reports quote.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class ModelConstants:
    """The latency model's constants (see docs/simulator.md for where each comes from)."""

    # CFS gives a cpu-bound task a slice of sched_min_granularity x (1 + log2(min(ncpu, 8)))
    # = 0.75 ms x 4 on machines with 8+ cpus: the time a waking task may wait behind it.
    batch_slice_ms: float = 3.0
    # A SCHED_IDLE task is preempted at once by a waking normal task; what remains is the
    # context switch and a cold cache (modelling assumption).
    idle_preempt_ms: float = 0.05
    # A normal-priority task at a tiny cgroup weight beside the service (the kubelet's 2
    # shares for a best-effort pod against the service's 1024 per core) is preempted by a
    # waking service thread almost as a SCHED_IDLE one is: CFS puts the waker near the
    # queue's smallest vruntime, and the light task's vruntime runs hundreds of times
    # faster. Its cost per unit of its busy share: benchmarks/isolation_real.py on a quiet
    # machine measured nginx beside stress-ng at 2 shares no slower than beside the same
    # antagonist under SCHED_IDLE (p99 0.81 and 0.87 x solo at 0.99 of the cpus busy), so
    # it is taken as the idle figure.
    light_preempt_ms: float = 0.05
    # Normal batch counts as light when its weight is at most this fraction of the service's.
    light_weight_ratio: float = 1.0 / 64.0
    # Tail slowdown of a thread whose hyperthread sibling runs batch, at full sibling load
    # (modelling assumption, the order of magnitude Heracles, ISCA 2015, measured for a
    # HyperThread antagonist).
    alpha_ht: float = 0.8
    # Tail slowdown from last-level-cache and memory-bandwidth pressure of batch on the
    # same socket, at full socket load and full cache pressure of the batch (modelling
    # assumption; Heracles, Bubble-Up (MICRO 2011) and CPI2 (EuroSys 2013) measured
    # slowdowns from a few per cent to several times, by antagonist).
    alpha_llc: float = 0.4
    # Tail quantile of the queueing delay.
    quantile: float = 0.99
    # A cpu-starved replica's queue grows without bound; it is charged this multiple of its
    # SLO (for charts) and always counts as violating.
    starved_factor: float = 10.0

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


MODEL_CONSTANTS = ModelConstants()


def model_constants(overrides: dict[str, float]) -> ModelConstants:
    """The default constants with a scenario's overrides applied."""
    return replace(MODEL_CONSTANTS, **overrides)


def waterfill(group: I64, capacity: F64, want: F64, weight: F64) -> F64:
    """Weighted max-min fair shares: in each group, capacity is split in proportion to
    weight, never giving a member more than it wants; what one does not take the others
    share. This is what CFS converges to for cpu-bound tasks under cgroup weights."""
    n = len(want)
    granted = np.zeros(n)
    if n == 0:
        return granted
    remaining = capacity.astype(np.float64).copy()
    active = want > 0
    ngroups = len(capacity)
    for _ in range(n + 1):
        if not active.any():
            break
        wsum = np.bincount(group[active], weight[active], ngroups)
        level = np.divide(remaining, wsum, out=np.zeros(ngroups), where=wsum > 0)
        fair = level[group] * weight
        done = active & (want <= fair * (1 + 1e-12))
        if not done.any():
            granted[active] = fair[active]
            break
        granted[done] = want[done]
        remaining -= np.bincount(group[done], want[done], ngroups)
        np.maximum(remaining, 0.0, out=remaining)
        active &= ~done
    return granted


def share_cpu(
    domain: I64,
    capacity: F64,
    demand: F64,
    limit: F64,
    weight: F64,
    idle: B,
) -> F64:
    """Cpu each task gets over a step. `domain`: the cpu domain (a set of cpus) the task
    runs in; `capacity`: cpus per domain; `limit`: the task's own ceiling (cpuset size and
    CFS quota); `weight`: cgroup cpu shares; `idle`: cpu.idle=1 (SCHED_IDLE).

    Normal tasks share the domain by weight; SCHED_IDLE tasks share only what normal tasks
    leave (the kernel's idle weight of 3 against 1024 is taken as zero)."""
    want = np.minimum(demand, limit)
    want = np.maximum(want, 0.0)
    normal = ~idle
    granted = np.zeros(len(want))
    if normal.any():
        granted[normal] = waterfill(domain[normal], capacity, want[normal], weight[normal])
    if idle.any():
        used = np.bincount(domain[normal], granted[normal], len(capacity))
        left = np.maximum(capacity - used, 0.0)
        granted[idle] = waterfill(domain[idle], left, want[idle], weight[idle])
    return granted


def erlang_c(servers: I64, rho: F64) -> F64:
    """Probability that an arrival waits in an M/M/c queue with `servers` and utilisation
    `rho` (Erlang's C formula, via the stable Erlang-B recursion). rho >= 1 gives 1."""
    rho = np.clip(rho, 0.0, 1.0)
    a = rho * servers
    b = np.ones(len(rho))
    cmax = int(servers.max()) if len(servers) else 0
    for k in range(1, cmax + 1):
        nb = a * b / (k + a * b)
        b = np.where(k <= servers, nb, b)
    denom = 1.0 - rho * (1.0 - b)
    c = np.divide(b, denom, out=np.ones(len(rho)), where=denom > 1e-12)
    return np.asarray(np.where(rho >= 1.0, 1.0, np.clip(c, 0.0, 1.0)))


def latency_p99(
    base_ms: F64,
    burst_ms: F64,
    servers: I64,
    rho_normal: F64,
    batch_share_normal: F64,
    idle_busy: F64,
    ht_batch: F64,
    socket_batch: F64,
    starved: B,
    slo_ms: F64,
    k: ModelConstants = MODEL_CONSTANTS,
    light_busy: F64 | None = None,
) -> F64:
    """p99 response time of each service replica (ms).

    R99 = (L0 + W99 + d_idle * u_idle + d_light * u_light) * (1 + a_ht * h + a_llc * b), where
    W99 = tau / (c (1 - rho)) * ln(C(c, rho) / (1 - q)) when C > 1 - q, else 0, is the tail
    of the M/M/c wait on the replica's cpu domain (c cpus, rho its normal-priority busy
    share, C Erlang's C), tau the mean remaining cpu burst of whoever holds a cpu: the batch
    slice for batch, the service's own burst otherwise. u_idle is the busy share of
    SCHED_IDLE tasks, u_light (`light_busy`) that of normal batch at a tiny weight beside
    the service (left out of rho by the caller: it is preempted at wakeup), h the batch busy
    share of the replica's hyperthread siblings, b the batch busy share of its socket. A
    replica that gets less cpu than it needs is starved.
    """
    tail = 1.0 - k.quantile
    tau = batch_share_normal * k.batch_slice_ms + (1.0 - batch_share_normal) * burst_ms
    pw = erlang_c(servers, rho_normal)
    slack = np.maximum(servers * (1.0 - np.clip(rho_normal, 0.0, 0.999)), 1e-3)
    wait = np.where(pw > tail, tau / slack * np.log(np.maximum(pw, tail) / tail), 0.0)
    light = 0.0 if light_busy is None else k.light_preempt_ms * light_busy
    r = (base_ms + wait + k.idle_preempt_ms * idle_busy + light) * (
        1.0 + k.alpha_ht * ht_batch + k.alpha_llc * socket_batch
    )
    return np.asarray(np.where(starved, np.maximum(r, slo_ms * k.starved_factor), r))


def oom_score_adj(qos_class: str, memory_request: int, capacity: int) -> int:
    """The kubelet's oom_score_adj for a container of a pod of this Kubernetes QoS class."""
    if qos_class == "Guaranteed":
        return -997
    if qos_class == "BestEffort":
        return 1000
    adj = 1000 - (1000 * memory_request) // max(capacity, 1)
    return int(min(max(adj, 2), 999))


def oom_victims(usage: F64, adj: I64, capacity: float) -> list[int]:
    """Indices (into the node's pods) the kernel's OOM killer takes, in order, until usage
    fits: highest oom_score = usage share x 1000 + oom_score_adj first."""
    total = float(usage.sum())
    if total <= capacity:
        return []
    score = usage / max(capacity, 1.0) * 1000.0 + adj
    order = np.lexsort((np.arange(len(usage)), -score))
    victims = []
    for i in order:
        if total <= capacity:
            break
        victims.append(int(i))
        total -= float(usage[i])
    return victims


def quantile(values: F64, q: float) -> float:
    if len(values) == 0:
        return 0.0
    return float(np.quantile(values, q))


def safe_ratio(a: float, b: float) -> float:
    return a / b if b > 0 and math.isfinite(b) else 0.0
