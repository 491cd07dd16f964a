"""Katalyst's dynamic memory policy: cpuset.mems and memory limits.

- NUMA-bound pods (dedicated_cores with numa_binding) allocate memory only on their NUMA
  nodes, so their cpus and memory stay together.
- Everyone else gets the NUMA nodes that hold no NUMA-bound pod, so that a reclaimed or
  shared pod's memory does not crowd a bound pod's node (all nodes when every node is bound).
- A reclaimed pod is held to the reclaimed_memory it asked for: the kubelet does not know
  that extended resource, so nothing else would limit it.
- Memory reserved for the system is spread over the NUMA nodes (`reserved_memory_per_numa`)
  and left out of what each NUMA zone offers.
- Pressure (Katalyst's memory advisor): per NUMA node and for the node, free memory below a
  critical watermark asks for cache to be dropped, below twice that is the tune state
  (`memory_pressure`); the cache of reclaimed pods goes first (`cache_drop_victims`).
- The memory guard holds the reclaimed root to what reclaimed pods use plus the free memory
  above each NUMA node's low watermark (`memory_guard`), memory.high at 95 % of that.
- Latency-sensitive pods are protected from reclaim on cgroup v2 (`protection`), and every
  pod's OOM priority becomes its processes' oom_score_adj (`oom_score_adj`).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pykatalyst.agent.advisor import MemoryUser
from pykatalyst.agent.config import PROTECTION_MODES, MemoryGuardConfig
from pykatalyst.agent.host.base import Knob, KnobValue, MemoryInfo, NumaMemory
from pykatalyst.api import names
from pykatalyst.api.qos import OOM_PRIORITY_IGNORE, OOM_PRIORITY_TOP
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology


def unbound_mems(topo: CPUTopology, bound_numas: Iterable[int]) -> CPUSet:
    """NUMA nodes without NUMA-bound pods (cpuset.mems of pods that are not bound)."""
    bound = set(bound_numas)
    free = [n for n in topo.numa_nodes if n not in bound]
    return CPUSet.of(free or topo.numa_nodes)


def bound_mems(numas: Iterable[int]) -> CPUSet:
    return CPUSet.of(numas)


def reclaimed_memory_limit(reclaimed_memory_request: int) -> int | None:
    """A reclaimed pod's memory limit: its reclaimed_memory (None when it asked for none)."""
    return reclaimed_memory_request if reclaimed_memory_request > 0 else None


def memory_user(
    level: str,
    request: int,
    usage: Mapping[str, int | None] | None,
    exclusive_memory: int | None = None,
) -> MemoryUser | None:
    """The headroom formula's view of a pod; reclaimed pods do not count against headroom.

    `exclusive_memory` is the memory of the NUMA nodes a numa_exclusive pod holds.
    """
    if level == names.QOS_RECLAIMED_CORES:
        return None
    if usage is None:
        return MemoryUser(level, request, None, None, None, exclusive_memory)
    return MemoryUser(
        level,
        request,
        usage.get("rss"),
        usage.get("cache"),
        usage.get("shmem"),
        exclusive_memory,
    )


def exclusive_memory(topo: CPUTopology, numas: Iterable[int]) -> int | None:
    """The memory of the NUMA nodes a numa_exclusive pod holds (None when unknown)."""
    if not topo.memory_per_numa:
        return None
    return sum(topo.memory_of_numa(n) for n in numas)


GIB = 1024**3


def reserved_memory_per_numa(reserved_bytes: int, numas: Iterable[int]) -> dict[int, int]:
    """Katalyst's memory reserve per NUMA node: the reserve in GiB, ceil(GiB / #NUMA) GiB on
    each node (so the whole reserve is never less than asked)."""
    ids = sorted(numas)
    if not ids or reserved_bytes <= 0:
        return dict.fromkeys(ids, 0)
    per_numa = math.ceil(reserved_bytes / GIB / len(ids) - 1e-12) * GIB
    return dict.fromkeys(ids, per_numa)


# -- pressure ------------------------------------------------------------------------------

SCALE_DENOMINATOR = 10000  # vm.watermark_scale_factor is in 1/10000 of memory
HIGH_SCALE = 0.95  # memory.high = 95 % of the guard's limit (Katalyst's memoryHighScaleFactor)


class PressureLevel(enum.Enum):
    NONE = "none"
    TUNE_MEMCG = "tune_memcg"  # free below twice the critical watermark
    DROP_CACHE = "drop_cache"  # free below the critical watermark


@dataclass(frozen=True, slots=True)
class Pressure:
    """Where free memory stands against the critical watermark (bytes)."""

    level: PressureLevel
    free: int
    critical: int
    target_reclaim: int  # bytes to reclaim to get back above twice the critical watermark


def memory_pressure(
    free: int, total: int, watermark_scale_factor: int, min_critical: int
) -> Pressure:
    """Katalyst's memory advisor: critical = max(min_critical, 2 × total × scale / 10000);
    free < critical asks for 2·critical − free of cache to be dropped; free < 2·critical is
    the tune state (for the node, min_critical is the per-NUMA one × #NUMA)."""
    critical = max(min_critical, 2 * total * watermark_scale_factor // SCALE_DENOMINATOR)
    if free < critical:
        return Pressure(PressureLevel.DROP_CACHE, free, critical, 2 * critical - free)
    if free < 2 * critical:
        return Pressure(PressureLevel.TUNE_MEMCG, free, critical, 0)
    return Pressure(PressureLevel.NONE, free, critical, 0)


@dataclass(frozen=True, slots=True)
class CacheHolder:
    """A reclaimed pod's page cache, as a cache-drop candidate."""

    uid: str
    cgroup: str
    cache: int  # bytes of page cache
    numas: tuple[int, ...]  # NUMA nodes it may allocate on


def cache_drop_victims(
    holders: Sequence[CacheHolder],
    target: int,
    total: int,
    min_cache_ratio: float,
    numa: int | None = None,
) -> list[CacheHolder]:
    """Katalyst's cache reaper: the reclaimed pods whose cache is dropped to free `target`
    bytes, largest cache first, until their cache adds up to more than the target; pods
    holding less than `min_cache_ratio` of `total` are not worth it. With `numa`, only pods
    that may allocate on that NUMA node are candidates."""
    if target <= 0:
        return []
    floor = total * min_cache_ratio
    pool = [
        h for h in holders if h.cache >= floor and h.cache > 0 and (numa is None or numa in h.numas)
    ]
    pool.sort(key=lambda h: (-h.cache, h.uid))
    out: list[CacheHolder] = []
    freed = 0
    for h in pool:
        out.append(h)
        freed += h.cache
        if freed > target:
            break
    return out


# -- memory guard --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GuardLimit:
    limit: int  # memory limit of the reclaimed root (bytes)
    high: int  # its memory.high (bytes; cgroup v2)
    spare: Mapping[int, int]  # per NUMA node: free memory above its watermark, lent out


def memory_guard(
    reclaimed_used: int,
    numa_memory: Mapping[int, NumaMemory],
    numas: Iterable[int],
    min_critical: int,
    watermark_factor: float,
) -> GuardLimit | None:
    """Katalyst's memory guard: limit = reclaimed use + Σ over the NUMA nodes reclaimed pods
    may use of max(free − max(min_critical, low watermark × factor), 0). Reclaimed pods may
    grow into free memory only down to each node's low watermark: below it the kernel's
    own reclaim (kswapd) would start on everyone's pages. None when the machine does not
    say how much is free per NUMA node."""
    spare: dict[int, int] = {}
    for n in numas:
        m = numa_memory.get(n)
        if m is None:
            return None
        critical = max(min_critical, int(m.watermark_low * watermark_factor))
        spare[n] = max(m.free - critical, 0)
    if not spare:
        return None
    limit = max(reclaimed_used, 0) + sum(spare.values())
    limit = max(limit, 1)
    return GuardLimit(limit, max(int(limit * HIGH_SCALE), 1), spare)


# -- protection and the OOM ladder ---------------------------------------------------------


def protection(level: str, request: int, mode: str) -> tuple[Knob, int] | None:
    """memory.min / memory.low of a pod (cgroup v2): with mode "low", shared, dedicated and
    system pods get memory.low = their memory request (reclaim takes their pages only when
    nothing unprotected is left); with "min", dedicated and system pods get memory.min
    instead (never reclaimed below it) and shared pods memory.low. Reclaimed pods: none."""
    if mode not in PROTECTION_MODES:
        raise ValueError(
            f"memory.protection: invalid value {mode!r}; accepted: {', '.join(PROTECTION_MODES)}"
        )
    if mode == "none" or level == names.QOS_RECLAIMED_CORES or request <= 0:
        return None
    hard = mode == "min" and level in (names.QOS_DEDICATED_CORES, names.QOS_SYSTEM_CORES)
    return (Knob.MEMORY_MIN if hard else Knob.MEMORY_LOW, request)


def protection_totals(
    pods: Mapping[str, tuple[Knob, int]], top: str | None
) -> dict[str, dict[Knob, int]]:
    """memory.min / memory.low of the cgroups above protected pods (pod cgroup -> its own):
    a v2 cgroup's protection is capped by its parent's, so each ancestor up to `top` (the
    kubelet's kubepods cgroup; only the parent when None) gets the sum below it."""
    out: dict[str, dict[Knob, int]] = {}
    for cg, (knob, value) in pods.items():
        parts = cg.split("/")
        for i in range(len(parts) - 1, 0, -1):
            anc = "/".join(parts[:i])
            sums = out.setdefault(anc, {Knob.MEMORY_MIN: 0, Knob.MEMORY_LOW: 0})
            sums[knob] += value
            if top is None or anc == top or not anc.startswith(top + "/"):
                break
    return out


def oom_score_adj(priority: int) -> int | None:
    """The oom_score_adj that stands for a Katalyst OOM priority (None: leave the kubelet's).

    The kernel picks the process with the highest oom_score = its share of memory in
    1/1000 + oom_score_adj. The ladder maps monotonically onto the adj range, a higher
    priority always meaning a lower adj: reclaimed priorities [-100, 0) onto (0, 1000]
    (-100, the reclaimed default, is the kubelet's best-effort 1000), shared, dedicated and
    system [0, 300) onto (−1000, 0] in thirds, and 300 ("never") onto −1000, which exempts the
    process from the OOM killer. -300 ("ignore") leaves the kubelet's value."""
    if priority == OOM_PRIORITY_IGNORE:
        return None
    if priority >= OOM_PRIORITY_TOP:
        return -1000
    if priority < 0:
        return min(-10 * priority, 1000)
    return -((1000 * priority) // OOM_PRIORITY_TOP) if priority else 0


# -- one pass over the node ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemoryPod:
    """What the memory decisions need of one managed pod."""

    uid: str
    key: str
    level: str
    cgroup: str  # the pod's cgroup
    containers: tuple[str, ...]  # its containers' cgroups (the sandbox's left out)
    memory_request: int
    oom_priority: int
    cache: int | None  # page cache of the pod's cgroup, None when unknown
    numas: tuple[int, ...]  # NUMA nodes it may allocate on


@dataclass(frozen=True, slots=True)
class MemoryInputs:
    now: float
    cgroup_version: int
    pods: tuple[MemoryPod, ...]
    memory: MemoryInfo | None
    numa_memory: Mapping[int, NumaMemory]
    reclaimed_numas: tuple[int, ...]  # NUMA nodes reclaimed pods may allocate on
    root: str | None  # the reclaimed root, when it exists
    root_usage: int | None  # its memory charge
    top: str | None  # the kubelet's kubepods cgroup, when known


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    desired: Mapping[str, Mapping[Knob, KnobValue]]
    terms: Mapping[str, Any]
    dropped_at: Mapping[str, float] = field(default_factory=dict)  # pod uid -> last drop


def decide_memory(
    inp: MemoryInputs, cfg: MemoryGuardConfig, dropped_at: Mapping[str, float]
) -> MemoryPlan:
    """The memory knobs of this pass beyond cpusets and reclaimed pods' own limits: the
    guard on the reclaimed root, cache drops under pressure, protection and the OOM ladder,
    with the terms behind each (`dropped_at` is the state the cache reaper keeps)."""
    desired: dict[str, dict[Knob, KnobValue]] = {}
    terms: dict[str, Any] = {}
    pressure = _pressures(inp, cfg)
    terms["pressure"] = {k: _pressure_json(v) for k, v in pressure.items()}
    if cfg.guard and inp.root is not None:
        terms["guard"] = _guard(inp, cfg, desired)
    present = {p.uid for p in inp.pods}
    state = {u: t for u, t in dropped_at.items() if u in present}
    if cfg.drop_cache:
        terms["drop_cache"] = _drop_cache(inp, cfg, pressure, state, desired)
    if cfg.protection != "none" and inp.cgroup_version == 2:
        terms["protection"] = _protect(inp, cfg, desired)
    if cfg.oom_priority:
        terms["oom"] = _oom(inp, desired)
    return MemoryPlan(desired, terms, state)


def _pressures(inp: MemoryInputs, cfg: MemoryGuardConfig) -> dict[str, Pressure]:
    out: dict[str, Pressure] = {}
    wsf = inp.memory.watermark_scale_factor if inp.memory is not None else 10
    for n, m in sorted(inp.numa_memory.items()):
        out[f"numa{n}"] = memory_pressure(m.free, m.total, wsf, cfg.min_critical_watermark)
    if inp.memory is not None:
        numas = max(len(inp.numa_memory), 1)
        out["node"] = memory_pressure(
            inp.memory.free, inp.memory.total, wsf, cfg.min_critical_watermark * numas
        )
    return out


def _pressure_json(p: Pressure) -> dict[str, Any]:
    return {
        "state": p.level.value,
        "free": p.free,
        "critical": p.critical,
        "target_reclaim": p.target_reclaim,
    }


def _guard(
    inp: MemoryInputs, cfg: MemoryGuardConfig, desired: dict[str, dict[Knob, KnobValue]]
) -> dict[str, Any]:
    assert inp.root is not None
    used = inp.root_usage
    if used is None:
        return {"enabled": True, "limit": "unchanged: the reclaimed root's usage is unknown"}
    g = memory_guard(
        used,
        inp.numa_memory,
        inp.reclaimed_numas,
        cfg.min_critical_watermark,
        cfg.critical_watermark_scale_factor,
    )
    if g is None:
        return {"enabled": True, "limit": "unchanged: free memory per NUMA node is unknown"}
    desired[inp.root] = {Knob.MEMORY_LIMIT: g.limit, Knob.MEMORY_HIGH: g.high}
    return {
        "enabled": True,
        "reclaimed_used": used,
        "spare_per_numa": dict(g.spare),
        "limit": g.limit,
        "high": g.high,
        "formula": "reclaimed_used + Σ max(free − max(min_critical, low × factor), 0)",
    }


def _drop_cache(
    inp: MemoryInputs,
    cfg: MemoryGuardConfig,
    pressure: Mapping[str, Pressure],
    state: dict[str, float],
    desired: dict[str, dict[Knob, KnobValue]],
) -> list[dict[str, Any]]:
    holders = [
        CacheHolder(p.uid, p.cgroup, p.cache, p.numas)
        for p in inp.pods
        if p.level == names.QOS_RECLAIMED_CORES
        and p.cache
        and inp.now - state.get(p.uid, -math.inf) >= cfg.drop_cache_interval_s
    ]
    chosen: dict[str, tuple[CacheHolder, str]] = {}
    for where, pr in pressure.items():
        if pr.level is not PressureLevel.DROP_CACHE:
            continue
        if where == "node":
            total = inp.memory.total if inp.memory is not None else 0
            picked = cache_drop_victims(
                holders, pr.target_reclaim, total, cfg.min_cache_utilization
            )
        else:
            n = int(where.removeprefix("numa"))
            total = inp.numa_memory[n].total
            picked = cache_drop_victims(
                holders, pr.target_reclaim, total, cfg.min_cache_utilization, numa=n
            )
        for h in picked:
            chosen.setdefault(h.uid, (h, where))
    out = []
    keys = {p.uid: p.key for p in inp.pods}
    for uid, (h, where) in sorted(chosen.items()):
        desired.setdefault(h.cgroup, {})[Knob.MEMORY_RECLAIM] = h.cache
        state[uid] = inp.now
        out.append({"pod": keys[uid], "cache": h.cache, "pressure": where})
    return out


def _protect(
    inp: MemoryInputs, cfg: MemoryGuardConfig, desired: dict[str, dict[Knob, KnobValue]]
) -> dict[str, Any]:
    own: dict[str, tuple[Knob, int]] = {}
    out: dict[str, Any] = {}
    for p in inp.pods:
        prot = protection(p.level, p.memory_request, cfg.protection)
        knob, value = prot if prot is not None else (Knob.MEMORY_LOW, 0)
        other = Knob.MEMORY_MIN if knob is Knob.MEMORY_LOW else Knob.MEMORY_LOW
        # Processes sit in the containers' cgroups, whose own protection is also capped
        # by the pod's: each gets the pod's figure, and the kernel shares it among them
        # by their usage.
        for cg in (p.cgroup, *p.containers):
            desired.setdefault(cg, {}).update({knob: value, other: 0})
        if prot is not None:
            own[p.cgroup] = prot
            out[p.key] = {knob.value: value}
    for cg, sums in protection_totals(own, inp.top).items():
        desired.setdefault(cg, {}).update(sums)
        out[cg] = {k.value: v for k, v in sums.items()}
    return out


def _oom(inp: MemoryInputs, desired: dict[str, dict[Knob, KnobValue]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in inp.pods:
        adj = oom_score_adj(p.oom_priority)
        out[p.key] = {"oom_priority": p.oom_priority, "oom_score_adj": adj}
        if adj is None:
            continue
        for cg in p.containers:
            desired.setdefault(cg, {})[Knob.OOM_SCORE_ADJ] = adj
    return out
