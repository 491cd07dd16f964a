"""The inner eviction plugins. Each looks at a snapshot and reports its thresholds.

A plugin only measures and compares; it never picks victims and never waits out grace
periods — the manager does both, the same way for every plugin. Plugins that need
history (a ring of load samples, how long kswapd has been busy, a NUMA pressure
counter) keep it themselves, advanced once per round by `observe`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

from pykatalyst.agent.eviction.config import (
    LoadPressureConfig,
    NicHealthConfig,
    NumaMemoryPressureConfig,
    ReclaimedResourcePressureConfig,
    SystemMemoryPressureConfig,
)
from pykatalyst.agent.eviction.ranking import numa_memory_of
from pykatalyst.agent.eviction.types import (
    ConditionSpec,
    EvictionSnapshot,
    Met,
    PodInfo,
    Threshold,
)
from pykatalyst.agent.host.base import MemoryInfo
from pykatalyst.api import names

ANY_LEVEL: tuple[str, ...] = (
    names.QOS_RECLAIMED_CORES,
    names.QOS_SHARED_CORES,
    names.QOS_DEDICATED_CORES,
)
RECLAIMED_ONLY: tuple[str, ...] = (names.QOS_RECLAIMED_CORES,)

RECLAIMED_CONDITION = ConditionSpec(
    names.CONDITION_RECLAIMED_RESOURCE_PRESSURE,
    "cnr",
    (names.CNR_TAINT_EFFECT_RECLAIMED_NO_SCHEDULE,),
)
MEMORY_CONDITION = ConditionSpec(names.CONDITION_MEMORY_PRESSURE, "node", ("NoSchedule",))
NUMA_MEMORY_CONDITION = ConditionSpec(
    names.CONDITION_NUMA_MEMORY_PRESSURE, "cnr", (names.CNR_TAINT_EFFECT_RECLAIMED_NO_SCHEDULE,)
)
CPU_CONDITION = ConditionSpec(names.CONDITION_CPU_PRESSURE, "node", ("NoSchedule",))

_SHORT = {
    names.RECLAIMED_MILLICPU: "reclaimed_millicpu",
    names.RECLAIMED_MEMORY: "reclaimed_memory",
}
_UNIT = {names.RECLAIMED_MILLICPU: "millicpu", names.RECLAIMED_MEMORY: "bytes"}


class NumaZoneLike(Protocol):
    @property
    def watermark_min(self) -> int: ...

    @property
    def watermark_low(self) -> int: ...


# What a plugin remembers between rounds, as a value (None for a plugin with no memory).
PluginMemory = tuple[Any, ...] | None


class EvictionPlugin(Protocol):
    @property
    def name(self) -> str: ...

    def observe(self, snap: EvictionSnapshot) -> list[Threshold]: ...

    def memory(self) -> PluginMemory: ...

    def restore(self, memory: PluginMemory) -> None: ...


class _Stateless:
    """A plugin that remembers nothing between rounds."""

    def memory(self) -> PluginMemory:
        return None

    def restore(self, memory: PluginMemory) -> None:
        return None


def _live(pods: Sequence[PodInfo]) -> list[PodInfo]:
    # Terminating pods count as already released: their requests no longer weigh.
    return [p for p in pods if not p.terminating]


# --- reclaimed resources ---------------------------------------------------------------


def _overcommit(
    plugin: str,
    key: str,
    resource: str,
    requested: float,
    allocatable: float,
    cfg: ReclaimedResourcePressureConfig,
    numa: int | None,
    candidates: frozenset[str] | None,
    where: str,
) -> Threshold:
    hard = cfg.eviction_threshold.get(resource, 5.0)
    soft = cfg.soft_eviction_threshold.get(resource, hard)
    hard_limit = hard * allocatable
    soft_limit = soft * allocatable
    if requested > hard_limit:
        met, limit = Met.HARD, hard_limit
    elif requested > soft_limit:
        met, limit = Met.SOFT, soft_limit
    else:
        met, limit = Met.NOT, soft_limit
    return Threshold(
        plugin=plugin,
        key=key,
        met=met,
        signal=f"sum of {_SHORT[resource]} requests of reclaimed pods{where}",
        observed=requested,
        threshold=limit,
        unit=_UNIT[resource],
        window="published reclaimed allocatable (the reporter's smoothed figure)",
        resource=resource,
        grace_period_s=cfg.grace_period_s,
        condition=RECLAIMED_CONDITION,
        victim_levels=RECLAIMED_ONLY,
        candidates=candidates,
        numa=numa,
        overage=max(requested - hard_limit, 0.0) if met == Met.HARD else None,
        deletion_grace_s=cfg.deletion_grace_s,
        terms={
            "allocatable": allocatable,
            "hard_ratio": hard,
            "soft_ratio": soft,
            "hard_limit": hard_limit,
            "soft_limit": soft_limit,
        },
    )


class ReclaimedResourcePressurePlugin(_Stateless):
    """Σ reclaimed requests > ratio × reclaimed allocatable, node-wide, per resource.

    The allocatable read is the published (smoothed) figure, so a single dip in the raw
    headroom moves it by at most the reporter's step: one spike cannot evict.
    """

    name = names.EVICTION_PLUGIN_RECLAIMED_RESOURCE

    def __init__(self, cfg: ReclaimedResourcePressureConfig) -> None:
        self.cfg = cfg

    def observe(self, snap: EvictionSnapshot) -> list[Threshold]:
        if snap.reclaimed is None:
            return []
        live = [p for p in _live(snap.pods) if p.qos_level == names.QOS_RECLAIMED_CORES]
        out = []
        for resource in (names.RECLAIMED_MILLICPU, names.RECLAIMED_MEMORY):
            if resource not in self.cfg.eviction_threshold:
                continue
            if resource == names.RECLAIMED_MILLICPU:
                requested = float(sum(p.reclaimed_milli_cpu for p in live))
            else:
                requested = float(sum(p.reclaimed_memory for p in live))
            out.append(
                _overcommit(
                    self.name,
                    _SHORT[resource],
                    resource,
                    requested,
                    float(snap.reclaimed.get(resource)),
                    self.cfg,
                    None,
                    None,
                    "",
                )
            )
        return out


class ReclaimedNumaResourcePressurePlugin(_Stateless):
    """The same check per NUMA zone, over the reclaimed pods bound to that NUMA."""

    name = names.EVICTION_PLUGIN_RECLAIMED_NUMA_RESOURCE

    def __init__(self, cfg: ReclaimedResourcePressureConfig) -> None:
        self.cfg = cfg

    def observe(self, snap: EvictionSnapshot) -> list[Threshold]:
        if snap.reclaimed is None or not snap.reclaimed.per_numa:
            return []
        live = [
            p for p in _live(snap.pods) if p.qos_level == names.QOS_RECLAIMED_CORES and p.numa_nodes
        ]
        out = []
        for numa, zone in sorted(snap.reclaimed.per_numa.items()):
            bound = [p for p in live if numa in p.numa_nodes]
            if not bound:
                continue
            uids = frozenset(p.uid for p in bound)
            for resource in (names.RECLAIMED_MILLICPU, names.RECLAIMED_MEMORY):
                if resource not in self.cfg.eviction_threshold:
                    continue
                if resource == names.RECLAIMED_MILLICPU:
                    requested = sum(p.reclaimed_milli_cpu / len(p.numa_nodes) for p in bound)
                    allocatable = float(zone.milli_cpu)
                else:
                    requested = sum(p.reclaimed_memory / len(p.numa_nodes) for p in bound)
                    allocatable = float(zone.memory)
                out.append(
                    _overcommit(
                        self.name,
                        f"numa{numa}/{_SHORT[resource]}",
                        resource,
                        requested,
                        allocatable,
                        self.cfg,
                        numa,
                        uids,
                        f" bound to NUMA {numa}",
                    )
                )
        return out


# --- memory ----------------------------------------------------------------------------


class SystemMemoryPressurePlugin:
    """Node memory pressure, three ways (each its own threshold):

    - free: MemFree below max(minimum, total × watermark_scale_factor / 10000) → evict
      reclaimed pods;
    - psi: memory PSI some-avg10 of the node ≥ threshold, at least N pods under pressure
      (avg10 > the active mark) and the mean avg10 of the pods ≥ the pod threshold —
      hard for reclaimed pods once it has lasted 15 s, for any pod after 45 s;
    - kswapd (only with `kswapd_eviction`; Katalyst replaced it with PSI): kswapd stealing
      ≥ rate pages/s for the exceed duration — hard, any pod.

    Like Katalyst's, none of these is ever soft: pressure that has not lasted is not met.
    """

    name = names.EVICTION_PLUGIN_SYSTEM_MEMORY

    def __init__(self, cfg: SystemMemoryPressureConfig) -> None:
        self.cfg = cfg
        self._kswapd_since: float | None = None
        self._psi_since: float | None = None

    def memory(self) -> PluginMemory:
        """When kswapd and the memory PSI began their current run over the thresholds."""
        return (self._kswapd_since, self._psi_since)

    def restore(self, memory: PluginMemory) -> None:
        self._kswapd_since, self._psi_since = memory if memory is not None else (None, None)

    def _base(self, key: str, met: Met, **kw: object) -> Threshold:
        return Threshold(
            plugin=self.name,
            key=key,
            met=met,
            resource=names.RESOURCE_MEMORY,
            grace_period_s=self.cfg.grace_period_s,
            condition=MEMORY_CONDITION,
            cool_down_s=self.cfg.cool_down_s,
            deletion_grace_s=self.cfg.deletion_grace_s,
            **kw,  # type: ignore[arg-type]
        )

    def observe(self, snap: EvictionSnapshot) -> list[Threshold]:
        mem = snap.sample.memory if snap.sample is not None else None
        if mem is None:
            self._kswapd_since = self._psi_since = None
            return []
        out = [self._free(mem)]
        kswapd = self._kswapd(mem, snap.now)
        if kswapd is not None:
            out.append(kswapd)
        psi = self._psi(mem, snap)
        if psi is not None:
            out.append(psi)
        return out

    def _free(self, mem: MemoryInfo) -> Threshold:
        """MemFree below the larger of the configured minimum and the kernel's watermark."""
        watermark = mem.total * mem.watermark_scale_factor / 10000.0
        limit = max(float(self.cfg.free_threshold_minimum), watermark)
        return self._base(
            "free",
            Met.HARD if mem.free < limit else Met.NOT,
            signal="MemFree",
            observed=float(mem.free),
            threshold=limit,
            operator="<",
            unit="bytes",
            window="instant",
            victim_levels=RECLAIMED_ONLY,
            terms={"total": mem.total, "watermark_scale_factor": mem.watermark_scale_factor},
        )

    def _kswapd(self, mem: MemoryInfo, now: float) -> Threshold | None:
        """kswapd's steal rate, sustained; None when not measured or not asked for."""
        cfg = self.cfg
        rate = mem.kswapd_steal_pages_per_s if cfg.kswapd_eviction else None
        if rate is None:
            return None
        if rate >= cfg.kswapd_rate_threshold:
            if self._kswapd_since is None:
                self._kswapd_since = now
            lasted = now - self._kswapd_since
            met = Met.HARD if lasted >= cfg.kswapd_rate_exceed_duration_s else Met.NOT
        else:
            self._kswapd_since = None
            lasted, met = 0.0, Met.NOT
        return self._base(
            "kswapd",
            met,
            signal="kswapd steal rate",
            observed=rate,
            threshold=cfg.kswapd_rate_threshold,
            operator=">=",
            unit="pages/s",
            window=f"sustained {cfg.kswapd_rate_exceed_duration_s:g}s (so far {lasted:g}s)",
            victim_levels=ANY_LEVEL,
        )

    def _psi(self, mem: MemoryInfo, snap: EvictionSnapshot) -> Threshold | None:
        """The node's memory PSI with enough pods under pressure, sustained: reclaimed pods
        first, any pod later; None when not measured."""
        cfg = self.cfg
        psi = mem.psi_some_avg10
        if psi is None:
            return None
        reported = [p.memory_psi_avg10 for p in snap.pods if p.memory_psi_avg10 is not None]
        active = [v for v in reported if v > cfg.psi_pod_active]
        mean = sum(reported) / len(reported) if reported else 0.0
        pods_ok = len(active) >= cfg.psi_min_pods and mean >= cfg.psi_pod_threshold
        pressured = psi >= cfg.psi_node_threshold and pods_ok
        if pressured:
            if self._psi_since is None:
                self._psi_since = snap.now
            lasted = snap.now - self._psi_since
        else:
            self._psi_since = None
            lasted = 0.0
        if not pressured:
            met, levels = Met.NOT, RECLAIMED_ONLY
        elif lasted >= cfg.psi_any_duration_s:
            met, levels = Met.HARD, ANY_LEVEL
        elif lasted >= cfg.psi_reclaimed_duration_s:
            met, levels = Met.HARD, RECLAIMED_ONLY
        else:
            met, levels = Met.NOT, RECLAIMED_ONLY
        return self._base(
            "psi",
            met,
            signal="memory PSI some avg10",
            observed=psi,
            threshold=cfg.psi_node_threshold,
            operator=">=",
            unit="%",
            window=f"sustained {cfg.psi_reclaimed_duration_s:g}s (reclaimed) / "
            f"{cfg.psi_any_duration_s:g}s (any) (so far {lasted:g}s)",
            victim_levels=levels,
            terms={"pressured_pods": len(active), "pods_mean_avg10": round(mean, 3)},
        )


class NumaMemoryPressurePlugin:
    """Per-NUMA free memory against the zone watermarks.

    Katalyst's below-watermark counter: free < min evicts reclaimed pods at once and lifts
    the counter to (any threshold − fast-eviction wait cycle); free < low adds one, and one
    more once the counter is past 2 while free is below the middle of min and low; free
    above low takes one off and clamps the counter to the reclaimed threshold. Above the
    reclaimed threshold (6) reclaimed pods go, at the any threshold (12) any pod may.
    Victims must use at least `victim_minimum_utilization` of the NUMA. As Katalyst's,
    only these are met (hard) and no condition is raised; with `early_warning` a counter
    short of the thresholds is soft and the NumaMemoryPressure CNR condition is raised.
    """

    name = names.EVICTION_PLUGIN_NUMA_MEMORY

    def __init__(self, cfg: NumaMemoryPressureConfig) -> None:
        self.cfg = cfg
        self._counters: dict[int, int] = {}

    def memory(self) -> PluginMemory:
        """Each NUMA node's below-watermark counter."""
        return tuple(sorted(self._counters.items()))

    def restore(self, memory: PluginMemory) -> None:
        self._counters = dict(memory or ())

    def observe(self, snap: EvictionSnapshot) -> list[Threshold]:
        numas = snap.sample.numa_memory if snap.sample is not None else {}
        cfg = self.cfg
        out = []
        live = _live(snap.pods)
        for numa, zm in sorted(numas.items()):
            if zm.watermark_low <= 0 and zm.watermark_min <= 0:
                continue
            count = _numa_counter(self._counters.get(numa, 0), zm.free, zm, cfg)
            self._counters[numa] = count
            if zm.free < zm.watermark_min:
                met, levels, why = Met.HARD, RECLAIMED_ONLY, "free below the min watermark"
            elif count >= cfg.any_times_threshold:
                met, levels, why = Met.HARD, ANY_LEVEL, "counter at the any-pod threshold"
            elif count > cfg.reclaimed_times_threshold:
                met, levels, why = Met.HARD, RECLAIMED_ONLY, "counter above the reclaimed threshold"
            elif count > 0 and cfg.early_warning:
                met, levels, why = Met.SOFT, RECLAIMED_ONLY, "free below the low watermark"
            else:
                met, levels, why = Met.NOT, RECLAIMED_ONLY, ""
            minimum = cfg.victim_minimum_utilization * zm.total
            users = frozenset(p.uid for p in live if numa_memory_of(p, numa, len(numas)) >= minimum)
            out.append(
                Threshold(
                    plugin=self.name,
                    key=f"numa{numa}",
                    met=met,
                    signal=f"free memory of NUMA {numa}",
                    observed=float(zm.free),
                    threshold=float(
                        zm.watermark_min if zm.free < zm.watermark_min else zm.watermark_low
                    ),
                    operator="<",
                    unit="bytes",
                    window=f"below-low counter {count} (reclaimed > "
                    f"{cfg.reclaimed_times_threshold}, any >= {cfg.any_times_threshold})",
                    resource=names.RESOURCE_MEMORY,
                    grace_period_s=cfg.grace_period_s,
                    condition=NUMA_MEMORY_CONDITION if cfg.early_warning else None,
                    victim_levels=levels,
                    candidates=users,
                    numa=numa,
                    deletion_grace_s=cfg.deletion_grace_s,
                    cool_down_s=cfg.cool_down_s,
                    terms={
                        "counter": count,
                        "watermark_min": zm.watermark_min,
                        "watermark_low": zm.watermark_low,
                        "why": why,
                    },
                )
            )
        for numa in [n for n in self._counters if n not in numas]:
            del self._counters[numa]
        return out


_COUNTER_FAST_MARK = 2  # past this, deep pressure counts twice (Katalyst's minDuration)


def _numa_counter(count: int, free: int, zm: NumaZoneLike, cfg: NumaMemoryPressureConfig) -> int:
    """One round of Katalyst's NUMA below-watermark counter."""
    if free < zm.watermark_min:
        return max(count, cfg.any_times_threshold - cfg.fast_eviction_wait_cycle)
    if free < zm.watermark_low:
        count += 1
        if count > _COUNTER_FAST_MARK and free < (zm.watermark_min + zm.watermark_low) / 2:
            count += 1
        return min(count, 2 * cfg.any_times_threshold)
    if count > 0:
        count = min(count - 1, cfg.reclaimed_times_threshold)
    return count


# --- cpu -------------------------------------------------------------------------------


class LoadPressurePlugin:
    """Share-pool load against its size, over a ring of the last N rounds.

    Over 'soft' when load > soft_ratio × size, 'hard' when > hard_ratio × size; the
    threshold is met when at least met_percentage of the ring is over. Victims come from
    the offending pool, biggest load first (Katalyst's cpu-pressure load plugin).
    """

    name = names.EVICTION_PLUGIN_CPU_LOAD

    def __init__(self, cfg: LoadPressureConfig) -> None:
        self.cfg = cfg
        self._rings: dict[str, deque[float]] = {}

    def memory(self) -> PluginMemory:
        """Each share pool's ring of its last loads."""
        return tuple((name, tuple(ring)) for name, ring in self._rings.items())

    def restore(self, memory: PluginMemory) -> None:
        size = self.cfg.ring_size
        self._rings = {name: deque(ring, maxlen=size) for name, ring in memory or ()}

    def observe(self, snap: EvictionSnapshot) -> list[Threshold]:
        cfg = self.cfg
        out = []
        seen = set()
        for pool in snap.pools:
            if pool.name in cfg.skip_pools or pool.size <= 0 or pool.load is None:
                continue
            if pool.name.startswith(f"{names.POOL_PREFIX_ISOLATION}-"):
                continue  # an isolated pod is noisy by definition (Katalyst skips these too)
            seen.add(pool.name)
            ring = self._rings.setdefault(pool.name, deque(maxlen=cfg.ring_size))
            ring.append(pool.load)
            soft_limit = cfg.soft_ratio * pool.size
            hard_limit = cfg.hard_ratio * pool.size
            soft_over = sum(1 for v in ring if v > soft_limit)
            hard_over = sum(1 for v in ring if v > hard_limit)
            need = cfg.met_percentage * cfg.ring_size
            if hard_over >= need:
                met, limit = Met.HARD, hard_limit
            elif soft_over >= need:
                met, limit = Met.SOFT, soft_limit
            else:
                met, limit = Met.NOT, soft_limit
            members = frozenset(p.uid for p in snap.pods if p.pool == pool.name)
            out.append(
                Threshold(
                    plugin=self.name,
                    key=f"pool {pool.name}",
                    met=met,
                    signal=f"1-minute load of pool {pool.name}",
                    observed=pool.load,
                    threshold=limit,
                    unit="runnable tasks",
                    window=f"{soft_over} soft / {hard_over} hard over in the last {len(ring)} "
                    f"samples (need {need:g} of {cfg.ring_size})",
                    resource=names.RESOURCE_CPU,
                    grace_period_s=cfg.grace_period_s,
                    condition=CPU_CONDITION,
                    victim_levels=ANY_LEVEL,
                    candidates=members,
                    deletion_grace_s=cfg.deletion_grace_s,
                    cool_down_s=cfg.cool_down_s,
                    terms={
                        "pool_size": pool.size,
                        "soft_limit": soft_limit,
                        "hard_limit": hard_limit,
                    },
                )
            )
        for name in [n for n in self._rings if n not in seen]:
            del self._rings[name]
        return out


# --- NIC health -----------------------------------------------------------------------------


class NicHealthPlugin(_Stateless):
    """Katalyst's network eviction: a NIC whose zone reports no allocatable net_bandwidth
    (zero, or none at all: the NIC went down or its bandwidth was taken away) for
    `tolerance_s` evicts every pod that holds bandwidth on it — a `net_bandwidth` request
    and a `nic_selection_result` naming it — whatever its QoS level: what it was promised
    cannot be given there, and the scheduler may place it on a NIC that can. One
    threshold per NIC the node reports; NICs with allocatable report theirs not met."""

    name = names.EVICTION_PLUGIN_NETWORK

    def __init__(self, cfg: NicHealthConfig) -> None:
        self.cfg = cfg

    def observe(self, snap: EvictionSnapshot) -> list[Threshold]:
        if snap.nic_allocatable is None:
            return []
        holders: dict[str, list[PodInfo]] = {}
        for p in _live(snap.pods):
            nic = str(p.annotations.get(names.NIC_SELECTION_RESULT_ANNOTATION) or "")
            if nic and p.digest.request(names.RESOURCE_NET_BANDWIDTH) > 0:
                holders.setdefault(nic, []).append(p)
        return [
            self._threshold(nic, alloc, holders.get(nic, []))
            for nic, alloc in sorted(snap.nic_allocatable.items())
        ]

    def _threshold(self, nic: str, alloc: int | None, pods: list[PodInfo]) -> Threshold:
        held = sum(p.digest.request(names.RESOURCE_NET_BANDWIDTH) for p in pods)
        down = alloc is None or alloc <= 0
        return Threshold(
            plugin=self.name,
            key=f"nic {nic}",
            met=Met.HARD if down and pods else Met.NOT,
            signal=f"allocatable net_bandwidth of NIC {nic}",
            observed=float(alloc or 0),
            operator="<=",
            threshold=0.0,
            unit="Mbps",
            window="its NIC zone as the node reports it"
            + (" (the zone reports no net_bandwidth)" if alloc is None else ""),
            resource=names.RESOURCE_NET_BANDWIDTH,
            grace_period_s=self.cfg.tolerance_s,
            victim_levels=(*ANY_LEVEL, names.QOS_SYSTEM_CORES),
            candidates=frozenset(p.uid for p in pods),
            overage=float(held) if down else None,  # every holder goes
            deletion_grace_s=self.cfg.deletion_grace_s,
            terms={"holders": sorted(p.key for p in pods), "held_mbps": held},
            scope=f"nic/{nic}",  # a NIC's holders do not wait for another NIC's
        )
