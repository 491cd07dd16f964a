"""Katalyst's dynamic cpu policy: which cpus each pool and each pod runs on.

The machine is cut in this order, each step a pure function of the previous ones:

1. `reserve_cpus`: the reserve pool for the system (a count taken a hyperthread per NUMA
   node in turn, or a list).
2. `place_dedicated`: dedicated_cores pods with NUMA binding get exclusive cpus inside the
   NUMA nodes their hint allows (fewest NUMAs; exclusive pods need wholly free NUMAs; no
   socket crossing), taken by topology. An assignment, once made, is kept while the pod
   lives; its cpus are released when it goes.
3. `layout`: what is left is split into the *share domain* (NUMA nodes without NUMA-bound
   pods, where the share pools live) and the leftover of NUMA-bound nodes (reclaim only).
4. `assign_pools`: the share pools get the sizes sys-advisor chose, and the reclaim pool
   everything else of the domain. When sizes change, each pool keeps the cpus it had and
   grows or shrinks at its edge (siblings of its cpus first, NUMA-balanced), so that
   resizing moves as few cpus — and the processes on them — as possible.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pykatalyst.agent.config import CpuPolicyConfig
from pykatalyst.topology.allocate import take_by_topology, take_ht_numa_balanced
from pykatalyst.topology.cpuset import CPUSet
from pykatalyst.topology.machine import CPUTopology

EMPTY = CPUSet()


class CpuPolicyError(ValueError):
    """The policy cannot place something (e.g. no NUMA hint fits a dedicated pod)."""


# --- 1. reserve ---------------------------------------------------------------------------


def reserve_cpus(topo: CPUTopology, cfg: CpuPolicyConfig) -> CPUSet:
    """The reserve pool: the explicit list, or `reserved_cpus` taken one hyperthread per
    NUMA node in turn (Katalyst's TakeHTByNUMABalance), so each node keeps some."""
    if cfg.reserved_cpu_list:
        cpus = CPUSet.parse(cfg.reserved_cpu_list)
        unknown = cpus - topo.all_cpus
        if unknown:
            raise CpuPolicyError(
                f"cpu.reserved_cpu_list {cfg.reserved_cpu_list!r} names cpus {unknown} that "
                f"this machine does not have (cpus: {topo.all_cpus})"
            )
        return cpus
    n = cfg.reserved_cpus
    if n <= 0:
        return EMPTY
    if n >= topo.num_cpus:
        raise CpuPolicyError(
            f"cpu.reserved_cpus={n} leaves no cpu for pods (machine has {topo.num_cpus})"
        )
    return take_ht_numa_balanced(topo, topo.all_cpus, n, reverse=cfg.reserve_cpus_reversely)


# --- 2. dedicated -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DedicatedRequest:
    uid: str
    key: str
    cpus: int
    exclusive: bool = False
    numa_number: int | None = None
    numa_ids: tuple[int, ...] | None = None
    align_by_socket: bool = False
    distribute_evenly: bool = False
    memory: int = 0  # bytes requested; NUMA hints must hold it as well as the cpus


@dataclass(frozen=True, slots=True)
class DedicatedAssignment:
    uid: str
    cpuset: CPUSet
    numas: tuple[int, ...]
    exclusive: bool
    terms: Mapping[str, object] = field(default_factory=dict)


def numa_hints(
    topo: CPUTopology,
    req: DedicatedRequest,
    available: Mapping[int, CPUSet],
    occupied: frozenset[int],
    free_memory: Mapping[int, int] | None = None,
) -> list[tuple[int, ...]]:
    """NUMA sets a dedicated pod may bind to, preferred first.

    Katalyst's rules: at least the fewest NUMAs whose cpus could hold the request; a
    non-exclusive pod fits one NUMA unless it asks for more (numa_number); the available
    cpus must cover the request, and (as Katalyst's memory plugin hints) the NUMAs' free
    memory must cover its memory request; a set no larger than a socket may not cross
    sockets; exclusive pods need NUMAs nobody else holds — no dedicated pod, no NUMA-bound
    shared pod, no memory given out; numa_ids / numa_number pin the set.
    """
    numas = sorted(topo.numa_nodes)
    caps = sorted((len(topo.cpus_in_numa(n)) for n in numas), reverse=True)
    min_numas = len(numas) + 1
    acc = 0
    for i, cap in enumerate(caps, start=1):
        acc += cap
        if acc >= req.cpus:
            min_numas = i
            break
    per_socket = topo.numas_per_socket
    out: list[tuple[int, ...]] = []
    wanted_ids = tuple(sorted(req.numa_ids)) if req.numa_ids is not None else None
    for size in range(1, len(numas) + 1):
        if size < min_numas:
            continue
        if not req.exclusive and (req.numa_number or 1) <= 1 and size > 1:
            break
        if wanted_ids is not None and size != len(wanted_ids):
            continue
        if wanted_ids is None and req.numa_number is not None and size != req.numa_number:
            continue
        for mask in itertools.combinations(numas, size):
            if wanted_ids is not None and mask != wanted_ids:
                continue
            if req.exclusive and any(n in occupied for n in mask):
                continue
            if sum(len(available.get(n, EMPTY)) for n in mask) < req.cpus:
                continue
            if free_memory is not None and not _memory_fits(topo, req, mask, free_memory):
                continue
            sockets = {topo.socket_of_numa(n) for n in mask}
            if size <= per_socket and len(sockets) > 1:
                continue
            if req.align_by_socket and len(sockets) > math.ceil(size / per_socket):
                continue
            if req.distribute_evenly and (
                req.cpus % size or any(len(available[n]) < req.cpus // size for n in mask)
            ):
                continue
            out.append(mask)
    return out


def _memory_fits(
    topo: CPUTopology, req: DedicatedRequest, mask: tuple[int, ...], free: Mapping[int, int]
) -> bool:
    if req.exclusive:
        # The whole of each node goes to the pod: nobody may hold memory there.
        return (
            all(free.get(n, 0) >= topo.memory_of_numa(n) for n in mask)
            and sum(free.get(n, 0) for n in mask) >= req.memory
        )
    return sum(free.get(n, 0) for n in mask) >= req.memory


def free_numa_memory(
    topo: CPUTopology,
    assignments: Iterable[DedicatedAssignment],
    memory: Mapping[str, int],
    snb_memory: Mapping[int, int] | None = None,
) -> dict[int, int] | None:
    """Memory not yet promised on each NUMA node (None when the machine does not say).

    An exclusive pod takes its nodes' memory whole; another NUMA-bound pod its request,
    spread evenly over its nodes; `snb_memory` is what NUMA-bound shared pods hold.
    """
    if not topo.memory_per_numa:
        return None
    free = {n: topo.memory_of_numa(n) for n in topo.numa_nodes}
    for a in assignments:
        for n in a.numas:
            use = free[n] if a.exclusive else memory.get(a.uid, 0) // max(len(a.numas), 1)
            free[n] = max(free[n] - use, 0)
    for n, used in (snb_memory or {}).items():
        if n in free:
            free[n] = max(free[n] - used, 0)
    return free


def place_dedicated(
    topo: CPUTopology,
    reserve: CPUSet,
    requests: Sequence[DedicatedRequest],
    previous: Mapping[str, DedicatedAssignment],
    min_left: int,
    snb_numas: Mapping[int, int] | None = None,
) -> tuple[dict[str, DedicatedAssignment], dict[str, str]]:
    """Exclusive cpus for dedicated pods; (assignments by uid, failure reasons by uid).

    Pods placed before keep their cpus. New pods are placed in the order given, never
    leaving fewer than `min_left` cpus for the pools (the reclaim pool must not vanish).
    `snb_numas` is the memory NUMA-bound shared pods hold on each node they run on: an
    exclusive pod never takes such a node, so that no running pod has to move.
    """
    snb_held = dict(snb_numas or {})
    memory = {r.uid: r.memory for r in requests}
    taken = reserve
    out: dict[str, DedicatedAssignment] = {}
    failed: dict[str, str] = {}
    pending: list[DedicatedRequest] = []
    for req in requests:
        prev = previous.get(req.uid)
        if (
            prev is not None
            and len(prev.cpuset) >= req.cpus
            and prev.exclusive == req.exclusive
            and prev.cpuset.isdisjoint(taken)
        ):
            out[req.uid] = prev
            taken = taken | prev.cpuset
        else:
            pending.append(req)
    for req in pending:
        occupied = frozenset({n for a in out.values() for n in a.numas} | set(snb_held))
        available = {n: topo.cpus_in_numa(n) - taken for n in topo.numa_nodes}
        free_mem = free_numa_memory(topo, out.values(), memory, snb_held)
        hints = numa_hints(topo, req, available, occupied, free_mem)
        if not hints:
            failed[req.uid] = _no_hint(req, available, free_mem)
            continue
        chosen = _first_fit(topo, req, hints, available, taken, min_left)
        if chosen is None:
            failed[req.uid] = (
                f"placing {req.cpus} dedicated cpus would leave fewer than {min_left} cpus "
                "for the share and reclaim pools"
            )
            continue
        out[req.uid] = chosen
        taken = taken | chosen.cpuset
    return out, failed


def _no_hint(
    req: DedicatedRequest, available: Mapping[int, CPUSet], free_mem: Mapping[int, int] | None
) -> str:
    """Why no NUMA node (or set of them) can hold the pod."""
    return (
        f"no NUMA hint fits {req.cpus} dedicated cpus"
        + (f" and {req.memory} bytes of memory" if free_mem is not None else "")
        + (" on wholly free NUMA nodes" if req.exclusive else "")
        + f" (free per NUMA: { {n: len(c) for n, c in sorted(available.items())} }"
        + (f", memory {free_mem}" if free_mem is not None else "")
        + ")"
    )


def _first_fit(
    topo: CPUTopology,
    req: DedicatedRequest,
    hints: Sequence[tuple[int, ...]],
    available: Mapping[int, CPUSet],
    taken: CPUSet,
    min_left: int,
) -> DedicatedAssignment | None:
    """The pod's cpus on the first hint that leaves the pools `min_left` cpus."""
    for mask in hints:
        pool = CPUSet().union(*(available[n] for n in mask))
        if req.exclusive:
            cpus = pool
        elif req.distribute_evenly:
            per = req.cpus // len(mask)
            cpus = CPUSet().union(*(take_by_topology(topo, available[n], per) for n in mask))
        else:
            cpus = take_by_topology(topo, pool, req.cpus)
        if len(topo.all_cpus - taken - cpus) < min_left:
            continue
        return DedicatedAssignment(
            req.uid,
            cpus,
            mask,
            req.exclusive,
            {"hint": list(mask), "hints_considered": len(hints), "request_cpus": req.cpus},
        )
    return None


# --- 2b. shared pods with NUMA binding (SNB) ------------------------------------------------

SNB_INCREASE_RATIO = 2.0  # an SNB pod's request counts twice, to leave it room to burst


@dataclass(frozen=True, slots=True)
class SnbRequest:
    uid: str
    key: str
    cores: float
    numa_ids: tuple[int, ...] | None = None
    memory: int = 0


def snb_pool_name(pool: str, numa: int) -> str:
    """Katalyst's name of a NUMA-bound shared pool: `<pool>-NUMA<id>`."""
    return f"{pool}-NUMA{numa}"


def place_snb(
    topo: CPUTopology,
    reserve: CPUSet,
    dedicated: Mapping[str, DedicatedAssignment],
    requests: Sequence[SnbRequest],
    previous: Mapping[str, int],
    dedicated_memory: Mapping[str, int] | None = None,
) -> tuple[dict[str, int], dict[str, str]]:
    """One NUMA node for each shared pod with numa_binding; (numa by uid, failures by uid).

    A pod keeps the node it had. A new pod goes where its doubled request fits, its memory
    request fits the node's memory not yet promised (as Katalyst's memory hints), and the
    most cpus stay free ("spreading"), never onto a node an exclusive dedicated pod owns,
    and never onto the last node without NUMA-bound pods, which non-bound pods need.
    """
    free_mem = free_numa_memory(topo, dedicated.values(), dedicated_memory or {})
    exclusive = {n for a in dedicated.values() if a.exclusive for n in a.numas}
    taken = reserve.union(*(a.cpuset for a in dedicated.values()))
    capacity = {n: len(topo.cpus_in_numa(n) - taken) for n in topo.numa_nodes}
    load = dict.fromkeys(topo.numa_nodes, 0.0)
    out: dict[str, int] = {}
    failed: dict[str, str] = {}
    pending: list[SnbRequest] = []
    for req in requests:
        n = previous.get(req.uid)
        if n is not None and n not in exclusive and (req.numa_ids is None or n in req.numa_ids):
            out[req.uid] = n
            load[n] += req.cores * SNB_INCREASE_RATIO
            if free_mem is not None:
                free_mem[n] = max(free_mem[n] - req.memory, 0)
        else:
            pending.append(req)
    bound = {n for a in dedicated.values() for n in a.numas}
    for req in pending:
        need = req.cores * SNB_INCREASE_RATIO
        now_bound = bound | set(out.values())
        unbound = [n for n in topo.numa_nodes if n not in now_bound]
        candidates = [
            n
            for n in topo.numa_nodes
            if n not in exclusive
            and (req.numa_ids is None or n in req.numa_ids)
            and load[n] + need <= capacity[n]
            and (free_mem is None or free_mem[n] >= req.memory)
            and (len(unbound) > 1 or n in now_bound)
        ]
        if not candidates:
            failed[req.uid] = (
                f"no NUMA node has room for {req.cores:g} cores x {SNB_INCREASE_RATIO:g}"
                + (f" and {req.memory} bytes of memory" if free_mem is not None else "")
                + " while keeping a node for pods without NUMA binding"
            )
            continue
        best = max(candidates, key=lambda n: (capacity[n] - load[n] - need, -n))
        out[req.uid] = best
        load[best] += need
        if free_mem is not None:
            free_mem[best] = max(free_mem[best] - req.memory, 0)
    return out, failed


# --- 3. layout ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Layout:
    """The static cut of the machine, before share pools are sized."""

    reserve: CPUSet
    dedicated: Mapping[str, DedicatedAssignment]
    failed: Mapping[str, str]
    bound_numas: tuple[int, ...]  # NUMA nodes holding NUMA-bound pods
    share_domain: CPUSet  # where share pools (and the rest of reclaim) live
    bound_leftover: CPUSet  # free cpus of NUMA-bound nodes: reclaim only
    reserved_for_reclaim: int  # cpus of the share domain always left to reclaim
    share_numas: tuple[int, ...]  # NUMA nodes of the share domain
    snb: Mapping[str, int] = field(default_factory=dict)  # NUMA of each SNB pod
    snb_failed: Mapping[str, str] = field(default_factory=dict)
    snb_reserved_for_reclaim: Mapping[int, int] = field(default_factory=dict)
    foreign: CPUSet = EMPTY  # the kubelet's exclusive cpus of pods that are not ours

    @property
    def dedicated_cpus(self) -> CPUSet:
        return CPUSet().union(*(a.cpuset for a in self.dedicated.values()))

    @property
    def pooled(self) -> CPUSet:
        """Everything but the reserve and dedicated cpus (where ramping-up pods run)."""
        return self.share_domain | self.bound_leftover


def reclaim_minimum(topo: CPUTopology, cfg: CpuPolicyConfig, min_for_allocate: float) -> int:
    """The reclaim pool never has fewer than max(4, #NUMA) cpus; none of its own when both
    minimums are set to 0 (a node too small for a share pool to grow otherwise)."""
    if cfg.min_reclaim_pool_cpus == 0 and math.ceil(min_for_allocate) <= 0:
        return 0
    return max(cfg.min_reclaim_pool_cpus, math.ceil(min_for_allocate), topo.num_numa_nodes)


def layout(
    topo: CPUTopology,
    cfg: CpuPolicyConfig,
    dedicated_requests: Sequence[DedicatedRequest],
    previous: Mapping[str, DedicatedAssignment],
    reclaim_min: int,
    snb_requests: Sequence[SnbRequest] = (),
    snb_previous: Mapping[str, int] | None = None,
    *,
    foreign: CPUSet = EMPTY,
    kubelet_exclusive: CPUSet = EMPTY,
) -> Layout:
    """The cut of the machine. `kubelet_exclusive` are the cpus the kubelet's static cpu
    manager gave out (never in the reserve); `foreign` those of them the agent owns no part
    of (never in a pool or given to a dedicated pod): see `kubelet_cpu`."""
    reserve = reserve_cpus(topo, cfg) - kubelet_exclusive - foreign
    snb_held = _snb_memory(snb_requests, snb_previous or {})
    held = reserve | foreign
    dedicated, failed = place_dedicated(
        topo, held, dedicated_requests, previous, reclaim_min, snb_held
    )
    snb, snb_failed = place_snb(
        topo,
        held,
        dedicated,
        snb_requests,
        snb_previous or {},
        {r.uid: r.memory for r in dedicated_requests},
    )
    taken = held.union(*(a.cpuset for a in dedicated.values()))
    ded_numas = {n for a in dedicated.values() for n in a.numas}
    bound = tuple(sorted(ded_numas | set(snb.values())))
    domain, leftover = _split_free(topo, taken, bound)
    if not domain and snb:
        # Every NUMA node is bound: pods without NUMA binding need a home more than SNB
        # pods need their binding, so those run unbound this time.
        why = "every NUMA node holds NUMA-bound pods; running without NUMA binding"
        snb_failed = {**snb_failed, **dict.fromkeys(snb, why)}
        snb = {}
        bound = tuple(sorted(ded_numas))
        leftover = _split_free(topo, taken, bound)[1]
    snb_numas = sorted(set(snb.values()))
    if not domain:
        # Every NUMA node holds dedicated pods: the pools live on their leftovers.
        domain, leftover = leftover, EMPTY
    rfr, snb_rfr = _reclaim_reserve(topo, reclaim_min, snb_numas, bound, domain, leftover)
    share_numas = tuple(topo.numas_of(domain))  # domain: the machine's cpus only
    return Layout(
        reserve,
        dedicated,
        failed,
        bound,
        domain,
        leftover,
        rfr,
        share_numas,
        snb,
        snb_failed,
        snb_rfr,
        foreign,
    )


def _reclaim_reserve(
    topo: CPUTopology,
    reclaim_min: int,
    snb_numas: Sequence[int],
    bound: Sequence[int],
    domain: CPUSet,
    leftover: CPUSet,
) -> tuple[int, dict[int, int]]:
    """The reclaim reserve of the share domain, and of each NUMA node with SNB pools.

    NUMA nodes with SNB pools keep their share of the reclaim reserve; the leftovers of
    dedicated-only nodes are wholly reclaim."""
    per_numa = _spread(reclaim_min, list(topo.numa_nodes))
    snb_rfr = {n: per_numa[n] for n in snb_numas}
    guaranteed = sum(snb_rfr.values()) + sum(
        len(leftover & topo.cpus_in_numa(n)) for n in bound if n not in snb_rfr
    )
    rfr = max(reclaim_min - guaranteed, 0)
    return min(max(rfr, 1 if reclaim_min else 0), len(domain)), snb_rfr


def _split_free(topo: CPUTopology, taken: CPUSet, bound: Sequence[int]) -> tuple[CPUSet, CPUSet]:
    """The cpus not `taken`: (on the NUMA nodes not `bound`, on the bound ones)."""
    domain = EMPTY
    leftover = EMPTY
    for n in topo.numa_nodes:
        free = topo.cpus_in_numa(n) - taken
        if n in bound:
            leftover = leftover | free
        else:
            domain = domain | free
    return domain, leftover


def _snb_memory(requests: Sequence[SnbRequest], previous: Mapping[str, int]) -> dict[int, int]:
    """Memory that running NUMA-bound shared pods hold, by the NUMA node they run on."""
    held: dict[int, int] = {}
    for r in requests:
        n = previous.get(r.uid)
        if n is not None:
            held[n] = held.get(n, 0) + r.memory
    return held


def _spread(total: int, numas: Sequence[int]) -> dict[int, int]:
    """Katalyst's per-NUMA reclaim reserve: floor(total/#NUMA) each, at least one."""
    each = max(1, total // max(len(numas), 1))
    return dict.fromkeys(numas, each)


def fit_reclaim_reserve(domain_size: int, reserved_for_reclaim: int, pools: int) -> int:
    """The reclaim reserve, cut down so that every share pool keeps at least one cpu.

    On a machine too small for both, the share pools win (they hold the pods that were
    promised cpus); 0 means the reclaim pool must overlap the share pools.
    """
    if domain_size - reserved_for_reclaim >= pools:
        return reserved_for_reclaim
    return max(domain_size - pools, 0)


# --- 4. pools -----------------------------------------------------------------------------


def assign_pools(
    topo: CPUTopology,
    domain: CPUSet,
    sizes: Mapping[str, int],
    previous: Mapping[str, CPUSet],
) -> dict[str, CPUSet]:
    """Cpusets of the given sizes inside `domain`, keeping each pool's previous cpus.

    Pools are handled in name order, so the result depends only on the inputs.
    Sizes that do not fit are cut to what is left.
    """
    free = domain
    result: dict[str, CPUSet] = {}
    for name in sorted(sizes):
        keep = previous.get(name, EMPTY) & free
        n = max(sizes[name], 0)
        if len(keep) > n:
            keep = _shrink(topo, keep, n)
        result[name] = keep
        free = free - keep
    for name in sorted(sizes):
        need = min(max(sizes[name], 0) - len(result[name]), len(free))
        if need > 0:
            add = _grow(topo, result[name], free, need)
            result[name] = result[name] | add
            free = free - add
    return result


def _known(topo: CPUTopology, cpus: CPUSet) -> None:
    """Raise TopologyError for a cpu the machine does not have."""
    unknown = cpus - topo.all_cpus
    if unknown:
        topo.numa_of(unknown.min())  # raises, naming the cpu


def _shrink(topo: CPUTopology, cpus: CPUSet, n: int) -> CPUSet:
    """Give back cpus at the pool's edge: lone hyperthreads first, from the NUMA where the
    pool is largest, highest ids first."""
    if n <= 0:
        return EMPTY
    if len(cpus) <= n:
        return cpus
    _known(topo, cpus)
    numa_of, sibs = topo.numa_by_cpu, topo.sibling_ids
    members = set(cpus)
    per_numa: dict[int, int] = {}
    for c in members:
        per_numa[numa_of[c]] = per_numa.get(numa_of[c], 0) + 1
    highest_first = sorted(members, reverse=True)
    while len(members) > n:
        # the highest lone cpu of a largest NUMA share, else its highest cpu
        biggest = max(per_numa.values())
        pick: int | None = None
        first: int | None = None
        for c in highest_first:
            if c not in members or per_numa[numa_of[c]] != biggest:
                continue
            if first is None:
                first = c
            if all(s == c or s not in members for s in sibs[c]):
                pick = c
                break
        gone = first if pick is None else pick
        assert gone is not None
        members.discard(gone)
        per_numa[numa_of[gone]] -= 1
    return CPUSet.of(members)


def _grow(topo: CPUTopology, cpus: CPUSet, free: CPUSet, need: int) -> CPUSet:
    """Take `need` cpus from `free` next to the pool: free siblings of its cpus first, then
    whole free cores on the NUMA node where the pool is smallest."""
    _known(topo, cpus | free)
    numa_of, sibs = topo.numa_by_cpu, topo.sibling_ids
    members = sorted(cpus)
    avail = set(free)
    added: set[int] = set()
    per_numa = dict.fromkeys(topo.numa_nodes, 0)
    for c in members:
        per_numa[numa_of[c]] += 1
    while len(added) < need and avail:
        pick: int | None = None
        for c in members:  # ascending
            for s in sibs[c]:
                if s in avail:
                    pick = s
                    break
            if pick is not None:
                break
        if pick is None:
            numas_with_free = {numa_of[c] for c in avail}
            numa = min(numas_with_free, key=lambda x: (per_numa[x], x))
            local = sorted(c for c in avail if numa_of[c] == numa)
            whole = [c for c in local if all(s in avail for s in sibs[c])]
            pick = (whole or local)[0]
        bisect.insort(members, pick)
        per_numa[numa_of[pick]] += 1
        added.add(pick)
        avail.discard(pick)
    return CPUSet.of(added)


def pools_for_system(pool_cpus: Mapping[str, CPUSet], wanted: str | None) -> CPUSet | None:
    """A system_cores pod's cpus: the pools named (or prefixed) by its cpuset_pool."""
    if not wanted:
        return None
    hits: Iterable[CPUSet] = (c for name, c in pool_cpus.items() if name.startswith(wanted))
    found = CPUSet().union(*hits)
    return found or None
