"""Sys-advisor: how big the share pools must be and how much is left for reclaimed pods.

Katalyst's canonical provisioning, in four steps, each a pure function returning its terms:

1. `estimate_container`: what one shared container needs now —
   max(1.25 × usage, load1, load5), or its request while ramping up or without metrics.
2. `regulate`: a pool's size from Σ estimates + the burst reserve (ReservedForAllocate),
   rounded up, limited to +10 / −2 cores per step with at most one shrink per 30 s.
3. `assemble_pools`: share pools fitted into the cpus available; reclaim gets the rest.
4. `cpu_headroom` / `memory_headroom`: the reclaimed capacity, smoothed for publication by
   `HeadroomSmoother` (sliding window, step clamp, floor, zero-out).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pykatalyst.agent.config import AdvisorConfig
from pykatalyst.api import names
from pykatalyst.topology.cpuset import CPUSet

Terms = dict[str, Any]


# --- 1. per-container estimate ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContainerEstimate:
    cores: float
    source: str  # usage | load1 | load5 | request | ramp-up | fallback


def estimate_container(
    request: float,
    usage: float | None,
    load1: float | None,
    load5: float | None,
    *,
    ramping_up: bool,
    reclaim_enabled: bool,
    cfg: AdvisorConfig,
) -> ContainerEstimate:
    """Katalyst's canonical estimate of one shared container, in cores.

    Non-positive metrics count as missing (an idle or just-started container says nothing
    about its need), so a container without usable metrics is held at its request, and one
    without a request either at the fallback — never at zero.
    """
    if reclaim_enabled and not ramping_up:
        best: ContainerEstimate | None = None
        for value, source in (
            (None if usage is None else usage * cfg.usage_coefficient, "usage"),
            (load1, "load1"),
            (load5, "load5"),
        ):
            if value is not None and value > 0 and (best is None or value > best.cores):
                best = ContainerEstimate(value, source)
        if best is not None:
            return best
    source = "ramp-up" if ramping_up and reclaim_enabled else "request"
    if request > 0:
        return ContainerEstimate(request, source)
    return ContainerEstimate(cfg.fallback_cpu_estimate, "fallback")


# --- 2. regulator -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RegulatorState:
    """What the regulator remembers of a pool between ticks."""

    size: int
    last_ramp_down: float | None = None


def regulate(
    requirement: float,
    reserved_for_allocate: float,
    state: RegulatorState | None,
    now: float,
    lower: float,
    upper: int | None,
    cfg: AdvisorConfig,
) -> tuple[int, RegulatorState, Terms]:
    """The pool size for `requirement` cores (Katalyst's cpu regulator).

    `upper` None leaves the size uncapped: several pools that together want more than
    the node has are then scaled down together by `assemble_pools`, keeping their ratio.
    """
    raw = requirement + reserved_for_allocate
    v = math.ceil(raw - 1e-9)
    if cfg.ht_align and v % 2:
        v += 1
    terms: Terms = {
        "requirement": round(requirement, 3),
        "reserved_for_allocate": reserved_for_allocate,
        "rounded": v,
    }
    last_down = state.last_ramp_down if state else None
    if state is not None:
        current = state.size
        if v < current and last_down is not None and now - last_down < cfg.min_ramp_down_period_s:
            terms["held_by_min_ramp_down_period"] = True
            v = current
        v = max(v, math.floor(current - cfg.max_ramp_down_step))
        v = min(v, math.ceil(current + cfg.max_ramp_up_step))
        terms["previous"] = current
    lo = math.ceil(lower - 1e-9)
    v = max(v, lo) if upper is None else min(max(v, lo), upper)
    terms["lower_bound"] = lo
    if upper is not None:
        terms["upper_bound"] = upper
    terms["size"] = v
    if state is not None and v < state.size:
        last_down = now
    return v, RegulatorState(v, last_down), terms


# --- 3. pool assembly -------------------------------------------------------------------


def assemble_pools(
    available: int,
    regulated: Mapping[str, int],
    requests: Mapping[str, float],
    *,
    reclaim_enabled: bool,
    reserved_for_reclaim: int,
    fixed: Mapping[str, int] | None = None,
) -> tuple[dict[str, int], int, Terms]:
    """Share pool sizes within `available` cpus, and the reclaim pool size.

    With reclaim on, a pool gets its regulated requirement; pools that do not fit are scaled
    down together. With reclaim off, Katalyst sizes pools by their requests and gives them
    every spare cpu, leaving only the reclaim reserve. `fixed` pools (isolation pools) get
    their size and are never expanded; they are scaled down with the others when the
    scope is too small for all.
    """
    names = sorted(regulated)
    if reclaim_enabled:
        want = {n: max(1, regulated[n]) for n in names}
    else:
        want = {n: max(1, math.ceil(requests.get(n, 0.0) - 1e-9)) for n in names}
    pinned = {n: max(1, v) for n, v in (fixed or {}).items()}
    total = sum(want.values()) + sum(pinned.values())
    terms: Terms = {"available": available, "wanted": {**want, **pinned}}
    if pinned:
        terms["fixed"] = dict(pinned)
    avail = max(available, 0)
    if (names or pinned) and total > avail:
        sizes = _normalize({**want, **pinned}, avail)
        terms["throttled"] = True
    elif names and not reclaim_enabled and total < avail:
        sizes = {**_expand(want, avail - sum(pinned.values())), **pinned}
        terms["expanded"] = True
    else:
        sizes = {**want, **pinned}
    reclaim = avail - sum(sizes.values()) + reserved_for_reclaim
    terms["reserved_for_reclaim"] = reserved_for_reclaim
    terms["reclaim"] = reclaim
    return sizes, reclaim, terms


def _normalize(want: Mapping[str, int], avail: int) -> dict[str, int]:
    """Scale sizes together to fit `avail` (Katalyst's normalizePoolSizes): each pool gets
    ceil(want × avail / Σ want), then the pool furthest above its share (highest
    size / want, ties: the larger) gives back one cpu at a time, down to one cpu each."""
    total = sum(want.values())
    if avail < len(want):
        # Not even one cpu each: every pool shares whatever there is.
        return {n: avail for n in want}
    sizes = {n: math.ceil(w * avail / total) for n, w in want.items()}
    while sum(sizes.values()) > avail:
        over = [n for n in sorted(sizes) if sizes[n] > 1]
        pick = max(over, key=lambda n: (sizes[n] / want[n], sizes[n]))
        sizes[pick] -= 1
    return sizes


def _expand(want: Mapping[str, int], avail: int) -> dict[str, int]:
    total = sum(want.values())
    sizes = {n: math.floor(w * avail / total) for n, w in want.items()}
    for n in sorted(want, key=lambda n: (-want[n], n)):
        if sum(sizes.values()) >= avail:
            break
        sizes[n] += 1
    return sizes


def reserved_for_reclaim_per_numa(total: int, numas: Sequence[int]) -> dict[int, int]:
    """Spread the reclaim reserve across NUMA nodes: at least one each, floor(n/#NUMA)."""
    if not numas:
        return {}
    each = max(1, total // len(numas))
    out = {n: each for n in numas}
    rest = total - each * len(numas)
    for n in numas:
        if rest <= 0:
            break
        out[n] += 1
        rest -= 1
    return out


# --- 4. headroom ------------------------------------------------------------------------


# (pool mask, id of the cpu -> NUMA map) -> (that map, its NUMA groups); the map is held so
# that its id is not reused while the entry lives
_NUMA_GROUPS: dict[
    tuple[int, int], tuple[Mapping[int, int], tuple[tuple[int, tuple[int, ...]], ...]]
] = {}
_NUMA_GROUPS_MAX = 1024


def numa_groups(
    cpus: CPUSet, numa_of: Mapping[int, int]
) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """`cpus` by NUMA node (`numa_of`; a cpu it lacks is on node 0): each node with its
    cpus in ascending order, the nodes in the order of their first cpu. Remembered per
    set and map (a pool changes far less often than the agent ticks); the map must not
    change in place (the agent's is part of its fixed `NodeFacts`)."""
    key = (cpus.mask, id(numa_of))
    hit = _NUMA_GROUPS.get(key)
    if hit is not None and hit[0] is numa_of:
        return hit[1]
    groups: dict[int, list[int]] = {}
    for cpu in cpus:
        groups.setdefault(numa_of.get(cpu, 0), []).append(cpu)
    out = tuple((n, tuple(members)) for n, members in groups.items())
    if len(_NUMA_GROUPS) >= _NUMA_GROUPS_MAX:
        _NUMA_GROUPS.clear()
    _NUMA_GROUPS[key] = (numa_of, out)
    return out


def cpu_headroom(
    reclaim_pool: CPUSet,
    cpu_usage_ratio: Sequence[float] | None,
    reclaimed_usage: float | None,
    reclaimed_quota: float | None,
    numa_of: Mapping[int, int],
    whole_cores: bool = True,
) -> tuple[float, dict[int, float], Terms]:
    """Reclaimed cpu = idle cpus of the reclaim pool + what reclaimed pods use there.

    The supply is split evenly over the pool's NUMA nodes and each share truncated to
    whole cores, as Katalyst reports it; the total is the sum of those shares. With
    `whole_cores` off the shares keep their fraction (small nodes, where a whole idle core
    is rare).

    Reclaimed pods themselves keep reclaim-pool cpus busy; their usage is added back, since
    it is theirs to keep. A quota on reclaimed pods caps the total. Without per-cpu usage the
    pool counts as idle apart from the reclaimed usage (never zero by accident).
    """
    groups = numa_groups(reclaim_pool, numa_of)
    per_numa_cpus = {n: len(cpus) for n, cpus in groups}
    per_numa_busy: dict[int, float] = {}
    have_ratio = bool(cpu_usage_ratio)
    if have_ratio and cpu_usage_ratio is not None:
        ratio, known = cpu_usage_ratio, len(cpu_usage_ratio)
        for n, cpus in groups:
            # each NUMA node's sum in cpu order, as the figures were always added up
            shares = [min(max(ratio[c], 0.0), 1.0) for c in cpus if c < known]
            if shares:
                per_numa_busy[n] = sum(shares, 0.0)
    size = len(reclaim_pool)
    busy = sum(per_numa_busy.values())
    used = max(reclaimed_usage or 0.0, 0.0)
    if not have_ratio:
        busy = min(used, float(size))
    idle = max(size - busy, 0.0)
    supply = idle + used
    terms: Terms = {
        "formula": "max(|reclaim pool| - busy cpus of the pool, 0) + reclaimed usage",
        "reclaim_pool_cpus": size,
        "reclaim_pool_busy_cpus": round(busy, 3),
        "reclaimed_usage_cores": round(used, 3),
    }
    if not have_ratio:
        terms["per_cpu_usage"] = "missing: pool assumed idle except reclaimed usage"
    if reclaimed_usage is None:
        terms["reclaimed_usage"] = "missing: counted as 0"
    if reclaimed_quota is not None and reclaimed_quota > 0 and supply > reclaimed_quota:
        supply = reclaimed_quota
        terms["capped_by_quota_cores"] = reclaimed_quota
    per_numa: dict[int, float] = {}
    if size:
        # Katalyst's default headroom: the pool's supply split evenly over its NUMA nodes,
        # each share truncated to whole cores; the node's figure is the sum of the shares.
        share = supply / len(per_numa_cpus)
        each = float(math.floor(share + 1e-9)) if whole_cores else share
        per_numa = {n: each for n in sorted(per_numa_cpus)}
        terms["per_numa_whole_cores" if whole_cores else "per_numa_cores"] = round(each, 3)
        supply = each * len(per_numa)
    terms["supply_cores"] = round(supply, 3)
    return supply, per_numa, terms


@dataclass(frozen=True, slots=True)
class MemoryUser:
    """A non-reclaimed pod's memory, for the headroom formula (bytes; None = no metric)."""

    qos_level: str
    request: int
    rss: int | None
    cache: int | None
    shmem: int | None
    exclusive_memory: int | None = None  # a numa_exclusive pod: its NUMA nodes' memory


def memory_headroom(
    capacity: int,
    users: Iterable[MemoryUser],
    cfg: AdvisorConfig,
    numa_capacity: Mapping[int, int] | None = None,
    numa_free: Mapping[int, int] | None = None,
) -> tuple[float, dict[int, float], Terms]:
    """Reclaimed memory = capacity − reserve − Σ requirement of non-reclaimed pods.

    With reclaim on, a pod's requirement is 1.1 × (rss + cache + shmem) (system pods:
    rss); a pod without memory metrics is held at its request (fallback 8 GiB); a
    numa_exclusive dedicated pod at the whole memory of its NUMA nodes.
    """
    max_alloc = max(capacity - cfg.reserved_for_allocate_memory, 0)
    requirement = 0.0
    from_metrics = from_request = 0
    exclusive = 0
    for u in users:
        if u.exclusive_memory is not None:
            # Katalyst: a numa_exclusive dedicated pod holds its NUMA nodes' memory whole.
            requirement += u.exclusive_memory
            exclusive += 1
            continue
        if cfg.enable_reclaim and u.rss is not None:
            if u.qos_level == names.QOS_SYSTEM_CORES:
                value = u.rss * cfg.system_memory_coefficient
            else:
                value = (u.rss + (u.cache or 0) + (u.shmem or 0)) * cfg.memory_usage_coefficient
            from_metrics += 1
        else:
            value = float(u.request)
            from_request += 1
        if value <= 0:
            value = float(cfg.fallback_memory_estimate) if u.rss is None else 0.0
        requirement += value
    headroom = min(max(max_alloc - requirement, 0.0), float(max_alloc))
    terms: Terms = {
        "formula": "capacity - reserved_for_allocate - sum(requirement of non-reclaimed pods)",
        "capacity": capacity,
        "reserved_for_allocate": cfg.reserved_for_allocate_memory,
        "requirement": int(requirement),
        "pods_from_metrics": from_metrics,
        "pods_from_request": from_request,
        "numa_exclusive_pods": exclusive,
        "usage_coefficient": cfg.memory_usage_coefficient,
    }
    per_numa: dict[int, float] = {}
    if numa_capacity:
        weights = dict(numa_free) if numa_free else dict(numa_capacity)
        total_w = sum(max(w, 0) for w in weights.values())
        for n in sorted(numa_capacity):
            w = max(weights.get(n, 0), 0)
            per_numa[n] = headroom * w / total_w if total_w else headroom / len(numa_capacity)
    return headroom, per_numa, terms


# --- reporting smoothing ----------------------------------------------------------------


# A tick samples once this share of the sample period has passed (see HeadroomSmoother).
SAMPLE_JITTER = 0.9


@dataclass(frozen=True, slots=True)
class HeadroomSmoother:
    """Katalyst's headroom reporter for one resource: sliding-window average, then a step
    clamp (ignore small moves, limit big ones), minus the report reserve, floored.

    The window is Katalyst's: the average of the last window/period samples among those
    younger than twice the window (its TTL). A tick samples when a period has passed, less
    a tenth for the tick's own jitter: ticks a hair short of the period must not skip a
    sample each, or the window would thin out and publish nothing for long stretches.

    A value: `update` returns the figure to publish (None until the window is full:
    nothing is published before then), its terms, and the smoother with this sample.
    """

    window_s: float
    sample_period_s: float
    min_step: float
    max_step: float
    reserved_for_report: float
    min_for_report: float
    samples: tuple[tuple[float, float], ...] = ()
    last: float | None = None
    last_sample_time: float | None = None

    @property
    def needed_samples(self) -> int:
        if self.sample_period_s <= 0:
            return 1
        return max(1, round(self.window_s / self.sample_period_s))

    def update(self, now: float, value: float) -> tuple[float | None, Terms, HeadroomSmoother]:
        due = (
            self.last_sample_time is None
            or now - self.last_sample_time >= SAMPLE_JITTER * self.sample_period_s
        )
        samples, sampled_at = self.samples, self.last_sample_time
        if due:
            samples, sampled_at = (*samples, (now, value)), now
        ttl = 2 * self.window_s
        old = 0
        while old < len(samples) and now - samples[old][0] > ttl + 1e-9:
            old += 1
        samples = samples[old:]
        window = [v for _, v in samples]
        need = self.needed_samples
        terms: Terms = {
            "window_s": self.window_s,
            "window_samples": len(window),
            "window_needed": need,
        }
        if len(window) < need or not window:
            terms["state"] = "window filling"
            return None, terms, replace(self, samples=samples, last_sample_time=sampled_at)
        avg = sum(window[-need:]) / need
        terms["window_avg"] = round(avg, 3)
        last = self.last
        if due or last is None:
            last = self._stepped(avg, terms)
        terms["stepped"] = round(last, 3)
        r = last - self.reserved_for_report
        terms["reserved_for_report"] = self.reserved_for_report
        if r < self.min_for_report:
            terms["floored_to"] = self.min_for_report
        r = max(r, self.min_for_report)
        return r, terms, replace(self, samples=samples, last_sample_time=sampled_at, last=last)

    def _stepped(self, avg: float, terms: Terms) -> float:
        if self.last is None:
            return avg
        delta = avg - self.last
        if abs(delta) < self.min_step:
            terms["step"] = "below min step: kept"
            return self.last
        clamp = self.max_step if self.max_step > 0 else abs(delta)
        return self.last + max(-clamp, min(clamp, delta))

    def tuned(
        self,
        window_s: float,
        sample_period_s: float,
        min_step: float,
        max_step: float,
        reserved_for_report: float,
        min_for_report: float,
    ) -> HeadroomSmoother:
        """The same history under other settings (itself when they are its own)."""
        if (
            window_s == self.window_s
            and sample_period_s == self.sample_period_s
            and min_step == self.min_step
            and max_step == self.max_step
            and reserved_for_report == self.reserved_for_report
            and min_for_report == self.min_for_report
        ):
            return self
        return replace(
            self,
            window_s=window_s,
            sample_period_s=sample_period_s,
            min_step=min_step,
            max_step=max_step,
            reserved_for_report=reserved_for_report,
            min_for_report=min_for_report,
        )
