"""The eviction manager's rules, the same for every plugin: ranking, protection, the kill
budget, in-flight victims, dry run, conditions and their taints, throttle before evict."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from pykatalyst.agent.eviction import (
    EvictionConfig,
    EvictionManager,
    EvictionSnapshot,
    Met,
    PodInfo,
    PoolState,
    ReclaimedCapacity,
    rank,
)
from pykatalyst.agent.eviction.ranking import minimal_prefix, usage_fn
from pykatalyst.agent.host.base import HostSample, MemoryInfo
from pykatalyst.api import names
from tests.agent.eviction_pods import eviction_pod

GIB = 1 << 30
RECLAIMED = names.QOS_RECLAIMED_CORES
SHARED = names.QOS_SHARED_CORES
PRESSURE_KEY = names.TAINT_PREFIX + names.CONDITION_MEMORY_PRESSURE


def pod(name: str, level: str = RECLAIMED, **kw: object) -> PodInfo:
    return eviction_pod(f"uid-{name}", "default", name, level, **kw)  # type: ignore[arg-type]


def deleting(p: PodInfo) -> PodInfo:
    """The pod once its deletion has begun."""
    return replace(p, digest=replace(p.digest, deleting=True))


def system_only(**extra: object) -> EvictionConfig:
    data: dict[str, object] = {
        "reclaimed_resource": {"enabled": False},
        "numa_memory": {"enabled": False},
        "system_memory": {"cool_down_s": 0},
    }
    data.update(extra)
    return EvictionConfig.model_validate(data)


def squeezed(now: float, pods: Sequence[PodInfo], free: int = GIB // 100) -> EvictionSnapshot:
    """Node free memory below the watermark: a hard threshold on reclaimed pods."""
    info = MemoryInfo(total=100 * GIB, free=free, available=free)
    return EvictionSnapshot(now, "n1", tuple(pods), sample=HostSample(now, memory=info))


# --- ranking ----------------------------------------------------------------------------


def test_ranking_reclaimed_before_shared_then_priority_then_biggest_user() -> None:
    pods = [
        pod("shared-low", SHARED, priority=0, memory=50 * GIB),
        pod("rec-high-big", priority=100, memory=40 * GIB),
        pod("rec-low-small", priority=0, memory=1 * GIB),
        pod("rec-low-big", priority=0, memory=8 * GIB),
        pod("dedicated", names.QOS_DEDICATED_CORES, priority=-5, memory=90 * GIB),
    ]
    order = [p.name for p, _ in rank(pods, usage_fn(names.RESOURCE_MEMORY))]
    assert order == ["rec-low-big", "rec-low-small", "rec-high-big", "shared-low", "dedicated"]


def test_ranking_uses_pod_evict_score_before_size() -> None:
    keep = pod("keep", memory=8 * GIB, annotations={names.POD_EVICT_SCORE_ANNOTATION: "10"})
    go = pod("go", memory=1 * GIB, annotations={names.POD_EVICT_SCORE_ANNOTATION: "-1"})
    assert [p.name for p, _ in rank([keep, go], usage_fn(names.RESOURCE_MEMORY))] == ["go", "keep"]


@settings(max_examples=60, deadline=None)
@given(
    usages=st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=8),
    overage=st.integers(min_value=0, max_value=200),
)
def test_minimal_prefix_covers_the_overage_with_no_spare_victim(
    usages: list[int], overage: int
) -> None:
    pods = [pod(f"p{i}", reclaimed_milli_cpu=u) for i, u in enumerate(usages)]
    ranked = rank(pods, usage_fn(names.RECLAIMED_MILLICPU))
    picks = minimal_prefix(ranked, float(overage), limit=100)
    released = sum(e.usage for _, e in picks)
    if overage > sum(usages):
        assert len(picks) == len(pods)
    else:
        assert released >= overage
        # without its last member the set would not be enough: nobody evicted for nothing
        assert len(picks) == 1 or released - picks[-1][1].usage < overage


# --- protection -------------------------------------------------------------------------


def test_system_critical_and_static_pods_are_never_chosen() -> None:
    protected = [
        pod("sys", names.QOS_SYSTEM_CORES, memory=90 * GIB),
        pod("crit", priority=2_000_000_000, memory=80 * GIB),
        pod("node-crit", priority_class_name="system-node-critical", memory=70 * GIB),
        pod("cluster-crit", priority_class_name="system-cluster-critical", memory=70 * GIB),
        pod("static", static=True, memory=60 * GIB),
    ]
    mgr = EvictionManager("n1", system_only())
    plan = mgr.decide(squeezed(0, protected))
    assert not plan.victims
    assert any("no eligible candidate" in n for n in plan.notes)
    plan = mgr.decide(squeezed(5, [*protected, pod("ok", memory=GIB)]))
    assert [v.pod.name for v in plan.victims] == ["ok"]


def test_pods_with_a_skip_annotation_or_label_are_left_alone() -> None:
    cfg = system_only(skipped_annotations=["example.com/keep"], skipped_labels=["pinned"])
    mgr = EvictionManager("n1", cfg)
    pods = [
        pod("annotated", memory=9 * GIB, annotations={"example.com/keep": "yes"}),
        pod("labelled", memory=8 * GIB, labels={"pinned": "true"}),
        pod("plain", memory=GIB),
    ]
    assert [v.pod.name for v in mgr.decide(squeezed(0, pods)).victims] == ["plain"]


# --- budget and in-flight victims -------------------------------------------------------


def reclaimed_only(**extra: object) -> EvictionConfig:
    data: dict[str, object] = {
        "system_memory": {"enabled": False},
        "numa_memory": {"enabled": False},
    }
    data.update(extra)
    return EvictionConfig.model_validate(data)


def test_at_most_the_burst_is_evicted_per_round_and_the_rest_waits() -> None:
    pods = [pod(f"r{i}", reclaimed_milli_cpu=10_000) for i in range(6)]
    mgr = EvictionManager("n1", reclaimed_only())
    snap = EvictionSnapshot(0, "n1", tuple(pods), reclaimed=ReclaimedCapacity(0, 100 * GIB))
    first = mgr.decide(snap)
    assert len(first.evictions) == 3  # Katalyst's burst: 3 per 5 s round
    # the same round 1 s later is not a new round
    assert not mgr.decide(replace(snap, now=1)).ran
    terminating = tuple(deleting(p) if p.uid in mgr.in_flight else p for p in pods)
    # victims still terminating: no second wave for the same plugin
    waiting = mgr.decide(replace(snap, now=5, pods=terminating))
    assert not waiting.victims
    assert any("to terminate" in n for n in waiting.notes)
    # once they are gone the next three go
    rest = tuple(p for p in terminating if not p.terminating)
    second = mgr.decide(replace(snap, now=10, pods=rest))
    assert len(second.evictions) == 3
    assert {v.pod.uid for v in first.victims}.isdisjoint({v.pod.uid for v in second.victims})


def test_burst_is_configurable() -> None:
    pods = [pod(f"r{i}", reclaimed_milli_cpu=10_000) for i in range(4)]
    mgr = EvictionManager("n1", reclaimed_only(eviction_burst=1))
    snap = EvictionSnapshot(0, "n1", tuple(pods), reclaimed=ReclaimedCapacity(0, 100 * GIB))
    assert len(mgr.decide(snap).evictions) == 1


def test_terminating_pods_count_as_released_so_nothing_more_is_evicted() -> None:
    big = pod("big", reclaimed_milli_cpu=24_000)
    small = pod("small", reclaimed_milli_cpu=12_000)
    mgr = EvictionManager("n1", reclaimed_only())
    cap = ReclaimedCapacity(6000, 100 * GIB)
    plan = mgr.decide(EvictionSnapshot(0, "n1", (big, small), reclaimed=cap))
    assert [v.pod.name for v in plan.victims] == ["big"]
    for t in (5, 10, 15, 20):
        later = mgr.decide(EvictionSnapshot(t, "n1", (deleting(big), small), reclaimed=cap))
        assert not later.victims
        assert later.thresholds[0].met == Met.SOFT  # 12k <= 5 x 6k once big is released


def test_a_victim_that_is_never_deleted_is_forgotten_after_the_timeout() -> None:
    mgr = EvictionManager("n1", system_only(inflight_timeout_s=30))
    stubborn = pod("stubborn", memory=GIB)
    assert mgr.decide(squeezed(0, [stubborn])).victims
    assert not mgr.decide(squeezed(5, [stubborn])).victims  # still in flight
    assert mgr.decide(squeezed(35, [stubborn])).victims  # refused eviction: try again


# --- dry run ----------------------------------------------------------------------------


def test_dry_run_plugin_records_and_counts_but_evicts_and_taints_nothing() -> None:
    cfg = system_only(dry_run=[names.EVICTION_PLUGIN_SYSTEM_MEMORY])
    mgr = EvictionManager("n1", cfg)
    pods = [pod("a", memory=2 * GIB), pod("b", memory=GIB)]
    plan = mgr.decide(squeezed(0, pods))
    assert [v.pod.name for v in plan.victims] == ["a"]
    assert all(v.dry_run for v in plan.victims) and not plan.evictions
    assert not plan.node_taints and not plan.cnr_taints
    assert {r.kind for r in plan.records} == {"dry-run-eviction", "condition-set"}
    assert all(r.dry_run for r in plan.records)
    assert not mgr.in_flight


def test_dry_run_star_covers_every_plugin() -> None:
    assert EvictionConfig(dry_run=("*",)).is_dry_run(names.EVICTION_PLUGIN_NUMA_MEMORY)
    assert not EvictionConfig().is_dry_run(names.EVICTION_PLUGIN_NUMA_MEMORY)


# --- conditions -------------------------------------------------------------------------


def test_condition_taint_stays_for_the_transition_period_then_clears() -> None:
    mgr = EvictionManager("n1", system_only())
    a = pod("a", memory=GIB)
    set_plan = mgr.decide(squeezed(0, [a]))
    assert [t.key for t in set_plan.node_taints] == [PRESSURE_KEY]
    assert set_plan.node_taints[0].effect == "NoSchedule"
    calm = GIB * 50
    for t in range(5, 300, 5):
        plan = mgr.decide(squeezed(t, [], free=calm))
        assert [x.key for x in plan.node_taints] == [PRESSURE_KEY], t
    cleared = mgr.decide(squeezed(305, [], free=calm))
    assert not cleared.node_taints and not cleared.conditions
    assert [r.kind for r in cleared.records] == ["condition-cleared"]


def test_a_condition_seen_again_extends_its_life() -> None:
    mgr = EvictionManager("n1", system_only(condition_transition_period_s=20))
    mgr.decide(squeezed(0, []))
    mgr.decide(squeezed(15, [], free=50 * GIB))
    mgr.decide(squeezed(20, []))  # pressure again: last seen moves to 20
    assert mgr.decide(squeezed(35, [], free=50 * GIB)).node_taints
    assert not mgr.decide(squeezed(45, [], free=50 * GIB)).node_taints


# --- throttle before evict --------------------------------------------------------------


def test_cpu_hard_threshold_waits_while_the_reclaim_pool_is_still_shrinking() -> None:
    pods = [pod("a", reclaimed_milli_cpu=30_000)]
    mgr = EvictionManager("n1", reclaimed_only(throttle_settle_s=10))

    def snap(now: float, reclaim_cpus: int) -> EvictionSnapshot:
        # the published capacity follows the pool (no smoothing here, to isolate the rule)
        return EvictionSnapshot(
            now,
            "n1",
            tuple(pods),
            reclaimed=ReclaimedCapacity(reclaim_cpus * 200, 100 * GIB),
            pools=(PoolState("share", 48 - reclaim_cpus, None),),
            reclaim_pool_cpus=reclaim_cpus,
            reclaim_pool_floor=4,
        )

    mgr.decide(snap(0, 30))
    shrinking = mgr.decide(snap(5, 20))
    assert not shrinking.victims
    assert shrinking.ladder is not None and not shrinking.ladder.throttle_settled
    assert any("throttling first" in n for n in shrinking.notes)
    still = mgr.decide(snap(10, 20))
    assert not still.victims
    settled = mgr.decide(snap(15, 20))
    assert settled.ladder is not None and settled.ladder.throttle_settled
    assert [v.pod.name for v in settled.victims] == ["a"]


def test_a_reclaim_pool_at_its_floor_has_nothing_left_to_throttle() -> None:
    pods = [pod("a", reclaimed_milli_cpu=30_000)]
    mgr = EvictionManager("n1", reclaimed_only(throttle_settle_s=60))
    base = EvictionSnapshot(
        0,
        "n1",
        tuple(pods),
        reclaimed=ReclaimedCapacity(8000, 100 * GIB),
        reclaim_pool_cpus=8,
        reclaim_pool_floor=4,
    )
    assert not mgr.decide(base).victims
    squeezed_pool = replace(
        base, now=5, reclaim_pool_cpus=4, reclaimed=ReclaimedCapacity(4000, 100 * GIB)
    )
    plan = mgr.decide(squeezed_pool)
    assert [v.pod.name for v in plan.victims] == ["a"]


def test_memory_thresholds_do_not_wait_for_the_cpu_throttle() -> None:
    mgr = EvictionManager("n1", system_only(throttle_settle_s=600))
    mgr.decide(replace(squeezed(0, [], free=50 * GIB), reclaim_pool_cpus=30))
    plan = mgr.decide(replace(squeezed(5, [pod("a", memory=GIB)]), reclaim_pool_cpus=10))
    assert [v.pod.name for v in plan.victims] == ["a"]


# --- records ----------------------------------------------------------------------------


def test_victim_record_names_plugin_signal_value_threshold_window_and_ranking() -> None:
    mgr = EvictionManager("n1", system_only())
    plan = mgr.decide(squeezed(0, [pod("a", memory=2 * GIB), pod("b", memory=GIB)]))
    record = next(r for r in plan.records if r.kind == "eviction")
    assert record.plugin == names.EVICTION_PLUGIN_SYSTEM_MEMORY
    assert record.signal == "MemFree" and record.operator == "<"
    assert record.observed == GIB // 100 and record.threshold == 100 * GIB * 10 / 10000
    assert record.window == "instant"
    assert [r.pod for r in record.ranking] == ["default/a", "default/b"]
    for text in (
        "MemFree",
        "met threshold in scope",
        names.EVICTION_PLUGIN_SYSTEM_MEMORY,
        "Ranked #1 of 2",
        "default/b",
    ):
        assert text in record.message


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([RECLAIMED, SHARED, names.QOS_DEDICATED_CORES]),
            st.integers(min_value=-10, max_value=10),
            st.integers(min_value=0, max_value=64),
        ),
        min_size=1,
        max_size=10,
    ),
    st.randoms(use_true_random=False),
)
def test_ranking_is_a_total_order_independent_of_input_order(
    specs: list[tuple[str, int, int]], rnd: random.Random
) -> None:
    pods = [
        pod(f"p{i}", level, priority=prio, memory=mem * GIB)
        for i, (level, prio, mem) in enumerate(specs)
    ]
    usage = usage_fn(names.RESOURCE_MEMORY)
    order = [p.name for p, _ in rank(pods, usage)]
    shuffled = list(pods)
    rnd.shuffle(shuffled)
    assert [p.name for p, _ in rank(shuffled, usage)] == order
    ranked = [p for p, _ in rank(pods, usage)]
    levels = [{RECLAIMED: 0, SHARED: 1}.get(p.qos_level, 2) for p in ranked]
    assert levels == sorted(levels)
    for a, b in itertools.pairwise(ranked):
        if a.qos_level == b.qos_level:
            assert (a.priority, -(a.memory or 0)) <= (b.priority, -(b.memory or 0))
