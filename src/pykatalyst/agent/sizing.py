"""How big each share pool is this tick, and what the reclaim pool borrows.

`advise` sizes the share pools from the tick's inputs and the regulators', rama's and the
load isolator's state of the last tick: the unbound pools (an isolated pod's pool among
them), then the NUMA-bound ones per NUMA node. `borrow` finds the cpus the reclaim pool
borrows: from share pools in overlap mode, and the idle cpus of numa_exclusive dedicated
pods (Katalyst's dedicated regions). Both are pure: they return the new state with the
figures, and change nothing they are given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pykatalyst.agent import cpu_layout as steps
from pykatalyst.agent import cpu_policy, regions
from pykatalyst.agent.advisor import RegulatorState, assemble_pools, estimate_container, regulate
from pykatalyst.agent.agent_state import AgentState
from pykatalyst.agent.config import CPU_LOAD_RATIO, CPU_SCHED_WAIT, CPU_USAGE_RATIO
from pykatalyst.agent.cpu_policy import Layout
from pykatalyst.agent.inputs import TickInputs
from pykatalyst.agent.pods import PodSpec
from pykatalyst.agent.rama import PIDState, rama_requirement, region_targets
from pykatalyst.api import names
from pykatalyst.api.timefmt import rfc3339
from pykatalyst.topology.cpuset import CPUSet

Estimates = dict[tuple[str, str], tuple[float, str]]  # (pod uid, container) -> (cores, source)


@dataclass(frozen=True, slots=True)
class Shared:
    """A shared pod of a pool, and whether it is ramping up."""

    spec: PodSpec
    ramping: bool


@dataclass(frozen=True, slots=True)
class Advice:
    """The pools' sizes (unbound; NUMA-bound per NUMA node, with the cpus each NUMA node's
    pools are cut from), their terms, each container's estimate, and the state the sizing
    leaves for the next tick."""

    terms: dict[str, dict[str, Any]]
    estimates: Estimates
    sizes: dict[str, int]
    snb_sizes: dict[int, dict[str, int]]
    snb_domains: dict[int, CPUSet]
    regulators: dict[str, RegulatorState]
    rama: dict[str, dict[str, PIDState]]
    steps: dict[str, Mapping[str, Any]]
    isolated: frozenset[str]
    isolation_states: Mapping[tuple[str, str], regions.IsolationState]


@dataclass(frozen=True, slots=True)
class _Scope:
    """One scope the pools are sized in: the unbound NUMA nodes, or one NUMA node."""

    shared: Mapping[str, list[Shared]]
    domain_size: int
    reserved_for_reclaim: int
    numa_fraction: float
    fixed: Mapping[str, int]


class _Sizer:
    """One call of `advise`: the inputs, the last tick's state, and the new state as it is
    built (nothing outside the call sees it change)."""

    def __init__(self, inp: TickInputs, state: AgentState) -> None:
        self.inp = inp
        self.state = state
        self.regulators: dict[str, RegulatorState] = {}
        self.rama: dict[str, dict[str, PIDState]] = {}
        self.steps: dict[str, Mapping[str, Any]] = dict(state.steps)
        self.estimates: Estimates = {}

    def members(self, groups: Mapping[str, list[PodSpec]]) -> dict[str, list[Shared]]:
        return {p: [Shared(s, self.inp.ramping(s)) for s in ms] for p, ms in groups.items()}

    def scope(self, sc: _Scope) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
        """Size the share pools of one scope.

        In overlap mode the pools fill the scope, sized by their requests (Katalyst's
        allowExpand), and the regulator keeps the requirement: the reclaim pool overlaps
        each pool by what it does not require (`regions.borrow_from_pools`). `fixed` pools
        (isolation pools) have their size and no regulator."""
        adv = self.inp.config.advisor
        overlap = self.inp.config.cpu.overlap_reclaim_with_share
        regular = [p for p in sc.shared if p not in sc.fixed]
        rfr = 0
        if not overlap:
            rfr = cpu_policy.fit_reclaim_reserve(
                sc.domain_size, sc.reserved_for_reclaim, len(sc.shared)
            )
        available = sc.domain_size - rfr
        reserved_each = adv.reserved_for_allocate_cpu * sc.numa_fraction / max(len(regular), 1)
        regulated: dict[str, int] = {}
        requests: dict[str, float] = {}
        terms: dict[str, dict[str, Any]] = {}
        scope: dict[str, RegulatorState] = {}
        for pool, members in sorted(sc.shared.items()):
            requirement, _requests, sources = self.estimate_pool(members)
            if pool in sc.fixed:
                terms[pool] = {"isolated": True, "size": sc.fixed[pool], "pods": len(members)}
                continue
            requirement, provision = self.provision(
                pool, members, requirement, reserved_each, available
            )
            size, scope[pool], rterms = regulate(
                requirement,
                reserved_each,
                self.state.regulators.get(pool),
                self.inp.now,
                adv.min_share_cpu_requirement,
                None,  # fitted below, all pools together
                adv,
            )
            regulated[pool] = size
            requests[pool] = sum(m.spec.request_cores for m in members)
            rterms.update(pods=len(members), estimate_sources=sources, provision=provision)
            terms[pool] = rterms
        sizes, _reclaim, aterms = assemble_pools(
            max(available, 0),
            regulated,
            requests,
            reclaim_enabled=adv.enable_reclaim and not overlap,
            reserved_for_reclaim=rfr,
            fixed=dict(sc.fixed),
        )
        for pool, size in sizes.items():
            if size != regulated.get(pool, size) or pool in sc.fixed:
                if pool in scope and not overlap:
                    scope[pool] = RegulatorState(size, scope[pool].last_ramp_down)
                terms[pool]["assembled"] = size
                terms[pool]["assembly"] = aterms
            self.record_step(pool, size, terms[pool])
        self.regulators.update(scope)
        return terms, sizes

    def estimate_pool(self, members: Sequence[Shared]) -> tuple[float, float, dict[str, int]]:
        """The pool's canonical requirement (Σ container estimates), its Σ requests, and
        how many estimates came from each source; each container's estimate is kept."""
        requirement = 0.0
        req_total = 0.0
        sources: dict[str, int] = {}
        for m in members:
            total, per = pod_estimate(self.inp, m.spec, m.ramping)
            requirement += total
            for c, est in per.items():
                self.estimates[(m.spec.uid, c)] = est
                sources[est[1]] = sources.get(est[1], 0) + 1
            req_total += m.spec.request_cores
        return requirement, req_total, sources

    def record_step(self, pool: str, size: int, terms: Mapping[str, Any]) -> None:
        """Keep, per pool, the provision step that last changed its size: the CNR carries
        it (cpu_pools annotation) for `katalyst explain node`, and is rewritten only then."""
        last = self.steps.get(pool)
        if last is not None and last["size"] == size:
            return
        self.steps[pool] = {
            "time": rfc3339(self.inp.now),
            "size": size,
            "previous": None if last is None else last["size"],
            **dict(terms.get("provision") or {}),
        }

    def provision(
        self,
        pool: str,
        members: Sequence[Shared],
        canonical: float,
        reserved_for_allocate: float,
        available: int,
    ) -> tuple[float, dict[str, Any]]:
        """The pool's requirement by the configured provision policy, with its terms. rama
        runs as Katalyst runs it: with reclaim on, no burst buffer (its controllers are the
        buffer) and a pool size to start from; otherwise canonical's estimate stands."""
        adv = self.inp.config.advisor
        if adv.provision_policy != "rama":
            return canonical, {"policy": "canonical"}
        prev = self.state.regulators.get(pool)
        why = rama_skipped(adv.enable_reclaim, reserved_for_allocate, prev is not None)
        if why is None and prev is not None:
            targets, target_terms = region_targets(
                adv.rama.indicator_targets,
                {m.spec.key: dict(self.spd_targets(m.spec)) for m in members},
            )
            result = rama_requirement(
                float(prev.size),
                pool_indicators(self.inp, self.state, pool, members),
                targets,
                adv.rama.pid_parameters,
                self.state.rama.get(pool, {}),
                lower_bound=adv.min_share_cpu_requirement,
                upper_bound=float(max(available, 1)),
            )
            if result is not None:
                self.rama[pool] = dict(result.states)
                return result.requirement, {"policy": "rama", **result.terms, **target_terms}
            why = "no indicator with a target was measured"
        return canonical, {"policy": "canonical", "rama_skipped": why}

    def spd_targets(self, s: PodSpec) -> Mapping[str, float]:
        if not s.spd_name:
            return {}
        return self.inp.spd_targets.get((s.namespace, s.spd_name), {})


def rama_skipped(reclaim: bool, reserved_for_allocate: float, sized: bool) -> str | None:
    """Why rama cannot size a pool (None: it can)."""
    if not reclaim:
        return "reclaim disabled"
    if reserved_for_allocate > 0:
        return (
            f"a burst buffer of {reserved_for_allocate:g} cores exists "
            "(rama needs advisor.reserved_for_allocate_cpu: 0)"
        )
    if not sized:
        return "no pool size to start from yet"
    return None


def advise(inp: TickInputs, state: AgentState, valid: Mapping[str, PodSpec], lay: Layout) -> Advice:
    """Size the share pools: the unbound ones (an isolated pod's pool among them), then
    the NUMA-bound ones per NUMA node."""
    topo = inp.facts.topology
    sizer = _Sizer(inp, state)
    isolated, isolation_states, isolation_sizes = load_isolation(inp, state, valid, lay)
    unbound, bound = steps.snb_groups(valid, lay, isolated)
    numas = max(topo.num_numa_nodes, 1)
    pool_terms, sizes = sizer.scope(
        _Scope(
            sizer.members(unbound),
            len(lay.share_domain),
            lay.reserved_for_reclaim,
            len(lay.share_numas) / numas,
            isolation_sizes,
        )
    )
    snb_domains: dict[int, CPUSet] = {}
    snb_sizes: dict[int, dict[str, int]] = {}
    for numa, numa_pools in sorted(bound.items()):
        domain = lay.bound_leftover & topo.cpus_in_numa(numa)
        snb_domains[numa] = domain
        rfr = lay.snb_reserved_for_reclaim.get(numa, 1)
        t, snb_sizes[numa] = sizer.scope(
            _Scope(sizer.members(numa_pools), len(domain), rfr, 1 / numas, {})
        )
        pool_terms.update(t)
    return Advice(
        pool_terms,
        sizer.estimates,
        sizes,
        snb_sizes,
        snb_domains,
        sizer.regulators,
        sizer.rama,
        sizer.steps,
        isolated,
        isolation_states,
    )


def load_isolation(
    inp: TickInputs, state: AgentState, valid: Mapping[str, PodSpec], lay: Layout
) -> tuple[frozenset[str], Mapping[tuple[str, str], regions.IsolationState], dict[str, int]]:
    """Katalyst's load isolator over the unbound shared pods: the isolated pods, the
    isolator's state, and the size of each isolation pool = max(limit, request) summed
    over the pod's containers."""
    cfg = inp.config.advisor.isolation
    cands: list[regions.IsolationCandidate] = []
    for s in valid.values() if cfg.enabled else ():
        if s.level != names.QOS_SHARED_CORES or s.uid in lay.snb:
            continue
        cg = inp.cgroups_of(s)
        single = len(s.containers) == 1
        runnable: dict[str, float | None] = {}
        for c in s.containers:
            path = cg.pod if single else cg.containers.get(c.name)
            runnable[c.name] = inp.metrics.runnable(path, inp.now) if path else None
        resources = {c.name: max(c.limit_cores, c.request_cores) for c in s.containers}
        pool = s.pool or names.POOL_SHARE
        cands.append(regions.IsolationCandidate(s.uid, pool, resources, runnable, inp.ramping(s)))
    isolated, isolation_states, _terms = regions.decide_isolation(
        cands, state.isolated, state.isolation_states, inp.now, cfg
    )
    by_uid = {c.uid: c for c in cands}
    sizes = {
        regions.isolation_pool_name(u): max(1, math.ceil(sum(by_uid[u].resources.values())))
        for u in sorted(isolated)
    }
    return isolated, isolation_states, sizes


def pod_estimate(
    inp: TickInputs, s: PodSpec, ramping: bool
) -> tuple[float, dict[str, tuple[float, str]]]:
    """Katalyst's canonical estimate of a pod: Σ over its containers, with each
    container's (cores, source). A pod its SPD keeps out of reclaim is held at its
    requests (source `reclaim-off`), so its idle cpus are not lent."""
    adv = inp.config.advisor
    cg = inp.cgroups_of(s)
    single = len(s.containers) == 1
    lends = adv.enable_reclaim and s.uid not in inp.reclaim_off
    per: dict[str, tuple[float, str]] = {}
    for c in s.containers:
        path = cg.pod if single else cg.containers.get(c.name)
        cm = inp.metrics.cpu(path, inp.now) if path else None
        est = estimate_container(
            c.request_cores,
            cm.usage if cm else None,
            cm.load1 if cm else None,
            cm.load5 if cm else None,
            ramping_up=ramping,
            reclaim_enabled=lends,
            cfg=adv,
        )
        source = "reclaim-off" if adv.enable_reclaim and not lends else est.source
        per[c.name] = (est.cores, source)
    return sum(v[0] for v in per.values()), per


def pool_indicators(
    inp: TickInputs, state: AgentState, pool: str, members: Sequence[Shared]
) -> dict[str, float | None]:
    """The pool's indicators over the cpus it has now (Katalyst averages the per-cpu
    metrics over the pool's cpuset)."""
    now, metrics = inp.now, inp.metrics
    cpus = sorted(state.placement.pools.get(pool, CPUSet()))
    out: dict[str, float | None] = {}
    for name, series in (
        (CPU_SCHED_WAIT, metrics.cpu_sched_wait_us(now)),
        (CPU_USAGE_RATIO, metrics.cpu_usage_ratio(now)),
    ):
        have = [series[c] for c in cpus if series is not None and c < len(series)]
        out[name] = sum(have) / len(have) if have else None
    load = None
    for m in members:
        pc = inp.cgroups.get(m.spec.uid)
        cm = metrics.cpu(pc.cgroup, now) if pc is not None else None
        if cm is not None and cm.load1 is not None:
            load = (load or 0.0) + cm.load1
    out[CPU_LOAD_RATIO] = None if load is None or not cpus else load / len(cpus)
    return out


# --- what the reclaim pool borrows -------------------------------------------------------

Lent = dict[str, tuple[CPUSet, int, dict[str, Any]]]  # region -> (cpus, cores, terms)


def borrow(
    inp: TickInputs,
    state: AgentState,
    advice: Advice,
    lay: Layout,
    pools: Mapping[str, CPUSet],
    valid: Mapping[str, PodSpec],
) -> tuple[dict[str, CPUSet], int, dict[str, Any], dict[str, RegulatorState]]:
    """Cpus the reclaim pool borrows, by region (share pools in overlap mode, dedicated
    regions), the cores reclaimed pods may use there in all, the terms, and the dedicated
    regions' regulators."""
    out, total, terms = _from_pools(inp, state, advice, lay, pools)
    dedicated, regulators = dedicated_regions(inp, state, lay, valid)
    for name, (cpus, size, t) in dedicated.items():
        if cpus:
            out[name] = cpus
            total += size
        terms[name] = t
    return out, total, terms, regulators


def _from_pools(
    inp: TickInputs,
    state: AgentState,
    advice: Advice,
    lay: Layout,
    pools: Mapping[str, CPUSet],
) -> tuple[dict[str, CPUSet], int, dict[str, Any]]:
    """In overlap mode, what the share pools lend, by pool, the cores in all, and the
    terms of each scope ("unbound", "NUMA<n>")."""
    cfg = inp.config
    out: dict[str, CPUSet] = {}
    total = 0
    terms: dict[str, Any] = {}
    if not cfg.cpu.overlap_reclaim_with_share:
        return out, total, terms
    sizes, states = advice.sizes, advice.regulators
    prefix = f"{names.POOL_PREFIX_ISOLATION}-"
    isolation_sizes = {p: z for p, z in sizes.items() if p.startswith(prefix)}
    scopes = [
        (
            "unbound",
            [p for p in sorted(sizes) if p not in isolation_sizes],
            len(lay.share_domain),
            lay.reserved_for_reclaim,
            isolation_sizes,
        )
    ]
    for numa, z in sorted(advice.snb_sizes.items()):
        rfr = lay.snb_reserved_for_reclaim.get(numa, 1)
        scopes.append((f"NUMA{numa}", sorted(z), len(advice.snb_domains[numa]), rfr, {}))
    for scope, members, avail, rfr, fixed in scopes:
        if not members:
            continue
        got, size, t = regions.borrow_from_pools(
            inp.facts.topology,
            {p: pools[p] for p in members},
            {p: states[p].size for p in members if p in states},
            avail,
            rfr,
            state.borrowed,
            reclaim_enabled=cfg.advisor.enable_reclaim,
            whole_pools=cfg.reclaimed_root_quota,
            fixed=fixed,
        )
        out.update(got)
        total += size
        terms[scope] = t
    return out, total, terms


def dedicated_regions(
    inp: TickInputs, state: AgentState, lay: Layout, valid: Mapping[str, PodSpec]
) -> tuple[Lent, dict[str, RegulatorState]]:
    """Per NUMA node of each numa_exclusive dedicated pod: the idle cpus reclaimed pods
    may run on (Katalyst's dedicated regions), with the pod's regulated requirement."""
    cfg = inp.config
    adv = cfg.advisor
    topo = inp.facts.topology
    on = adv.enable_reclaim and cfg.reclaimed_cpu_idle
    reclaim_min = cpu_policy.reclaim_minimum(topo, cfg.cpu, adv.min_reclaimed_for_allocate_cpu)
    rfr = max(1, reclaim_min // max(topo.num_numa_nodes, 1))
    out: Lent = {}
    states: dict[str, RegulatorState] = {}
    for uid, a in sorted(lay.dedicated.items()):
        if not a.exclusive or uid not in valid or not a.cpuset:
            continue
        s = valid[uid]
        estimate, _ = pod_estimate(inp, s, inp.ramping(s))
        lends = on and s.uid not in inp.reclaim_off
        for n in a.numas:
            cpus = a.cpuset & topo.cpus_in_numa(n)
            if not cpus:
                continue
            name = f"{names.POOL_DEDICATED}-{s.key}-NUMA{n}"
            requirement, states[name], rterms = regulate(
                estimate * len(cpus) / len(a.cpuset),
                adv.reserved_for_allocate_cpu / max(topo.num_numa_nodes, 1),
                state.dedicated_regulators.get(name),
                inp.now,
                min(adv.min_share_cpu_requirement, len(cpus)),
                len(cpus),
                adv,
            )
            size, t = regions.dedicated_reclaim_size(
                len(cpus), requirement, min(rfr, len(cpus)), reclaim_enabled=lends
            )
            if adv.enable_reclaim and not cfg.reclaimed_cpu_idle:
                t["reclaim"] = "reclaimed_cpu_idle is off: reclaimed pods would not yield"
            elif s.uid in inp.reclaim_off:
                t["reclaim"] = inp.reclaim_off[s.uid]
            picked = regions.pick_cpus(topo, cpus, size, state.borrowed.get(name, CPUSet()))
            t.update({"pod": s.key, "cpus": str(picked), "regulator": rterms})
            out[name] = (picked, size, t)
    return out, states
