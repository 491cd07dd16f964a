"""The agent's decision for one tick: `decide(inputs, state) -> (plan, state)`, pure.

From the gathered `TickInputs` and the `AgentState` the last tick left, it lays the machine
out, sizes the share pools (`sizing.advise`), cuts their cpusets, lends the reclaim pool
what regions can spare (`sizing.borrow`), works out the reclaimed figures
(`headroom.headroom`) and every managed pod's cgroup knobs (cpusets, reclaimed pods'
cpu.idle and memory limit, then memory and disk I/O isolation), and the egress QoS plan
(`net_policy.decide`: the device's shape, the pods' classid knobs merged into the desired
ones), the CNR status to publish (`publish.report_input`, with the GPU and NIC zones
gathered) and the pods' native demand for the overcommit advice. Then each eviction stage
decides on that plan (`EvictionStage.decide`, from the
memory its last decision left in the state): the evictions, taints and Events it wants
performed, and the knob overrides (throttling before evicting) merged into the desired
knobs. It reads nothing but its arguments and changes none of them: the state it returns
is a new value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from pykatalyst.agent import cpu_layout as steps
from pykatalyst.agent import (
    cpu_placement,
    headroom,
    isolation,
    kubelet_cpu,
    memory_policy,
    net_policy,
    publish,
    sizing,
)
from pykatalyst.agent.advisor import RegulatorState
from pykatalyst.agent.agent_state import AgentState, PlanCacheEntry
from pykatalyst.agent.cpu_policy import Layout
from pykatalyst.agent.host.base import CpuQuota, Knob, KnobValue, PodCgroup
from pykatalyst.agent.inputs import EvictionInput, TickInputs
from pykatalyst.agent.plan import (
    UNMANAGED,
    AgentPlan,
    ContainerPlan,
    PlanEvent,
    PodPlan,
    StageDecision,
)
from pykatalyst.agent.pods import PodSpec, nic_hold
from pykatalyst.api import names
from pykatalyst.topology.cpuset import CPUSet

OOM_PRIORITY_IGNORED = (
    "oom_priority is not applied on this node: the agent's memory_advisor.oom_priority is "
    "off, so the kernel's OOM killer follows the kubelet's QoS-class oom_score_adj"
)

Desired = dict[str, dict[Knob, KnobValue]]


class Notes:
    """The plan's warnings and Events as a tick collects them; an Event about a pod is
    sent once (`sent`: those already sent, by pod, reason and message)."""

    def __init__(
        self,
        warnings: tuple[str, ...],
        events: tuple[PlanEvent, ...],
        sent: frozenset[tuple[str, str, str]],
    ) -> None:
        self.warnings = list(warnings)
        self.events = list(events)
        self.sent = set(sent)

    def once(self, s: PodSpec, reason: str, message: str, type_: str = "Warning") -> None:
        key = (s.uid, reason, message)
        if key in self.sent:
            return
        self.sent.add(key)
        self.events.append(PlanEvent(names.POD.kind, s.key, reason, message, type_))


def decide(inp: TickInputs, state: AgentState) -> tuple[AgentPlan, AgentState]:
    """The tick's whole plan (see the module's text) and the state it leaves the next."""
    notes = Notes(inp.warnings, inp.events, state.events_sent)
    valid = steps.classify(inp.specs)
    pod_events(inp, notes)
    lay = _layout(inp, state, valid, notes)
    advice = sizing.advise(inp, state, valid, lay)
    alloc, borrowed, dedicated_regulators = _cut(inp, state, advice, lay, valid)
    notes.warnings.extend(alloc.warnings)
    # headroom: over the cpus reclaimed pods get, capped at the reclaimed cores size
    # when some are lent, so that a region's slack is not published twice.
    cap = float(alloc.reclaimed_cores_size) if alloc.overlap else None
    cpu_fig, mem_fig, smoothers = headroom.headroom(
        inp,
        (state.cpu_smoother, state.mem_smoother),
        alloc.reclaimed_cpus,
        valid,
        cap,
        lay.dedicated,
    )
    placed = PodPlacing(inp, state, lay, alloc, advice, valid)
    pod_plans, knobs, plans = placed.plans()
    desired = with_root(inp, without_pinned(inp, knobs, valid), alloc)
    iso = isolate(inp, state, valid, lay, (pod_plans, desired))
    net = network(inp, valid)
    isolation.merge(desired, net.knobs)
    notes.warnings.extend(steps.failed_warnings(lay, valid))
    plan = AgentPlan(
        node=inp.facts.node,
        time=inp.now,
        topology=inp.facts.terms,
        pools=tuple(steps.pool_plans(lay, alloc, advice.terms)),
        pods=tuple(pod_plans),
        reclaimed_cpu=cpu_fig,
        reclaimed_memory=mem_fig,
        desired=desired,
        warnings=tuple(notes.warnings),
        events=tuple(notes.events),
        dry_run=inp.facts.dry_run,
        config=dict(inp.config_status),
        memory=iso.memory,
        io=iso.io,
        net=net,
    )
    new = AgentState(
        placement=cpu_placement.CpuState(lay.dedicated, lay.snb, alloc.pools),
        regulators=advice.regulators,
        dedicated_regulators=dedicated_regulators,
        rama=advice.rama,
        steps=advice.steps,
        isolated=advice.isolated,
        isolation_states=advice.isolation_states,
        borrowed=borrowed,
        cpu_smoother=smoothers[0],
        mem_smoother=smoothers[1],
        events_sent=frozenset(notes.sent),
        dropped_at=dict(iso.dropped_at),
        plans=plans,
    )
    return _with_evictions(inp, state, _with_report(inp, lay, valid, plan, new), new, valid)


def _with_report(
    inp: TickInputs,
    lay: Layout,
    valid: Mapping[str, PodSpec],
    plan: AgentPlan,
    new: AgentState,
) -> AgentPlan:
    """The plan with the CNR status and node extended resources to publish (with the GPU
    and NIC zones gathered), and the pods' native demand for the overcommit advice."""
    cnr, terms = publish.report_input(inp, lay, valid, plan, new.steps)
    if inp.gpus is not None:
        zones, props, terms["gpus"] = inp.gpus
        cnr = dataclasses.replace(cnr, gpu_zones=zones, resource_properties=props)
    if inp.nic_zones is not None:
        nic_zones, terms["nics"] = inp.nic_zones
        cnr = dataclasses.replace(cnr, nic_zones=nic_zones)
    demand = headroom.native_demand(inp, valid) if inp.config.overcommit.enabled else None
    return dataclasses.replace(plan, cnr=cnr, cnr_terms=terms, native_demand=demand)


def _with_evictions(
    inp: TickInputs,
    state: AgentState,
    plan: AgentPlan,
    new: AgentState,
    valid: Mapping[str, PodSpec],
) -> tuple[AgentPlan, AgentState]:
    """The plan with the eviction stages' decisions, their knob overrides merged into
    the desired knobs; the state with the memory they leave."""
    evictions, memory, failures = evict(inp, state, plan, valid)
    if not inp.stages:
        return plan, new
    plan = dataclasses.replace(
        plan,
        desired=with_overrides(plan.desired, evictions),
        warnings=(*plan.warnings, *failures),
        evictions=evictions,
    )
    return plan, dataclasses.replace(new, stage_memory=memory)


def evict(
    inp: TickInputs, state: AgentState, plan: AgentPlan, valid: Mapping[str, PodSpec]
) -> tuple[tuple[StageDecision, ...], tuple[object, ...], tuple[str, ...]]:
    """Each eviction stage's decision on the plan, in order, and the memory it leaves; a
    stage that failed to read or to decide is reported (the warnings) and skipped, its
    memory kept."""
    if not inp.stages:
        return (), (), ()
    stage_input = EvictionInput(
        inp.now, plan, valid, inp.metrics, inp.sample, node=inp.node, nics=inp.nics
    )
    decisions: list[StageDecision] = []
    memory: list[object] = []
    failures: list[str] = []
    for i, stage in enumerate(inp.stages):
        held = state.stage_memory[i] if i < len(state.stage_memory) else None
        reads = inp.stage_reads[i] if i < len(inp.stage_reads) else None
        try:
            if isinstance(reads, Exception):
                raise reads
            decision, held = stage.decide(stage_input, reads, held)
        except Exception as exc:  # a broken stage must not stop the loop
            failures.append(f"eviction stage {stage.name}: {exc}")
            decision = StageDecision(stage.name)
        decisions.append(decision)
        memory.append(held)
    return tuple(decisions), tuple(memory), tuple(failures)


def network(inp: TickInputs, valid: Mapping[str, PodSpec]) -> net_policy.NetPlan:
    """Egress QoS (`net_policy.decide`) for the managed pods with a cgroup or an address:
    the device's shape, the pods' classid knobs and the terms; no shape while it is off."""
    cfg = inp.config.network
    if not cfg.enabled:
        return net_policy.NetPlan(None, terms={"enabled": False})
    pods = []
    for uid, s in valid.items():
        pc = inp.cgroups.get(uid)
        cgs = () if pc is None else (pc.cgroup, *(c.cgroup for c in pc.containers))
        if cgs or s.addresses:
            pods.append(net_policy.NetPod(s.key, s.level, cgs, s.addresses, *nic_hold(s)))
    return net_policy.decide(cfg, pods, inp.facts.cgroup_version)


def with_overrides(
    desired: Mapping[str, Mapping[Knob, KnobValue]], decisions: Sequence[StageDecision]
) -> dict[str, Mapping[Knob, KnobValue]]:
    """`desired` narrowed by the eviction stages' `knob_overrides` (cgroup -> {Knob:
    value}: throttling before evicting), in the stages' order; `desired` is untouched."""
    out = dict(desired)
    for decision in decisions:
        for cgroup, knobs in decision.knob_overrides.items():
            out[cgroup] = {**out.get(cgroup, {}), **knobs}
    return out


def _cut(
    inp: TickInputs,
    state: AgentState,
    advice: sizing.Advice,
    lay: Layout,
    valid: Mapping[str, PodSpec],
) -> tuple[steps.Allocation, dict[str, CPUSet], dict[str, RegulatorState]]:
    """The pools' cpusets and the reclaim pool's with what regions lend it (share pools
    in overlap mode, idle cpus of numa_exclusive dedicated pods: reclaimed pods run there
    under SCHED_IDLE); the lent cpus by region and the dedicated regions' regulators."""
    alloc = steps.allocate(
        inp.facts.topology,
        inp.config,
        lay,
        advice.sizes,
        advice.snb_sizes,
        advice.snb_domains,
        state.placement.pools,
    )
    borrowed, borrowed_size, region_terms, regulators = sizing.borrow(
        inp, state, advice, lay, alloc.pools, valid
    )
    return steps.lend(lay, alloc, borrowed, borrowed_size, region_terms), borrowed, regulators


def _layout(
    inp: TickInputs, state: AgentState, valid: Mapping[str, PodSpec], notes: Notes
) -> Layout:
    """The static cut, with an Event for each pod that could not be placed."""
    lay, warnings = steps.layout(inp.facts.topology, inp.config, valid, state.placement, inp.pins)
    notes.warnings.extend(warnings)
    for uid, why in lay.failed.items():
        notes.once(valid[uid], "DedicatedPlacementFailed", why)
    for uid, why in lay.snb_failed.items():
        notes.once(valid[uid], "NUMABindingFailed", why)
    return lay


def pod_events(inp: TickInputs, notes: Notes) -> None:
    """Say, once each, which pods are left alone and which annotations are ignored."""
    applied = inp.config.memory_advisor.oom_priority
    for s in inp.specs.values():
        if s.error is not None:
            notes.once(s, "InvalidQoS", s.error)
            continue
        if s.qos is not None and s.qos.enhancements.oom_priority is not None and not applied:
            notes.once(s, "OOMPriorityIgnored", OOM_PRIORITY_IGNORED)
        if s.qos is not None and s.qos.warnings:
            warned = "; ".join(str(w) for w in s.qos.warnings)
            notes.once(s, "QoSWarning", f"Pod {s.key}: {warned}")


def without_pinned(inp: TickInputs, desired: Desired, valid: Mapping[str, PodSpec]) -> Desired:
    """The kubelet alone writes the cpusets of the containers it pinned (and, under the
    static policy with no answer from it, of those it may have pinned), and of the cgroups
    of such pods that no container of the pod's status names yet (`kubelet_cpu.kubelet_owned`)."""
    static = inp.kubelet is not None and inp.kubelet.static
    if inp.pins is None and not static:
        return desired
    pods: dict[str, kubelet_cpu.PodContainers] = {}
    for uid, s in valid.items():
        pc = inp.cgroups.get(uid)
        pods[uid] = kubelet_cpu.PodContainers(
            inp.cgroups_of(s).containers,
            frozenset(c.cgroup for c in pc.containers) if pc is not None else frozenset(),
            frozenset(
                c.name for c in s.containers if kubelet_cpu.may_pin(c.request_cores, c.limit_cores)
            ),
        )
    return kubelet_cpu.strip_pinned(desired, kubelet_cpu.kubelet_owned(inp.pins, static, pods))


def with_root(inp: TickInputs, desired: Desired, alloc: steps.Allocation) -> Desired:
    """The reclaimed root's knobs (cpu.idle, the reclaim pool's quota) with the pods'."""
    root = inp.reclaimed_root
    if root is not None:
        desired[root] = root_knobs(inp, alloc.reclaimed_cores_size)
    return desired


def root_knobs(inp: TickInputs, reclaim_cpus: int) -> dict[Knob, KnobValue]:
    """cpu.idle on the reclaimed root: the kernel decides wakeup preemption between the
    entities just below the common ancestor of the waking task and the running one, so
    a shared pod (under kubepods/burstable) preempts a reclaimed one at once only when
    the best-effort root itself is idle. But the kubelet writes cpu.shares to its
    best-effort cgroup at start and every minute, and the kernel refuses cpu.shares on
    an idle cgroup: a kubelet restarted under an idle root fails to start. So the root
    is idled only when `reclaimed_root_cpu_idle` says it is not the kubelet's, and
    otherwise kept at cpu.idle=0 (undoing an earlier agent's setting). The quota, when
    enabled, caps everything below the root at the reclaimed cores size (what Katalyst
    writes for its quota knob)."""
    cfg = inp.config
    idle = cfg.reclaimed_cpu_idle and cfg.reclaimed_root_cpu_idle
    knobs: dict[Knob, KnobValue] = {Knob.CPU_IDLE: 1 if idle else 0}
    period = 100_000
    if cfg.reclaimed_root_quota:
        knobs[Knob.CPU_QUOTA] = CpuQuota(max(reclaim_cpus, 1) * period, period)
    else:
        knobs[Knob.CPU_QUOTA] = CpuQuota(None, period)
    return knobs


def isolate(
    inp: TickInputs,
    state: AgentState,
    valid: Mapping[str, PodSpec],
    lay: Layout,
    desired: tuple[list[PodPlan], Desired],
) -> isolation.IsolationResult:
    """Memory and disk I/O knobs (agent/isolation.py), merged into the desired ones."""
    managed = [p for p in desired[0] if p.pool != UNMANAGED]
    iso = isolation.isolation_pass(
        inp.now,
        inp.config,
        inp.facts.cgroup_version,
        inp.facts.topology,
        managed,
        valid,
        inp.sample,
        inp.reclaimed_root,
        lay.bound_numas,
        state.dropped_at,
        inp.guaranteed_root,
    )
    isolation.merge(desired[1], iso.desired)
    return iso


class PodPlacing:
    """Every pod's plan and its cgroups' knobs, for one tick. A pod's plan is made again
    only when what it is made from changed (the last tick's are in the state)."""

    def __init__(
        self,
        inp: TickInputs,
        state: AgentState,
        lay: Layout,
        alloc: steps.Allocation,
        advice: sizing.Advice,
        valid: Mapping[str, PodSpec],
    ) -> None:
        self.inp, self.state, self.lay, self.valid = inp, state, lay, valid
        self.pools, self.reclaim = alloc.pools, alloc.reclaimed_cpus
        self.advice = advice
        self.machine = steps.MachineDefaults.of(inp.facts.topology, lay)

    def plans(self) -> tuple[list[PodPlan], Desired, dict[str, PlanCacheEntry]]:
        desired: Desired = {}
        plans: list[PodPlan] = []
        cache: dict[str, PlanCacheEntry] = {}
        for uid in self.inp.order:
            s = self.inp.specs[uid]
            pc = self.inp.cgroups.get(uid)
            if uid not in self.valid or uid in self.lay.failed:
                plans.append(self.unmanaged(s, pc))
                continue
            hit = cache[uid] = self.managed(s, pc)
            plans.append(hit[1])
            for path, knobs in hit[2]:
                desired[path] = knobs
        return plans, desired, cache

    def unmanaged(self, s: PodSpec, pc: PodCgroup | None) -> PodPlan:
        why = s.error or self.lay.failed.get(s.uid, "")
        return PodPlan(
            s.uid,
            s.key,
            s.level,
            UNMANAGED,
            CPUSet(),
            CPUSet(),
            pc.cgroup if pc else None,
            note=f"left as placed: {why}",
        )

    def managed(self, s: PodSpec, pc: PodCgroup | None) -> PlanCacheEntry:
        inp = self.inp
        ramping = s.level == names.QOS_SHARED_CORES and inp.ramping(s)
        pool, cpus, mems, numas = steps.pod_placement(
            s,
            self.lay,
            self.pools,
            self.reclaim,
            self.advice.snb_domains,
            ramping,
            self.machine,
            s.uid in self.advice.isolated,
        )
        ests = tuple(self.advice.estimates.get((s.uid, c.name)) for c in s.containers)
        off = inp.reclaim_off.get(s.uid, "")
        key = (s, pc, pool, cpus, mems, numas, ramping, ests, inp.config.reclaimed_cpu_idle, off)
        hit = self.state.plans.get(s.uid)
        if hit is not None and hit[0] == key:
            return hit
        plan, writes = pod_plan(inp, s, pc, (pool, cpus, mems, numas), ramping, ests)
        return key, plan, writes


def pod_plan(
    inp: TickInputs,
    s: PodSpec,
    pc: PodCgroup | None,
    where: tuple[str, CPUSet, CPUSet, tuple[int, ...]],
    ramping: bool,
    ests: tuple[tuple[float, str] | None, ...],
) -> tuple[PodPlan, tuple[tuple[str, dict[Knob, KnobValue]], ...]]:
    """One pod's plan and the knobs of its cgroups: `where` it runs (pool, cpus, memory
    nodes, NUMA nodes)."""
    pool, cpus, mems, numas = where
    pod_knobs: dict[Knob, KnobValue] = {}
    if s.level == names.QOS_RECLAIMED_CORES:
        if inp.config.reclaimed_cpu_idle:
            pod_knobs[Knob.CPU_IDLE] = 1
        limit = memory_policy.reclaimed_memory_limit(s.reclaimed_memory)
        if limit is not None:
            pod_knobs[Knob.MEMORY_LIMIT] = limit
    # Cpusets go on the containers' cgroups only, the sandbox's included, never on the
    # pod's: the kubelet leaves pod cgroups with every cpu, and on cgroup v1 a pod cgroup
    # cannot narrow below a child that still holds a cpu (EBUSY), nor can a container
    # later be widened beyond its pod. v2 gets the same rule, so both behave alike.
    knobs: dict[Knob, KnobValue] = {Knob.CPUSET_CPUS: cpus, Knob.CPUSET_MEMS: mems}
    writes: list[tuple[str, dict[Knob, KnobValue]]] = []
    cg = inp.cgroups_of(s)
    containers = []
    for c, est in zip(s.containers, ests, strict=True):
        path = cg.containers.get(c.name)
        if path is not None:
            writes.append((path, knobs))
        containers.append(
            ContainerPlan(c.name, path, est[0] if est else None, est[1] if est else None, knobs)
        )
    if cg.pod is not None and pod_knobs:
        writes.append((cg.pod, pod_knobs))
    if pc is not None and len(pc.containers) > len(cg.containers):
        # Cgroups of the pod that match no spec container (the sandbox, a container whose
        # status is not reported yet) get the same cpus as the pod's containers.
        known = set(cg.containers.values())
        writes.extend((o.cgroup, knobs) for o in pc.containers if o.cgroup not in known)
    plan = PodPlan(
        s.uid,
        s.key,
        s.level,
        pool,
        cpus,
        mems,
        cg.pod,
        numas,
        ramping,
        pod_knobs,
        tuple(containers),
        note="" if pc is not None else "no cgroup found on this machine: not enforced",
        reclaim_off=inp.reclaim_off.get(s.uid, ""),
    )
    return plan, tuple(writes)
