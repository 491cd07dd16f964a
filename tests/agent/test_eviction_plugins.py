"""Each inner eviction plugin's soft and hard thresholds and how long they must hold,
driven through the manager on a virtual clock (5 s rounds)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pykatalyst.agent.eviction import (
    EvictionConfig,
    EvictionManager,
    EvictionPlan,
    EvictionSnapshot,
    Met,
    NumaReclaimed,
    PodInfo,
    PoolState,
    ReclaimedCapacity,
)
from pykatalyst.agent.host.base import HostSample, MemoryInfo, NumaMemory
from pykatalyst.api import names
from tests.agent.eviction_pods import eviction_pod

GIB = 1 << 30
RECLAIMED = names.QOS_RECLAIMED_CORES
SHARED = names.QOS_SHARED_CORES


def pod(name: str, level: str = RECLAIMED, **kw: object) -> PodInfo:
    return eviction_pod(f"uid-{name}", "default", name, level, **kw)  # type: ignore[arg-type]


def only(plugin: str, **extra: object) -> EvictionConfig:
    """A config with just one plugin family switched on."""
    data: dict[str, object] = {
        "reclaimed_resource": {"enabled": plugin == "reclaimed"},
        "system_memory": {"enabled": plugin == "system"},
        "numa_memory": {"enabled": plugin == "numa"},
        "load": {"enabled": plugin == "load"},
    }
    for key, value in extra.items():
        section = data.get(key)
        if isinstance(section, dict) and isinstance(value, dict):
            section.update(value)
        else:
            data[key] = value
    return EvictionConfig.model_validate(data)


def run(mgr: EvictionManager, snaps: Sequence[EvictionSnapshot]) -> list[EvictionPlan]:
    return [mgr.decide(s) for s in snaps]


def met_of(plan: EvictionPlan, key: str) -> Met:
    for t in plan.thresholds:
        if t.key == key:
            return t.met
    return Met.NOT


# --- reclaimed resource overcommit -------------------------------------------------------


def reclaimed_snap(
    now: float, milli_alloc: int, pods: Sequence[PodInfo], numa: dict[int, int] | None = None
) -> EvictionSnapshot:
    per_numa = {n: NumaReclaimed(m, 100 * GIB) for n, m in (numa or {}).items()}
    return EvictionSnapshot(
        now=now,
        node="n1",
        pods=tuple(pods),
        reclaimed=ReclaimedCapacity(milli_alloc, 100 * GIB, per_numa),
    )


def test_reclaimed_overcommit_soft_then_hard_by_katalyst_ratios() -> None:
    pods = [pod("a", reclaimed_milli_cpu=6000), pod("b", reclaimed_milli_cpu=4000)]
    mgr = EvictionManager("n1", only("reclaimed"))
    # 10k requested: allocatable 8k -> below 1.5x (12k): nothing
    p0 = mgr.decide(reclaimed_snap(0, 8000, pods))
    assert met_of(p0, "reclaimed_millicpu") == Met.NOT and not p0.conditions
    # allocatable 5k: 10k > 1.5 x 5k = 7.5k -> soft: a CNR taint, no victim
    p1 = mgr.decide(reclaimed_snap(5, 5000, pods))
    assert met_of(p1, "reclaimed_millicpu") == Met.SOFT
    assert [c.spec.name for c in p1.conditions] == [names.CONDITION_RECLAIMED_RESOURCE_PRESSURE]
    assert not p1.victims and not p1.node_taints
    assert [(t.key, t.effect, t.qos_level) for t in p1.cnr_taints] == [
        (names.TAINT_PREFIX + names.CONDITION_RECLAIMED_RESOURCE_PRESSURE, "NoSchedule", RECLAIMED)
    ]
    # allocatable 1.9k: 10k > 5 x 1.9k = 9.5k -> hard: overage 500m, one victim suffices
    p2 = mgr.decide(reclaimed_snap(10, 1900, pods))
    assert met_of(p2, "reclaimed_millicpu") == Met.HARD
    assert [v.pod.name for v in p2.victims] == ["a"]


def test_reclaimed_overcommit_threshold_must_hold_for_its_grace_period() -> None:
    pods = [pod("a", reclaimed_milli_cpu=6000), pod("b", reclaimed_milli_cpu=4000)]
    mgr = EvictionManager("n1", only("reclaimed", reclaimed_resource={"grace_period_s": 20}))
    plans = [mgr.decide(reclaimed_snap(t, 1000, pods)) for t in (0, 5, 10, 15)]
    assert all(not p.victims and not p.conditions for p in plans)
    assert any("grace period" in n for n in plans[-1].notes)
    held = mgr.decide(reclaimed_snap(20, 1000, pods))
    assert [v.pod.name for v in held.victims] == ["a"]


def test_a_threshold_that_lets_go_restarts_its_grace_period() -> None:
    pods = [pod("a", reclaimed_milli_cpu=10000)]
    mgr = EvictionManager("n1", only("reclaimed", reclaimed_resource={"grace_period_s": 10}))
    mgr.decide(reclaimed_snap(0, 1000, pods))
    mgr.decide(reclaimed_snap(5, 50_000, pods))  # relief for one round
    assert not mgr.decide(reclaimed_snap(10, 1000, pods)).victims
    assert not mgr.decide(reclaimed_snap(15, 1000, pods)).victims
    assert mgr.decide(reclaimed_snap(20, 1000, pods)).victims


def test_reclaimed_memory_is_checked_on_its_own_ratio() -> None:
    pods = [pod("a", reclaimed_memory=30 * GIB), pod("b", reclaimed_memory=10 * GIB)]
    mgr = EvictionManager("n1", only("reclaimed"))
    snap = EvictionSnapshot(
        now=0, node="n1", pods=tuple(pods), reclaimed=ReclaimedCapacity(100_000, 7 * GIB)
    )
    plan = mgr.decide(snap)
    # 40Gi > 5 x 7Gi = 35Gi: release 5Gi -> the 30Gi pod alone covers it
    assert met_of(plan, "reclaimed_memory") == Met.HARD
    assert [v.pod.name for v in plan.victims] == ["a"]


def test_reclaimed_overcommit_per_numa_counts_only_pods_bound_there() -> None:
    bound = pod("bound", reclaimed_milli_cpu=8000, numa_nodes=(1,))
    free = pod("free", reclaimed_milli_cpu=20000)
    mgr = EvictionManager("n1", only("reclaimed"))
    # node-wide: 28k vs 5 x 40k: fine; NUMA 1: 8k > 5 x 1.5k -> hard
    plan = mgr.decide(reclaimed_snap(0, 40_000, [bound, free], numa={0: 20_000, 1: 1500}))
    assert met_of(plan, "reclaimed_millicpu") == Met.NOT
    assert met_of(plan, "numa1/reclaimed_millicpu") == Met.HARD
    assert [v.pod.name for v in plan.victims] == ["bound"]
    assert plan.victims[0].plugin == names.EVICTION_PLUGIN_RECLAIMED_NUMA_RESOURCE


def test_no_published_capacity_means_no_decision() -> None:
    mgr = EvictionManager("n1", only("reclaimed"))
    plan = mgr.decide(EvictionSnapshot(0, "n1", (pod("a", reclaimed_milli_cpu=1000),)))
    assert not plan.thresholds and not plan.victims


# --- system memory ----------------------------------------------------------------------


def mem_snap(now: float, pods: Sequence[PodInfo], **mem: object) -> EvictionSnapshot:
    values: dict[str, object] = {"total": 100 * GIB, "free": 50 * GIB, "available": 50 * GIB}
    values.update(mem)
    info = MemoryInfo(**values)  # type: ignore[arg-type]
    return EvictionSnapshot(now, "n1", tuple(pods), sample=HostSample(now, memory=info))


def test_free_below_watermark_evicts_the_biggest_reclaimed_user_at_once() -> None:
    pods = [
        pod("small", memory=1 * GIB),
        pod("big", memory=4 * GIB),
        pod("web", SHARED, memory=20 * GIB),
    ]
    mgr = EvictionManager("n1", only("system"))
    # watermark = 100Gi x 10 / 10000 = 0.1Gi
    calm = mgr.decide(mem_snap(0, pods, free=GIB))
    assert met_of(calm, "free") == Met.NOT
    tight = mgr.decide(mem_snap(5, pods, free=GIB // 20))
    assert met_of(tight, "free") == Met.HARD
    assert [v.pod.name for v in tight.victims] == ["big"]
    assert [t.key for t in tight.node_taints] == [
        names.TAINT_PREFIX + names.CONDITION_MEMORY_PRESSURE
    ]


def keys_of(plan: EvictionPlan) -> set[str]:
    return {t.key for t in plan.thresholds}


def test_kswapd_rate_alone_never_evicts_by_default() -> None:
    # Katalyst's system-memory plugin checks the watermark and PSI; kswapd no longer counts.
    pods = [pod("web", SHARED, memory=8 * GIB, priority=100)]
    mgr = EvictionManager("n1", only("system"))
    plans = [
        mgr.decide(mem_snap(t, pods, kswapd_steal_pages_per_s=9000.0)) for t in range(0, 300, 5)
    ]
    assert all("kswapd" not in keys_of(p) and not p.victims for p in plans)
    assert all(not p.node_taints for p in plans)


KSWAPD_ON = {"kswapd_eviction": True}


def test_kswapd_rate_when_enabled_is_never_soft_then_hard_for_any_pod() -> None:
    pods = [pod("web", SHARED, memory=8 * GIB, priority=100)]
    mgr = EvictionManager("n1", only("system", system_memory=KSWAPD_ON))
    plans = [
        mgr.decide(mem_snap(t, pods, kswapd_steal_pages_per_s=2500.0)) for t in range(0, 120, 5)
    ]
    assert all(met_of(p, "kswapd") == Met.NOT for p in plans)
    assert all(not p.victims and not p.node_taints for p in plans)
    final = mgr.decide(mem_snap(120, pods, kswapd_steal_pages_per_s=2500.0))
    assert met_of(final, "kswapd") == Met.HARD
    assert [v.pod.name for v in final.victims] == ["web"]  # any QoS level for kswapd


def test_kswapd_rate_below_threshold_resets_the_duration() -> None:
    mgr = EvictionManager("n1", only("system", system_memory=KSWAPD_ON))
    pods = [pod("web", SHARED, memory=GIB)]
    for t in range(0, 100, 5):
        mgr.decide(mem_snap(t, pods, kswapd_steal_pages_per_s=3000.0))
    mgr.decide(mem_snap(100, pods, kswapd_steal_pages_per_s=10.0))
    plan = mgr.decide(mem_snap(125, pods, kswapd_steal_pages_per_s=3000.0))
    assert met_of(plan, "kswapd") == Met.NOT and not plan.victims


def psi_pods(*names_levels: tuple[str, str]) -> list[PodInfo]:
    return [pod(n, lv, memory=GIB, memory_psi_avg10=8.0) for n, lv in names_levels]


def test_memory_psi_escalates_from_reclaimed_to_any_pod_never_soft() -> None:
    pods = psi_pods(("batch", RECLAIMED), ("web", SHARED), ("api", SHARED))
    mgr = EvictionManager("n1", only("system", system_memory={"cool_down_s": 0}))
    first = mgr.decide(mem_snap(0, pods, psi_some_avg10=30.0))
    assert met_of(first, "psi") == Met.NOT and not first.victims and not first.node_taints
    mgr.decide(mem_snap(5, pods, psi_some_avg10=30.0))
    mgr.decide(mem_snap(10, pods, psi_some_avg10=30.0))
    at15 = mgr.decide(mem_snap(15, pods, psi_some_avg10=30.0))
    assert [v.pod.name for v in at15.victims] == ["batch"]
    # batch is gone; a third pressured pod keeps the pod check met; at 45 s any pod may go
    rest = pods[1:] + psi_pods(("db", SHARED))
    for t in (20, 25, 30, 35, 40):
        mgr.decide(mem_snap(t, rest, psi_some_avg10=30.0))
    at45 = mgr.decide(mem_snap(45, rest, psi_some_avg10=30.0))
    assert len(at45.victims) == 1 and at45.victims[0].pod.qos_level == SHARED


def test_memory_psi_needs_enough_pressured_pods() -> None:
    # Katalyst: fewer than 3 pods with memory PSI above 1 is no system pressure.
    pods = psi_pods(("batch", RECLAIMED), ("web", SHARED))
    mgr = EvictionManager("n1", only("system"))
    plans = [mgr.decide(mem_snap(t, pods, psi_some_avg10=60.0)) for t in range(0, 100, 5)]
    assert all(met_of(p, "psi") == Met.NOT and not p.victims for p in plans)


def test_system_memory_cool_down_spaces_victims() -> None:
    pods = [pod("a", memory=2 * GIB), pod("b", memory=GIB)]
    mgr = EvictionManager("n1", only("system"))
    first = mgr.decide(mem_snap(0, pods, free=GIB // 100))
    assert [v.pod.name for v in first.victims] == ["a"]
    rest = [pods[1]]  # a is gone
    blocked = mgr.decide(mem_snap(5, rest, free=GIB // 100))
    assert not blocked.victims and any("cooling down" in n for n in blocked.notes)
    later = mgr.decide(mem_snap(35, rest, free=GIB // 100))
    assert [v.pod.name for v in later.victims] == ["b"]


# --- NUMA memory ------------------------------------------------------------------------


def numa_snap(now: float, pods: Sequence[PodInfo], free: int) -> EvictionSnapshot:
    zones = {
        0: NumaMemory(total=64 * GIB, free=free, watermark_min=GIB, watermark_low=2 * GIB),
        1: NumaMemory(total=64 * GIB, free=30 * GIB, watermark_min=GIB, watermark_low=2 * GIB),
    }
    return EvictionSnapshot(now, "n1", tuple(pods), sample=HostSample(now, numa_memory=zones))


def test_numa_counter_reaches_reclaimed_then_any_threshold() -> None:
    pods = [
        pod("batch", numa_memory={0: 4 * GIB}),
        pod("web", SHARED, numa_memory={0: 8 * GIB}),
        pod("elsewhere", numa_memory={1: 8 * GIB}),
    ]
    mgr = EvictionManager("n1", only("numa"))
    free = int(1.8 * GIB)  # below low, above the middle of min and low: +1 a round
    mets = []
    for i in range(6):
        plan = mgr.decide(numa_snap(i * 5, pods, free))
        mets.append(met_of(plan, "numa0"))
        assert not plan.victims and not plan.conditions
    # Katalyst's plugin reports only the hard stage, and raises no condition
    assert mets == [Met.NOT] * 6
    seventh = mgr.decide(numa_snap(30, pods, free))  # counter 7 > 6: reclaimed pods
    assert [v.pod.name for v in seventh.victims] == ["batch"]
    assert met_of(seventh, "numa1") == Met.NOT
    survivors = pods[1:]
    for i in range(7, 11):
        assert not mgr.decide(numa_snap(i * 5, survivors, free)).victims
    twelfth = mgr.decide(numa_snap(55, survivors, free))  # counter 12: any pod on NUMA 0
    assert [v.pod.name for v in twelfth.victims] == ["web"]


def test_numa_early_warning_reports_the_soft_stage_and_a_cnr_condition() -> None:
    pods = [pod("batch", numa_memory={0: 4 * GIB})]
    mgr = EvictionManager("n1", only("numa", numa_memory={"early_warning": True}))
    plan = mgr.decide(numa_snap(0, pods, int(1.8 * GIB)))
    assert met_of(plan, "numa0") == Met.SOFT
    assert [c.spec.name for c in plan.conditions] == [names.CONDITION_NUMA_MEMORY_PRESSURE]
    assert [c.spec.scope for c in plan.conditions] == ["cnr"]


def test_numa_free_below_min_evicts_a_reclaimed_user_of_that_numa_at_once() -> None:
    pods = [pod("on1", numa_memory={1: 4 * GIB}), pod("on0", numa_memory={0: 2 * GIB})]
    mgr = EvictionManager("n1", only("numa"))
    plan = mgr.decide(numa_snap(0, pods, GIB // 2))
    assert met_of(plan, "numa0") == Met.HARD
    assert [v.pod.name for v in plan.victims] == ["on0"]


def test_numa_counter_cools_down_when_pressure_goes() -> None:
    mgr = EvictionManager("n1", only("numa"))
    pods = [pod("batch", numa_memory={0: GIB})]
    for i in range(5):
        mgr.decide(numa_snap(i * 5, pods, int(1.8 * GIB)))
    for i in range(5, 10):
        mgr.decide(numa_snap(i * 5, pods, 10 * GIB))
    plan = mgr.decide(numa_snap(50, pods, 10 * GIB))
    assert met_of(plan, "numa0") == Met.NOT


# --- share-pool load --------------------------------------------------------------------


def load_snap(now: float, load: float, pods: Sequence[PodInfo]) -> EvictionSnapshot:
    return EvictionSnapshot(now, "n1", tuple(pods), pools=(PoolState("share", 10, load),))


def test_load_plugin_is_off_by_default_as_in_katalyst() -> None:
    assert not EvictionConfig().load.enabled


def test_load_soft_then_hard_in_80_percent_of_ten_samples() -> None:
    pods = [
        pod("light", SHARED, pool="share", load1=3.0),
        pod("heavy", SHARED, pool="share", load1=9.0),
    ]
    mgr = EvictionManager("n1", only("load"))
    # 12 runnable on 10 cpus: over 1.0x, under 1.8x
    plans = [mgr.decide(load_snap(i * 5, 12.0, pods)) for i in range(8)]
    assert [met_of(p, "pool share") for p in plans] == [Met.NOT] * 7 + [Met.SOFT]
    assert [t.key for t in plans[-1].node_taints] == [
        names.TAINT_PREFIX + names.CONDITION_CPU_PRESSURE
    ]
    # 20 runnable (> 18): hard once 8 of the last 10 samples are over 1.8x
    hard = [mgr.decide(load_snap(40 + i * 5, 20.0, pods)) for i in range(8)]
    assert [met_of(p, "pool share") for p in hard[:7]] == [Met.SOFT] * 7
    assert met_of(hard[7], "pool share") == Met.HARD
    assert [v.pod.name for v in hard[7].victims] == ["heavy"]


def test_load_plugin_skips_the_reclaim_pool() -> None:
    mgr = EvictionManager("n1", only("load"))
    snap = EvictionSnapshot(0, "n1", (), pools=(PoolState(names.POOL_RECLAIM, 4, 100.0),))
    assert not mgr.decide(snap).thresholds


def test_load_plugin_skips_isolation_pools_as_katalyst() -> None:
    mgr = EvictionManager("n1", only("load"))
    noisy = PoolState(f"{names.POOL_PREFIX_ISOLATION}-uid1", 2, 100.0)
    busy = PoolState(names.POOL_SHARE, 2, 100.0)
    plan = mgr.decide(EvictionSnapshot(0, "n1", (), pools=(noisy, busy)))
    assert [t.key for t in plan.thresholds] == [f"pool {names.POOL_SHARE}"]


@pytest.mark.parametrize("ratio", [1.2, 2.5])
def test_load_thresholds_are_configurable(ratio: float) -> None:
    mgr = EvictionManager(
        "n1",
        only(
            "load",
            load={
                "soft_ratio": ratio,
                "hard_ratio": ratio + 1,
                "ring_size": 1,
                "met_percentage": 1.0,
            },
        ),
    )
    below = mgr.decide(load_snap(0, 10 * ratio - 0.5, []))
    above = mgr.decide(load_snap(5, 10 * ratio + 0.5, []))
    assert met_of(below, "pool share") == Met.NOT
    assert met_of(above, "pool share") == Met.SOFT


def test_a_soft_load_ratio_above_the_hard_one_is_refused() -> None:
    with pytest.raises(ValueError, match="soft_ratio"):
        EvictionConfig.model_validate({"load": {"soft_ratio": 2.0, "hard_ratio": 1.5}})


def test_node_and_numa_overcommit_together_evict_one_pod_that_covers_both() -> None:
    bound = pod("bound", reclaimed_milli_cpu=20_000, numa_nodes=(1,))
    other = pod("other", reclaimed_milli_cpu=1000, numa_nodes=(1,))
    mgr = EvictionManager("n1", only("reclaimed"))
    # node: 21k > 5 x 4k; NUMA 1: 21k > 5 x 2k: both hard, one pod releases enough for both
    plan = mgr.decide(reclaimed_snap(0, 4000, [bound, other], numa={0: 2000, 1: 2000}))
    assert met_of(plan, "reclaimed_millicpu") == Met.HARD
    assert met_of(plan, "numa1/reclaimed_millicpu") == Met.HARD
    assert [v.pod.name for v in plan.victims] == ["bound"]
    assert any("covered by this round's victims" in n for n in plan.notes)
