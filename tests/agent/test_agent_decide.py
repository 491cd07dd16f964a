"""The agent's decision is a pure function of the tick's inputs and the last tick's state:
whatever pods came and went and whatever they ran, deciding again from the same inputs and
state gives the same plan and the same next state, and leaves both untouched (the machine
and the cluster too). Executing a decision writes its knobs (with the eviction stages'
overrides) and nothing else."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from pykatalyst.agent.act import KnobWriter
from pykatalyst.agent.agent import EvictionInput
from pykatalyst.agent.decide import decide
from pykatalyst.agent.enforcer import Enforcer, EnforceReport
from pykatalyst.agent.eviction import EvictionConfig, EvictionPlan, EvictionStage
from pykatalyst.agent.host.base import CpuQuota, Knob, KnobValue, KnobWrite
from pykatalyst.agent.plan import StageDecision
from pykatalyst.agent.reporter import build_status
from pykatalyst.api import names
from pykatalyst.api.names import Kind
from pykatalyst.api.objects import Taint
from pykatalyst.cluster.protocol import Cluster
from tests.agent.test_agent_invariants import step_st
from tests.agent.test_agent_loop import FnStage, Node

CONFIGS: list[dict[str, Any]] = [
    {},
    {"cpu": {"overlap_reclaim_with_share": True}},
    {"advisor": {"isolation": {"enabled": True}}},
    {"advisor": {"provision_policy": "rama", "reserved_for_allocate_cpu": 0}},
]


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    cfg=st.sampled_from(CONFIGS),
    steps=st.lists(step_st, min_size=2, max_size=8),
    later=st.floats(min_value=0, max_value=90),
)
def test_decide_is_pure(
    cfg: dict[str, Any], steps: list[tuple[str, dict[str, Any], float]], later: float
) -> None:
    n = Node(cfg)
    live: list[tuple[str, str]] = []
    for i, (op, kw, load) in enumerate(steps):
        if op == "add" or not live:
            name = f"p{i}"
            live.append((name, n.pod(name, **kw)))
        elif op == "remove":
            name, uid = live.pop(int(load) % len(live))
            n.cluster.delete(names.POD, name, "default", grace_period_seconds=0)
            n.host.remove_pod(uid)
        elif op == "load":
            n.host.set_load(live[int(load) % len(live)][1], load)
        if i < len(steps) - 1:  # the last change is news to the decision under test
            n.run(10)
    n.clock.advance(later)
    inputs = n.agent.gather(n.clock.now())
    state = n.agent.state
    state_before = repr(state)  # every value in it, nested ones too
    knobs_before = copy.deepcopy(n.host.knobs)
    version_before = n.cluster.list(names.POD, "default").resource_version

    first, after_first = decide(inputs, state)
    second, after_second = decide(inputs, state)

    assert first == second
    assert after_first == after_second
    assert repr(state) == state_before, "deciding changed the state it was given"
    assert n.agent.state is state
    assert n.host.knobs == knobs_before, "deciding wrote to the machine"
    assert n.cluster.list(names.POD, "default").resource_version == version_before
    # the agent executes the decision and keeps the state decide returned
    plan, kept = n.agent.execute(inputs, first, after_first)
    assert kept.placement == after_first.placement and kept.plans == after_first.plans
    assert plan.pools == first.pools and plan.pods == first.pods


@dataclass
class RecordingEnforcer:
    """The real enforcer, with every desired mapping it was handed and every write made."""

    inner: Enforcer
    handed: list[Mapping[str, Mapping[Knob, KnobValue]]] = field(default_factory=list)
    written: list[KnobWrite] = field(default_factory=list)
    failed: set[tuple[str, Knob]] = field(default_factory=set)

    @property
    def checkpoint_path(self) -> Path | None:
        return None

    def apply(
        self,
        desired: Mapping[str, Mapping[Knob, KnobValue]],
        dry_run: bool = False,
        usage: Mapping[str, int] | None = None,
    ) -> EnforceReport:
        self.handed.append(desired)
        report = self.inner.apply(desired, dry_run, usage)
        self.written.extend(report.applied)
        self.failed.update((f.write.cgroup, f.write.knob) for f in report.failed)
        return report


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    cfg=st.sampled_from(CONFIGS),
    steps=st.lists(step_st, min_size=1, max_size=6),
    throttle=st.booleans(),
)
def test_the_executor_writes_exactly_the_plan(
    cfg: dict[str, Any], steps: list[tuple[str, dict[str, Any], float]], throttle: bool
) -> None:
    n = Node(cfg)
    recorder = RecordingEnforcer(Enforcer(n.host, None, n.clock))
    n.agent.enforcer = recorder
    n.agent.performer.writer = KnobWriter(recorder, False)
    quota = CpuQuota(50_000, 100_000)

    def throttling(inp: EvictionInput) -> StageDecision:
        """Narrow the first pod's quota (throttling before evicting)."""
        cgroups = sorted(p.cgroup for p in inp.plan.pods if p.cgroup is not None)
        overrides = {cgroups[0]: {Knob.CPU_QUOTA: quota}} if throttle and cgroups else {}
        return StageDecision("throttle", knob_overrides=overrides)

    n.agent.eviction_stages = [FnStage(throttling)]
    uids: list[str] = []
    for i, (op, kw, load) in enumerate(steps):
        if op == "add" or not uids:
            uids.append(n.pod(f"p{i}", **kw))
        elif op == "load":
            n.host.set_load(uids[int(load) % len(uids)], load)
        n.clock.advance(5)
        inputs = n.agent.gather(n.clock.now())
        decision, state = decide(inputs, n.agent.state)
        recorder.handed.clear()
        recorder.written.clear()
        recorder.failed.clear()
        plan, n.agent.state = n.agent.execute(inputs, decision, state)
        # the decision's knobs carry the stage's overrides over the agent's own
        (throttled,) = decision.evictions
        for cg, knobs in throttled.knob_overrides.items():
            assert {k: decision.desired[cg][k] for k in knobs} == knobs
        # the executor hands the enforcer the decision's knobs
        assert plan.desired == decision.desired
        assert recorder.handed in ([], [plan.desired])
        # ... and only those are written (a cpuset may be widened on the way), each last
        # to the plan's value unless the write failed
        last = {(w.cgroup, w.knob): w.value for w in recorder.written}
        for (cg, knob), value in last.items():
            assert (cg, knob) in recorder.failed or plan.desired[cg][knob] == value


# Memory pressure on every tick (MemFree is always under this floor): the eviction stage
# taints the Node and evicts reclaimed pods, one a round.
PRESSURE: dict[str, Any] = {
    "system_memory": {"free_threshold_minimum": 2**50, "cool_down_s": 0},
    "condition_transition_period_s": 0,
}


@dataclass
class RecordingCluster:
    """Every eviction asked of the cluster, by namespace, name and grace period."""

    evicted: list[tuple[str, str, int | None]] = field(default_factory=list)

    def wrap(self, cluster: Cluster) -> None:
        evict = cluster.evict

        def recording(namespace: str, name: str, grace_period_seconds: int | None = None) -> None:
            self.evicted.append((namespace, name, grace_period_seconds))
            evict(namespace, name, grace_period_seconds)

        cluster.evict = recording  # type: ignore[method-assign]


def ours(cluster: Cluster, kind: Kind) -> list[dict[str, Any]]:
    """The object's taints under the eviction manager's prefix."""
    taints = (cluster.get(kind, "node-1").get("spec") or {}).get("taints") or []
    return sorted(
        (t for t in taints if str(t["key"]).startswith(names.TAINT_PREFIX)),
        key=lambda t: (t["key"], t["effect"], t.get("qosLevel", "")),
    )


def wanted(taints: tuple[Taint, ...]) -> list[dict[str, Any]]:
    return sorted(
        (t.to_json() for t in taints),
        key=lambda t: (t["key"], t["effect"], t.get("qosLevel", "")),
    )


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    cfg=st.sampled_from(CONFIGS),
    steps=st.lists(step_st, min_size=1, max_size=8),
    pressure=st.booleans(),
)
def test_decide_is_deterministic_and_act_performs_exactly_the_plan(
    cfg: dict[str, Any], steps: list[tuple[str, dict[str, Any], float]], pressure: bool
) -> None:
    n = Node(cfg)
    registry = CollectorRegistry()
    stage = EvictionStage(
        "node-1",
        n.cluster,
        EvictionConfig.model_validate(PRESSURE if pressure else {}),
        registry=registry,
    )
    n.agent.eviction_stages = [stage]
    recorder = RecordingCluster()
    recorder.wrap(n.cluster)
    uids: list[str] = []
    for i, (op, kw, load) in enumerate(steps):
        if op == "add" or not uids:
            uids.append(n.pod(f"p{i}", **kw))
        elif op == "load":
            n.host.set_load(uids[int(load) % len(uids)], load)
        n.clock.advance(5)
        inputs = n.agent.gather(n.clock.now())
        plan, state = decide(inputs, n.agent.state)
        # the same inputs and state: the same plan and state, evictions included
        assert decide(inputs, n.agent.state) == (plan, state)
        recorder.evicted.clear()
        done, n.agent.state = n.agent.execute(inputs, plan, state)
        rounds = [d.plan for d in plan.evictions if isinstance(d.plan, EvictionPlan)]
        # the evictions asked of the cluster are the plan's, in its order
        assert recorder.evicted == [
            (v.pod.namespace, v.pod.name, v.deletion_grace_s)
            for r in rounds
            if r.ran
            for v in r.evictions
        ]
        # the manager's taints on the Node and the CNR are the plan's
        for r in rounds:
            if r.ran:
                assert ours(n.cluster, names.NODE) == wanted(r.node_taints)
                assert ours(n.cluster, names.CUSTOM_NODE_RESOURCE) == wanted(r.cnr_taints)
        # the CNR's status is the one the plan's report input makes
        assert plan.cnr is not None
        status = build_status(plan.cnr, n.agent.reporter.topology_policy)
        published = n.cluster.get(names.CUSTOM_NODE_RESOURCE, "node-1")["status"]
        assert {k: published.get(k) for k in status} == status
        assert done.pools == plan.pools and done.desired == plan.desired
