"""Katalyst's other cpu regions: what the reclaim pool may borrow, and noisy shared pods.

Three pure decisions, each returning its terms for the plan:

1. **Partial overlap** (`overlap_sizes`, `spread_overlap`): in overlap mode the share pools
   fill their domain and reclaimed pods run on `max(1, size − requirement)` cpus of each
   reclaimable pool (Katalyst's assembler and its regulateOverlapReclaimPoolSize); when
   that is less than the reclaim reserve, the reserve is spread over the pools instead.
2. **Dedicated regions** (`dedicated_reclaim_size`): on a NUMA node a numa_exclusive
   dedicated pod holds, reclaimed pods may run on max(reservedForReclaim, available −
   non-reclaimed requirement) of its cpus, under SCHED_IDLE — never when reclaim is off.
3. **Isolation** (`decide_isolation`): Katalyst's load isolator. A shared pod whose
   runnable threads exceed ratio × r or r + size (r = max(limit, request)) for
   `lockin` ticks in a row moves to a pool of its own; it goes back once it has stayed
   below for the lock-out period. At most a share of each pool's resources and pods.

`pick_cpus` turns a size into cpus, deterministically and with little movement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pykatalyst.agent.config import IsolationConfig
from pykatalyst.api import names
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology

Terms = dict[str, Any]


# --- cpus -----------------------------------------------------------------------------


EMPTY = CPUSet()


def pick_cpus(topo: CPUTopology, cpus: CPUSet, n: int, previous: CPUSet = EMPTY) -> CPUSet:
    """`n` cpus of `cpus`: those picked before first (so reclaimed pods do not move), then
    whole cores from the highest ids down (Katalyst takes the overlap reversely), so the
    lowest cpus of a pool — where its own pods are placed first — stay the pool's own."""
    n = max(0, min(n, len(cpus)))
    kept = sorted(previous & cpus, reverse=True)[:n]
    chosen = set(kept)
    if len(chosen) < n:
        cores: dict[int, list[int]] = {}
        for c in cpus:
            if c not in chosen:
                cores.setdefault(topo.core_of(c), []).append(c)
        # siblings of cpus already taken first, then whole cores from the top
        order = sorted(
            cores.values(),
            key=lambda m: (not any(s in chosen for s in topo.siblings(m[0])), -max(m)),
        )
        for members in order:
            for c in sorted(members, reverse=True):
                if len(chosen) >= n:
                    break
                chosen.add(c)
            if len(chosen) >= n:
                break
    return CPUSet.of(chosen)


# --- 1. partial overlap -----------------------------------------------------------------


def spread_overlap(pool_sizes: Mapping[str, int], total: int) -> dict[str, int]:
    """`total` overlap cpus spread over pools in proportion to their sizes, largest pool
    first (ties: by name), each at most its size (Katalyst's
    regulateOverlapReclaimPoolSize). `total` above the pools' sum is cut to it."""
    pool_sum = sum(max(v, 0) for v in pool_sizes.values())
    left = min(max(total, 0), pool_sum)
    out: dict[str, int] = {}
    if left <= 0:
        return out
    want = left
    for name in sorted(pool_sizes, key=lambda p: (-pool_sizes[p], p)):
        size = max(pool_sizes[name], 0)
        take = min(math.ceil(want * size / pool_sum), size, left)
        if take > 0:
            out[name] = take
        left -= take
        if left <= 0:
            break
    return out


def overlap_sizes(
    pool_sizes: Mapping[str, int],
    requirements: Mapping[str, int],
    available: int,
    reserved_for_reclaim: int,
    *,
    reclaim_enabled: bool,
    fixed: Mapping[str, int] | None = None,
    whole_pools: bool = False,
) -> tuple[dict[str, int], int, Terms]:
    """Cpus of each share pool the reclaim pool overlaps, and the reclaimed cores size.

    `pool_sizes` are the share pools (all reclaimable when reclaim is on); `fixed` are
    pools reclaimed pods never use (isolation pools); `available` the scope's cpus. With
    `whole_pools` (a quota caps reclaimed pods) each overlapped pool is overlapped whole,
    as under Katalyst's quota knob. Returns (overlap by pool, reclaimed size, terms); the
    reclaim pool proper is max(size − Σ overlap, 0) cpus.
    """
    fixed_sum = sum((fixed or {}).values())
    terms: Terms = {"available": available, "reserved_for_reclaim": reserved_for_reclaim}
    if reclaim_enabled:
        req_sum = sum(min(requirements.get(p, s), s) for p, s in pool_sizes.items())
        size = available - fixed_sum - req_sum
        terms["formula"] = "available - isolated - sum(share requirement)"
        if size < reserved_for_reclaim:
            size = reserved_for_reclaim
            overlap = spread_overlap(pool_sizes, size)
            terms["spread_reserve"] = True
        else:
            overlap = {
                p: min(max(1, s - requirements.get(p, s)), s)
                for p, s in sorted(pool_sizes.items())
                if s > 0
            }
    else:
        size = reserved_for_reclaim
        terms["formula"] = "reserved_for_reclaim (reclaim disabled)"
        overlap = spread_overlap(pool_sizes, size)
    if whole_pools:
        overlap = {p: max(v, pool_sizes[p]) for p, v in overlap.items()}
    size = min(max(size, 0), max(available - fixed_sum, 0))
    terms["overlap"] = dict(overlap)
    terms["reclaimed_cores_size"] = size
    return overlap, size, terms


def borrow_from_pools(
    topo: CPUTopology,
    pools: Mapping[str, CPUSet],
    requirements: Mapping[str, int],
    available: int,
    reserved_for_reclaim: int,
    previous: Mapping[str, CPUSet],
    *,
    reclaim_enabled: bool,
    whole_pools: bool = False,
    fixed: Mapping[str, int] | None = None,
) -> tuple[dict[str, CPUSet], int, Terms]:
    """The cpus of each share pool of one scope that reclaimed pods run on in overlap mode
    (by `overlap_sizes`, picked by `pick_cpus`), and the scope's reclaimed cores size."""
    sizes = {p: len(c) for p, c in pools.items()}
    overlap, size, terms = overlap_sizes(
        sizes,
        requirements,
        available,
        reserved_for_reclaim,
        reclaim_enabled=reclaim_enabled,
        fixed=fixed,
        whole_pools=whole_pools,
    )
    borrowed = {
        p: pick_cpus(topo, pools[p], n, previous.get(p, EMPTY)) for p, n in sorted(overlap.items())
    }
    terms["overlap_cpus"] = {p: str(c) for p, c in borrowed.items()}
    return borrowed, size, terms


# --- 2. dedicated regions ---------------------------------------------------------------


def dedicated_reclaim_size(
    available: int,
    requirement: float,
    reserved_for_reclaim: int,
    *,
    reclaim_enabled: bool,
) -> tuple[int, Terms]:
    """Cpus of a numa_exclusive dedicated pod's NUMA node that reclaimed pods may use:
    max(reservedForReclaim, available − ceil(requirement)), within the node; 0 when reclaim
    is off for the node or the pod (Katalyst then counts the whole node as required)."""
    terms: Terms = {
        "formula": "max(reserved_for_reclaim, available - non-reclaimed requirement)",
        "available": available,
        "requirement": round(requirement, 3),
        "reserved_for_reclaim": reserved_for_reclaim,
    }
    if not reclaim_enabled or available <= 0:
        terms["reclaim"] = "disabled for this pod or node: none of its cpus"
        terms["size"] = 0
        return 0, terms
    need = math.ceil(max(requirement, 0.0) - 1e-9)
    size = min(max(reserved_for_reclaim, available - need), available)
    terms["size"] = size
    return size, terms


# --- 3. isolation -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IsolationCandidate:
    """A shared pod the isolator judges: its pool, max(limit, request) per container, and
    the runnable threads of each container now (None: not measured)."""

    uid: str
    pool: str
    resources: Mapping[str, float]
    runnable: Mapping[str, float | None]
    ramping: bool = False


@dataclass(frozen=True, slots=True)
class IsolationState:
    """What the isolator remembers of one container."""

    lockin_hits: int = 0
    lockout_since: float | None = None


def isolation_pool_name(uid: str) -> str:
    return f"{names.POOL_PREFIX_ISOLATION}-{uid}"


def decide_isolation(
    candidates: Sequence[IsolationCandidate],
    isolated: frozenset[str],
    states: Mapping[tuple[str, str], IsolationState],
    now: float,
    cfg: IsolationConfig,
) -> tuple[frozenset[str], dict[tuple[str, str], IsolationState], Terms]:
    """The pods to isolate now, the containers' new states, and why.

    Containers are judged in a fixed order (pod uid, container name, descending, as
    Katalyst sorts them); a pod is isolated when one of its containers is, within its
    pool's caps: isolated resources ≤ max_resource_ratio × the pool's, isolated pods ≤
    min(pods − 1, floor(pods × max_pod_ratio)).
    """
    if not cfg.enabled:
        return frozenset(), {}, {"isolation": "disabled"}
    targets = [c for c in candidates if not c.ramping and c.pool not in cfg.disabled_pools]
    caps = _pool_caps(targets, cfg)
    chosen: dict[str, set[str]] = {p: set() for p in caps}
    used: dict[str, float] = dict.fromkeys(caps, 0.0)
    new_states: dict[tuple[str, str], IsolationState] = {}
    why: dict[str, str] = {}
    order = sorted(
        ((c, name) for c in targets for name in c.resources), key=lambda x: (x[0].uid, x[1])
    )
    for cand, name in reversed(order):
        key = (cand.uid, name)
        if cand.uid in chosen[cand.pool]:
            new_states[key] = states.get(key, IsolationState())
            continue
        max_res, max_pods = caps[cand.pool]
        pod_res = sum(cand.resources.values())
        if used[cand.pool] + pod_res > max_res + 1e-9 or len(chosen[cand.pool]) + 1 > max_pods:
            new_states[key] = states.get(key, IsolationState())
            why[cand.uid] = why.get(cand.uid) or "pool's isolation caps reached"
            continue
        verdict, new_states[key] = _judge(
            cand, name, cand.uid in isolated, states.get(key, IsolationState()), now, cfg
        )
        if verdict:
            chosen[cand.pool].add(cand.uid)
            used[cand.pool] += pod_res
            why[cand.uid] = "runnable threads above threshold"
    out = frozenset(u for pods in chosen.values() for u in pods)
    terms: Terms = {
        "isolated": sorted(out),
        "caps": {p: {"max_cores": round(r, 3), "max_pods": n} for p, (r, n) in caps.items()},
        "reasons": dict(sorted(why.items())),
    }
    return out, new_states, terms


def _pool_caps(
    targets: Sequence[IsolationCandidate], cfg: IsolationConfig
) -> dict[str, tuple[float, int]]:
    total: dict[str, float] = {}
    pods: dict[str, int] = {}
    for c in targets:
        total[c.pool] = total.get(c.pool, 0.0) + sum(c.resources.values())
        pods[c.pool] = pods.get(c.pool, 0) + 1
    return {
        p: (total[p] * cfg.max_resource_ratio, min(pods[p] - 1, int(pods[p] * cfg.max_pod_ratio)))
        for p in total
    }


def _judge(
    cand: IsolationCandidate,
    name: str,
    was_isolated: bool,
    state: IsolationState,
    now: float,
    cfg: IsolationConfig,
) -> tuple[bool, IsolationState]:
    """Katalyst's checkContainerLoad for one container: (isolate it, its new state)."""
    load = cand.runnable.get(name)
    if load is None:
        return was_isolated, state  # no measure: keep things as they are
    r = cand.resources[name]
    if load > r * cfg.cpu_ratio or load > r + cfg.cpu_size:
        hits = min(state.lockin_hits + 1, cfg.lockin_threshold)
        return was_isolated or hits >= cfg.lockin_threshold, IsolationState(hits, None)
    since = state.lockout_since if state.lockout_since is not None else now
    keep = was_isolated and now - since < cfg.lockout_period_s
    return keep, IsolationState(0, since)
